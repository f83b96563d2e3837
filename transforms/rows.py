"""Beam row types of chunkline's tables, derived from their Arrow schemas.

:func:`row_type_for` turns an Arrow schema into a ``typing.NamedTuple`` class with Beam's ``RowCoder``
registered for it, so a PCollection of its rows is schema'd: ``beam.Select``, ``beam.GroupBy`` on field
names, ``apache_beam.dataframe.convert.to_dataframe``, Beam SQL and Beam's own file writers work on it. The
field names, order and nullability are the Arrow schema's, so a row type follows whatever columns a config
gives the ``chunks`` table; :data:`ChunkRow`, :data:`DocumentRow` and :data:`ErrorRow` are those of the
default schemas.

Arrow -> Beam field types: strings (``string``, ``large_string``) -> ``str``; ``int8``..``int64`` and
unsigned -> ``numpy.int8``..``numpy.int64``; ``float32``/``float64`` -> ``numpy.float32``/``numpy.float64``;
``bool`` -> ``bool``; ``binary`` -> ``bytes``; ``timestamp`` -> ``apache_beam.utils.timestamp.Timestamp``;
``list<T>`` -> ``Sequence[T]``; a nullable field is ``Optional``. Values are plain Python values (ints,
lists, ``Timestamp``); :func:`row_from_dict` and :func:`row_to_dict` convert to and from the dicts whose
Arrow conversion is the table's.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils.timestamp import Timestamp

from chunkline.schemas import CHUNKS_SCHEMA, DOCUMENTS_SCHEMA, ERRORS_SCHEMA, SECTIONS_SCHEMA

__all__ = [
    "ChunkRow",
    "DocumentRow",
    "ErrorRow",
    "chunk_row_type",
    "row_from_dict",
    "row_to_dict",
    "row_type_for",
    "value_converter",
]

_INTEGERS = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.int16,
    pa.uint16(): np.int32,
    pa.uint32(): np.int64,
    pa.uint64(): np.int64,
}


def _beam_type(arrow_type: pa.DataType, field_name: str) -> Any:
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return str
    if arrow_type in _INTEGERS:
        return _INTEGERS[arrow_type]
    if pa.types.is_float32(arrow_type):
        return np.float32
    if pa.types.is_float64(arrow_type):
        return np.float64
    if pa.types.is_boolean(arrow_type):
        return bool
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return bytes
    if pa.types.is_timestamp(arrow_type):
        return Timestamp
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return Sequence[_beam_type(arrow_type.value_type, field_name)]
    raise TypeError(f"column {field_name!r}: Arrow type {arrow_type} has no Beam row field type in chunkline")


def row_type_for(arrow_schema: pa.Schema, name: str, *, module: str | None = None) -> type[NamedTuple]:
    """A NamedTuple row type with one field per column of ``arrow_schema`` (same names, same order,
    nullable columns ``Optional``), with Beam's ``RowCoder`` registered for it.

    ``module`` is where the class says it lives: give the module that binds it to ``name`` at import time,
    so that workers unpickle it by reference (a class made at run time is pickled by value instead)."""
    fields = []
    for field in arrow_schema:
        beam_type = _beam_type(field.type, field.name)
        # typing.Optional: Beam infers a nullable field from it (a `X | None` union it may not read).
        fields.append((field.name, typing.Optional[beam_type] if field.nullable else beam_type))  # noqa: UP045
    row_type = NamedTuple(name, fields)
    if module is not None:
        row_type.__module__ = module
    row_type._arrow_schema = arrow_schema
    row_type._from_dict = value_converter(arrow_schema, to_beam=True)
    row_type._to_dict = value_converter(arrow_schema, to_beam=False)
    beam.coders.registry.register_coder(row_type, beam.coders.RowCoder)
    return row_type


def _timestamp_from(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return Timestamp.from_utc_datetime(value.astimezone(timezone.utc))


def _datetime_from(value: Timestamp | None) -> datetime | None:
    return None if value is None else value.to_utc_datetime(has_tz=True)


def value_converter(arrow_schema: pa.Schema, *, to_beam: bool) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """A function converting a row dict's values between Arrow's Python values and the row type's (only
    timestamps differ); None when no column needs one, so rows of such a table convert at no cost."""
    timestamps = [field.name for field in arrow_schema if pa.types.is_timestamp(field.type)]
    if not timestamps:
        return None
    convert = _timestamp_from if to_beam else _datetime_from

    def converted(values: dict[str, Any]) -> dict[str, Any]:
        values = dict(values)
        for name in timestamps:
            values[name] = convert(values.get(name))
        return values

    return converted


def row_from_dict(row_type: type[NamedTuple], values: dict[str, Any]) -> Any:
    """A row of ``row_type`` from a table's row dict (as the chunker builds it)."""
    if row_type._from_dict is not None:
        values = row_type._from_dict(values)
    return row_type(**values)


def row_to_dict(row: Any) -> dict[str, Any]:
    """The table's row dict of a row of a type made by :func:`row_type_for`: what ``pa.Table.from_pylist``
    turns into the table's row."""
    values = row._asdict()
    converter = getattr(type(row), "_to_dict", None)
    return converter(values) if converter is not None else values


#: A row of the default ``chunks`` table (:data:`chunkline.schemas.CHUNKS_SCHEMA`).
ChunkRow = row_type_for(CHUNKS_SCHEMA, "ChunkRow", module=__name__)

_CHUNK_ROW_TYPES: dict[tuple[tuple[str, str, bool], ...], type] = {}


def _columns(arrow_schema: pa.Schema) -> tuple[tuple[str, str, bool], ...]:
    return tuple((field.name, str(field.type), field.nullable) for field in arrow_schema)


_CHUNK_ROW_TYPES[_columns(CHUNKS_SCHEMA)] = ChunkRow


def chunk_row_type(arrow_schema: pa.Schema = CHUNKS_SCHEMA) -> type:
    """The row type of a ``chunks`` table with ``arrow_schema``: :data:`ChunkRow` for the default schema,
    and one class per other set of columns (the same class each time it is asked for, so that the steps of
    a pipeline agree on it)."""
    columns = _columns(arrow_schema)
    if columns not in _CHUNK_ROW_TYPES:
        _CHUNK_ROW_TYPES[columns] = row_type_for(arrow_schema, "ChunkRow")
    return _CHUNK_ROW_TYPES[columns]


#: A row of the ``documents`` table: one per input document, whatever became of it.
DocumentRow = row_type_for(DOCUMENTS_SCHEMA, "DocumentRow", module=__name__)
#: A row of the ``errors`` table: one per document (or folder) that could not be chunked.
ErrorRow = row_type_for(ERRORS_SCHEMA, "ErrorRow", module=__name__)
#: A row of the ``sections`` table: one per document root and per heading subtree.
SectionRow = row_type_for(SECTIONS_SCHEMA, "SectionRow", module=__name__)
