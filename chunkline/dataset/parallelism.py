"""How many worker processes a run uses: ``run.workers`` as given, or with ``auto`` (the default) a choice
made from the driver's listing before the pipeline starts.

A worker process (forked from the driver, see :mod:`chunkline.pipelines.forked_workers`) costs a little
wall time to start and to hand its share of the merges back, and saves half, a third... of the chunking
time; the chunker reads about 2.5 MB of markdown a second on one core. Measured on two cores, two workers
beat the in-process run from about 10 MB to chunk on, and a 0.2 MB corpus gains nothing from them.
``auto`` therefore runs one worker per :data:`AUTO_BYTES_PER_WORKER` bytes to chunk, up to one per core
this process may run on, and stays in-process when that makes fewer than two (a small corpus, an
incremental run that chunks little, a one-core machine) or when the output is ``memory://`` (worker
processes cannot share this process's memory). The sizes are the listing's; a file whose size the storage
did not report counts as the mean of those it did. The number of documents does not count: a run reads and
chunks them in batches (:data:`~chunkline.dataset.bundle.BATCH_DOCUMENTS`), one element per batch for the
runner, so what the runner adds per document does not grow with the number of documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chunkline.cores import available_cores
from chunkline.dataset.arrow_columns import numpy_values
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.listed_files import ListedDocuments

__all__ = ["AUTO_BYTES_PER_WORKER", "WorkersChoice", "bytes_to_chunk", "choose_workers"]

AUTO_BYTES_PER_WORKER = 4_000_000
"""Markdown bytes to chunk per worker process that ``auto`` starts: two workers from 8 MB on."""


@dataclass(frozen=True)
class WorkersChoice:
    """The worker processes of one run, and why: for the run's log line."""

    workers: int
    """0: in-process (Beam's FnApiRunner in this process); N >= 1: N worker processes."""
    reason: str

    def describe(self) -> str:
        where = "in-process" if self.workers == 0 else f"on {self.workers} worker processes"
        return f"{where} ({self.reason})"


def bytes_to_chunk(to_chunk: Sequence[tuple[str, list[SourceFile]]], max_file_bytes: int | None = None) -> int:
    """The bytes of the documents a run reads, from the listing: the first file of each doc_id (the one
    read), none of a file over ``max_file_bytes`` (an error row, never read); a size the storage did not
    report counts as the mean of the known ones (0 if none is known)."""
    if isinstance(to_chunk, ListedDocuments):  # the driver's listing, as Arrow rows
        first_sizes = to_chunk.first_sizes()
        known_sizes = numpy_values(first_sizes.drop_null()).astype(np.int64)
        if max_file_bytes is not None:
            known_sizes = np.where(known_sizes > max_file_bytes, 0, known_sizes)
        count, known_count, known_sum = len(first_sizes), len(known_sizes), int(known_sizes.sum())
    else:
        sizes = [files[0].size_bytes if files else None for _, files in to_chunk]
        if max_file_bytes is not None:
            sizes = [0 if size is not None and size > max_file_bytes else size for size in sizes]
        known = [size for size in sizes if size is not None]
        count, known_count, known_sum = len(sizes), len(known), sum(known)
    if not known_count:
        return 0
    mean = known_sum / known_count
    return int(known_sum + mean * (count - known_count))


def choose_workers(
    setting: int | str,
    to_chunk: Sequence[tuple[str, list[SourceFile]]],
    *,
    output_url: str = "",
    max_file_bytes: int | None = None,
    cores: int | None = None,
) -> WorkersChoice:
    """The workers of a run whose ``run.workers`` is ``setting`` and which reads ``to_chunk`` (the plan's
    ``(doc_id, files)`` pairs, files over ``max_file_bytes`` left out): a number given by the user is
    kept; ``auto`` decides as the module says."""
    if setting != "auto":
        if not isinstance(setting, int) or isinstance(setting, bool):
            raise ValueError(f"workers must be auto or a whole number, got {setting!r}")
        return WorkersChoice(setting, f"run.workers is {setting}")
    if output_url.startswith("memory://"):
        return WorkersChoice(0, "auto: a memory:// output is this process's memory")
    cores = available_cores() if cores is None else cores
    total = bytes_to_chunk(to_chunk, max_file_bytes)
    workers = min(cores, total // AUTO_BYTES_PER_WORKER)
    figures = f"auto: {total / 1e6:.1f} MB to chunk, {cores} core{'s' if cores != 1 else ''}"
    if workers < 2:
        needed = 2 * AUTO_BYTES_PER_WORKER / 1e6
        why = "one core" if cores < 2 else f"under the {needed:.0f} MB that pay for worker processes"
        return WorkersChoice(0, f"{figures}: {why}")
    return WorkersChoice(workers, f"{figures}: one worker per {AUTO_BYTES_PER_WORKER / 1e6:.0f} MB, up to one per core")
