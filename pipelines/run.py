"""Building and running the chunkline pipeline, then publishing its dataset.

``run_pipeline(config, beam_args)`` is what ``chunkline run`` calls::

    list_inputs                                          (one listing; a missing or empty input publishes nothing)
    acquire_output_lock                                  (one run writes an output at a time)
    plan_rebuild                                         (full, or incremental against the last snapshot)
    ReadMarkdown -> ChunkMarkdown -> WriteChunkDataset   (one Beam pipeline, reading what was listed;
                                                          or, in this process, the same steps without Beam)
    publish_run                                          (after the pipeline succeeded: a new snapshot)

The transforms are the public ones of :mod:`chunkline.transforms`; the writer runs with ``publish=False``,
since here the driver holds the output's lock from before planning until after publishing. The run's
progress lines and summary are the pipeline's Beam metrics (:mod:`chunkline.transforms.metrics`), the
figures a runner's UI shows; a run without a runner (in this process, without Beam) counts its staged files
instead.

The publish guard: an input whose root is missing or cannot be listed, or that matches no file, fails the
run before anything is written (:class:`~chunkline.dataset.rebuild.PublishRefusedError`, exit status 1
from ``chunkline run``); so does a snapshot that would delete more than ``output.max_deleted_fraction`` of
the previous snapshot's documents, unless ``run.allow_deletes`` (``--allow-deletes``) says so. The count is
checked before the pipeline starts, from the listing, and again before publishing, from the snapshot's
``changes/documents``.

Where the run's documents are chunked: ``run.workers`` N runs Beam's FnApiRunner in its multi-processing
mode (N worker processes); 0 runs in this process; ``auto`` (the default) picks one worker per core when
the listing holds enough bytes to chunk, else this process (see :mod:`chunkline.dataset.parallelism`; the
run logs which and why). A run in this process with no Beam argument at all starts no runner and imports
no Beam: it calls the steps the transforms' DoFns are made of (:mod:`chunkline.dataset.in_process`), which
stage the same files, without the cost of building and running a pipeline. Given any Beam argument
(``--runner FnApiRunner`` among them), the run builds the Beam pipeline: on the FnApiRunner in this process
or its worker processes unless ``--runner`` names another runner, which is passed through unchanged
(``--runner DataflowRunner --project ... --region ...``; the workers then need the chunkline package, see
the README on distributed runners). Beam's default DirectRunner is never used, as it first tries to
download a Prism binary. The manifest's ``rebuild.runner`` says which ran (``none`` for this process
without Beam).
"""

from __future__ import annotations

import logging
import posixpath
import shutil
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsspec.core import split_protocol, url_to_fs
from fsspec.registry import get_filesystem_class

from chunkline.dataset.bundle import BATCH_DOCUMENTS
from chunkline.dataset.in_process import stage_run_in_process
from chunkline.dataset.inputs import glob_root
from chunkline.dataset.layout import staging_url
from chunkline.dataset.listing import write_listing
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.publish import (
    CheckedParts,
    OutputState,
    PartsHashedAhead,
    acquire_output_lock,
    discard_run,
    publish_run,
    read_dataset,
    verify_output,
)
from chunkline.dataset.rebuild import PLANNED_COLUMNS, InputListing, RebuildPlan, list_inputs, plan_rebuild
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.staged import (
    change_counts,
    new_run_id,
    published_snapshot,
    refuse_mass_deletion,
    run_manifest_fields,
    staged_counts,
)
from chunkline.dataset.storage import scrub_secrets
from chunkline.pipelines.describe import read_to_compare_text
from chunkline.pipelines.run_folder import RunFolder, remove_abandoned_run_folders
from chunkline.pipelines.worker_watchdog import WorkerWatchdog
from chunkline.settings import ConfigError

if TYPE_CHECKING:  # Beam is imported only by a run that builds a pipeline
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from chunkline.pipelines.forked_workers import WorkerForkServer
    from chunkline.transforms import ChunkMarkdown, ReadMarkdown, WriteChunkDataset

__all__ = [
    "RunSummary",
    "build_pipeline",
    "run_pipeline",
    "check_output_location",
    "new_run_id",
    "refuse_mass_deletion",
]

logger = logging.getLogger("chunkline")


@dataclass(frozen=True)
class RunSummary:
    """What a finished run produced. Documents, chunks, tokens and bytes are the pipeline's ``chunkline``
    metrics when the runner reports them (the figures of its UI), else counted from the staged files; when
    a run succeeds the two are the same."""

    output_url: str
    run_id: str
    documents_ok: int
    documents_error: int
    documents_skipped: int
    chunks: int
    tokens: int
    input_bytes: int
    pipeline_seconds: float
    total_seconds: float
    errors: list[dict[str, Any]]
    rebuild: dict[str, Any] = field(default_factory=dict)
    """How the snapshot was built: mode (full or incremental), reason, documents chunked and carried over."""
    changes: dict[str, int] = field(default_factory=dict)
    """Documents added, changed, deleted and unchanged since the previous snapshot; chunk upserts (and how many
    of them need a new embedding) and deletes."""

    @property
    def megabytes_per_second(self) -> float:
        return self.input_bytes / 1e6 / self.total_seconds if self.total_seconds > 0 else 0.0

    def describe(self) -> str:
        lines = [
            f"chunkline: {self.documents_ok + self.documents_error + self.documents_skipped} documents "
            f"({self.documents_ok} ok, {self.documents_error} error, {self.documents_skipped} skipped), "
            f"{self.chunks:,} chunks, {self.tokens:,} tokens, {self.input_bytes / 1e6:.2f} MB "
            f"in {self.total_seconds:.1f} s ({self.megabytes_per_second:.2f} MB/s) -> {self.output_url}"
        ]
        if self.rebuild.get("mode") == "incremental":
            lines.append(
                f"  incremental: {self.rebuild['documents_chunked']} documents chunked, "
                f"{self.rebuild['documents_carried_over']} carried over from snapshot {self.rebuild['previous_snapshot']}"
                + read_to_compare_text(self.rebuild)
            )
        elif self.rebuild.get("previous_snapshot"):
            lines.append(f"  full rebuild: {self.rebuild['reason']}")
        if self.changes:
            lines.append(
                "  changes: "
                + ", ".join(f"{self.changes[kind]} {kind}" for kind in ("added", "changed", "deleted", "unchanged"))
                + f"; {self.changes['chunks_upserted']:,} chunk upserts"
                + f" ({self.changes.get('chunks_reembedded', 0):,} to embed), {self.changes['chunks_deleted']:,} chunk deletes"
            )
        for error in self.errors[:10]:
            lines.append(f"  error: {error['doc_id']} [{error['stage']}/{error['error_type']}] {error['message']}")
        if len(self.errors) > 10:
            lines.append(f"  ... and {len(self.errors) - 10} more in {self.output_url}/errors")
        return "\n".join(lines)


def _location(url: str) -> tuple[str, str] | None:
    """Where ``url`` points, as (protocol, absolute normalized path), for comparing an output with the
    inputs; None for a chained URL (``zip::...``).

    Local paths and ``file://`` or ``local://`` URLs become the same real path whatever the spelling
    (relative, ``.``, ``..``, symlinks); another protocol's path is normalized as its filesystem strips it
    (``memory://docs`` and ``memory:///docs`` are one folder), or as written if its package is missing."""
    if "::" in url:
        return None
    protocol, path = split_protocol(url)
    if protocol is None or protocol in ("file", "local"):
        return "file", Path(path).resolve().as_posix()
    try:
        path = get_filesystem_class(protocol)._strip_protocol(url)
    except Exception:  # an optional package that is not installed; the URL's path is still comparable
        pass
    return protocol, posixpath.normpath("/" + path.lstrip("/"))


def check_output_location(config: RunConfig) -> None:
    """Refuse an output that is an input or lies inside an input folder (a glob's folder: the part before
    its first wildcard), before anything is written."""
    output = config.output.url or ""
    output_location = _location(output)
    for raw in config.input.paths:
        input_location = _location(glob_root(raw))
        if output_location is None or input_location is None or output_location[0] != input_location[0]:
            continue
        output_path, input_path = output_location[1], input_location[1]
        if output_path == input_path or output_path.startswith(input_path.rstrip("/") + "/"):
            raise ConfigError(f"output {output} is inside input {raw}: its files would be read as input")
    workers = config.run.workers
    if output.startswith("memory://") and isinstance(workers, int) and workers > 0:
        raise ConfigError("memory:// output needs the in-process runner: worker processes cannot share memory")


def _runner_given(beam_args: list[str]) -> bool:
    return any(argument == "--runner" or argument.startswith("--runner=") for argument in beam_args)


def _runner_name(beam_args: list[str]) -> str:
    """The runner a Beam pipeline of this run runs on: the user's ``--runner``, else the FnApiRunner."""
    for index, argument in enumerate(beam_args):
        if argument.startswith("--runner="):
            return argument.split("=", 1)[1]
        if argument == "--runner" and index + 1 < len(beam_args):
            return beam_args[index + 1]
    return "FnApiRunner"


@dataclass(frozen=True)
class _Execution:
    """How a run chunks and stages its documents: without a runner, or on a Beam pipeline."""

    config: RunConfig
    """The run's config, ``run.workers`` settled when the FnApiRunner or this process runs it."""
    runner: str
    """``none`` (this process, no Beam), ``FnApiRunner`` or the user's ``--runner``: the manifest's
    ``rebuild.runner``."""

    @property
    def without_runner(self) -> bool:
        return self.runner == "none"


def _execution(config: RunConfig, plan: RebuildPlan, beam_args: list[str]) -> _Execution:
    """Whether the run starts a runner, and ``run.workers`` settled (as given, or for ``auto`` from the
    bytes the plan reads, see :func:`~chunkline.dataset.parallelism.choose_workers`), logged in one line.

    An incremental run with at most ``run.in_process_max_documents`` documents to chunk, and a run that
    chunks in this process (``run.workers`` 0 or ``auto`` choosing it) without any Beam argument, start no
    runner. A user's ``--runner`` runs as it is told."""
    if plan.incremental and len(plan.to_chunk) <= config.run.in_process_max_documents:
        return _Execution(config, "none")
    if _runner_given(beam_args):
        return _Execution(config, _runner_name(beam_args))
    from chunkline.dataset.parallelism import choose_workers  # a run that chunks little never chooses

    choice = choose_workers(
        config.run.workers,
        plan.to_chunk if plan.listed else [],
        output_url=config.output.url or "",
        max_file_bytes=config.input.max_file_bytes,
    )
    config = replace(config, run=replace(config.run, workers=choice.workers))
    if choice.workers == 0 and not beam_args:
        logger.info("chunkline: running in-process without Beam (%s)", choice.reason)
        return _Execution(config, "none")
    if choice.workers == 0:
        logger.info("chunkline: running in-process on Beam's FnApiRunner (%s; Beam options given)", choice.reason)
    else:
        logger.info("chunkline: running %s", choice.describe())
    return _Execution(config, "FnApiRunner")


def _pipeline_options(
    config: RunConfig, beam_args: list[str], fork_server: WorkerForkServer | None = None
) -> tuple[Any, PipelineOptions]:
    """The runner and options: the user's ``--runner`` if given, else the FnApiRunner (in-process, or
    multi-processing with ``run.workers`` worker processes, forked by ``fork_server`` when there is one;
    ``auto`` here is in-process, as :func:`run_pipeline` settles it from the listing first)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    if _runner_given(beam_args):
        return None, PipelineOptions(beam_args)
    arguments = list(beam_args)
    workers = config.run.workers if isinstance(config.run.workers, int) else 0
    environment = None
    if workers > 0:
        if fork_server is not None:
            # The runner starts its worker processes as in multi-processing mode, with the fork server's
            # command (in its in_memory mode the FnApiRunner keeps the environment it is given).
            arguments += ["--direct_running_mode=in_memory", f"--direct_num_workers={workers}"]
            environment = SubprocessSDKEnvironment.from_command_string(command_string=fork_server.worker_command)
        else:
            arguments += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
        if not any(argument.startswith("--default_sdk_harness_log_level") for argument in arguments):
            # Worker processes log every channel they open at INFO; keep their warnings and chunkline's progress.
            arguments += [
                "--default_sdk_harness_log_level=WARNING",
                '--sdk_harness_log_level_overrides={"chunkline": "INFO"}',
            ]
    else:
        arguments += ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    options = PipelineOptions(arguments)
    # As Beam's DirectRunner does: hand the options to the worker processes through the provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(default_environment=environment, provision_info=provision_info), options


def _transforms(
    config: RunConfig, run_id: str, plan: RebuildPlan, process_hooks: ProcessHooks = NO_PROCESS_HOOKS
) -> tuple[ReadMarkdown, ChunkMarkdown, WriteChunkDataset]:
    """The read, chunk and write transforms of one run (all documents, or those an incremental plan names)."""
    from chunkline.transforms import ChunkMarkdown, ReadMarkdown, WriteChunkDataset

    # The driver's listing, when it made one, is what the pipeline reads: the guard and the plan judged it,
    # and a second listing in the pipeline could see another input (a folder unmounted in between). It is
    # staged beside the run's other files, so that only its URL travels in the job's graph.
    listing_url = None
    if plan.listed:
        listing_url = write_listing(
            staging_url(config.output.url or "", run_id),
            plan.to_chunk,
            config.output.storage_options,
            tuple(config.secrets()),
        )
        # The sink needs the plan's shards and carried documents, not its read list: the pipeline's graph
        # keeps its transforms while it runs, and the list's rows are in the staged file now.
        plan = plan.read_list_staged()
    return (
        ReadMarkdown(
            config,
            listing_url=listing_url,
            listing_storage_options=dict(config.output.storage_options),
            # Documents in batches: one element, one Arrow conversion per batch (chunkline.dataset.bundle).
            batch_documents=BATCH_DOCUMENTS,
        ),
        ChunkMarkdown(config, process_hooks=process_hooks),
        # Staged only: the driver holds the lock and publishes once the pipeline succeeded.
        WriteChunkDataset(config, plan=plan, run_id=run_id, publish=False, process_hooks=process_hooks),
    )


def build_pipeline(
    pipeline: beam.Pipeline,
    config: RunConfig,
    run_id: str,
    plan: RebuildPlan | None = None,
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
) -> None:
    """Add chunkline's transforms to ``pipeline``: read, chunk and write the snapshot of one run (all
    documents, or with an incremental ``plan`` only those it names); publishing is the caller's."""
    read, chunk, write = _transforms(config, run_id, plan or RebuildPlan("full", ""), process_hooks)
    sources = pipeline | "ReadMarkdown" >> read
    chunked = sources | "ChunkMarkdown" >> chunk
    _ = chunked | "WriteChunkDataset" >> write


def _run_in_process(
    config: RunConfig,
    run_id: str,
    plan: RebuildPlan,
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    previous: _PreviousState | None = None,
) -> None:
    """The run's documents through the steps the transforms' DoFns are made of, without starting a runner
    or importing Beam (:mod:`chunkline.dataset.in_process`). The parts of the previous snapshot that
    verifying the output hashed are not hashed again when they are carried over as links."""
    verified_parts = previous.output.verified_parts if previous is not None else None
    stage_run_in_process(config, run_id, plan, process_hooks, verified_parts)


def run_counts(result: Any) -> dict[str, int] | None:
    """The ``chunkline`` counters of a finished pipeline (:func:`chunkline.transforms.metrics.run_counts`)."""
    from chunkline.transforms.metrics import run_counts as pipeline_counts

    return pipeline_counts(result)


_PROGRESS_SECONDS = 10.0
_DONE_STATES = ("DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED")


def _state(result: Any) -> str:
    return str(getattr(result, "state", "DONE")).rsplit(".", 1)[-1]


def _progress_line(counts: dict[str, int]) -> str:
    documents = counts["documents_ok"] + counts["documents_error"] + counts["documents_skipped"]
    return (
        f"chunkline: {documents} documents so far ({counts['documents_ok']} ok, {counts['documents_error']} "
        f"error, {counts['documents_skipped']} skipped, {counts['documents_carried_over']} carried over), "
        f"{counts['chunks']:,} chunks, {counts['tokens']:,} tokens, {counts['input_bytes'] / 1e6:.1f} MB"
    )


def _wait_with_progress(result: Any) -> None:
    """Wait for the pipeline, logging its metrics every few seconds while it runs (a runner that runs the
    job before ``run()`` returns, like the in-process one, is done at once)."""
    while _state(result) not in _DONE_STATES:
        try:
            result.wait_until_finish(duration=int(_PROGRESS_SECONDS * 1000))
        except TypeError:  # a runner whose result waits only to the end
            break
        except TimeoutError:
            # DaskRunner's wait raises when the duration passes with work left, and calls itself failed until
            # it is waited on again: the job still runs, so this is a progress tick. A job whose work is all
            # done raised a TimeoutError of its own.
            if not _has_work_left(result):
                raise
            _log_progress(result)
            _wait_for_dask(result)
            break
        if _state(result) in _DONE_STATES:
            break
        _log_progress(result)
    result.wait_until_finish()


def _has_work_left(result: Any) -> bool:
    return any(not future.done() for future in getattr(result, "futures", ()))


def _wait_for_dask(result: Any) -> None:
    """Tick progress while a Dask job's futures run, then let the final wait collect their results."""
    next_tick = time.monotonic() + _PROGRESS_SECONDS
    while _has_work_left(result):
        time.sleep(0.1)
        if time.monotonic() >= next_tick:
            _log_progress(result)
            next_tick += _PROGRESS_SECONDS


def _log_progress(result: Any) -> None:
    counts = run_counts(result)
    if counts is not None:
        logger.info("%s", _progress_line(counts))


@dataclass(frozen=True)
class _PreviousState:
    """The output as the run found it, verified, and what the run builds on."""

    output: OutputState
    documents: Any = None
    """The documents table of the published snapshot, when it verifies (None otherwise)."""


def _previous_state(config: RunConfig, hashed_ahead: CheckedParts | None = None) -> _PreviousState:
    """The output's published state, verified with the lock held (see :func:`verify_output`: a damaged
    snapshot is never built on, and a stale ``_SUCCESS`` is put right; parts ``hashed_ahead`` that have not
    changed since are not read again), and the published snapshot's documents table when that snapshot
    verifies."""
    output_url = config.output.url or ""
    secret_values = tuple(config.secrets())
    state = verify_output(output_url, config.output.storage_options, secret_values, hashed_ahead=hashed_ahead)
    for repaired in state.repaired:
        logger.info("chunkline: %s", scrub_secrets(repaired, secret_values))
    if not state.latest_trusted:
        return _PreviousState(state)
    try:
        documents = read_dataset(
            output_url,
            "documents",
            columns=list(PLANNED_COLUMNS),
            storage_options=config.output.storage_options,
        )
    except Exception as error:  # an unreadable snapshot is rebuilt in full, never trusted
        logger.warning(
            "chunkline: cannot read the published documents table (%s): rebuilding in full", type(error).__name__
        )
        documents = None
    return _PreviousState(state, documents)


def _plan(config: RunConfig, previous: _PreviousState, listing: InputListing) -> RebuildPlan:
    """How the run builds its snapshot: as :func:`plan_rebuild` decides when the published snapshot
    verifies; otherwise in full, with ``changes/`` against the newest kept snapshot that verifies, or marked
    as a full reload when none does. Damage is reported in one warning line."""
    state = previous.output
    secret_values = tuple(config.secrets())
    if state.latest_trusted or state.manifest is None and not state.damage:
        if state.damage:  # only older kept snapshots, which are no longer kept
            logger.warning("chunkline: %s", scrub_secrets("; ".join(state.damage), secret_values))
        return plan_rebuild(config, state.manifest, previous.documents, listing)
    if state.root_damaged:
        damaged = "the root manifest is damaged"
    elif len(state.damaged_snapshots) == 1:
        damaged = f"snapshot {state.damaged_snapshots[0]} is damaged"
    else:
        damaged = f"snapshots {', '.join(state.damaged_snapshots)} are damaged"
    base = state.manifest
    if base is None:
        consequence = "no kept snapshot verifies: rebuilt in full, and changes/ mark a full reload"
        plan = plan_rebuild(config, None, None, listing)
        plan.reason = f"{damaged}; {consequence}"
    else:
        consequence = f"rebuilt in full, changes/ against snapshot {base['snapshot']}, the newest that verifies"
        # Without a documents table to carry rows from, the plan is a full one against ``base``.
        plan = plan_rebuild(config, base, None, listing)
        plan.reason = f"{damaged}; {consequence}"
    # One line with the details (which part, which count); the plan's reason, logged and recorded, names
    # only what is damaged.
    logger.warning("chunkline: %s; %s", scrub_secrets("; ".join(state.damage), secret_values), consequence)
    return plan


def _publish(
    config: RunConfig,
    run_id: str,
    plan: RebuildPlan,
    runner: str,
    pipeline_seconds: float,
    counts: dict[str, int],
    changes: dict[str, int],
    lock,
    previous_kept: tuple[str, ...] | None = None,
):
    fields = run_manifest_fields(
        config,
        plan,
        in_process=runner == "none",
        pipeline_seconds=pipeline_seconds,
        counts=counts,
        changes=changes,
        runner=runner,
    )
    return publish_run(
        config.output.url or "",
        run_id,
        fields,
        config.output.storage_options,
        secrets=tuple(config.secrets()),
        keep=config.output.keep,
        lock=lock,
        previous_kept=None if previous_kept is None else list(previous_kept),
    )


_FIGURES = ("documents_ok", "documents_error", "documents_skipped", "chunks", "tokens", "input_bytes")


def _summary_figures(metric_counts: dict[str, int] | None, staged: dict[str, int]) -> dict[str, int]:
    """The summary's figures: the pipeline's metrics, which the runner's UI shows, when it reported them;
    otherwise (no runner, or one without metrics) the staged files' counts. Metrics that disagree with the
    files (a runner that counts a retried bundle twice) are reported, and the files' counts are shown."""
    if metric_counts is None:
        return staged
    differ = [name for name in _FIGURES if metric_counts[name] != staged[name]]
    if differ:
        logger.warning(
            "chunkline: the pipeline's metrics disagree with the snapshot's files on %s; the summary shows the "
            "files' counts",
            ", ".join(f"{name} ({metric_counts[name]} vs {staged[name]})" for name in differ),
        )
        return staged
    return metric_counts


_pipelines_started_here = False
"""Whether this process has run a pipeline: its gRPC threads may then be alive, and forking is unsafe."""


def _may_fork_workers(fork_workers: bool) -> bool:
    """Whether the run's worker processes may be forked from this one: asked for (the ``chunkline``
    command asks; a program calling :func:`run_pipeline` gets Beam's own worker processes), no pipeline has
    run in this process yet, and no other thread runs. A fork copies only the calling thread, so a lock
    that a gRPC or other thread held at that moment would never be released in the child."""
    return fork_workers and not _pipelines_started_here and threading.active_count() == 1


def start_fork_server(directory: str) -> WorkerForkServer | None:
    """:func:`chunkline.pipelines.forked_workers.start_fork_server`, imported only by a run that forks its
    worker processes (a run chunked in process never does)."""
    from chunkline.pipelines.forked_workers import start_fork_server as start

    return start(directory)


def _keep_local_files_in(pipeline: beam.Pipeline, folder: str) -> None:
    """Move the pipeline's local temporary folder (made in the temporary folder when the pipeline is
    built, and removed when it finishes) into the run's own folder, so that a driver killed midway leaves it
    where the next run finds it (:mod:`chunkline.pipelines.run_folder`)."""
    shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
    pipeline.local_tempdir = tempfile.mkdtemp(prefix="beam-pipeline-temp", dir=folder)


def run_pipeline(
    config: RunConfig,
    beam_args: list[str] | None = None,
    *,
    fork_workers: bool = False,
    process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
) -> RunSummary:
    """Run the pipeline for ``config`` and publish its snapshot; returns the run's summary.

    With ``fork_workers`` (the ``chunkline`` command's choice), worker processes are forked from this
    process when that is safe (see :func:`_may_fork_workers`), which saves each the import of Beam and
    chunkline; otherwise Beam starts them. ``process_hooks`` is what the program that owns the process does
    around the run's steps (the ``chunkline`` program's:
    :data:`chunkline.pipelines.process_tuning.RUN_PROCESS_TUNING`); by default nothing. If the pipeline fails,
    what it wrote is removed and the published dataset is left untouched. A forked worker that dies while the
    pipeline runs stops it at once (:class:`~chunkline.pipelines.worker_watchdog.WorkerDiedError`). Files the
    run keeps on local disk live in a folder of its own in the temporary folder
    (:mod:`chunkline.pipelines.run_folder`), removed at the end or, after a driver killed outright, by its fork
    server or the next run."""
    global _pipelines_started_here
    check_output_location(config)
    remove_abandoned_run_folders()  # of runs killed before they could remove them
    output_url = config.output.url or ""
    storage_options = config.output.storage_options
    url_to_fs(output_url, **storage_options)  # a bad URL or missing package fails here, early
    run_id = new_run_id()
    started = time.perf_counter()
    secret_values = tuple(config.secrets())
    # The published parts are hashed while the inputs are listed (reading only): under the lock, the check
    # of what the run builds on then reads only what changed since.
    parts_hashed_ahead = PartsHashedAhead(output_url, storage_options)
    try:
        # Listed before the output is touched: an input that is missing or matches nothing publishes nothing.
        with process_hooks.listing():
            listing = list_inputs(config)
        listed = time.perf_counter()
        lock = acquire_output_lock(
            output_url, run_id, storage_options, expiry_seconds=config.output.lock_expiry_seconds, secrets=secret_values
        )
    except BaseException:
        parts_hashed_ahead.cancel()
        raise
    metric_counts = None
    fork_server = None
    run_folder = None
    try:
        previous = _previous_state(config, parts_hashed_ahead.hashed())
        plan = _plan(config, previous, listing)
        del listing  # the plan holds what is read: the listing's other rows need not outlive it
        logger.info("chunkline: run %s, %s rebuild: %s", run_id, plan.mode, plan.reason)
        if plan.documents_before is not None and plan.documents_deleted is not None:
            refuse_mass_deletion(config, plan.documents_deleted, plan.documents_before, plan)
        execution = _execution(config, plan, list(beam_args or []))
        planned = time.perf_counter()
        config = execution.config
        in_process = execution.without_runner
        if not in_process:
            import apache_beam as beam

            run_folder = RunFolder()
            if not _runner_given(list(beam_args or [])) and config.run.workers > 0:
                fork_server = start_fork_server(run_folder.path) if _may_fork_workers(fork_workers) else None
                logger.info(
                    "chunkline: worker processes %s",
                    "forked from this process" if fork_server is not None else "started by Beam",
                )
            runner, options = _pipeline_options(config, list(beam_args or []), fork_server)
            pipeline = beam.Pipeline(runner=runner, options=options)
            _keep_local_files_in(pipeline, run_folder.path)
            build_pipeline(pipeline, config, run_id, plan, process_hooks)
            if plan.listed:  # the read list is staged: the driver lets its rows go while the pipeline runs
                plan = plan.read_list_staged()
                process_hooks.listing_released()
        logger.info("chunkline: run %s reading %s", run_id, ", ".join(config.input.paths))
        try:
            if in_process:
                _run_in_process(config, run_id, plan, process_hooks, previous)
            else:
                _pipelines_started_here = True
                with WorkerWatchdog(fork_server) if fork_server is not None else nullcontext():
                    result = pipeline.run()
                _wait_with_progress(result)
                metric_counts = run_counts(result)
        except BaseException:
            discard_run(output_url, run_id, storage_options)
            raise
        finally:
            if fork_server is not None:
                fork_server.close()
        pipeline_seconds = time.perf_counter() - started
        try:
            counts = staged_counts(output_url, run_id, config)
            changes = change_counts(output_url, run_id, config)
            before = changes["deleted"] + changes["changed"] + changes["unchanged"]
            refuse_mass_deletion(config, changes["deleted"], before, plan)
            published = _publish(
                config, run_id, plan, execution.runner, pipeline_seconds, counts, changes, lock, previous.output.kept
            )
        except BaseException:
            if published_snapshot(config) != run_id:  # failed before the commit point: nothing of it is visible
                discard_run(output_url, run_id, storage_options)
            raise
    finally:
        parts_hashed_ahead.cancel()  # done already, unless the run was interrupted while it waited for it
        if fork_server is not None:  # a run that failed before its pipeline ran
            fork_server.close()
        if run_folder is not None:
            run_folder.close()
        lock.release()
    total_seconds = time.perf_counter() - started
    logger.info(
        "chunkline: stage seconds: listing %.2f, planning %.2f, pipeline %.2f, publish %.2f",
        listed - started,
        planned - listed,
        started + pipeline_seconds - planned,
        total_seconds - pipeline_seconds,
    )
    # The staged files were counted: a snapshot without error rows has none to read back.
    errors = read_dataset(output_url, "errors", storage_options=storage_options).to_pylist() if counts["errors"] else []
    figures = _summary_figures(metric_counts, counts)
    return RunSummary(
        output_url=output_url,
        run_id=published.run_id,
        documents_ok=figures["documents_ok"],
        documents_error=figures["documents_error"],
        documents_skipped=figures["documents_skipped"],
        chunks=figures["chunks"],
        tokens=figures["tokens"],
        input_bytes=figures["input_bytes"],
        pipeline_seconds=pipeline_seconds,
        total_seconds=total_seconds,
        errors=errors,
        rebuild=plan.describe(),
        changes=changes,
    )
