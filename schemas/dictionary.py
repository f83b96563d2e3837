"""The data dictionary of the output dataset, rendered as markdown from the Arrow schemas.

Every table of :data:`chunkline.schemas.TABLE_SCHEMAS` and every column of it, with its Arrow type,
whether it may be null and its description (the ``description`` of the field metadata; a table's own
description is the ``description`` of its schema metadata). ``docs/data-dictionary.md`` is this output::

    python -m chunkline.schemas.dictionary > docs/data-dictionary.md

A run that promotes front-matter keys (``output.front_matter_columns``) writes more columns in ``chunks``
and ``changes/upserts``; ``data_dictionary_markdown(config.output.promoted_front_matter)`` lists them too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import pyarrow as pa

from chunkline.schemas import FRONT_MATTER_TABLES, FRONT_MATTER_TYPES, SCHEMA_VERSION, FrontMatterColumn, table_schemas

__all__ = ["REGENERATE_COMMAND", "data_dictionary_markdown", "description_of", "type_name"]

REGENERATE_COMMAND = "python -m chunkline.schemas.dictionary > docs/data-dictionary.md"


#: How the Arrow types of the tables read in pandas, polars and DuckDB, with no cast (tests/test_readers.py).
READER_TYPES = (
    "How the types read, with no cast:",
    "",
    "| Arrow type | pandas | polars | DuckDB |",
    "| --- | --- | --- | --- |",
    "| `int32`, `int64` | `int32`, `int64` | `Int32`, `Int64` | `INTEGER`, `BIGINT` |",
    "| `string`, `large_string` | `str` (`object` before pandas 3) | `String` | `VARCHAR` |",
    "| `double` | `float64` | `Float64` | `DOUBLE` |",
    "| `bool` | `bool` (`object` when it holds a null) | `Boolean` | `BOOLEAN` |",
    "| `timestamp[us, tz=UTC]` | `datetime64[us, UTC]` | `Datetime(us, UTC)` | `TIMESTAMP WITH TIME ZONE` |",
    "| `list<string>` | `object`: arrays of `str` (lists with `read_dataset(..., as_pandas=True)`) | `List(String)` | `VARCHAR[]` |",
    "",
    "pandas reads a nullable integer column that holds a null (`documents.size_bytes` of an unreadable file)",
    'as `float64`; `pd.read_parquet(..., dtype_backend="pyarrow")` keeps it an integer.',
)


def description_of(metadata: dict[bytes, bytes] | None) -> str:
    """The ``description`` of a field's or schema's metadata, or ``""``."""
    return (metadata or {}).get(b"description", b"").decode("utf-8")


def type_name(arrow_type: pa.DataType) -> str:
    """The Arrow type as written in the dictionary: ``list<string>``, not ``list<item: string>``, whose
    child field name differs between pyarrow versions and file formats."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        kind = "large_list" if pa.types.is_large_list(arrow_type) else "list"
        return f"{kind}<{type_name(arrow_type.value_type)}>"
    return str(arrow_type)


def _cell(text: str) -> str:
    # A pipe would end the table cell, and "<doc_id>" would be read as an HTML tag and hidden.
    return " ".join(text.split()).replace("|", "\\|").replace("<", "\\<")


def data_dictionary_markdown(front_matter_columns: Iterable[FrontMatterColumn] = ()) -> str:
    """The data dictionary of every table in ``TABLE_SCHEMAS``, as a markdown document; with the columns of
    ``front_matter_columns`` (a run's ``output.front_matter_columns``) in the tables that hold them."""
    schemas = table_schemas(front_matter_columns)
    tables_with = " and ".join(f"`{table}`" for table in FRONT_MATTER_TABLES)
    lines = [
        "# Data dictionary",
        "",
        f"<!-- Generated from chunkline.schemas; do not edit. Regenerate with: {REGENERATE_COMMAND} -->",
        "",
        f"Schema version {SCHEMA_VERSION}. Each table is a set of Parquet part files; `_manifest.json` names",
        "the files of each table (`tables.<name>.files`, relative to the dataset URL) and their row count.",
        "Every column's description below is also in the Parquet files, as the `description` of the field",
        "metadata, and each file's schema metadata names its table (`chunkline.table`) and",
        "`chunkline.schema_version`.",
        "",
        f"A run with `output.front_matter_columns` adds one nullable column per promoted front-matter key to {tables_with},",
        f"after the columns below, typed as the config says ({', '.join(f'`{name}`' for name in FRONT_MATTER_TYPES)})",
        "and described in the files like every other column.",
        "",
        "| table | columns | key |",
        "| --- | ---: | --- |",
    ]
    for table, (schema, key) in schemas.items():
        lines.append(f"| [`{table}`](#{_anchor(table)}) | {len(schema)} | {', '.join(f'`{name}`' for name in key)} |")
    lines += ["", *READER_TYPES]
    for table, (schema, key) in schemas.items():
        lines += ["", f"## `{table}`", ""]
        description = description_of(schema.metadata)
        if description:
            lines += [_cell(description), ""]
        lines += [
            f"Key: {', '.join(f'`{name}`' for name in key)}. No two rows of the table share it, and each part",
            "file is sorted by it.",
            "",
            "| column | Arrow type | nullable | description |",
            "| --- | --- | --- | --- |",
        ]
        for field in schema:
            nullable = "yes" if field.nullable else "no"
            lines.append(
                f"| `{field.name}` | `{type_name(field.type)}` | {nullable} | {_cell(description_of(field.metadata))} |"
            )
    return "\n".join(lines) + "\n"


def _anchor(table: str) -> str:
    """The anchor GitHub gives the heading ``## `table` ``: lowercase, punctuation other than - and _ dropped."""
    return "".join(character for character in table.lower() if character.isalnum() or character in "-_")


def main() -> None:
    sys.stdout.write(data_dictionary_markdown())


if __name__ == "__main__":
    main()
