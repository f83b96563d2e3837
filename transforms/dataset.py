"""``WriteChunkDataset``: write and publish the dataset ``chunkline run`` writes, from any pipeline.

It takes what :class:`~chunkline.transforms.ChunkMarkdown` outputs and writes the run's snapshot with the
sink of :class:`~chunkline.transforms.write.WriteChunkTables` (spill per shard, then one merge per shard,
content-named parts and ``changes/`` against the previous snapshot), then publishes it in a last step.

Which rows it writes: the chunker's rows of every document, as one list per document (the fast path: no row
is converted), or, when given ``result.with_chunks(chunks)``, those chunk rows in place of the chunker's
(rows of the chunk row type, one element each) with the chunker's ``documents`` and ``errors`` rows.

How it publishes (``publish=True``, the default). The pipeline holds no lock while it chunks and writes: the
snapshot folder and staging area are the run's own (``snapshots/<run id>/``, ``_staging/<run id>/``), which no
reader looks at. When every part is written, the publish step takes the output's lock, checks that the
output still publishes the snapshot this pipeline was built against (the previous snapshot its
``changes/`` compare with: read when the transform was built, or named by the ``plan``), checks that every
part the merges wrote is there, refuses what ``chunkline run`` refuses (a full rebuild that would lose the
documents published from a folder it could not list, a snapshot that deletes more than
``output.max_deleted_fraction`` of the previous one's documents: :class:`~chunkline.dataset.rebuild.PublishRefusedError`),
publishes (:func:`~chunkline.dataset.publish.publish_run`, verifying the lock at the commit point) and
releases the lock. Another writer that published meanwhile fails the step with
:class:`~chunkline.dataset.lock.ConcurrentRunError` and nothing is published: the run's ``changes/`` would
be against the wrong snapshot. A publish step that refuses or fails removes what its run wrote, so the
output is left byte for byte as it was. An input that is missing, cannot be listed or matches no file fails
the pipeline in :class:`~chunkline.transforms.ReadMarkdown`, before anything is written. A pipeline that
fails elsewhere before the publish step publishes nothing; the folders it wrote are named by no manifest and
are removed by the next run that publishes.

One transform, one snapshot: the run id is decided when the transform is built (the staging area, an
incremental plan's files and the snapshot its ``changes/`` compare with all hang on it), and a snapshot
folder never changes once written. Running the same pipeline a second time therefore fails with
:class:`~chunkline.dataset.rebuild.PublishRefusedError` before its first write once the first run has written
its snapshot folder (the check is a side input of the step that feeds the spill); build the pipeline again to
write a new snapshot. A first run that failed before its merge wrote no snapshot folder: the second runs, and
its merge reads only the spill files its own spill step named, so it publishes what a fresh run of the
inputs would, not a row of the failed run.

``chunkline run`` builds its pipeline from the same transform with ``publish=False``: its driver holds the
output's lock from before planning to after publishing, and publishes once the pipeline succeeded.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from fsspec.core import url_to_fs

from chunkline.dataset.inputs import UNLISTED_FOLDER, FileProblem, SourceFile
from chunkline.dataset.layout import snapshot_url
from chunkline.dataset.lock import ConcurrentRunError
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.publish import acquire_output_lock, discard_run, publish_run, read_dataset, read_manifest
from chunkline.dataset.rebuild import (
    PLANNED_COLUMNS,
    InputListing,
    RebuildPlan,
    plan_rebuild,
    refuse_full_rebuild_over_unlisted,
    write_shard_plans,
)
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.sink import WriteSettings, write_settings_for
from chunkline.dataset.staged import (
    change_counts,
    new_run_id,
    published_snapshot,
    published_snapshot_strict,
    refuse_mass_deletion,
    refuse_written_run,
    run_manifest_fields,
    staged_counts,
)
from chunkline.dataset.storage import list_files, scrub_secrets
from chunkline.transforms.chunk import CHUNKS, ERRORS, ChunkMarkdownResult
from chunkline.transforms.rows import value_converter
from chunkline.transforms.write import WriteChunkTables

__all__ = ["WriteChunkDataset"]

logger = logging.getLogger("chunkline")


def _without_chunks(document_rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(table, row) for table, row in document_rows if table != CHUNKS]


def _unlisted_folders(document_rows: list[tuple[str, dict[str, Any]]]) -> Iterator[SourceFile]:
    """The folders below an input that could not be listed, from their error rows."""
    for table, row in document_rows:
        if table == ERRORS and row.get("error_type") == UNLISTED_FOLDER:
            problem = FileProblem(row["stage"], UNLISTED_FOLDER, row["message"])
            yield SourceFile(row["doc_id"], row["source_uri"], 0, "", None, None, problem=problem)


def _refuse_written_run(run_id: str, config: RunConfig) -> str:
    """:func:`~chunkline.dataset.staged.refuse_written_run` as a pipeline step."""
    refuse_written_run(config, run_id)
    return run_id


def _after_run_check(rows: Any, _: str) -> Any:
    """A document's rows, passed on once the run's check (the side input) has passed."""
    return rows


class _ChunkRowsAsTableRows:
    """A chunk row (of a row type made from the chunks schema) as the one-pair list the sink spills."""

    def __init__(self, arrow_schema):
        self._convert = value_converter(arrow_schema, to_beam=False)
        self._names = arrow_schema.names

    def __call__(self, row: Any) -> list[tuple[str, dict[str, Any]]]:
        values = row._asdict()
        if list(values) != self._names:
            raise ValueError(
                f"a chunk row has the fields {list(values)}, not the chunks table's columns {self._names}; keep "
                "the chunk row type in your own steps"
            )
        return [(CHUNKS, self._convert(values) if self._convert else values)]


class _PublishRunFn(beam.DoFn):
    """Publishes the run's snapshot once every part is written, with the output's lock held meanwhile."""

    def __init__(
        self,
        config: RunConfig,
        run_id: str,
        plan: RebuildPlan,
        base_snapshot: str | None,
        full_reason: str = "a pipeline of chunkline's transforms given no plan",
    ):
        self._config = config
        self._run_id = run_id
        self._full_reason = full_reason
        # Without its read list and carried documents, which can be long; what the manifest says of them stays.
        self._plan = dataclasses.replace(plan, to_chunk=[], carried={})
        self._rebuild = {**plan.describe(), "in_process": False}
        self._base_snapshot = base_snapshot

    def process(self, _: Any, parts: list[str], unlisted: list[SourceFile] = ()) -> Iterator[str]:
        config, run_id = self._config, self._run_id
        output_url = config.output.url or ""
        secrets = tuple(config.secrets())
        lock = acquire_output_lock(
            output_url,
            run_id,
            config.output.storage_options,
            expiry_seconds=config.output.lock_expiry_seconds,
            secrets=secrets,
        )
        try:
            published = published_snapshot_strict(config)
            if published == run_id:  # a retried bundle: this run is the dataset already
                yield run_id
                return
            try:
                self._publish(parts, list(unlisted), published, lock)
            except BaseException:
                if published_snapshot(config) != run_id:  # refused or failed before the commit point
                    discard_run(output_url, run_id, config.output.storage_options)
                raise
            logger.info("chunkline: published snapshot %s at %s", run_id, output_url)
            yield run_id
        finally:
            lock.release()

    def _publish(self, parts: list[str], unlisted: list[SourceFile], published: str | None, lock: Any) -> None:
        """Check the run's snapshot as ``chunkline run`` checks its own, then publish it."""
        config, run_id = self._config, self._run_id
        output_url = config.output.url or ""
        if published != self._base_snapshot:
            built_on = f"snapshot {self._base_snapshot}" if self._base_snapshot else "an output with no dataset"
            raise ConcurrentRunError(
                f"another run published snapshot {published} at {output_url} while this pipeline (run "
                f"{run_id}) was built against {built_on}; nothing was published (its changes/ would be "
                "against the wrong snapshot): run the pipeline again"
            )
        self._check_parts(parts)
        if unlisted and published is not None and not self._plan.incremental:
            # The pipeline listed its inputs itself and carried nothing over: the documents published from
            # a folder it could not list would be deleted.
            refuse_full_rebuild_over_unlisted(
                unlisted,
                read_manifest(output_url, config.output.storage_options),
                read_dataset(
                    output_url,
                    "documents",
                    columns=list(PLANNED_COLUMNS),
                    storage_options=config.output.storage_options,
                ),
                self._full_reason,
            )
        counts = staged_counts(output_url, run_id, config)
        changes = change_counts(output_url, run_id, config)
        before = changes["deleted"] + changes["changed"] + changes["unchanged"]
        refuse_mass_deletion(config, changes["deleted"], before, self._plan)
        fields = run_manifest_fields(
            config, self._plan, in_process=False, pipeline_seconds=0.0, counts=counts, changes=changes
        )
        fields.update(rebuild=self._rebuild, timings={})
        publish_run(
            output_url,
            run_id,
            fields,
            config.output.storage_options,
            secrets=tuple(config.secrets()),
            keep=config.output.keep,
            lock=lock,
        )

    def _check_parts(self, parts: list[str]) -> None:
        """Every part a merge wrote is in the snapshot folder (a writer that removed it publishes nothing)."""
        config = self._config
        fs, root = url_to_fs(snapshot_url(config.output.url or "", self._run_id), **config.output.storage_options)
        present = set(list_files(fs, root.rstrip("/"), tuple(config.secrets())))
        missing = sorted(path for path in parts if path not in present)
        if missing:
            raise ConcurrentRunError(
                scrub_secrets(
                    f"{len(missing)} part file(s) of run {self._run_id} are gone (first: {missing[0]}); another "
                    "writer removed them, or an earlier attempt of this step refused to publish the run (its "
                    "error says why); nothing was published",
                    tuple(config.secrets()),
                )
            )


def _base_plan(config: RunConfig) -> tuple[RebuildPlan, str | None]:
    """(a full rebuild whose ``changes/`` compare with the snapshot the output publishes now, that snapshot)
    read when the transform is built; a damaged root manifest raises here, before the pipeline runs."""
    output_url = config.output.url or ""
    published = published_snapshot_strict(config)
    manifest = read_manifest(output_url, config.output.storage_options) if published is not None else None
    plan = plan_rebuild(config, manifest, None, InputListing())
    against = f"changes/ against snapshot {plan.previous.snapshot}" if plan.previous else "no snapshot to compare with"
    plan.reason = f"full rebuild in a pipeline of chunkline's transforms, {against}"
    plan.listed = False
    return plan, published


class WriteChunkDataset(beam.PTransform):
    """Write :class:`~chunkline.transforms.ChunkMarkdown`'s output as the chunkline dataset at
    ``config.output.url`` and publish it (see the module's guide); outputs the published run id.

    ``config`` is the run's :class:`~chunkline.dataset.settings.RunConfig` (its output section says where and
    how; the whole config is recorded in the manifest and decides whether a later ``chunkline run`` can
    carry rows over). ``plan`` (from :func:`~chunkline.dataset.rebuild.plan_rebuild`) makes the run
    incremental: its carried documents' rows are copied from the previous snapshot, and only ``plan.to_chunk``
    must be read (``ReadMarkdown(config, matched=plan.to_chunk)``); the plan's files for the merges are
    written into the run's staging area when the transform is applied. Without one the run is a full rebuild,
    its ``changes/`` against the snapshot published when the transform was built. ``run_id`` names the
    snapshot (a new one by default); a pipeline holding the transform runs once: a second ``run()`` fails
    before writing anything once the first has written the snapshot folder (build the pipeline again for a
    new snapshot); after a first ``run()`` that failed before its merge, it publishes as a fresh run would.
    ``process_hooks`` is for a program that owns its process (:mod:`chunkline.dataset.process_hooks`); by
    default the steps leave it alone."""

    takes_chunk_markdown_result = True

    def __init__(
        self,
        config: RunConfig,
        *,
        plan: RebuildPlan | None = None,
        run_id: str | None = None,
        publish: bool = True,
        process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    ):
        super().__init__()
        if not isinstance(config, RunConfig):
            raise TypeError(f"WriteChunkDataset takes a RunConfig, got {type(config).__name__}")
        if not config.output.url:
            raise ValueError("WriteChunkDataset needs config.output.url")
        self._config = config
        self.run_id = run_id or new_run_id()
        self._publish = publish
        self._full_reason = plan.reason if plan is not None else "a pipeline of chunkline's transforms given no plan"
        self._process_hooks = process_hooks
        if not publish:
            self.plan, self._base_snapshot = plan or RebuildPlan("full", ""), None
        elif plan is None:
            self.plan, self._base_snapshot = _base_plan(config)
        else:
            # What the plan builds on; a plan with nothing to compare with (an older schema) builds on
            # whatever is published now.
            self.plan = plan
            self._base_snapshot = plan.previous.snapshot if plan.previous else published_snapshot_strict(config)

    @property
    def settings(self) -> WriteSettings:
        """Where and how the sink writes this run's tables."""
        return write_settings_for(self._config, self.run_id, self.plan, self._process_hooks)

    def _write_shard_plans(self) -> None:
        """An incremental run's ``keep-<shard>.arrow`` files, written into the run's staging area by the
        driver before the pipeline runs (the carried documents can be many: they stay out of the job's
        graph). Nothing reads them until the merges, and no reader ever looks there."""
        if self.plan.incremental:
            write_shard_plans(self.plan, self._config, self.settings.staging_url)

    def _extract_input_pvalues(self, pvalueish: Any) -> tuple[Any, dict[str, beam.pvalue.PValue]]:
        if not isinstance(pvalueish, ChunkMarkdownResult):
            raise TypeError(
                f"WriteChunkDataset takes the result of ChunkMarkdown (or its with_chunks(...)), got "
                f"{type(pvalueish).__name__}"
            )
        inputs = {"per_document": pvalueish.per_document}
        if pvalueish.chunks_replaced:
            inputs["chunks"] = pvalueish.chunks
        return pvalueish, inputs

    def expand(self, result: ChunkMarkdownResult) -> beam.PCollection[str]:
        if result.chunks_replaced:
            chunk_schema = self.settings.schemas[CHUNKS][0]
            chunk_row_type = result.row_types[CHUNKS]
            schema = getattr(chunk_row_type, "_arrow_schema", chunk_schema)
            other_rows = result.per_document | "DocumentAndErrorRows" >> beam.Map(_without_chunks)
            chunk_rows = result.chunks | "ChunkRows" >> beam.Map(_ChunkRowsAsTableRows(schema))
            rows = (other_rows, chunk_rows) | "AllRows" >> beam.Flatten()
        else:
            rows = result.per_document
        self._write_shard_plans()
        # Checked before the first row is spilled (a side input makes the spill wait for it): a second run
        # of the same pipeline, with the run id it was built with, stops here instead of writing into the
        # first run's snapshot folder.
        not_written = (
            result.pipeline
            | "RunId" >> beam.Create([self.run_id])
            | "RefuseWrittenRun" >> beam.Map(_refuse_written_run, self._config)
        )
        rows = rows | "AfterRunCheck" >> beam.Map(_after_run_check, beam.pvalue.AsSingleton(not_written))
        parts = rows | "WriteChunkTables" >> WriteChunkTables(self.settings)
        if not self._publish:
            return parts
        unlisted = result.per_document | "UnlistedFolders" >> beam.FlatMap(_unlisted_folders)
        return (
            result.pipeline
            | "Publish" >> beam.Create([None])
            | "PublishSnapshot"
            >> beam.ParDo(
                _PublishRunFn(self._config, self.run_id, self.plan, self._base_snapshot, self._full_reason),
                parts=beam.pvalue.AsList(parts),
                unlisted=beam.pvalue.AsList(unlisted),
            )
        )

    def write_in_process(self, rows: Any) -> list[str]:
        """The same writes without a runner, for per-document row lists (see
        :mod:`chunkline.transforms.in_process`); returns the part files' paths. Publishing is the caller's."""
        self._write_shard_plans()
        return WriteChunkTables(self.settings).write_in_process(rows)
