"""``WriteChunkTables``: chunkline's own Parquet sink, deterministic on every runner and incremental.

Rows go to a shard picked by a hash of their ``doc_id``. Each worker buffers the rows of a bundle per
(table, shard) and spills them, whenever the buffer grows past ``spill_bytes`` and at the end of the bundle,
to an Arrow IPC file in the shard's folder under the run's staging prefix, so no runner ever holds the
corpus's rows in memory or in a shuffle. The spill step outputs the id of each buffer it spills, which names
the buffer's files. Once every spill is written (the spill step's outputs are a side input of the merge,
which makes it wait), one merge per shard reads the shard's spill files those ids name (a file of a bundle
that failed, or of an earlier run of the same pipeline that failed before its merge, is not read), drops the
duplicates a runner may have spilled twice, adds the rows carried over from the previous snapshot, sorts
the rows by the table's key (``doc_id``, ``chunk_index`` for chunks) and writes one zstd Parquet file per
table whose name carries a hash of its bytes: ``part-00003-1f2e3d4c5b6a7980.parquet``. The same rows always
give the same bytes and the same name, whatever the runner, the bundling or the number of workers.

The merge of a shard's chunks is bounded (see :mod:`chunkline.dataset.merge`): it sorts the key columns
alone and writes the part one row group at a time, so it holds about one row group (``output.row_group_rows``
rows or ``output.row_group_bytes`` bytes of rows, whichever comes first) rather than every spilled row and a
sorted copy, however large the shard.

With a previous snapshot (``WriteSettings.previous``) the merge also writes the shard's ``changes/``
tables: the chunk rows to upsert and the chunk ids to delete, found by comparing the shard's rows with the
previous snapshot's. In an incremental run only the documents that changed were chunked; the run's plan
(``keep-<shard>.arrow`` under the staging prefix, see :mod:`chunkline.dataset.rebuild`) names the
documents whose rows are carried over unchanged from the previous snapshot's part, and a shard in which
nothing changed has its previous part files carried as they are, verified (on a local disk as hard links,
elsewhere written again).

Nothing depends on outputs emitted from ``finish_bundle`` (the DaskRunner drops them, which is why Beam's
own Parquet sink writes no rows there). The parts land in the run's own snapshot folder, which no reader
looks at until publishing (see :mod:`chunkline.dataset.publish`) names it, after the pipeline succeeded.

The spill and merge steps themselves are Beam-free (:mod:`chunkline.dataset.sink`); the DoFns here add the
pipeline's metrics, and a run without a runner calls the same steps directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import pyarrow as pa

from chunkline.dataset.sink import MergeShard, SpillRows, WriteSettings, write_tables_in_process
from chunkline.transforms.metrics import count_carried_documents

__all__ = ["WriteChunkTables", "WriteSettings"]


class _SpillRowsFn(SpillRows, beam.DoFn):
    """:class:`~chunkline.dataset.sink.SpillRows` as a Beam step."""


class _MergeShardFn(MergeShard, beam.DoFn):
    """:class:`~chunkline.dataset.sink.MergeShard` as a Beam step, counting the documents it carries over
    in the pipeline's metrics."""

    def count_carried_documents(self, documents: pa.Table) -> None:
        count_carried_documents(documents)


class WriteChunkTables(beam.PTransform):
    """Stage lists of ``(table, row)`` pairs (one list per document) as sorted Parquet files in the run's
    snapshot folder, one per non-empty (table, shard), with the ``changes/`` tables; outputs their paths."""

    def __init__(self, settings: WriteSettings):
        super().__init__()
        if settings.shards < 1:
            raise ValueError("shards must be >= 1")
        self._settings = settings

    def expand(self, rows: beam.PCollection[list[tuple[str, dict[str, Any]]]]) -> beam.PCollection[str]:
        spills_done = rows | "Spill" >> beam.ParDo(_SpillRowsFn(self._settings))
        return (
            rows.pipeline
            | "Shards" >> beam.Create(list(range(self._settings.shards)))
            | "MergeShards" >> beam.ParDo(_MergeShardFn(self._settings), spills_done=beam.pvalue.AsList(spills_done))
        )

    def write_in_process(self, rows: Iterable[list[tuple[str, dict[str, Any]]]]) -> list[str]:
        """The same spills and merges without a runner (:func:`chunkline.dataset.sink.write_tables_in_process`);
        returns the paths of the part files."""
        return write_tables_in_process(self._settings, rows)
