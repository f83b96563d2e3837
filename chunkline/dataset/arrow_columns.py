"""Arrow arrays built from Python lists through their buffers.

``pyarrow.array`` (and every Python value handed to a compute function) first asks whether the value is a
pandas one, which imports pandas: a sixth of a second for a driver step that needs none of it. These
build the same arrays from their validity, offset and data buffers, with numpy; Arrow scalars taken from
them stand for Python values in compute calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["bool_array", "empty_table", "int64_array", "numpy_values", "string_array", "zeros"]


def _validity(values: Sequence) -> pa.Buffer | None:
    """The validity bitmap of ``values`` (None when no value is None)."""
    if None not in values:
        return None
    mask = np.fromiter((value is not None for value in values), dtype=bool, count=len(values))
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def int64_array(values: Sequence[int | None]) -> pa.Array:
    """``values`` as an int64 array (None: null)."""
    validity = _validity(values)
    if validity is None:
        data = np.array(values, dtype=np.int64)
    else:
        data = np.fromiter((0 if value is None else value for value in values), dtype=np.int64, count=len(values))
    return pa.Array.from_buffers(pa.int64(), len(values), [validity, pa.py_buffer(data)])


def bool_array(values: Sequence[bool | None]) -> pa.Array:
    """``values`` as a boolean array (None: null)."""
    validity = _validity(values)
    if validity is None:
        data = np.array(values, dtype=bool)
    else:
        data = np.fromiter((bool(value) for value in values), dtype=bool, count=len(values))
    return pa.Array.from_buffers(
        pa.bool_(), len(values), [validity, pa.py_buffer(np.packbits(data, bitorder="little"))]
    )


def string_array(values: Sequence[str | None]) -> pa.Array:
    """``values`` (valid UTF-8 text, as every doc_id and source_uri is) as a string array (None: null)."""
    encoded = [b"" if value is None else value.encode("utf-8") for value in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(values)), out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.string(),
            len(values),
            [_validity(values), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))],
        )
    large = pa.Array.from_buffers(
        pa.large_string(), len(values), [_validity(values), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )
    return large.cast(pa.string())


def zeros(length: int, type: pa.DataType) -> pa.Array:
    """``length`` zeros of the signed integer ``type``."""
    data = np.zeros(length, np.dtype(f"int{type.bit_width}"))
    return pa.Array.from_buffers(type, length, [None, pa.py_buffer(data)])


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows (``Schema.empty_table`` imports pandas to build it)."""
    return pa.Table.from_batches([], schema=schema)


def numpy_values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an integer or boolean ``array`` without nulls, as numpy (``Array.to_numpy`` imports
    pandas)."""
    if isinstance(array, pa.ChunkedArray):
        parts = [numpy_values(chunk) for chunk in array.chunks]
        return np.concatenate(parts) if parts else numpy_values(pa.nulls(0, array.type))
    if array.null_count:
        raise ValueError("numpy_values takes an array without nulls")
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(bool)
    kind = "u" if pa.types.is_unsigned_integer(array.type) else "i"
    dtype = np.dtype(f"{kind}{array.type.bit_width // 8}")
    return np.frombuffer(data, dtype=dtype)[array.offset : array.offset + len(array)]
