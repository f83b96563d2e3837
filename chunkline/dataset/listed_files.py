"""The driver's listing held as Arrow rows: one row per matched file, a column per field of its
:class:`~chunkline.dataset.inputs.SourceFile`.

A corpus of a million small pages lists a million files. As Python objects (a ``SourceFile`` with its
strings, a datetime and a list around it) each costs the driver close to a kilobyte; as Arrow rows, under
a hundred bytes, and the plan's and the staged listing's work on them is done by Arrow's kernels. Files
come in from the inputs' listing a batch at a time (:func:`listed_files_table`), so the Python objects of
one batch are all there ever are at once; a ``SourceFile`` is made again from its row only where one is
needed (a file hashed by the plan, a document read in this process, a line of the staged listing).

The rows are held as :data:`HELD_FILES_SCHEMA`: the files of one folder share the start of their doc_id,
URL and path, so each of those is held as its folder (a dictionary entry per folder and batch) and its
name (held once when the three names are the same), and the columns nearly every file leaves empty cost
a bit and an index a row. :func:`take_rows` and :func:`plain_rows` give rows back as
:data:`LISTED_FILES_SCHEMA`, the full values, a batch at a time; only the doc_id order is found with the
doc_ids whole, for as long as that takes.

:class:`ListedDocuments` groups such rows into ``(doc_id, files)`` pairs, the shape the pipeline reads:
it answers ``len``, iterates its pairs lazily, a batch of rows at a time, and gives the doc_ids and first
files' sizes as Arrow arrays.

Every field survives the trip: a path or message holding a lone surrogate (a name that was not UTF-8) is
kept as binary, encoded with ``surrogatepass``; doc_ids and URLs are valid UTF-8 (see
:func:`~chunkline.dataset.inputs.utf8_name`); modification times are kept in microseconds since the epoch,
in UTC, their precision.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkline.dataset.arrow_columns import bool_array, empty_table, int64_array, numpy_values
from chunkline.dataset.inputs import FileProblem, SourceFile

__all__ = [
    "HELD_FILES_SCHEMA",
    "LISTED_FILES_SCHEMA",
    "ListedDocuments",
    "held_columns",
    "held_rows",
    "listed_files_batch",
    "listed_files_table",
    "plain_rows",
    "python_columns",
    "source_files_of",
    "take_rows",
]

LISTED_FILES_SCHEMA = pa.schema(
    [
        ("doc_id", pa.binary()),
        ("source_uri", pa.binary()),
        ("input_index", pa.int64()),
        ("path", pa.binary()),
        ("size_bytes", pa.int64()),
        ("modified_time", pa.int64()),
        ("problem_stage", pa.binary()),
        ("problem_error_type", pa.binary()),
        ("problem_message", pa.binary()),
        ("problem_skipped", pa.bool_()),
        ("mtime_ns", pa.int64()),
        ("etag", pa.binary()),
        ("version", pa.binary()),
    ]
)
"""One row per listed file. Text is kept as its UTF-8 bytes (``surrogatepass``: a lone surrogate survives,
and byte order is code point order, as Python compares text); ``modified_time`` is in microseconds since
the epoch; ``problem_*`` are null when the file has no problem."""

TEXT_COLUMNS = (
    "doc_id",
    "source_uri",
    "path",
    "problem_stage",
    "problem_error_type",
    "problem_message",
    "etag",
    "version",
)

BATCH_ROWS = 16_384
"""Files converted between Python and Arrow at a time; also the most rows of one batch of
:data:`HELD_FILES_SCHEMA`, whose dictionaries are numbered with 16-bit indices."""

SPLIT_COLUMNS = ("doc_id", "source_uri", "path")
"""The text columns held split at their last ``/``: a folder, shared by the files of one folder, and a
name."""

_SHARED_TEXT = pa.dictionary(pa.int16(), pa.binary())
"""A text column whose values many rows of a batch share (a folder; a problem, ETag or version, nearly
always empty): each value once per batch, each row a 16-bit index."""

HELD_FILES_SCHEMA = pa.schema(
    [
        ("doc_id_folder", _SHARED_TEXT),
        ("doc_id_name", pa.binary()),
        ("source_uri_folder", _SHARED_TEXT),
        ("source_uri_name", pa.binary()),
        ("input_index", pa.int32()),
        ("path_folder", _SHARED_TEXT),
        ("path_name", pa.binary()),
        ("size_bytes", pa.int64()),
        ("modified_time", pa.int64()),
        ("problem_stage", _SHARED_TEXT),
        ("problem_error_type", _SHARED_TEXT),
        ("problem_message", _SHARED_TEXT),
        ("problem_skipped", pa.bool_()),
        ("mtime_ns", pa.int64()),
        ("etag", _SHARED_TEXT),
        ("version", _SHARED_TEXT),
    ]
)
"""The rows of :data:`LISTED_FILES_SCHEMA` as the driver holds them, at most :data:`BATCH_ROWS` to a batch,
each batch's dictionaries its own. Every file of one folder shares the part of its doc_id, ``source_uri``
and ``path`` up to their last ``/`` (``…_folder``, a dictionary entry per folder; no ``/``: empty), and
mostly their name after it (``…_name``; for ``source_uri`` and ``path`` null when it is the doc_id's). The
other text columns, null for nearly every file, are dictionaries too (an index and a bit a row); the input's
number is 32-bit. :func:`plain_rows` gives the rows back as :data:`LISTED_FILES_SCHEMA`, value for value."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def _bytes_array(values: Sequence[bytes | None]) -> pa.Array:
    """``values`` as a binary array, None: null."""
    nulls = values.count(None)
    if nulls and nulls == len(values):
        return pa.nulls(nulls, pa.binary())
    encoded = [b"" if value is None else value for value in values] if nulls else values
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(values)), out=offsets[1:])
    validity = None
    if nulls:
        mask = np.fromiter((value is not None for value in values), dtype=bool, count=len(values))
        validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    data = pa.py_buffer(b"".join(encoded))
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), len(values), [validity, pa.py_buffer(offsets.astype(np.int32)), data])
    return pa.Array.from_buffers(pa.large_binary(), len(values), [validity, pa.py_buffer(offsets), data]).cast(
        pa.binary()
    )


def _dictionary_array(values: Sequence[bytes | None]) -> pa.Array:
    """``values`` (at most :data:`BATCH_ROWS`) as a dictionary of their distinct values and a 16-bit index
    per value, None: null."""
    count = len(values)
    if values.count(None) == count:  # a column no file has a value in: no index to work out
        indices = pa.Array.from_buffers(
            pa.int16(),
            count,
            [pa.py_buffer(np.zeros((count + 7) // 8, np.uint8)), pa.py_buffer(np.zeros(count, np.int16))],
            null_count=count,
        )
        return pa.DictionaryArray.from_arrays(indices, _bytes_array([]))
    encoded = pc.dictionary_encode(_bytes_array(values))
    return pa.DictionaryArray.from_arrays(encoded.indices.cast(pa.int16()), encoded.dictionary)


def _split(values: Sequence[bytes | None]) -> tuple[list[bytes | None], list[bytes | None]]:
    """Each of ``values`` cut after its last ``/`` (bytes: a ``/`` is never part of another character's
    UTF-8): (folders, names), None for None."""
    if None in values:
        cuts = [None if value is None else value.rfind(b"/") + 1 for value in values]
        return (
            [None if cut is None else value[:cut] for value, cut in zip(values, cuts)],
            [None if cut is None else value[cut:] for value, cut in zip(values, cuts)],
        )
    cuts = [value.rfind(b"/") + 1 for value in values]
    return [value[:cut] for value, cut in zip(values, cuts)], [value[cut:] for value, cut in zip(values, cuts)]


def _held_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One batch of :data:`LISTED_FILES_SCHEMA` rows (at most :data:`BATCH_ROWS`) as
    :data:`HELD_FILES_SCHEMA` rows."""
    return _held_of(
        {
            name: batch.column(name).to_pylist() if name in TEXT_COLUMNS else batch.column(name)
            for name in LISTED_FILES_SCHEMA.names
        }
    )


def _held_of(columns: dict[str, Any]) -> pa.RecordBatch:
    """A batch of :data:`HELD_FILES_SCHEMA` rows (at most :data:`BATCH_ROWS`) from the columns of
    :data:`LISTED_FILES_SCHEMA`: the text ones as lists of their bytes, the others as arrays."""
    held: dict[str, pa.Array] = {}
    doc_names: list[bytes | None] = []
    for name in SPLIT_COLUMNS:
        folders, names = _split(columns[name])
        if name == "doc_id":
            doc_names = names
        else:  # the name, when it is the doc_id's, is not held twice
            names = [
                None if folder is not None and tail == doc_name else tail
                for folder, tail, doc_name in zip(folders, names, doc_names)
            ]
        held[f"{name}_folder"] = _dictionary_array(folders)
        held[f"{name}_name"] = _bytes_array(names)
    for field in HELD_FILES_SCHEMA:
        if field.name in held:
            continue
        column = columns[field.name]
        if pa.types.is_dictionary(field.type):
            held[field.name] = _dictionary_array(column)
        else:
            held[field.name] = column.cast(field.type)
    return pa.record_batch([held[name] for name in HELD_FILES_SCHEMA.names], schema=HELD_FILES_SCHEMA)


def held_rows(rows: pa.Table | pa.RecordBatch) -> pa.Table:
    """``rows`` (:data:`LISTED_FILES_SCHEMA`, or already :data:`HELD_FILES_SCHEMA`) as a table of
    :data:`HELD_FILES_SCHEMA`, in their order."""
    if rows.schema.equals(HELD_FILES_SCHEMA):
        return rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
    held = [
        _held_batch(batch.slice(start, BATCH_ROWS))
        for batch in batches
        for start in range(0, batch.num_rows, BATCH_ROWS)
    ]
    return pa.Table.from_batches(held, schema=HELD_FILES_SCHEMA)


def held_columns(names: Iterable[str]) -> list[str]:
    """The columns of :data:`HELD_FILES_SCHEMA` that hold the columns ``names`` of
    :data:`LISTED_FILES_SCHEMA` (for ``select`` before :func:`take_rows` or :func:`plain_rows`)."""
    held: list[str] = []
    for name in names:
        if name in SPLIT_COLUMNS:
            wanted = [f"{name}_folder", f"{name}_name"] + ([] if name == "doc_id" else ["doc_id_name"])
        else:
            wanted = [name]
        held += [column for column in wanted if column not in held]
    return held


def plain_rows(rows: pa.Table | pa.RecordBatch) -> pa.Table:
    """``rows`` of :data:`HELD_FILES_SCHEMA` (all its columns or some, as :func:`held_columns` names them) as
    the columns of :data:`LISTED_FILES_SCHEMA` they hold, in that schema's order; other columns as they
    are."""
    batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
    plain = [_plain_batch(batch) for batch in batches]
    return pa.Table.from_batches(plain, schema=_plain_schema(rows.schema))


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    fields = []
    for field in schema:
        name = field.name
        if name.endswith("_folder") and name[: -len("_folder")] in SPLIT_COLUMNS:
            fields.append(LISTED_FILES_SCHEMA.field(name[: -len("_folder")]))
        elif name.endswith("_name") and name[: -len("_name")] in SPLIT_COLUMNS:
            continue
        elif name in LISTED_FILES_SCHEMA.names:
            fields.append(LISTED_FILES_SCHEMA.field(name))
        else:
            fields.append(field)
    return pa.schema(fields)


def _plain_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    schema = _plain_schema(batch.schema)
    arrays = []
    for field in schema:
        name = field.name
        if name in SPLIT_COLUMNS and f"{name}_folder" in batch.schema.names:
            tail = batch.column(f"{name}_name")
            if name != "doc_id":
                tail = pc.coalesce(tail, batch.column("doc_id_name"))
            folder = batch.column(f"{name}_folder").dictionary_decode()
            arrays.append(pc.binary_join_element_wise(folder, tail, _EMPTY))
        else:
            column = batch.column(name)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_EMPTY = _bytes_array([b""])[0]


def _decoded(values: list[bytes | None]) -> list[str | None]:
    return [None if value is None else value.decode("utf-8", "surrogatepass") for value in values]


def listed_files_batch(sources: Sequence[SourceFile]) -> pa.RecordBatch:
    """``sources`` as rows of :data:`LISTED_FILES_SCHEMA` (their bytes, if any, are left out)."""
    columns = _source_columns(sources)
    return pa.record_batch(
        [_bytes_array(columns[name]) if name in TEXT_COLUMNS else columns[name] for name in LISTED_FILES_SCHEMA.names],
        schema=LISTED_FILES_SCHEMA,
    )


def _source_columns(sources: Sequence[SourceFile]) -> dict[str, Any]:
    """The columns of :data:`LISTED_FILES_SCHEMA` of ``sources``: the text ones as lists of their UTF-8 bytes
    (``surrogatepass``; None: null), the others as arrays."""
    problems = [source.problem for source in sources]
    return {
        "doc_id": _encoded([source.doc_id for source in sources]),
        "source_uri": _encoded([source.source_uri for source in sources]),
        "input_index": int64_array([source.input_index for source in sources]),
        "path": _encoded([source.path for source in sources]),
        "size_bytes": int64_array([source.size_bytes for source in sources]),
        "modified_time": int64_array(
            [
                None if source.modified_time is None else (source.modified_time - _EPOCH) // _MICROSECOND
                for source in sources
            ]
        ),
        "problem_stage": _encoded([None if problem is None else problem.stage for problem in problems]),
        "problem_error_type": _encoded([None if problem is None else problem.error_type for problem in problems]),
        "problem_message": _encoded([None if problem is None else problem.message for problem in problems]),
        "problem_skipped": bool_array([None if problem is None else problem.skipped for problem in problems]),
        "mtime_ns": int64_array([source.mtime_ns for source in sources]),
        "etag": _encoded([source.etag for source in sources]),
        "version": _encoded([source.version for source in sources]),
    }


def _encoded(values: list[str | None]) -> list[bytes | None]:
    if values.count(None) == len(values):
        return values
    return [None if value is None else value.encode("utf-8", "surrogatepass") for value in values]


def listed_files_table(sources: Iterable[SourceFile]) -> pa.Table:
    """``sources`` as one table of :data:`HELD_FILES_SCHEMA`, in their order, converted
    :data:`BATCH_ROWS` at a time (an iterator is read a batch at a time)."""
    iterator = iter(sources)
    batches = []
    while batch := list(itertools.islice(iterator, BATCH_ROWS)):
        # Copied into Arrow's memory pool: the rows outlive the batch's Python values, and kept apart
        # from them, the heap those used is free again for the next batch's.
        batches.append(pa.concat_batches([_held_of(_source_columns(batch))]))
    return pa.Table.from_batches(batches, schema=HELD_FILES_SCHEMA)


def python_columns(rows: pa.Table | pa.RecordBatch) -> dict[str, list]:
    """The columns of ``rows`` (:data:`LISTED_FILES_SCHEMA` or :data:`HELD_FILES_SCHEMA`) as Python lists
    of :data:`LISTED_FILES_SCHEMA`'s values, text decoded."""
    rows = plain_rows(rows)
    return {
        name: _decoded(rows.column(name).to_pylist()) if name in TEXT_COLUMNS else rows.column(name).to_pylist()
        for name in LISTED_FILES_SCHEMA.names
    }


def source_files_of(rows: pa.Table | pa.RecordBatch) -> list[SourceFile]:
    """The ``SourceFile`` of each row of ``rows`` (:data:`LISTED_FILES_SCHEMA` or :data:`HELD_FILES_SCHEMA`),
    in order."""
    columns = python_columns(rows)
    result = []
    for (
        doc_id,
        source_uri,
        input_index,
        path,
        size_bytes,
        modified_time,
        stage,
        error_type,
        message,
        skipped,
        mtime_ns,
        etag,
        version,
    ) in zip(*(columns[name] for name in LISTED_FILES_SCHEMA.names)):
        result.append(
            SourceFile(
                doc_id=doc_id,
                source_uri=source_uri,
                input_index=input_index,
                path=path,
                size_bytes=size_bytes,
                modified_time=None if modified_time is None else _EPOCH + timedelta(microseconds=modified_time),
                problem=None if stage is None else FileProblem(stage, error_type, message, skipped),
                mtime_ns=mtime_ns,
                etag=etag,
                version=version,
            )
        )
    return result


class ListedDocuments:
    """``(doc_id, files)`` pairs held as Arrow rows: the files of pair ``i`` are rows
    ``rows[starts[i]:starts[i + 1]]`` of ``files`` (:data:`HELD_FILES_SCHEMA`; ``rows`` None: the rows
    in their order), and a pair's doc_id is its first file's. The rows are never copied to put them in
    order: ``rows`` is that order. Iterating gives the pairs in order, made :data:`BATCH_ROWS` rows at a
    time."""

    def __init__(
        self, files: pa.Table, starts: np.ndarray, rows: np.ndarray | None = None, *, sorted_by_doc_id: bool = False
    ):
        self.files = files
        self.starts = np.asarray(starts, dtype=np.int64)
        self.rows = rows
        self.sorted_by_doc_id = sorted_by_doc_id
        """Whether the pairs are in doc_id order (as :meth:`by_doc_id` puts them)."""

    @classmethod
    def empty(cls) -> ListedDocuments:
        return cls(empty_table(HELD_FILES_SCHEMA), np.zeros(1, np.int64))

    @classmethod
    def of_pairs(cls, pairs: Iterable[tuple[str, Sequence[SourceFile]]]) -> ListedDocuments:
        """``pairs`` as rows (each pair's doc_id is taken from its files; a pair needs at least one)."""
        if isinstance(pairs, ListedDocuments):
            return pairs
        sizes: list[int] = []

        def files() -> Iterator[SourceFile]:
            for _, group in pairs:
                sizes.append(len(group))
                yield from group

        table = listed_files_table(files())
        starts = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=starts[1:])
        return cls(table, starts)

    @classmethod
    def by_doc_id(
        cls,
        files: pa.Table,
        singles: Sequence[SourceFile] = (),
        *,
        then_by: tuple[str, ...] = (),
        rank: np.ndarray | None = None,
    ) -> ListedDocuments:
        """The rows of ``files`` grouped by doc_id, sorted by doc_id: each group's files in their order in
        ``files``, or by the columns ``then_by``, or by ``rank`` (a number per row); each of ``singles`` a
        pair of its own after any group of the same doc_id."""
        files = held_rows(files)
        count = files.num_rows
        if singles:
            files = pa.concat_tables([files, held_rows(listed_files_batch(list(singles)))])
        total = files.num_rows
        if total == 0:
            return cls(files, np.zeros(1, np.int64), sorted_by_doc_id=True)
        # The doc_ids whole for as long as the order takes to find; the rows keep them split.
        keys = plain_rows(files.select(held_columns(["doc_id"])))
        if rank is not None or singles:
            numbers = np.arange(count, dtype=np.int64) if rank is None else np.asarray(rank, dtype=np.int64)
            numbers = np.concatenate([numbers, np.arange(count, total, dtype=np.int64)])
            keys = keys.append_column("rank", pa.chunked_array([_int64_array(numbers)]))
        rows = numpy_values(pc.sort_indices(keys, sort_keys=[(key, "ascending") for key in keys.column_names]))
        new_group = np.ones(total, dtype=bool)
        doc_ids = keys.select(["doc_id"])
        for start in range(0, total, BATCH_ROWS):
            # The doc_ids in order a batch at a time (with the one before), never a sorted copy of them all.
            before = max(start - 1, 0)
            ids = _one_array(take_rows(doc_ids, rows[before : start + BATCH_ROWS]).column(0))
            if len(ids) > 1:
                new_group[before + 1 : start + BATCH_ROWS] = numpy_values(
                    pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
                )
        del keys, doc_ids
        if then_by:
            _order_ties(files, rows, new_group, then_by)
        if total > 1:
            if singles:
                single = rows >= count
                new_group[1:] |= single[1:] | single[:-1]
        starts = np.append(np.flatnonzero(new_group), total).astype(np.int64)
        return cls(files, starts, rows, sorted_by_doc_id=True)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[tuple[str, list[SourceFile]]]:
        return self.pairs()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ListedDocuments | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"ListedDocuments({len(self)} documents, {self.files.num_rows} files)"

    def first_rows(self) -> np.ndarray:
        """The row of ``files`` of each pair's first file, in order."""
        positions = self.starts[:-1]
        return positions if self.rows is None else self.rows[positions]

    def doc_ids(self) -> pa.Array:
        """Each pair's doc_id, in order (a string array: doc_ids are valid UTF-8)."""
        return self._firsts("doc_id").cast(pa.string())

    def first_sizes(self) -> pa.Array:
        """Each pair's first file's ``size_bytes`` (null: not known), in order."""
        return self._firsts("size_bytes")

    def _firsts(self, name: str) -> pa.Array:
        return _one_array(take_rows(self.files.select(held_columns([name])), self.first_rows()).column(name))

    def pairs(self, order: np.ndarray | None = None) -> Iterator[tuple[str, list[SourceFile]]]:
        """The pairs in order, or in ``order`` (pair numbers) when given, made a batch of rows at a time."""
        for lengths, rows in self.row_batches(order):
            sources = source_files_of(rows)
            offset = 0
            for length in lengths:
                group = sources[offset : offset + length]
                yield group[0].doc_id, group
                offset += length

    def row_batches(self, order: np.ndarray | None = None) -> Iterator[tuple[list[int], pa.Table]]:
        """The pairs' rows a batch at a time, in order or in ``order`` (pair numbers): (each pair's number of
        files, their rows)."""
        lengths = np.diff(self.starts)
        groups = np.arange(len(self), dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
        position = 0
        while position < len(groups):
            # As many pairs as fit in a batch of rows (at least one).
            batch_lengths = lengths[groups[position : position + BATCH_ROWS]]
            take = max(1, int(np.searchsorted(np.cumsum(batch_lengths), BATCH_ROWS, side="right")))
            chosen = groups[position : position + take]
            chosen_lengths = lengths[chosen]
            ends = np.cumsum(chosen_lengths)
            row_numbers = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(
                self.starts[chosen] - (ends - chosen_lengths), chosen_lengths
            )
            if self.rows is not None:
                row_numbers = self.rows[row_numbers]
            yield chosen_lengths.tolist(), take_rows(self.files, row_numbers)
            position += take

    def largest_first_order(self) -> np.ndarray:
        """The pair numbers largest first file first, then by doc_id; unknown sizes after every known one
        (:func:`chunkline.dataset.listing.largest_first`'s order)."""
        sizes = pc.fill_null(self.first_sizes(), int64_array([-1])[0])
        if self.sorted_by_doc_id:  # a stable sort by size keeps the doc_ids' order among equal sizes
            return np.argsort(-numpy_values(sizes), kind="stable")
        keys = pa.table([sizes, self._firsts("doc_id")], names=["size", "doc_id"])
        return numpy_values(pc.sort_indices(keys, sort_keys=[("size", "descending"), ("doc_id", "ascending")]))


def take_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, one chunk at a time: Arrow's own take joins a column's chunks into one copy
    first, which for a listing of millions of files is a copy of the listing per call. Rows of
    :data:`HELD_FILES_SCHEMA` (or some of its columns) come out as :func:`plain_rows` gives them."""
    rows = np.asarray(rows, dtype=np.int64)
    batches = [batch for batch in table.to_batches() if batch.num_rows]
    if len(batches) <= 1:
        single = pa.Table.from_batches(batches, schema=table.schema)
        return plain_rows(single.take(_int64_array(rows)) if batches else single.slice(0, 0))
    starts = np.cumsum([0] + [batch.num_rows for batch in batches])
    chunk = np.searchsorted(starts, rows, side="right") - 1
    by_chunk = np.argsort(chunk, kind="stable")
    sorted_chunks = chunk[by_chunk]
    pieces = []
    for number in np.unique(sorted_chunks).tolist():
        low, high = np.searchsorted(sorted_chunks, [number, number + 1])
        local = rows[by_chunk[low:high]] - starts[number]
        pieces.append(_plain_batch(batches[number].take(_int64_array(local))))
    gathered = pa.Table.from_batches(pieces, schema=_plain_schema(table.schema)).combine_chunks()
    inverse = np.empty_like(by_chunk)
    inverse[by_chunk] = np.arange(len(by_chunk), dtype=by_chunk.dtype)
    return gathered.take(_int64_array(inverse))


def _order_ties(files: pa.Table, rows: np.ndarray, new_group: np.ndarray, then_by: tuple[str, ...]) -> None:
    """Put the files of each doc_id held by several (``rows[i]`` in order, ``new_group[i]``: the doc_id
    changes at ``i``) in order by the columns ``then_by``, keeping their order among equal values: as a
    sort by doc_id, then ``then_by``, then the order found. Few doc_ids are held twice, and only their
    files' values are taken."""
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.append(starts, len(rows)))
    shared = sizes > 1
    if not shared.any():
        return
    group_starts, group_sizes = starts[shared], sizes[shared]
    ends = np.cumsum(group_sizes)
    positions = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(group_starts - (ends - group_sizes), group_sizes)
    columns = _column_lists(take_rows(files.select(held_columns(then_by)), rows[positions]), then_by)
    keys = [tuple((True,) if value is None else (False, value) for value in values) for values in zip(*columns)]
    offset = 0
    for size in group_sizes.tolist():
        group = range(offset, offset + size)
        ordered = sorted(group, key=keys.__getitem__)
        rows[positions[offset : offset + size]] = rows[positions[np.asarray(ordered, dtype=np.int64)]]
        offset += size


def _column_lists(rows: pa.Table, names: Iterable[str]) -> list[list]:
    """The columns ``names`` of plain ``rows`` as Python lists (text as its bytes: in byte order, as Arrow
    sorts binary)."""
    return [rows.column(name).to_pylist() for name in names]


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array (``combine_chunks`` of no chunks imports pandas)."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return pa.concat_arrays(column.chunks) if column.num_chunks else pa.nulls(0, column.type)


def _int64_array(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
