"""``output.front_matter_columns``: the config is checked when it loads (one line naming the entry), each type
takes exactly the values that fit it, the schema and the data dictionary describe the columns, and the
rebuild fingerprint changes with them. The pipeline runs are in tests/pipeline/test_front_matter_run.py."""

from __future__ import annotations

import json
import keyword
from datetime import datetime, timezone
from typing import NamedTuple

import pyarrow as pa
import pytest

from chunkline.dataset.front_matter_columns import front_matter_values, parse_front_matter_columns
from chunkline.dataset.rebuild import rebuild_fingerprint
from chunkline.dataset.settings import load_run_config
from chunkline.front_matter import load_front_matter
from chunkline.schemas import CHUNKS_SCHEMA, FrontMatterColumn, chunks_schema, table_schemas
from chunkline.schemas.dictionary import data_dictionary_markdown, description_of
from chunkline.settings import ConfigError


def run_config(*overrides: str, environ: dict[str, str] | None = None):
    return load_run_config(None, list(overrides), environ=environ or {}, inputs=["docs"], output="out")


def columns(spec: dict) -> tuple[FrontMatterColumn, ...]:
    return parse_front_matter_columns(spec)


# --------------------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------------------


def test_short_and_long_forms_from_a_file_the_environment_and_set(tmp_path):
    config_file = tmp_path / "chunkline.yaml"
    config_file.write_text(
        "output:\n  front_matter_columns:\n    version: string\n    title: {type: string, column: page_title}\n",
        encoding="utf-8",
    )
    config = load_run_config(
        config_file,
        ["output.front_matter_columns.tags=list<string>"],
        environ={"CHUNKLINE_OUTPUT_FRONT_MATTER_COLUMNS__DRAFT": "bool"},
        inputs=["docs"],
        output="out",
    )
    assert config.output.promoted_front_matter == (
        FrontMatterColumn("draft", "boolean", "draft"),
        FrontMatterColumn("title", "string", "page_title"),
        FrontMatterColumn("tags", "list<string>", "tags"),
        FrontMatterColumn("version", "string", "version"),
    )
    assert config.to_public_dict()["output"]["front_matter_columns"]["title"] == {
        "type": "string",
        "column": "page_title",
    }
    assert run_config().output.promoted_front_matter == ()


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "output.front_matter_columns.tags=list",
            "output: front_matter_columns.tags: unknown type 'list'; types: string, list<string>, integer, float, "
            "boolean, timestamp",
        ),
        (
            "output.front_matter_columns.title=string",
            "output: front_matter_columns.title: column 'title' is a built-in chunks column; promote the key under "
            "another name with {type: string, column: fm_title}",
        ),
        (
            "output.front_matter_columns={doc: {type: string, column: doc_id}}",
            "output: front_matter_columns.doc: column 'doc_id' is a built-in chunks column",
        ),
        (
            "output.front_matter_columns={last-updated: timestamp}",
            "output: front_matter_columns.last-updated: column name 'last-updated' is not a plain identifier",
        ),
        (
            "output.front_matter_columns={a: string, b: {type: integer, column: a}}",
            "output: front_matter_columns.b: column 'a' is also the column of front_matter_columns.a",
        ),
        (
            "output.front_matter_columns={v: {kind: string}}",
            "output: front_matter_columns.v: expected {type: ..., column: ...} (column optional)",
        ),
        ("output.front_matter_columns=[tags]", "output.front_matter_columns: expected a mapping"),
    ],
)
def test_a_mistake_is_one_config_error_line_naming_the_entry(override, message):
    with pytest.raises(ConfigError) as raised:
        run_config(override)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_the_fingerprint_changes_with_the_columns_and_not_without_them():
    plain = rebuild_fingerprint(run_config())
    tags = rebuild_fingerprint(run_config("output.front_matter_columns.tags=list<string>"))
    tags_as_text = rebuild_fingerprint(run_config("output.front_matter_columns.tags=string"))
    renamed = rebuild_fingerprint(
        run_config("output.front_matter_columns={tags: {type: list<string>, column: labels}}")
    )
    assert len({plain, tags, tags_as_text, renamed}) == 4
    assert rebuild_fingerprint(run_config("output.front_matter_columns={}")) == plain
    both_orders = {
        rebuild_fingerprint(run_config(f"output.front_matter_columns={{{spec}}}"))
        for spec in ("tags: list<string>, draft: boolean", "draft: boolean, tags: list<string>")
    }
    assert len(both_orders) == 1


# --------------------------------------------------------------------------------------------------
# The values
# --------------------------------------------------------------------------------------------------

# Front matter as authors write it: YAML's own types (an unquoted version is a number, an unquoted date a
# date, yes a boolean), TOML's, and values of the wrong kind.
YAML_FRONT_MATTER = """\
title: Harbour sensors
tags: [sensors, operations]
category: telemetry
version: 1.10
release: "1.10"
build: 42
huge: 123456789012345678901234567890
weight: 3
ratio: 0.25
draft: yes
published: "true"
updated: 2024-05-01
reviewed: 2024-05-01T10:30:00+02:00
noon: "2024-05-01T12:00:00Z"
naive: "2024-05-01 08:15:00"
nonsense_date: "May 1st"
impossible_date: "2024-02-30"
authors: [ada, 7]
empty:
"""

ALL_TYPES = {
    "tags": "list<string>",
    "category": "list<string>",
    "authors": "list<string>",
    "version": "string",
    "release": "string",
    "updated_text": {"type": "string", "column": "updated_text"},
    "build": "integer",
    "huge": "integer",
    "weight": "float",
    "ratio": "float",
    "draft": "boolean",
    "published": "boolean",
    "updated": "timestamp",
    "reviewed": "timestamp",
    "noon": "timestamp",
    "naive": "timestamp",
    "nonsense_date": "timestamp",
    "impossible_date": "timestamp",
    "empty": "string",
    "missing": "integer",
}


def test_each_type_takes_what_fits_and_nulls_what_does_not():
    data = load_front_matter("yaml", YAML_FRONT_MATTER)
    data["updated_text"] = data["updated"]  # a YAML date, as the JSON-safe front matter holds it
    values, mismatches = front_matter_values(data, columns(ALL_TYPES))
    utc = timezone.utc
    assert values == {
        "tags": ["sensors", "operations"],
        "category": ["telemetry"],  # one string is a list of one
        "authors": None,  # 7 is not a string
        "version": None,  # YAML read 1.10 as the number 1.1: not written as "1.1"
        "release": "1.10",
        "updated_text": "2024-05-01",
        "build": 42,
        "huge": None,  # over 64 bits
        "weight": 3.0,
        "ratio": 0.25,
        "draft": True,
        "published": None,  # the string "true" is not a boolean
        "updated": datetime(2024, 5, 1, tzinfo=utc),
        "reviewed": datetime(2024, 5, 1, 8, 30, tzinfo=utc),
        "noon": datetime(2024, 5, 1, 12, 0, tzinfo=utc),
        "naive": datetime(2024, 5, 1, 8, 15, tzinfo=utc),
        "nonsense_date": None,
        "impossible_date": None,
        "empty": None,  # null in the front matter: no value, no mismatch
        "missing": None,  # no such key: no mismatch
    }
    assert {error_type for error_type, _ in mismatches} == {"FrontMatterTypeMismatch"}
    mismatched = {message.split("'")[1]: message for _, message in mismatches}  # in the columns' order: by name
    assert list(mismatched) == ["authors", "huge", "impossible_date", "nonsense_date", "published", "version"]
    version = mismatched["version"]
    assert version.startswith("front matter 'version' is 1.1 (a number), which is not a string")
    assert "quote it in the front matter" in version
    # The values fit the columns' Arrow types.
    schema = chunks_schema(columns(ALL_TYPES))
    table = pa.Table.from_pylist([values], schema=pa.schema([schema.field(name) for name in values]))
    assert table.num_rows == 1


def test_toml_front_matter_and_a_document_without_any():
    toml = load_front_matter("toml", 'tags = ["a", "b"]\nupdated = 2024-05-01T10:00:00Z\nweight = 2\n')
    spec = columns({"tags": "list<string>", "updated": "timestamp", "weight": "integer"})
    values, mismatches = front_matter_values(toml, spec)
    assert values == {
        "tags": ["a", "b"],
        "updated": datetime(2024, 5, 1, 10, tzinfo=timezone.utc),
        "weight": 2,
    }
    assert mismatches == []
    assert front_matter_values(None, spec) == ({"tags": None, "updated": None, "weight": None}, [])


def test_an_integer_column_refuses_a_float_and_a_float_column_a_whole_number_it_cannot_hold():
    spec = columns({"count": "integer", "size": "float"})
    assert front_matter_values({"count": 2.0, "size": 2**60 + 1}, spec)[0] == {"count": None, "size": None}
    assert front_matter_values({"count": True, "size": False}, spec)[0] == {"count": None, "size": None}
    assert front_matter_values({"count": -(2**63), "size": 2**53}, spec)[0] == {
        "count": -(2**63),
        "size": float(2**53),
    }


# --------------------------------------------------------------------------------------------------
# The schema and the data dictionary
# --------------------------------------------------------------------------------------------------


def test_the_schemas_append_described_nullable_columns_to_chunks_and_upserts():
    spec = columns({"tags": "list<string>", "updated": "timestamp", "title": {"type": "string", "column": "fm_title"}})
    schemas = table_schemas(spec)
    chunks, upserts = schemas["chunks"][0], schemas["changes/upserts"][0]
    assert chunks.names == [*CHUNKS_SCHEMA.names, "fm_title", "tags", "updated"]
    assert upserts.names[-3:] == ["fm_title", "tags", "updated"]
    assert chunks.metadata == CHUNKS_SCHEMA.metadata
    assert chunks.field("tags").type == pa.list_(pa.string())
    assert chunks.field("updated").type == pa.timestamp("us", tz="UTC")
    assert all(chunks.field(name).nullable for name in ("fm_title", "tags", "updated"))
    assert description_of(chunks.field("fm_title").metadata).startswith(
        "Front matter 'title' of the chunk's document, as string"
    )
    assert schemas["documents"] == table_schemas()["documents"]
    assert chunks_schema() is CHUNKS_SCHEMA


def test_the_data_dictionary_lists_the_columns_with_their_descriptions():
    spec = columns({"tags": "list<string>", "version": "string"})
    dictionary = data_dictionary_markdown(spec)
    chunks_section = dictionary.split("## `chunks`")[1].split("## `")[0]
    upserts_section = dictionary.split("## `changes/upserts`")[1].split("## `")[0]
    for section in (chunks_section, upserts_section):
        assert (
            "| `tags` | `list<string>` | yes | Front matter 'tags' of the chunk's document, as list\\<string>"
            in section
        )
        assert "| `version` | `string` | yes | Front matter 'version'" in section
    assert "`tags`" not in data_dictionary_markdown().split("## `chunks`")[1]


# --------------------------------------------------------------------------------------------------
# Column names every runner takes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"class": "string"}, "front_matter_columns.class: column name 'class' is a Python keyword"),
        ({"None": "integer"}, "front_matter_columns.None: column name 'None' is a Python keyword"),
        (
            {"k": {"type": "string", "column": "_x"}},
            "front_matter_columns.k: column name '_x' starts with an underscore",
        ),
        ({"_fields": "string"}, "front_matter_columns._fields: column name '_fields' starts with an underscore"),
        ({"café": "string"}, "front_matter_columns.café: column name 'café' is not a plain identifier"),
        ({"k": {"type": "string", "column": 123}}, "front_matter_columns.k: column name 123 is not text"),
        ({"k": {"type": "string", "column": ""}}, "front_matter_columns.k: column name '' is not a plain identifier"),
        ({"two words": "string"}, "front_matter_columns.two words: column name 'two words' is not a plain identifier"),
        ({"k": {"type": "string", "column": "x\n"}}, "front_matter_columns.k: column name 'x\\n' is not a plain"),
        ({"k": {"type": "string", "column": "a" * 65}}, "front_matter_columns.k: column name 'aaaa"),
        (
            {"Text": "string"},
            "front_matter_columns.Text: column 'Text' differs only in case from the built-in chunks column 'text'",
        ),
        (
            {"k": {"type": "string", "column": "CHUNK_ID"}},
            "front_matter_columns.k: column 'CHUNK_ID' differs only in case from the built-in chunks column 'chunk_id'",
        ),
        (
            {"Tags": "list<string>", "tags": "string"},
            "front_matter_columns.tags: column 'tags' differs only in case from 'Tags', the column of "
            "front_matter_columns.Tags",
        ),
    ],
)
def test_a_column_name_a_runner_or_sql_would_refuse_or_confuse_is_a_config_error(spec, message):
    with pytest.raises(ValueError) as raised:
        parse_front_matter_columns(spec)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


# Names a config might give a column: every Python keyword and soft keyword, names a tuple, a NamedTuple
# or a class already has (count, index, _fields, __init__), builtins, and odd but valid identifiers.
CANDIDATE_COLUMN_NAMES = sorted(
    {
        *keyword.kwlist,
        *keyword.softkwlist,
        "count",
        "index",
        "self",
        "cls",
        "_fields",
        "_asdict",
        "__init__",
        "__class__",
        "_x",
        "x_",
        "x__y",
        "print",
        "type",
        "id",
        "schema",
        "Tags",
        "a" * 64,
        "A1",
        "item2",
    }
)


def test_every_accepted_column_name_builds_a_beam_row_type_and_every_refused_one_would_not():
    import apache_beam as beam

    import chunkline
    from chunkline.transforms.rows import row_from_dict, row_type_for

    chunk = chunkline.chunk_markdown("# Harbour\n\nThe gauge reads the tide.\n", doc_id="harbour.md")[0].to_dict()
    for name in CANDIDATE_COLUMN_NAMES:
        try:
            (column,) = parse_front_matter_columns({"key": {"type": "list<string>", "column": name}})
        except ValueError:
            with pytest.raises(ValueError):
                NamedTuple("Row", [(name, str)])
            continue
        row_type = row_type_for(chunks_schema([column]), "ChunkRow")
        coder = beam.coders.registry.get_coder(row_type)
        row = row_from_dict(row_type, {**chunk, name: ["tide"]})
        assert getattr(coder.decode(coder.encode(row)), name) == ["tide"]


# --------------------------------------------------------------------------------------------------
# Timestamps at the edges of the range
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written, expected",
    [
        ("0001-01-01T00:00:00+01:00", None),  # 31 December of year 0 in UTC
        ("0001-01-01T00:30:00+01:00", None),
        ("0001-01-01T01:00:00+01:00", datetime(1, 1, 1, tzinfo=timezone.utc)),
        ("0001-01-01T00:00:00-01:00", datetime(1, 1, 1, 1, tzinfo=timezone.utc)),
        ("0001-01-01", datetime(1, 1, 1, tzinfo=timezone.utc)),
        ("9999-12-31T23:59:59-01:00", None),  # year 10000 in UTC
        ("9999-12-31T23:00:00-01:00", None),
        ("9999-12-31T23:59:59+01:00", datetime(9999, 12, 31, 22, 59, 59, tzinfo=timezone.utc)),
        ("9999-12-31T23:59:59.999999Z", datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)),
        ("9999-12-31", datetime(9999, 12, 31, tzinfo=timezone.utc)),
        ("0000-01-01", None),
        ("10000-01-01", None),
        ("2024-02-30", None),
        ("2024-01-01T24:00:00Z", None),
    ],
)
def test_a_timestamp_out_of_range_in_utc_is_null_and_one_mismatch(written, expected):
    spec = columns({"updated": "timestamp"})
    values, mismatches = front_matter_values({"updated": written}, spec)
    assert values == {"updated": expected}
    assert [error_type for error_type, _ in mismatches] == ["FrontMatterTypeMismatch"] * (expected is None)
    if expected is not None:
        # The value fits the column's Arrow type.
        assert pa.array([expected], type=chunks_schema(spec).field("updated").type).to_pylist() == [expected]


@pytest.mark.parametrize("written", ["0000-01-01", "2024-02-30", "10000-01-01", "2024-05-01T25:00:00"])
def test_a_quoted_date_that_does_not_exist_is_a_mismatch(written):
    data = load_front_matter("yaml", f'title: Tides\nupdated: "{written}"\n')
    values, mismatches = front_matter_values(data, columns({"updated": "timestamp"}))
    assert values == {"updated": None}
    assert len(mismatches) == 1 and mismatches[0][0] == "FrontMatterTypeMismatch"
    assert mismatches[0][1].startswith(f"front matter 'updated' is \"{written}\"")


def test_a_keyword_column_is_refused_when_the_run_config_loads():
    with pytest.raises(ConfigError) as raised:
        run_config("output.front_matter_columns={class: string}")
    assert str(raised.value) == (
        "output: front_matter_columns.class: column name 'class' is a Python keyword, which the fields of Beam's "
        "row types cannot be; name one with {type: string, column: NAME}"
    )


# --------------------------------------------------------------------------------------------------
# A promoted value's size
# --------------------------------------------------------------------------------------------------


def test_a_value_over_the_size_limit_is_null_and_one_errors_row_naming_key_size_and_limit():
    tags = [f"sensor-{number:04d}" for number in range(1000)]  # 14,000 bytes of JSON
    size_bytes = len(json.dumps(tags).encode())
    spec = parse_front_matter_columns({"tags": "list<string>", "title_text": "string"}, max_value_bytes=size_bytes)
    front_matter = {"tags": tags, "title_text": "Sensors"}
    assert front_matter_values(front_matter, spec) == ({"tags": tags, "title_text": "Sensors"}, [])

    spec = parse_front_matter_columns({"tags": "list<string>", "title_text": "string"}, max_value_bytes=size_bytes - 1)
    values, problems = front_matter_values(front_matter, spec)
    assert values == {"tags": None, "title_text": "Sensors"}
    assert problems == [
        (
            "FrontMatterValueTooLarge",
            f"front matter 'tags' is a list of {size_bytes:,} bytes as JSON, over the {size_bytes - 1:,} bytes a "
            "promoted value may have (output.front_matter_max_value_bytes), since every chunk of the document "
            "carries it; its column tags is null for this document's chunks: shorten the value, or raise "
            "output.front_matter_max_value_bytes",
        )
    ]
    # Over the limit and of the wrong type too: one row, for the size.
    values, problems = front_matter_values({"tags": {"nested": tags}}, spec)
    assert values["tags"] is None and [error_type for error_type, _ in problems] == ["FrontMatterValueTooLarge"]


def test_the_size_limit_is_a_setting_in_the_config_and_the_fingerprint():
    assert run_config().output.front_matter_max_value_bytes == 65_536
    config = run_config("output.front_matter_columns.tags=list<string>", "output.front_matter_max_value_bytes=1024")
    assert [column.max_value_bytes for column in config.output.promoted_front_matter] == [1024]
    assert config.to_public_dict()["output"]["front_matter_max_value_bytes"] == 1024
    default = run_config("output.front_matter_columns.tags=list<string>")
    assert rebuild_fingerprint(config) != rebuild_fingerprint(default)
    with pytest.raises(ConfigError, match="front_matter_max_value_bytes"):
        run_config("output.front_matter_max_value_bytes=0")
