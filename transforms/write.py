"""``WriteChunkTables``: chunkline's own Parquet sink, deterministic on every runner.

Rows go to a shard picked by a hash of their ``doc_id``. Each worker buffers the rows of a bundle per
(table, shard) and spills them, whenever the buffer grows past ``spill_bytes`` and at the end of the bundle,
to an Arrow IPC file in the shard's folder under the run's staging prefix, so no runner ever holds the
corpus's rows in memory or in a shuffle. Once every spill is written (the spill step is a side input of the
merge, which makes it wait), one merge per (table, shard) lists the shard's folder, reads its spill files,
drops the duplicates a retried bundle may have left, sorts the rows by the table's key (``doc_id``,
``chunk_index`` for chunks) and writes one zstd Parquet file whose name carries a hash of its bytes:
``part-00003-1f2e3d4c5b6a7980.parquet``. The same rows always give the same bytes and the same name,
whatever the runner, the bundling or the number of workers.

Nothing depends on outputs emitted from ``finish_bundle`` (the DaskRunner drops them, which is why Beam's
own Parquet sink writes no rows there). The files land under ``<staging>/<table>/``; publishing them (see ``chunkline.pipelines.publish``) is a
separate step that runs after the pipeline has succeeded.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from fsspec.core import url_to_fs

from chunkline.pipelines.files import parquet_bytes, read_file_bytes, write_file_atomically
from chunkline.schemas import TABLE_SCHEMAS

__all__ = ["WriteChunkTables", "WriteSettings", "shard_of"]


@dataclass(frozen=True)
class WriteSettings:
    """Where the staged tables go and how they are written."""

    staging_url: str
    shards: int
    row_group_rows: int
    compression: str = "zstd"
    storage_options: dict[str, Any] | None = None
    spill_bytes: int = 8_000_000
    """Buffered row text (approximate bytes) per worker before a spill file is written."""
    secrets: tuple[str, ...] = ()
    """Credential values to keep out of storage error messages."""


def shard_of(doc_id: str, shards: int) -> int:
    """The shard of a document: a stable hash of its ``doc_id`` (the same on every machine and run)."""
    digest = hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def _row_size(row: dict[str, Any]) -> int:
    text = row.get("text") or row.get("message") or ""
    return 200 + len(text)


class _SpillRowsFn(beam.DoFn):
    """Buffers rows per (table, shard) and spills them to Arrow IPC files in the staging area."""

    def __init__(self, settings: WriteSettings):
        self._settings = settings

    def setup(self) -> None:
        self._fs, root = url_to_fs(self._settings.staging_url, **(self._settings.storage_options or {}))
        self._spill_root = f"{root.rstrip('/')}/spill"

    def start_bundle(self) -> None:
        self._rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        self._buffered_bytes = 0

    def process(self, element: list[tuple[str, dict[str, Any]]]) -> Iterator[int]:
        for table, row in element:
            if table not in TABLE_SCHEMAS:
                raise ValueError(f"row for unknown table {table!r}")
            self._rows[(table, shard_of(row["doc_id"], self._settings.shards))].append(row)
            self._buffered_bytes += _row_size(row)
        if self._buffered_bytes >= self._settings.spill_bytes:
            yield self._spill()

    def finish_bundle(self) -> None:
        self._spill()

    def _spill(self) -> int:
        """Write the buffered rows, one file per shard; returns the number of files written."""
        written = 0
        for (table_name, shard), rows in sorted(self._rows.items()):
            if not rows:
                continue
            schema = TABLE_SCHEMAS[table_name][0]
            table = pa.Table.from_pylist(rows, schema=schema)
            table.validate(full=True)
            path = f"{self._spill_root}/{table_name}/{shard:05d}/{uuid.uuid4().hex}.arrow"
            sink = io.BytesIO()
            with ipc.new_file(sink, schema) as writer:
                writer.write_table(table)
            write_file_atomically(self._fs, path, sink.getvalue(), secrets=self._settings.secrets)
            written += 1
        self._rows = defaultdict(list)
        self._buffered_bytes = 0
        return written


class _MergeShardFn(beam.DoFn):
    """Merges one (table, shard)'s spill files into a sorted, de-duplicated, content-named Parquet file."""

    def __init__(self, settings: WriteSettings):
        self._settings = settings

    def setup(self) -> None:
        self._fs, root = url_to_fs(self._settings.staging_url, **(self._settings.storage_options or {}))
        self._root = root.rstrip("/")

    def process(self, element: tuple[str, int], spills_done: Iterable[int] = ()) -> Iterator[str]:
        table_name, shard = element
        schema, key_columns = TABLE_SCHEMAS[table_name]
        folder = f"{self._root}/spill/{table_name}/{shard:05d}"
        spill_paths = self._fs.find(folder) if self._fs.exists(folder) else []
        if not spill_paths:
            return
        tables = []
        for path in sorted(spill_paths):
            data = read_file_bytes(self._fs, path, secrets=self._settings.secrets)
            tables.append(ipc.open_file(pa.BufferReader(data)).read_all())
        table = pa.concat_tables(tables)
        table = _sorted_unique(table, key_columns)
        data = parquet_bytes(table, self._settings.row_group_rows, self._settings.compression)
        name = f"part-{shard:05d}-{hashlib.sha256(data).hexdigest()[:16]}.parquet"
        path = f"{self._root}/{table_name}/{name}"
        write_file_atomically(self._fs, path, data, secrets=self._settings.secrets)
        yield path


def _sorted_unique(table: pa.Table, key_columns: tuple[str, ...]) -> pa.Table:
    """Rows sorted by ``key_columns`` with repeated keys dropped.

    Keys are unique per row in every table, so a repeated key is a row that a retried bundle spilled
    twice; the copies are equal, and keeping the first is deterministic."""
    table = table.sort_by([(name, "ascending") for name in key_columns])
    if table.num_rows < 2:
        return table
    same_as_previous = None
    for name in key_columns:
        column = table.column(name)
        equal = pc.fill_null(pc.equal(column.slice(1), column.slice(0, table.num_rows - 1)), False)
        same_as_previous = equal if same_as_previous is None else pc.and_(same_as_previous, equal)
    keep = pa.concat_arrays([pa.array([True]), pc.invert(same_as_previous).combine_chunks()])
    return table if pc.all(keep).as_py() else table.filter(keep)


class WriteChunkTables(beam.PTransform):
    """Stage lists of ``(table, row)`` pairs (one list per document) as sorted Parquet files, one per
    non-empty (table, shard); outputs their paths."""

    def __init__(self, settings: WriteSettings):
        super().__init__()
        if settings.shards < 1:
            raise ValueError("shards must be >= 1")
        self._settings = settings

    def expand(self, rows: beam.PCollection[list[tuple[str, dict[str, Any]]]]) -> beam.PCollection[str]:
        spills_done = rows | "Spill" >> beam.ParDo(_SpillRowsFn(self._settings))
        shards = [(name, shard) for name in TABLE_SCHEMAS for shard in range(self._settings.shards)]
        return (
            rows.pipeline
            | "Shards" >> beam.Create(shards)
            | "MergeShards" >> beam.ParDo(_MergeShardFn(self._settings), spills_done=beam.pvalue.AsList(spills_done))
        )
