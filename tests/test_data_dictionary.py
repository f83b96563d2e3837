"""The data dictionary: every table and column described, and docs/data-dictionary.md generated from the
schemas, so the document cannot drift from the Parquet files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from chunkline.schemas import TABLE_SCHEMAS
from chunkline.schemas.dictionary import REGENERATE_COMMAND, data_dictionary_markdown, description_of, type_name

REPO = Path(__file__).resolve().parents[1]
DICTIONARY_FILE = REPO / "docs" / "data-dictionary.md"

COLUMN_ROW = re.compile(
    r"^\| `(?P<name>[^`]+)` \| `(?P<type>[^`]+)` \| (?P<nullable>yes|no) \| (?P<description>.*) \|$"
)


def test_every_table_and_column_has_a_description():
    missing = [
        f"{table}.{field.name}"
        for table, (schema, _) in TABLE_SCHEMAS.items()
        for field in schema
        if not description_of(field.metadata).strip()
    ]
    missing += [
        f"{table} (schema metadata)"
        for table, (schema, _) in TABLE_SCHEMAS.items()
        if not description_of(schema.metadata).strip()
    ]
    assert not missing, (
        "undescribed: " + ", ".join(missing) + '; give each field a metadata "description" (schemas.chunks.field) '
        'and each table schema a metadata "description"'
    )


def test_dictionary_lists_every_column_of_every_table_with_its_type_nullability_and_description():
    text = data_dictionary_markdown()
    sections = re.split(r"^## `([^`]+)`$", text, flags=re.MULTILINE)
    tables = dict(zip(sections[1::2], sections[2::2]))
    assert list(tables) == list(TABLE_SCHEMAS)
    for table, (schema, key) in TABLE_SCHEMAS.items():
        section = tables[table]
        assert description_of(schema.metadata) in section
        assert f"Key: {', '.join(f'`{name}`' for name in key)}." in section
        rows = [match.groupdict() for match in map(COLUMN_ROW.match, section.splitlines()) if match]
        assert [row["name"] for row in rows] == schema.names, table
        for row, field in zip(rows, schema):
            assert row["type"] == type_name(field.type)
            assert row["nullable"] == ("yes" if field.nullable else "no")
            # The cell escapes "<" and "|" so that a markdown viewer shows the description as written.
            assert row["description"].replace("\\<", "<").replace("\\|", "|") == description_of(field.metadata)


def test_type_names_do_not_depend_on_the_list_child_name():
    assert type_name(pa.list_(pa.string())) == "list<string>"
    assert type_name(pa.list_(pa.field("element", pa.string()))) == "list<string>"
    assert type_name(pa.timestamp("us", tz="UTC")) == "timestamp[us, tz=UTC]"


def test_data_dictionary_file_is_the_generated_text():
    expected = data_dictionary_markdown()
    found = DICTIONARY_FILE.read_bytes().decode("utf-8") if DICTIONARY_FILE.exists() else None
    assert found == expected, (
        f"{DICTIONARY_FILE.relative_to(REPO)} is out of date; regenerate it from the repository root with: {REGENERATE_COMMAND}"
    )


def test_regenerate_command_prints_the_dictionary():
    result = subprocess.run(
        [sys.executable, "-m", "chunkline.schemas.dictionary"], cwd=REPO, capture_output=True, check=True, timeout=120
    )
    assert result.stdout.decode("utf-8") == data_dictionary_markdown()
