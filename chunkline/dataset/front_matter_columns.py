"""Front-matter keys promoted to typed ``chunks`` columns (``output.front_matter_columns``), with no Beam.

A config names each key and its type, the column taking the key's name unless it names another::

    output:
      front_matter_columns:
        tags: list<string>
        version: string
        weight: float
        draft: boolean
        updated: timestamp
        title: {type: string, column: page_title}   # `title` is a built-in column: promote it under another name

:func:`parse_front_matter_columns` checks that config: a known type, and a column name that Beam's row
types, Parquet and SQL all take as it is — an ASCII identifier that starts with a letter (Beam's NamedTuple
rows refuse a leading underscore) and is no Python keyword (``class``, ``None``), clashing with no built-in
column nor another promoted one even in case only (DuckDB reads ``"Text"`` as the built-in ``text``).

:func:`front_matter_values` gives a document's value for each column from its front matter
(``FrontMatter.data``, already JSON-safe: YAML dates are ISO 8601 text there). A value is converted only
where nothing is lost or guessed:

- ``string``: a string (a YAML date is one: its ISO 8601 text). A number or a boolean does not fit: YAML
  has already turned ``version: 1.10`` into 1.1, and writing ``"1.1"`` would be a value nobody wrote.
- ``list<string>``: a list of strings, or one string as a list of one (``tags: python``).
- ``integer``: a whole number (not a boolean) within 64 bits; ``2.0`` or ``"2"`` does not fit.
- ``float``: a number; a whole number is taken when the float holds it exactly.
- ``boolean``: ``true`` or ``false`` (YAML 1.1's ``yes``/``no`` load as booleans); a string does not fit.
- ``timestamp``: ISO 8601 text (or a YAML date or datetime, which arrive as such text): a date is its
  midnight in UTC, a time with an offset is converted to UTC, one without an offset is taken as UTC. The
  moment in UTC must fall in the years 0001 to 9999: ``0001-01-01T00:00:00+01:00`` does not fit.

A key the front matter does not have, or holds as null, is null in its column. A value that does not fit
is null too, never an error of the document: the document is chunked as ever, and the caller records one
``errors`` row (``FrontMatterTypeMismatch``) per such value, naming the key, the value and what fits. So is
a value whose JSON text is over ``output.front_matter_max_value_bytes`` (64 KiB by default), with a
``FrontMatterValueTooLarge`` row naming the key, its size and the limit: every chunk of the document carries
its promoted values, and a megabyte of tags on each of a thousand chunks would take gigabytes.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from chunkline.schemas import (
    CHUNK_UPSERTS_SCHEMA,
    CHUNKS_SCHEMA,
    DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES,
    FRONT_MATTER_TYPES,
    FrontMatterColumn,
)

__all__ = [
    "FRONT_MATTER_MISMATCH",
    "FRONT_MATTER_TOO_LARGE",
    "front_matter_values",
    "parse_front_matter_columns",
]

#: ``error_type`` of the errors row of a front-matter value that does not fit its column's type.
FRONT_MATTER_MISMATCH = "FrontMatterTypeMismatch"
#: ``error_type`` of the errors row of a front-matter value over ``output.front_matter_max_value_bytes``.
FRONT_MATTER_TOO_LARGE = "FrontMatterValueTooLarge"

#: Other names a config may give a type, as people write them.
_TYPE_ALIASES = {"int": "integer", "bool": "boolean", "str": "string", "list[string]": "list<string>"}
_COLUMN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_INT64 = (-(2**63), 2**63 - 1)
# ISO 8601 as Python 3.10's datetime.fromisoformat reads it on every version: a date, optionally a time
# (minutes, seconds, milliseconds or microseconds) and a UTC offset or Z.
_ISO_8601 = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.(?:\d{3}|\d{6}))?)?(?:Z|[+-]\d{2}:\d{2})?)?")


def parse_front_matter_columns(
    value: Any, max_value_bytes: int = DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES
) -> tuple[FrontMatterColumn, ...]:
    """The promoted columns of ``output.front_matter_columns`` (a mapping of key to a type name, or to
    ``{type: ..., column: ...}``), sorted by column name (the order of the table's columns, whatever order
    a config file, the environment and ``--set`` gave them in), each taking values of up to
    ``max_value_bytes``; ``ValueError`` naming the entry for anything else."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"front_matter_columns must be a mapping of front-matter key to type, got {type(value).__name__}"
        )
    builtin = {name.casefold(): name for name in (*CHUNKS_SCHEMA.names, *CHUNK_UPSERTS_SCHEMA.names)}
    columns: list[FrontMatterColumn] = []
    taken: dict[str, tuple[str, str]] = {}  # casefolded column -> (key, column)
    for key, spec in value.items():
        where = f"front_matter_columns.{key}"
        if not isinstance(key, str) or not key:
            raise ValueError(f"front_matter_columns: a key must be non-empty text, got {key!r}")
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - {"type", "column"}, key=str)
            if unknown or "type" not in spec:
                raise ValueError(f"{where}: expected {{type: ..., column: ...}} (column optional), got {dict(spec)!r}")
            type_name, column = spec["type"], spec.get("column", key)
        else:
            type_name, column = spec, key
        type_name = _TYPE_ALIASES.get(type_name, type_name) if isinstance(type_name, str) else type_name
        if type_name not in FRONT_MATTER_TYPES:
            raise ValueError(f"{where}: unknown type {type_name!r}; types: {', '.join(FRONT_MATTER_TYPES)}")
        problem = _column_name_problem(column)
        if problem:
            raise ValueError(
                f"{where}: column name {column!r} {problem}; name one with {{type: {type_name}, column: NAME}}"
            )
        folded = column.casefold()
        if folded in builtin:
            clash = (
                "is a built-in chunks column"
                if builtin[folded] == column
                else (
                    f"differs only in case from the built-in chunks column {builtin[folded]!r}, and SQL engines such "
                    "as DuckDB do not tell names apart by case"
                )
            )
            raise ValueError(
                f"{where}: column {column!r} {clash}; promote the key under another name with "
                f"{{type: {type_name}, column: fm_{column}}}"
            )
        if folded in taken:
            other_key, other_column = taken[folded]
            clash = "is also" if other_column == column else f"differs only in case from {other_column!r},"
            raise ValueError(f"{where}: column {column!r} {clash} the column of front_matter_columns.{other_key}")
        taken[folded] = (key, column)
        columns.append(FrontMatterColumn(key=key, type=type_name, column=column, max_value_bytes=max_value_bytes))
    return tuple(sorted(columns, key=lambda column: column.column))


def _column_name_problem(column: Any) -> str | None:
    """Why ``column`` cannot name a promoted column, or None when it can."""
    if not isinstance(column, str):
        return "is not text"
    if column.startswith("_"):
        return "starts with an underscore, which the fields of Beam's row types cannot start with"
    if not _COLUMN_NAME.fullmatch(column):
        return "is not a plain identifier (an ASCII letter, then letters, digits or _; at most 64)"
    if keyword.iskeyword(column):
        return "is a Python keyword, which the fields of Beam's row types cannot be"
    return None


def front_matter_values(
    data: Mapping[str, Any] | None, columns: tuple[FrontMatterColumn, ...]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(column -> the document's value or None, ``(error_type, message)`` for each value that is null
    because it does not fit its type or is over its column's ``max_value_bytes``).

    ``data`` is the document's front matter (``FrontMatter.data``), None when it has none."""
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for column in columns:
        raw = (data or {}).get(column.key)
        value = None
        if raw is not None:
            size_bytes = _json_size_bytes(raw)
            if size_bytes > column.max_value_bytes:
                problems.append((FRONT_MATTER_TOO_LARGE, _too_large_message(column, raw, size_bytes)))
            else:
                value = _CONVERTERS[column.type](raw)
                if value is None:
                    problems.append((FRONT_MATTER_MISMATCH, _mismatch_message(column, raw)))
        values[column.column] = value
    return values, problems


def _json_size_bytes(value: Any) -> int:
    """Bytes of ``value``'s JSON text in UTF-8 (front matter is JSON-safe: ``FrontMatter.data``)."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _too_large_message(column: FrontMatterColumn, raw: Any, size_bytes: int) -> str:
    return (
        f"front matter {column.key!r} is {_json_kind(raw)} of {size_bytes:,} bytes as JSON, over the "
        f"{column.max_value_bytes:,} bytes a promoted value may have (output.front_matter_max_value_bytes), since "
        f"every chunk of the document carries it; its column {column.column} is null for this document's chunks: "
        "shorten the value, or raise output.front_matter_max_value_bytes"
    )


def _mismatch_message(column: FrontMatterColumn, raw: Any) -> str:
    shown = json.dumps(raw, ensure_ascii=False, sort_keys=True)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    advice = "quote it in the front matter" if column.type == "string" else "fix the value"
    return (
        f"front matter {column.key!r} is {shown} ({_json_kind(raw)}), which is not a {column.type} "
        f"(output.front_matter_columns.{column.key}); its column {column.column} is null for this document's "
        f"chunks: {advice}, or change the column's type"
    )


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "a mapping"


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _string_list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def _integer(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        try:
            converted = float(value)
        except OverflowError:
            return None
        return converted if int(converted) == value else None
    return None


def _boolean(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not _ISO_8601.fullmatch(value):
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)
    except ValueError:  # 2024-02-30, 25:00, year 0
        return None
    except OverflowError:  # an offset that takes 0001-01-01 or 9999-12-31 out of the years a datetime holds
        return None


_CONVERTERS = {
    "string": _string,
    "list<string>": _string_list,
    "integer": _integer,
    "float": _float,
    "boolean": _boolean,
    "timestamp": _timestamp,
}
