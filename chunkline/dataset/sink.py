"""The staged writes of a run's tables, without Beam: spilling rows per shard and merging each shard.

These are the steps of :class:`~chunkline.transforms.write.WriteChunkTables` (that module tells the whole
design: spill files per (table, shard), one merge per shard into content-named Parquet parts, ``changes/``
against the previous snapshot, an incremental run's carried rows). Each step is a class with a runner's
lifecycle (``setup``, ``start_bundle``, ``process``, ``finish_bundle``): the Beam DoFns subclass them and add
the pipeline's metrics, and a run too small to start a runner for calls them directly
(:func:`chunkline.dataset.bundle.run_bundle`), so that both write exactly the same files.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import posixpath
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from chunkline.cores import available_cores, cores_busy_elsewhere
from chunkline.dataset.arrow_columns import empty_table
from chunkline.dataset.bundle import BundleStep, run_bundle
from chunkline.dataset.layout import SPILL_FOLDER, part_name, part_shard, snapshot_url, staging_url
from chunkline.dataset.merge import (
    PartWriter,
    PreviousSnapshot,
    ShardPlan,
    carried_doc_ids,
    chunk_deletes,
    chunk_upserts,
    documents_changes,
    not_carried,
    read_shard_plan,
    section_deletes,
    section_upserts,
    shard_of,
    sorted_row_groups_and_sizes,
    sorted_unique,
    unchanged_documents_changes,
    with_listed_metadata,
)
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.publish import CheckedParts, read_verified_part, verify_local_part
from chunkline.dataset.rebuild import RebuildPlan
from chunkline.dataset.row_groups import row_bytes
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.storage import (
    link_file,
    list_files,
    parquet_bytes,
    read_file_bytes,
    scrub_secrets,
    storage_url,
    write_file_atomically,
)
from chunkline.schemas import ROW_TABLES, FrontMatterColumn, table_schemas

__all__ = [
    "MergeShard",
    "SpillRows",
    "WriteSettings",
    "free_cores",
    "merge_shards",
    "merge_threads",
    "write_settings_for",
    "write_tables_in_process",
]

logger = logging.getLogger("chunkline")


@dataclass(frozen=True)
class WriteSettings:
    """Where the staged tables go and how they are written."""

    staging_url: str
    """The run's scratch prefix: spill files and the run's plan."""
    snapshot_url: str
    """The run's snapshot folder: the finished part files."""
    shards: int
    row_group_rows: int
    compression: str = "zstd"
    row_group_bytes: int | None = 16_000_000
    """A row group also ends once its rows reach this many bytes (``output.row_group_bytes``); None: rows only."""
    storage_options: dict[str, Any] | None = None
    spill_bytes: int = 8_000_000
    """Buffered row text (approximate bytes) per worker before a spill file is written."""
    secrets: tuple[str, ...] = ()
    """Credential values to keep out of storage error messages."""
    previous: PreviousSnapshot | None = None
    """The snapshot to compare with; None for the first run on an output."""
    incremental: bool = False
    """True when only changed documents were chunked: each shard's plan names the rows to carry over."""
    front_matter_columns: tuple[FrontMatterColumn, ...] = ()
    """The promoted front-matter columns of ``chunks`` and ``changes/upserts`` (``output.front_matter_columns``)."""
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS
    """What the program that owns the process does around the merges (:mod:`chunkline.dataset.process_hooks`)."""
    verified_parts: CheckedParts = field(default_factory=dict)
    """The previous snapshot's local parts the run hashed when it verified the output
    (:attr:`~chunkline.dataset.publish.OutputState.verified_parts`): one carried over as a hard link to the
    very file hashed, unchanged since, is not hashed again."""

    @property
    def schemas(self) -> dict[str, tuple[pa.Schema, tuple[str, ...]]]:
        """Every table's schema and key for this run (:func:`chunkline.schemas.table_schemas`)."""
        return table_schemas(self.front_matter_columns)


def write_settings_for(
    config: RunConfig,
    run_id: str,
    plan: RebuildPlan,
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    verified_parts: CheckedParts | None = None,
) -> WriteSettings:
    """Where and how run ``run_id`` of ``config`` stages its tables, building on ``plan`` (and on the parts
    of its previous snapshot that ``verified_parts`` names as hashed already, see :class:`WriteSettings`)."""
    output_url = config.output.url or ""
    return WriteSettings(
        staging_url=staging_url(output_url, run_id),
        snapshot_url=snapshot_url(output_url, run_id),
        shards=config.output.shards,
        row_group_rows=config.output.row_group_rows,
        row_group_bytes=config.output.row_group_bytes,
        compression=config.output.compression,
        storage_options=dict(config.output.storage_options),
        secrets=tuple(config.secrets()),
        previous=plan.previous,
        incremental=plan.incremental,
        front_matter_columns=config.output.promoted_front_matter,
        process_hooks=process_hooks,
        verified_parts=dict(verified_parts or {}),
    )


def row_size(row: dict[str, Any]) -> int:
    """About how many bytes a buffered row holds: its text and a fixed share for the other columns."""
    text = row.get("text") or row.get("embed_text") or row.get("message") or ""
    return 200 + len(text)


class SpillRows(BundleStep):
    """Buffers rows per (table, shard) and spills them to Arrow IPC files in the staging area.

    Its outputs are the ids of its spills: each buffer of rows gets one when its first element comes in,
    output then (not from ``finish_bundle``, whose outputs a runner may drop), and names every file the
    buffer is spilled to (``<spill id>.arrow``). The merge reads the spills the step output in this run
    (:class:`MergeShard`), never a spill file it did not: a bundle that failed, or an earlier run of the same
    pipeline that failed before its merge, may have left files in the same folders, and their rows may come
    from documents that have changed since or are gone.

    A document the chunker converted to Arrow already (:class:`~chunkline.dataset.document_rows.ConvertedRows`)
    is buffered as its arrays, which a spill concatenates; other rows (a document in error, or rows a
    pipeline step of its own made) are converted when they are spilled."""

    def __init__(self, settings: WriteSettings, background: bool = False):
        self._settings = settings
        self._background = background
        """Write each spill on a thread of its own while the next rows are buffered (a run in this process:
        Arrow's concatenation and IPC encoding and the file writes release the GIL). At most one spill is
        in flight: the next one waits for it, so at most two spills' rows are held."""

    def setup(self) -> None:
        self._fs, root = url_to_fs(self._settings.staging_url, **(self._settings.storage_options or {}))
        self._spill_root = f"{root.rstrip('/')}/{SPILL_FOLDER}"
        self._schemas = self._settings.schemas
        self._row_types = {table: pa.struct(list(schema)) for table, (schema, _) in self._schemas.items()}

    def start_bundle(self) -> None:
        self._spill_id: str | None = None
        """The id of the buffered rows' spill (None while nothing is buffered)."""
        self._rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        self._arrays: dict[str, list[tuple[pa.StructArray, np.ndarray]]] = defaultdict(list)
        """Table -> its converted rows as they came, each array with the shard of each of its rows: put in
        shard order once per spill (one ``take`` for all the buffered rows of a table, not one per element)."""
        self._buffered_bytes = 0
        self._in_flight: threading.Thread | None = None
        self._spill_failure: list[BaseException] = []

    def process(self, element: list[tuple[str, dict[str, Any]]]) -> Iterator[str]:
        if self._spill_id is None:
            self._spill_id = uuid.uuid4().hex
            yield self._spill_id
        arrays = getattr(element, "arrays", None)
        if arrays is not None and all(array.type == self._row_types.get(table) for table, array in arrays.items()):
            self._buffer_converted(element, arrays)
        else:
            # Rows not converted to this run's columns (a chunker configured with other front-matter
            # columns, or rows a pipeline step of its own made) are converted when they are spilled.
            for table, row in element:
                if table not in ROW_TABLES:
                    raise ValueError(f"row for unknown table {table!r}")
                row_shard, size = shard_of(row["doc_id"], self._settings.shards), row_size(row)
                self._rows[(table, row_shard)].append(row)
                self._buffered_bytes += size
        if self._buffered_bytes >= self._settings.spill_bytes:
            self._spill()

    def _buffer_converted(self, element: list[tuple[str, dict[str, Any]]], arrays: dict[str, pa.StructArray]) -> None:
        """Buffer converted rows (one document's or a batch's) as their arrays, with the shard of each row:
        per table in the order of its array, which is the order of that table's pairs in the element."""
        for table in arrays:
            if table not in ROW_TABLES:
                raise ValueError(f"row for unknown table {table!r}")
        shard_count = self._settings.shards
        by_doc_id: dict[str, int] = {}
        shards: dict[str, list[int]] = defaultdict(list)
        for table, row in element:
            doc_id = row["doc_id"]
            shard = by_doc_id.get(doc_id)
            if shard is None:
                shard = by_doc_id[doc_id] = shard_of(doc_id, shard_count)
            shards[table].append(shard)
            self._buffered_bytes += row_size(row)
        for table, array in arrays.items():
            self._arrays[table].append((array, np.array(shards[table], np.int64)))

    def finish_bundle(self) -> None:
        self._spill(last=True)

    def teardown(self) -> None:
        # A run that fails meanwhile discards its staging area: no spill may still be writing into it.
        if getattr(self, "_in_flight", None) is not None:
            self._in_flight.join()
            self._in_flight = None
        for error in getattr(self, "_spill_failure", []):  # not raised: the run failed before it could be
            message = scrub_secrets(f"{type(error).__name__}: {error}", self._settings.secrets)
            logger.error("chunkline: a spill failed too: %s", message)
        self._spill_failure = []

    def _spill(self, last: bool = False) -> None:
        """Write the buffered rows, one file per (table, shard) named by the buffer's spill id (on the
        spill's thread, when in the background)."""
        rows, arrays, spill_id = self._rows, self._arrays, self._spill_id
        self._spill_id = None
        self._rows = defaultdict(list)
        self._arrays = defaultdict(list)
        self._buffered_bytes = 0
        converted_files = {
            (table, int(shard))
            for table, pieces in arrays.items()
            for shard in np.unique(np.concatenate([shards for _, shards in pieces]))
        }
        files = sorted(converted_files | {key for key, table_rows in rows.items() if table_rows})
        if self._background:
            self._wait_for_spill()
            if not last:
                self._in_flight = threading.Thread(
                    target=self._write_spill_files,
                    args=(spill_id, files, rows, arrays),
                    name="chunkline-spill",
                    daemon=True,
                )
                self._in_flight.start()
                return
        self._write_spill_files(spill_id, files, rows, arrays, raise_errors=True)

    def _wait_for_spill(self) -> None:
        """Wait for the spill in flight, raising its error."""
        if self._in_flight is not None:
            self._in_flight.join()
            self._in_flight = None
        if self._spill_failure:
            raise self._spill_failure.pop(0)

    def _write_spill_files(
        self,
        spill_id: str | None,
        files: list[tuple[str, int]],
        rows: dict[tuple[str, int], list[dict[str, Any]]],
        arrays: dict[str, list[tuple[pa.StructArray, np.ndarray]]],
        raise_errors: bool = False,
    ) -> None:
        try:
            by_shard: dict[tuple[str, int], pa.StructArray] = {}
            for table_name, shard in files:
                if table_name in arrays:  # the table's converted rows, put in shard order
                    by_shard.update(
                        ((table_name, table_shard), rows_of_shard)
                        for table_shard, rows_of_shard in _split_by_shard(arrays.pop(table_name))
                    )
                rows_of_shard = by_shard.pop((table_name, shard), None)
                pieces = [] if rows_of_shard is None else [rows_of_shard]
                del rows_of_shard
                table_rows = rows.pop((table_name, shard), None)
                if table_rows:
                    # Arrow's typed conversion checks every value against its column's type.
                    pieces = [*pieces, pa.array(table_rows, type=self._row_types[table_name])]
                del table_rows
                schema = self._schemas[table_name][0]
                rows_array = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
                del pieces
                table = pa.Table.from_arrays(rows_array.flatten(), schema=schema)
                del rows_array
                path = f"{self._spill_root}/{table_name}/{shard:05d}/{spill_id}.arrow"
                sink = pa.BufferOutputStream()
                with ipc.new_file(sink, schema) as writer:
                    writer.write_table(table)
                del table
                write_file_atomically(self._fs, path, memoryview(sink.getvalue()), secrets=self._settings.secrets)
        except BaseException as error:
            if raise_errors:
                raise
            self._spill_failure.append(error)


def _split_by_shard(pieces: list[tuple[pa.StructArray, np.ndarray]]) -> Iterator[tuple[int, pa.StructArray]]:
    """``(shard, its rows)`` for each shard of the rows of ``pieces`` (arrays of one table, each with the
    shard of each of its rows), the rows of a shard in their order in the pieces. One ``take`` puts the rows
    in shard order and each shard's rows are a slice of it: a take per shard costs about three times as
    much over eight shards, and a take per piece (a batch of documents) adds a call's cost per batch."""
    arrays = [array for array, _ in pieces]
    shard_of_row = np.concatenate([shards for _, shards in pieces])
    if not len(shard_of_row):
        return
    array = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    del arrays
    first = shard_of_row[0]
    if (shard_of_row == first).all():
        yield int(first), array
        return
    order = np.argsort(shard_of_row, kind="stable")
    in_order = array.take(pa.array(order))
    del array
    ordered_shards = shard_of_row[order]
    starts = np.flatnonzero(np.diff(ordered_shards, prepend=-1))
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(order)]):
        yield int(ordered_shards[start]), in_order.slice(start, end - start)


@dataclass
class _ChunkCounts:
    """Per doc_id, a shard's chunk upserts, deletes and upserts to embed again (for ``changes/documents``)."""

    upserted: Counter = field(default_factory=Counter)
    deleted: Counter = field(default_factory=Counter)
    reembedded: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class _KeyedTables:
    """A table of rows with ids, merged row group by row group, and the ``changes/`` tables of its rows."""

    rows: str
    id_column: str
    upserts: str
    deletes: str
    find_upserts: Any
    find_deletes: Any


_CHUNK_TABLES = _KeyedTables("chunks", "chunk_id", "changes/upserts", "changes/deletes", chunk_upserts, chunk_deletes)
_SECTION_TABLES = _KeyedTables(
    "sections", "section_id", "changes/section_upserts", "changes/section_deletes", section_upserts, section_deletes
)


class MergeShard(BundleStep):
    """Merges one shard: its spill files and the rows carried over from the previous snapshot become one
    sorted, de-duplicated, content-named Parquet file per table, plus the shard's ``changes/`` tables.

    Memory: ``chunks`` (and with it ``changes/upserts``), then ``sections`` (and its changes), is merged one
    output row group at a time
    (:func:`~chunkline.dataset.merge.sorted_row_groups_and_sizes`, :class:`~chunkline.dataset.merge.PartWriter`):
    the merge holds the shard's key columns, one spill file and about 1.2 row groups of chunk rows, where a
    row group ends at ``output.row_group_rows`` rows or ``output.row_group_bytes`` bytes of rows (16 MB),
    whichever comes first, so that a shard's size does not change what its merge holds. An incremental or
    compared run also holds the previous part's rows of the shard. ``documents`` and ``errors`` (one row per
    document) are merged whole. The price is reading each chunks spill file again for each row group and
    group of columns (twice for a shard of one row group, at most five times a row group): on object
    storage, as many GETs."""

    def __init__(self, settings: WriteSettings):
        self._settings = settings

    def setup(self) -> None:
        self._settings.process_hooks.worker_setup()
        options = self._settings.storage_options or {}
        self._fs, staging_root = url_to_fs(self._settings.staging_url, **options)
        self._staging_root = staging_root.rstrip("/")
        self._snapshot_root = url_to_fs(self._settings.snapshot_url, **options)[1].rstrip("/")
        previous = self._settings.previous
        self._previous_root = url_to_fs(previous.root_url, **options)[1].rstrip("/") if previous else ""
        self._schemas = self._settings.schemas
        self._spill_ids: frozenset[str] = frozenset()
        """The spills of this run the shard being merged reads (see :meth:`process`)."""
        self._columns_changed = False
        """Whether the table :meth:`_read_previous` read last had other columns than this run writes."""

    def count_carried_documents(self, documents: pa.Table) -> None:
        """Called with the ``documents`` rows the merge carries over (the Beam step counts them in the
        pipeline's metrics); nothing to do here."""

    def process(self, shard: int, spills_done: Iterable[str] = ()) -> Iterator[str]:
        """Merge ``shard`` from the spills named by ``spills_done`` (the spill step's outputs in this run:
        see :class:`SpillRows`) and what the previous snapshot carries over; outputs the part files' paths."""
        self._spill_ids = frozenset(spills_done)
        plan = self._plan(shard)
        previous_parts = self._previous_parts(shard)
        if plan is not None and plan.rows_untouched:
            yield from self._copy_untouched(shard, plan, previous_parts)
            return
        carried_ids = carried_doc_ids(plan)
        # Chunks first, row group by row group (see chunkline.dataset.merge): a shard of a full rebuild holds
        # a share of the whole corpus, and the merge holds one row group of it at a time.
        counts = _ChunkCounts()
        # A full rebuild's shard is a share of the whole corpus: the process's owner may give back what the
        # chunking (or the previous shard's merge) freed before it and tune the merge's allocations. An
        # incremental run's merges, small and timed against a full run, skip both.
        hooks = self._settings.process_hooks
        full_rebuild = not self._settings.incremental
        if full_rebuild:
            hooks.between_merge_steps()
        with hooks.merging() if full_rebuild else contextlib.nullcontext():
            yield from self._merge_chunks(shard, previous_parts, carried_ids, counts)
            yield from self._merge_rows(_SECTION_TABLES, shard, previous_parts, carried_ids, None)
        previous_documents, documents = self._merge_table("documents", shard, previous_parts, carried_ids, plan)
        yield from self._write("documents", shard, documents)
        _, errors = self._merge_table("errors", shard, previous_parts, carried_ids, plan)
        yield from self._write("errors", shard, errors)
        yield from self._write(
            "changes/documents",
            shard,
            documents_changes(previous_documents, documents, counts.upserted, counts.deleted, counts.reembedded),
        )

    def _merge_chunks(
        self, shard: int, previous_parts: dict[str, list[str]], carried_ids: pa.Array, counts: _ChunkCounts
    ) -> Iterator[str]:
        """Write the shard's ``chunks``, ``changes/upserts`` and ``changes/deletes`` parts, one row group of
        chunks at a time, and count each document's upserts, deletes and upserts to embed again."""
        yield from self._merge_rows(_CHUNK_TABLES, shard, previous_parts, carried_ids, counts)

    def _merge_rows(
        self,
        tables: _KeyedTables,
        shard: int,
        previous_parts: dict[str, list[str]],
        carried_ids: pa.Array,
        counts: _ChunkCounts | None,
    ) -> Iterator[str]:
        """Write the shard's parts of a table of rows with ids (``chunks``, ``sections``) and of its
        upserts and deletes, one row group at a time, and count each document's upserts, deletes and upserts
        to embed again in ``counts`` (``changes/documents`` counts chunks alone: None for sections)."""
        schema, key = self._schemas[tables.rows]
        upserts_schema = self._schemas[tables.upserts][0]
        previous = self._read_previous(tables.rows, shard, previous_parts)
        carried = previous.filter(pc.is_in(previous.column("doc_id"), value_set=carried_ids))
        old_chunks = not_carried(previous, carried_ids)
        del previous
        # The previous rows had other front-matter columns: a store's copy of every chunk lacks one or holds
        # one no longer written, so every chunk is an upsert (as against an empty snapshot).
        compared_with = old_chunks.slice(0, 0) if self._columns_changed else old_chunks
        sources = [lambda: carried] + [
            functools.partial(self._read_spill, path) for path in self._spill_paths(tables.rows, shard)
        ]
        row_group_rows, compression = self._settings.row_group_rows, self._settings.compression
        row_group_bytes = self._settings.row_group_bytes
        chunks_part = PartWriter(schema, row_group_rows, compression, row_group_bytes)
        upserts_part = PartWriter(upserts_schema, row_group_rows, compression, row_group_bytes)
        new_chunk_ids = []
        # An upsert row is a row of the table with one more column: when a row group's rows are all upserts
        # (a full rebuild's are), their bytes are the rows' and that column's.
        added = [name for name in upserts_schema.names if name not in schema.names]
        sizes_carry_over = all(
            name in upserts_schema.names and upserts_schema.field(name).type == schema.field(name).type
            for name in schema.names
        )
        try:
            for rows, sizes in sorted_row_groups_and_sizes(
                sources,
                schema,
                key,
                row_group_rows,
                row_group_bytes,
                between_steps=self._settings.process_hooks.between_merge_steps,
            ):
                chunks_part.write(rows, sizes)
                new_chunks = not_carried(rows, carried_ids)
                del rows
                new_chunk_ids.append(new_chunks.column(tables.id_column))
                upserts = tables.find_upserts(compared_with, new_chunks)
                del new_chunks
                upserts = upserts.select(upserts_schema.names).cast(upserts_schema)  # in the schema's order
                if counts is not None:
                    counts.upserted.update(upserts.column("doc_id").to_pylist())
                    # The doc_ids alone: a filter of the whole table would copy the row group.
                    counts.reembedded.update(
                        pc.filter(upserts.column("doc_id"), upserts.column("embedding_changed")).to_pylist()
                    )
                if sizes_carry_over and upserts.num_rows == len(sizes):
                    upserts_part.write(upserts, sizes + row_bytes(upserts.select(added)))
                else:
                    upserts_part.write(upserts)
                del upserts, sizes
            carried = sources = None  # the carried rows are written: let them go
            chunks_part.end_rows()
            upserts_part.end_rows()
            yield from self._write_part(tables.rows, shard, chunks_part.finish())
            yield from self._write_part(tables.upserts, shard, upserts_part.finish())
        finally:
            chunks_part.close()
            upserts_part.close()
        ids = pa.chunked_array([ids for column in new_chunk_ids for ids in column.chunks], pa.string())
        deletes = tables.find_deletes(old_chunks, ids)
        del old_chunks, compared_with
        if counts is not None:
            counts.deleted.update(deletes.column("doc_id").to_pylist())
        yield from self._write(tables.deletes, shard, deletes)

    def _merge_table(
        self,
        table_name: str,
        shard: int,
        previous_parts: dict[str, list[str]],
        carried_ids: pa.Array,
        plan: ShardPlan | None,
    ) -> tuple[pa.Table, pa.Table]:
        """(the previous snapshot's rows of the shard, the shard's new rows: carried over and spilled, sorted
        by the table's key with duplicates dropped)."""
        previous = self._read_previous(table_name, shard, previous_parts)
        carried = previous.filter(pc.is_in(previous.column("doc_id"), carried_ids))
        if table_name == "documents" and plan is not None and carried.num_rows:
            carried = with_listed_metadata(carried, plan.carried)
        if table_name == "documents":
            self.count_carried_documents(carried)
        merged = sorted_unique(
            pa.concat_tables([carried, self._read_spills(table_name, shard)]), self._schemas[table_name][1]
        )
        return previous, merged

    def _plan(self, shard: int) -> ShardPlan | None:
        if not self._settings.incremental:
            return None
        return read_shard_plan(self._fs, self._staging_root, shard, self._settings.secrets)

    def _previous_parts(self, shard: int) -> dict[str, list[str]]:
        """Table -> the previous snapshot's part files that can hold rows of ``shard``."""
        previous = self._settings.previous
        if previous is None:
            return {}
        parts: dict[str, list[str]] = {}
        for table_name, names in previous.parts.items():
            paths = [f"{self._previous_root}/{name}" for name in names]
            if previous.shards == self._settings.shards:
                paths = [path for path in paths if part_shard(path) == shard]
            parts[table_name] = paths
        return parts

    def _read_previous(self, table_name: str, shard: int, previous_parts: dict[str, list[str]]) -> pa.Table:
        schema = self._schemas[table_name][0]
        tables = [empty_table(schema)]
        self._columns_changed = False
        for path in previous_parts.get(table_name, []):
            data = self._read_verified(path)
            table = pq.ParquetFile(pa.BufferReader(data)).read()
            self._columns_changed |= table.schema.names != schema.names
            table = with_columns_of(table, schema)
            if self._settings.previous.shards != self._settings.shards and table.num_rows:
                in_shard = [
                    shard_of(doc_id, self._settings.shards) == shard for doc_id in table.column("doc_id").to_pylist()
                ]
                table = table.filter(pa.array(in_shard))
            tables.append(table)
        return pa.concat_tables(tables)

    def _read_verified(self, path: str) -> bytes:
        """The bytes of a previous snapshot's part, checked against the hash its name carries (not hashed
        again when it is a local file this run checked whose identity and change time are as they were then,
        see :func:`~chunkline.dataset.publish.read_verified_part`): a part that changed since it was written
        is never read, carried over or copied."""
        return read_verified_part(
            self._fs, path, secrets=self._settings.secrets, verified=self._settings.verified_parts
        )

    def _spill_paths(self, table_name: str, shard: int) -> list[str]:
        """The shard's spill files of this run: those named by a spill id the spill step output (any other
        file in the folder was left by a bundle that failed or an earlier run that did)."""
        folder = f"{self._staging_root}/{SPILL_FOLDER}/{table_name}/{shard:05d}"
        return sorted(
            path
            for path in list_files(self._fs, folder, self._settings.secrets)
            if posixpath.basename(path).removesuffix(".arrow") in self._spill_ids
        )

    def _read_spill(self, path: str) -> pa.Table:
        data = read_file_bytes(self._fs, path, secrets=self._settings.secrets)
        return ipc.open_file(pa.BufferReader(data)).read_all()

    def _read_spills(self, table_name: str, shard: int) -> pa.Table:
        schema = self._schemas[table_name][0]
        tables = [empty_table(schema)]
        for path in self._spill_paths(table_name, shard):
            tables.append(self._read_spill(path))
        return pa.concat_tables(tables)

    def _write(self, table_name: str, shard: int, table: pa.Table) -> Iterator[str]:
        if not table.num_rows:
            return
        yield from self._write_part(
            table_name,
            shard,
            parquet_bytes(
                table, self._settings.row_group_rows, self._settings.compression, self._settings.row_group_bytes
            ),
        )

    def _write_part(self, table_name: str, shard: int, data: bytes) -> Iterator[str]:
        """Write a part's bytes under its content name (no part for no rows)."""
        if not data:
            return
        path = f"{self._snapshot_root}/{table_name}/{part_name(shard, data)}"
        write_file_atomically(self._fs, path, data, secrets=self._settings.secrets)
        yield path

    def _carry_part(self, source: str, destination: str) -> None:
        """Put the previous snapshot's part ``source`` into this run's snapshot as ``destination``, its bytes
        verified against the hash its name carries (a storage-side copy would carry bytes nobody checked).

        On a local disk the part gets a second name (a hard link, no bytes written) and the bytes verified
        are read through that name, so they are those of the file the new snapshot holds; a part that does
        not verify is unlinked again and fails the run (a link to the very file the run hashed when it
        verified the output, unchanged since, is not read again). Elsewhere, or where no link can be made,
        the verified bytes are written."""
        if link_file(self._fs, source, destination):
            try:
                verify_local_part(
                    storage_url(self._fs, source),
                    destination,
                    secrets=self._settings.secrets,
                    verified=self._settings.verified_parts,
                )
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(destination)
                raise
            return
        data = self._read_verified(source)
        write_file_atomically(self._fs, destination, data, secrets=self._settings.secrets)

    def _copy_untouched(self, shard: int, plan: ShardPlan, previous_parts: dict[str, list[str]]) -> Iterator[str]:
        """A shard where nothing changed: its part files are the previous ones, carried as they are (the
        bytes a rebuild would write; see :meth:`_carry_part`), and every one of its documents is ``unchanged``."""
        documents = self._read_previous("documents", shard, previous_parts)
        self.count_carried_documents(documents)
        for table_name in ROW_TABLES:
            if table_name == "documents" and not plan.documents_untouched:
                table = with_listed_metadata(documents, plan.carried)
                yield from self._write(table_name, shard, sorted_unique(table, self._schemas[table_name][1]))
                continue
            for source in previous_parts.get(table_name, []):
                destination = f"{self._snapshot_root}/{table_name}/{posixpath.basename(source)}"
                self._carry_part(source, destination)
                yield destination
        yield from self._write("changes/documents", shard, unchanged_documents_changes(documents))


def with_columns_of(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A previous snapshot's ``table`` as a table of this run's ``schema``: when the promoted front-matter
    columns differ (a full rebuild), a column this run adds is null in the old rows and one it drops is left
    out, so that the rows compare column by column for the ``changes/`` tables."""
    if table.schema.names == schema.names:
        return table.cast(schema)
    columns = [
        table.column(field.name).cast(field.type)
        if field.name in table.schema.names
        else pa.nulls(len(table), field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


MERGE_THREADS = 2
"""The most shards a run in this process merges at once. Parquet's encoding, decoding and compression
release the GIL, so a second merge uses a second core; each merge holds its own row group of rows (see
:class:`MergeShard`), so this bounds the merges' memory too."""


def free_cores() -> int:
    """The cores this process may use that other processes leave free now (see
    :func:`~chunkline.cores.cores_busy_elsewhere`). On a machine that other work keeps busy, a second
    thread only takes turns with the first (and costs the switching)."""
    return max(1, round(available_cores() - cores_busy_elsewhere()))


MERGE_SIDE_BY_SIDE_BYTES = 32_000_000
"""The largest previous ``chunks`` part (bytes of Parquet) a shard's merge may read for it to run beside
another's. A merge reads its spilled rows one output row group at a time (see :class:`MergeShard`), so a
second merge at once adds about its row groups to the peak whatever the shards' size (100,000 pages of 1-4
KB in 8 shards: 361 MB resident against 305 MB one at a time, the merge stage 7.0 s against 12.5 s); but a
merge that compares with or carries over the previous snapshot holds that snapshot's rows of its shard
whole (the same pages with 1% edited, parts of 27 MB: 675 MB against 537 MB, 4.8 s against 8.4 s). Above
this bound, shards are merged one at a time, and the peak stays that of one merge."""


def merge_threads(shards: int, largest_previous_bytes: int = 0) -> int:
    """How many shards a run in this process merges at once: one per free core (:func:`free_cores`), at
    most :data:`MERGE_THREADS` and ``shards``, and one when the largest previous part a merge reads whole
    (``largest_previous_bytes``) is over :data:`MERGE_SIDE_BY_SIDE_BYTES`."""
    if largest_previous_bytes > MERGE_SIDE_BY_SIDE_BYTES:
        return 1
    return max(1, min(shards, free_cores(), MERGE_THREADS))


def write_tables_in_process(
    settings: WriteSettings, rows: Iterable[list[tuple[str, dict[str, Any]]]], threads: int | None = None
) -> list[str]:
    """Spill per-document row lists and merge every shard in this process, ``threads`` shards at once (by
    default :func:`merge_threads` for the shards' rows; with a core to spare, the spills are written on a
    thread of their own); returns the part files' paths, shard by shard."""
    if settings.shards < 1:
        raise ValueError("shards must be >= 1")
    # With a core to spare, each spill is written while the next rows are chunked.
    spill = SpillRows(settings, background=(merge_threads(settings.shards) if threads is None else threads) > 1)
    started = time.perf_counter()
    spills_done = list(run_bundle(spill, rows))
    spilled = time.perf_counter()
    if threads is None:
        # A merge reads its spilled rows a row group at a time, but holds the previous snapshot's rows of the
        # shard it compares with or carries over.
        threads = merge_threads(settings.shards, max(_previous_chunk_bytes(settings).values(), default=0))
    parts = merge_shards(settings, spills_done, threads)
    logger.info("chunkline: stage seconds: chunking %.2f, merge %.2f", spilled - started, time.perf_counter() - spilled)
    return parts


def _previous_chunk_bytes(settings: WriteSettings) -> Counter:
    """Shard -> the bytes of the previous snapshot's ``chunks`` parts its merge reads (a part whose size
    cannot be had counts as too large for two merges at once: the merge itself reads and verifies it)."""
    previous = settings.previous
    sizes: Counter = Counter()
    if previous is None or not previous.parts.get("chunks"):
        return sizes
    fs, root = url_to_fs(previous.root_url, **(settings.storage_options or {}))
    for name in previous.parts["chunks"]:
        try:
            size = int(fs.size(f"{root.rstrip('/')}/{name}") or 0)
        except Exception:
            size = MERGE_SIDE_BY_SIDE_BYTES + 1
        for shard in [part_shard(name)] if previous.shards == settings.shards else range(settings.shards):
            sizes[shard] += size
    return sizes


def merge_shards(settings: WriteSettings, spills_done: list[str], threads: int) -> list[str]:
    """Merge every shard from the spills ``spills_done`` names (the ids :class:`SpillRows` output),
    ``threads`` at once, each thread with its own :class:`MergeShard` taking the next shard not yet merged;
    returns the part files' paths in shard order (the parts themselves are the same whichever thread merged
    them).

    When a shard's merge fails, no thread starts another shard, and the first error is raised once every
    thread has stopped, with the other failures added to it as notes (and logged): the caller publishes
    nothing. A failed shard may have written some of its parts, as a failed merge on a runner does; they
    are staged only, and discarded with the run."""
    shards = range(settings.shards)
    if threads <= 1 or settings.shards < 2:
        return list(run_bundle(MergeShard(settings), shards, spills_done=spills_done))
    lock = threading.Lock()
    pending = iter(shards)
    written: dict[int, list[str]] = {}
    failures: list[tuple[int | None, BaseException]] = []

    def take() -> int | None:
        with lock:
            return None if failures else next(pending, None)

    def merge() -> None:
        shard = None
        step = MergeShard(settings)
        try:
            step.setup()
            try:
                step.start_bundle()
                while (shard := take()) is not None:
                    written[shard] = list(step.process(shard, spills_done=spills_done))
                shard = None
                step.finish_bundle()
            finally:
                step.teardown()
        except BaseException as error:  # raised on the calling thread once every merge has stopped
            with lock:
                failures.append((shard, error))

    helpers = [
        threading.Thread(target=merge, name=f"chunkline-merge-{number}", daemon=True) for number in range(1, threads)
    ]
    for helper in helpers:
        helper.start()
    try:
        merge()
    finally:
        for helper in helpers:
            helper.join()
    if failures:
        (_, first), others = failures[0], failures[1:]
        for shard, error in others:
            where = "a merge" if shard is None else f"the merge of shard {shard}"
            note = f"{where} failed too: {type(error).__name__}: {error}"
            logger.error("chunkline: %s", scrub_secrets(note, settings.secrets))
            first.add_note(scrub_secrets(note, settings.secrets))
        raise first
    return [path for shard in shards for path in written[shard]]
