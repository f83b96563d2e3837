"""Beam metrics of a chunkline pipeline (namespace ``chunkline``), the figures runners' UIs show.

Counters hold the new snapshot's totals, so that when a run succeeds they equal the dataset's counts:

==========================  ==========================================================================
``documents_ok``            documents chunked, or carried over from the previous snapshot, with status ok
``documents_error``         documents with status error (each has its ``errors`` rows)
``documents_skipped``       documents with status skipped (a second file under a ``doc_id``)
``documents_carried_over``  of those, documents whose rows an incremental run carried over unchanged
``chunks``                  chunk rows; ``tokens`` the sum of their ``token_count``
``input_bytes``             bytes of the files that were read (``documents.size_bytes`` with a content hash)
==========================  ==========================================================================

Distributions (count, sum, min, max in the UIs): ``document_chunks``, ``document_tokens`` and
``document_bytes`` per chunked document, ``chunk_tokens`` per chunk. Chunking counts each document it
chunks; the shard merge counts the documents it carries over. Counters of a retried bundle are counted once
in the committed values, as the merge keeps one copy of its rows.

:func:`run_counts` reads the counters of a finished :class:`~apache_beam.runners.runner.PipelineResult`:
``chunkline run`` prints its progress lines and summary from them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

__all__ = ["COUNTER_NAMES", "METRICS_NAMESPACE", "count_carried_documents", "count_document", "run_counts"]

METRICS_NAMESPACE = "chunkline"
COUNTER_NAMES = (
    "documents_ok",
    "documents_error",
    "documents_skipped",
    "documents_carried_over",
    "chunks",
    "tokens",
    "input_bytes",
)

_COUNTERS = {name: Metrics.counter(METRICS_NAMESPACE, name) for name in COUNTER_NAMES}
_DOCUMENT_CHUNKS = Metrics.distribution(METRICS_NAMESPACE, "document_chunks")
_DOCUMENT_TOKENS = Metrics.distribution(METRICS_NAMESPACE, "document_tokens")
_DOCUMENT_BYTES = Metrics.distribution(METRICS_NAMESPACE, "document_bytes")
_CHUNK_TOKENS = Metrics.distribution(METRICS_NAMESPACE, "chunk_tokens")


def count_document(document_row: dict[str, Any], chunk_token_counts: list[int]) -> None:
    """Count one chunked document from its ``documents`` row and its chunks' token counts."""
    status = document_row["status"]
    _COUNTERS[f"documents_{status}"].inc()
    read_bytes = (document_row["size_bytes"] or 0) if document_row["content_sha256"] is not None else 0
    if read_bytes:
        _COUNTERS["input_bytes"].inc(read_bytes)
    if status != "ok":
        return
    _COUNTERS["chunks"].inc(document_row["chunk_count"])
    _COUNTERS["tokens"].inc(document_row["token_count"])
    _DOCUMENT_CHUNKS.update(document_row["chunk_count"])
    _DOCUMENT_TOKENS.update(document_row["token_count"])
    _DOCUMENT_BYTES.update(read_bytes)
    for token_count in chunk_token_counts:
        _CHUNK_TOKENS.update(token_count)


def count_carried_documents(documents: pa.Table) -> None:
    """Count the ``documents`` rows a merge carried over from the previous snapshot (their chunk and token
    counts stand for the chunk rows carried with them)."""
    if not documents.num_rows:
        return
    _COUNTERS["documents_carried_over"].inc(documents.num_rows)
    for status in ("ok", "error", "skipped"):
        rows = pc.sum(pc.equal(documents.column("status"), status)).as_py() or 0
        if rows:
            _COUNTERS[f"documents_{status}"].inc(rows)
    read = pc.is_valid(documents.column("content_sha256"))
    _COUNTERS["input_bytes"].inc(pc.sum(pc.if_else(read, documents.column("size_bytes"), 0)).as_py() or 0)
    _COUNTERS["chunks"].inc(pc.sum(documents.column("chunk_count")).as_py() or 0)
    _COUNTERS["tokens"].inc(pc.sum(documents.column("token_count")).as_py() or 0)


def run_counts(result: Any) -> dict[str, int] | None:
    """The ``chunkline`` counters of a pipeline result, by name (committed values where the runner keeps
    them, else attempted); None when the runner reports no metrics."""
    try:
        queried = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    except Exception:  # a runner without metrics support (NotImplementedError, or its own error)
        return None
    counters = queried.get("counters") or []
    if not counters:
        return None
    counts = dict.fromkeys(COUNTER_NAMES, 0)
    for counter in counters:
        name = counter.key.metric.name
        if name in counts:
            value = counter.committed if counter.committed is not None else counter.attempted
            counts[name] += int(value or 0)
    return counts
