"""Where the row groups of a Parquet part end: at ``output.row_group_rows`` rows or ``output.row_group_bytes``
bytes of rows, whichever comes first.

A row's bytes (:func:`row_bytes`) are those its values take in Arrow's memory, uncompressed: a fixed-width
value its width (a boolean one byte), a string or binary value its length and its offset, a list its
offset and its items. A row group ends after the row that brings it to ``row_group_rows`` rows or to
``row_group_bytes`` bytes or more (:class:`RowGroupCuts`), so that a writer given the rows in order, in
tables of any sizes, can end each row group as soon as its last row arrives, without waiting for the next:
a row group is over the byte cap by less than its last row, and a row larger than the cap is a row group of
its own. The ends follow from the rows in order alone, so a table written whole and the same rows written
in pieces have the same row groups.

The cap bounds what a merge holds, since it gathers and encodes one row group at a time: without it a row
group is the whole shard whenever the shard has fewer than ``row_group_rows`` rows, whatever their size.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["RowGroupCuts", "row_bytes", "row_group_ends"]


def row_bytes(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """The bytes of each row of ``table`` (int64), summed over its columns (see the module's docstring)."""
    fixed = 0  # the fixed-width columns' bytes, the same for every row: added once
    sizes = np.zeros(table.num_rows, np.int64)
    for column in table.columns:
        width = _fixed_width(column.type)
        if width:
            fixed += width
            continue
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        sizes += _value_bytes(array)
    if fixed:
        sizes += fixed
    return sizes


def _fixed_width(kind: pa.DataType) -> int:
    """The bytes of a value of ``kind`` when each takes the same, else 0."""
    if pa.types.is_boolean(kind):
        return 1
    if (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_struct(kind)
    ):
        return 0
    return getattr(kind, "byte_width", 0) or max(kind.bit_width // 8, 1)


def _value_bytes(array: pa.Array) -> np.ndarray:
    kind = array.type
    width = _fixed_width(kind)
    if width:
        return np.full(len(array), width, np.int64)
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return _lengths(array) + 4
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return _lengths(array) + 8
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        items = array.flatten()  # the items of the valid lists, in order
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        in_lists = np.bincount(parents, weights=_value_bytes(items), minlength=len(array)).astype(np.int64)
        return in_lists + (8 if pa.types.is_large_list(kind) else 4)
    sizes = np.zeros(len(array), np.int64)  # a struct: its fields' bytes
    for index in range(kind.num_fields):
        sizes += _value_bytes(array.field(index))
    return sizes


def _lengths(array: pa.Array) -> np.ndarray:
    """The length of each value of a string or binary array, read off its offsets (0 for a null)."""
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    offsets = np.frombuffer(array.buffers()[1], np.int64 if large else np.int32)
    lengths = np.diff(offsets[array.offset : array.offset + len(array) + 1]).astype(np.int64)
    if array.null_count:
        lengths[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return lengths


class RowGroupCuts:
    """Finds the row group ends of rows given in order, in pieces of any sizes."""

    def __init__(self, row_group_rows: int, row_group_bytes: int | None = None):
        if row_group_rows < 1 or (row_group_bytes is not None and row_group_bytes < 1):
            raise ValueError("row_group_rows and row_group_bytes must be at least 1")
        self._max_rows = row_group_rows
        self._max_bytes = row_group_bytes
        self.rows = 0
        """Rows of the row group still open (ended by no row given so far)."""
        self.bytes = 0
        """Their bytes."""

    def ends(self, sizes: np.ndarray) -> list[int]:
        """Of rows of ``sizes`` bytes, which follow the rows given before: the positions (in ``sizes``, one
        past the row) where a row group ends, in order. The rows after the last position stay in the open
        row group."""
        ends: list[int] = []
        count = len(sizes)
        start = 0
        totals = np.cumsum(sizes, dtype=np.int64) if self._max_bytes is not None else None
        while start < count:
            end = start + self._max_rows - self.rows  # one past the row that fills the row group's rows
            if totals is not None:
                before = totals[start - 1] if start else 0
                # The first row that brings the open row group to the byte cap or over it.
                reaching = int(np.searchsorted(totals, before + self._max_bytes - self.bytes, side="left"))
                end = min(end, reaching + 1)
            if end > count:
                self.rows += count - start
                if totals is not None:
                    self.bytes += int(totals[-1] - (totals[start - 1] if start else 0))
                return ends
            ends.append(end)
            start = end
            self.rows = self.bytes = 0
        return ends


def row_group_ends(sizes: np.ndarray, row_group_rows: int, row_group_bytes: int | None = None) -> list[int]:
    """One past the last row of each row group of rows of ``sizes`` bytes, the last row group's end (the
    row count) included: ``[]`` for no row."""
    ends = RowGroupCuts(row_group_rows, row_group_bytes).ends(sizes)
    if len(sizes) and (not ends or ends[-1] != len(sizes)):
        ends.append(len(sizes))
    return ends
