"""A run's documents read, chunked and staged in this process, without a runner.

``chunkline run`` takes this path for a run in this process (``run.workers`` 0, or ``auto`` choosing it)
given no Beam argument, full or incremental, and for an incremental plan with at most
``run.in_process_max_documents`` documents to chunk whatever the runner: it calls the run's steps
(:class:`~chunkline.dataset.file_reader.MatchedFileReader`,
:class:`~chunkline.dataset.document_rows.DocumentChunker`, :class:`~chunkline.dataset.sink.SpillRows` and
:class:`~chunkline.dataset.sink.MergeShard`, the same classes the Beam DoFns are made of) one after the
other, so the files it stages are those a pipeline would stage, and neither Beam nor a runner is imported.
The documents stream through: each is read, chunked and buffered for the spill in turn (in batches of up to
:data:`~chunkline.dataset.bundle.BATCH_DOCUMENTS` documents, whose rows are converted to Arrow together), and the spill writes its
buffer out every ``spill_bytes``, so no more of the corpus's rows is held than on a runner.
Publishing is the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from chunkline.dataset.bundle import BATCH_BYTES, BATCH_DOCUMENTS, batched, run_bundle
from chunkline.dataset.document_rows import DocumentChunker
from chunkline.dataset.file_reader import MatchedFileReader
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.publish import CheckedParts
from chunkline.dataset.rebuild import RebuildPlan, write_shard_plans
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.sink import write_settings_for, write_tables_in_process
from chunkline.encode_ahead import encode_ahead_default

__all__ = ["batches_of", "stage_run_in_process"]


def stage_run_in_process(
    config: RunConfig,
    run_id: str,
    plan: RebuildPlan,
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    verified_parts: CheckedParts | None = None,
) -> list[str]:
    """Read and chunk ``plan.to_chunk``, and stage the run's snapshot (carrying the plan's other documents
    over); returns the part files' paths. ``process_hooks``: what the program that owns the process does
    around the steps (:mod:`chunkline.dataset.process_hooks`); ``verified_parts``: the previous snapshot's
    local parts hashed when the output was verified
    (:attr:`~chunkline.dataset.publish.OutputState.verified_parts`), not hashed again when carried over."""
    secrets = tuple(config.secrets())
    settings = write_settings_for(config, run_id, plan, process_hooks, verified_parts)
    if plan.incremental:
        write_shard_plans(plan, config, settings.staging_url)
    if not plan.to_chunk:  # every document carried over: no file to read, no tokenizer to load
        return write_tables_in_process(settings, [])
    sources = run_bundle(MatchedFileReader(config.input, secrets), plan.to_chunk)
    chunker = DocumentChunker(
        config.chunking,
        config.input.encoding_errors,
        secrets,
        config.output.promoted_front_matter,
        encode_ahead=encode_ahead_default(),
        process_hooks=process_hooks,
    )
    return write_tables_in_process(settings, run_bundle(chunker, batches_of(sources)))


def batches_of(
    sources: Iterable[SourceFile], documents: int = BATCH_DOCUMENTS, data_bytes: int = BATCH_BYTES
) -> Iterator[list[SourceFile]]:
    """Read ``sources`` in lists of at most ``documents`` documents, a list ending early once it holds
    ``data_bytes`` bytes of file data."""
    return batched(sources, lambda source: len(source.data or b""), documents, data_bytes)
