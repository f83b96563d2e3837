"""A run's staged snapshot, from its part files to its publication (no Beam here).

Whoever publishes a run — ``chunkline run`` in its driver, or the publish step of
:class:`chunkline.transforms.WriteChunkDataset` inside a user's pipeline — does the same things with the
snapshot the pipeline staged under ``snapshots/<run id>/``:

1. count what it holds (:func:`staged_counts`, :func:`change_counts`), from the part files themselves;
2. refuse a snapshot that deletes too much of the previous one (:func:`refuse_mass_deletion`);
3. describe the run in the manifest (:func:`run_manifest_fields`) and publish it
   (:func:`chunkline.dataset.publish.publish_run`).

Run ids (:func:`new_run_id`) sort by start time, so snapshots are kept newest first by them.
"""

from __future__ import annotations

import platform
import secrets
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from chunkline.dataset.layout import MANIFEST_NAME, join_path, snapshot_url
from chunkline.dataset.publish import read_manifest
from chunkline.dataset.rebuild import PublishRefusedError, RebuildPlan, rebuild_fingerprint
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.storage import list_files, scrub_secrets, storage_url, with_storage_retries

__all__ = [
    "change_counts",
    "new_run_id",
    "published_snapshot",
    "published_snapshot_strict",
    "refuse_mass_deletion",
    "refuse_written_run",
    "run_manifest_fields",
    "staged_counts",
]


def new_run_id() -> str:
    """A run id that sorts by start time, to the microsecond: ``20261130T101500.123456Z-3f9a1c`` (it names
    the run's snapshot, and snapshots are kept newest first by it)."""
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S.%fZ')}-{secrets.token_hex(3)}"


def published_snapshot(config: RunConfig) -> str | None:
    """The snapshot the output's root manifest names now (None if there is none or it cannot be read)."""
    try:
        return read_manifest(config.output.url or "", config.output.storage_options).get("snapshot")
    except Exception:
        return None


def published_snapshot_strict(config: RunConfig) -> str | None:
    """The snapshot the output's root manifest names now; None only when there is no root manifest. One
    that cannot be read or trusted raises: a publish step must not guess what it builds on."""
    output_url = config.output.url or ""
    fs, root = url_to_fs(output_url, **config.output.storage_options)
    path = join_path(root.rstrip("/"), MANIFEST_NAME)
    exists = with_storage_retries(
        lambda: fs.exists(path), storage_url(fs, path), "look up", secrets=tuple(config.secrets())
    )
    if not exists:
        return None
    return read_manifest(output_url, config.output.storage_options)["snapshot"]


def refuse_written_run(config: RunConfig, run_id: str) -> None:
    """Raise :class:`PublishRefusedError` when run ``run_id`` has written its snapshot folder already
    (published or not): a snapshot folder, once written, never changes, so a pipeline that runs a second time
    with the run id it was built with stops before its first write instead.

    Only the snapshot folder counts, not the run's spill files in its staging area: a runner may evaluate
    this check once per partition of the rows it gates (Beam's DaskRunner computes a side input inside every
    task), and a partition that starts after another has spilled must not take that spill for an earlier
    run's. The snapshot folder is written by the merge, after every partition has passed the check. The
    spill files of an earlier run that failed before its merge stay where they are, and are not read: the
    merge reads only the spills named by its own run's spill step
    (:class:`~chunkline.dataset.sink.SpillRows`)."""
    output_url = config.output.url or ""
    secret_values = tuple(config.secrets())
    fs, snapshot_root = url_to_fs(snapshot_url(output_url, run_id), **config.output.storage_options)
    path = snapshot_root.rstrip("/")
    written = (
        [snapshot_url(output_url, run_id)]
        if with_storage_retries(lambda: fs.exists(path), storage_url(fs, path), "look up", secrets=secret_values)
        else []
    )
    if written:
        raise PublishRefusedError(
            scrub_secrets(
                f"run {run_id} has written to {written[0]} already: a WriteChunkDataset writes one snapshot, and "
                "a snapshot folder never changes once written, so a pipeline holding it runs once; nothing was "
                "written. Build the pipeline again (a new WriteChunkDataset takes a new run id) to write a new "
                "snapshot",
                secret_values,
            )
        )


def refuse_mass_deletion(config: RunConfig, deleted: int, before: int, plan: RebuildPlan) -> None:
    """Raise :class:`PublishRefusedError` when the new snapshot would delete more than
    ``output.max_deleted_fraction`` of the ``before`` documents of the previous one and ``run.allow_deletes``
    is not set: a scheduled run over an input that lost most of its files is far more often a mistake (a
    wrong path, a half-synced bucket) than an intent, and a vector store synced from it would be emptied."""
    limit = config.output.max_deleted_fraction
    if config.run.allow_deletes or before <= 0 or deleted <= limit * before:
        return
    snapshot = (
        f"snapshot {plan.previous.snapshot}" if plan.previous and plan.previous.snapshot else "the published snapshot"
    )
    raise PublishRefusedError(
        f"this run would delete {deleted} of the {before} documents of {snapshot} at {config.output.url} "
        f"({deleted / before:.0%}), more than output.max_deleted_fraction ({limit:g}); nothing was published. "
        "Check the input; if those documents are meant to go, run again with --allow-deletes "
        "(run.allow_deletes: true)"
    )


def change_counts(output_url: str, run_id: str, config: RunConfig) -> dict[str, int]:
    """Documents per change kind, chunk upserts (and how many of them need a new embedding) and deletes, from the snapshot's changes/documents."""
    fs, root = url_to_fs(snapshot_url(output_url, run_id), **config.output.storage_options)
    counts = dict.fromkeys(("added", "changed", "deleted", "unchanged"), 0)
    counts |= {"chunks_upserted": 0, "chunks_reembedded": 0, "chunks_deleted": 0}
    folder = f"{root.rstrip('/')}/changes/documents"
    for path in list_files(fs, folder, tuple(config.secrets())):
        part = with_storage_retries(
            lambda path=path: _read_columns(
                fs, path, ["change", "chunks_upserted", "chunks_reembedded", "chunks_deleted"]
            ),
            storage_url(fs, path),
            "read",
            secrets=tuple(config.secrets()),
        )
        per_kind = _value_counts(part["change"])
        for kind in ("added", "changed", "deleted", "unchanged"):
            counts[kind] += per_kind.get(kind, 0)
        for column in ("chunks_upserted", "chunks_reembedded", "chunks_deleted"):
            counts[column] += pc.sum(part[column]).as_py() or 0
    return counts


def staged_counts(output_url: str, run_id: str, config: RunConfig) -> dict[str, int]:
    """Documents by status, chunks, tokens, input bytes (of the files that were read) and error rows of the
    snapshot ``run_id`` staged, read from its part files."""
    secret_values = tuple(config.secrets())
    fs, root = url_to_fs(snapshot_url(output_url, run_id), **config.output.storage_options)
    counts = {
        "documents_ok": 0,
        "documents_error": 0,
        "documents_skipped": 0,
        "chunks": 0,
        "tokens": 0,
        "input_bytes": 0,
        "errors": 0,
    }
    for table, columns in (
        ("documents", ["status", "size_bytes", "content_sha256"]),
        ("chunks", ["token_count"]),
        ("errors", ["stage"]),
    ):
        folder = f"{root.rstrip('/')}/{table}"
        for path in list_files(fs, folder, secret_values):
            part = with_storage_retries(
                lambda path=path, columns=columns: _read_columns(fs, path, columns),
                storage_url(fs, path),
                "read",
                secrets=secret_values,
            )
            if table == "documents":
                per_status = _value_counts(part["status"])
                for status in ("ok", "error", "skipped"):
                    counts[f"documents_{status}"] += per_status.get(status, 0)
                # Bytes read only: a file too large to read has its size in the row, but no content hash.
                read = pc.is_valid(part["content_sha256"])
                counts["input_bytes"] += pc.sum(part["size_bytes"].filter(read)).as_py() or 0
            elif table == "chunks":
                counts["chunks"] += part.num_rows
                counts["tokens"] += pc.sum(part["token_count"]).as_py() or 0
            else:
                counts["errors"] += part.num_rows
    return counts


def _value_counts(column) -> dict[str, int]:
    """How many times each value occurs in ``column``. Counted by pyarrow without a Python value in the
    call: comparing with a Python string converts it first, and that conversion imports pandas."""
    return {entry["values"]: entry["counts"] for entry in pc.value_counts(column).to_pylist()}


def _read_columns(fs, path: str, columns: list[str]):
    """``columns`` of the Parquet file at ``path`` (only their column chunks are read)."""
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).read(columns=columns)


def _versions(config: RunConfig) -> dict[str, str]:
    from chunkline import __version__

    versions = {"chunkline": __version__, "python": platform.python_version()}
    for package in ("apache-beam", "pyarrow", "tiktoken", "markdown-it-py", "fsspec"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "unknown"
    versions["tokenizer"] = config.chunking.tokenizer
    return versions


def run_manifest_fields(
    config: RunConfig,
    plan: RebuildPlan,
    *,
    in_process: bool,
    pipeline_seconds: float,
    counts: dict[str, int],
    changes: dict[str, int],
    runner: str | None = None,
) -> dict[str, Any]:
    """What a run's manifest says about it, beside the tables: its config (credentials redacted), the
    fingerprints the next run compares, how it was rebuilt (with ``runner``, what ran it: ``none`` for this
    process without Beam), its change and row counts, versions, timings."""
    rebuild = {**plan.describe(), "in_process": in_process}
    if runner is not None:
        rebuild["runner"] = runner
    return {
        "config": config.to_public_dict(),
        "chunking_fingerprint": config.chunking.fingerprint(),
        "rebuild_fingerprint": rebuild_fingerprint(config),
        "rebuild": rebuild,
        "changes": changes,
        # No snapshot to compare with: changes/ holds every document as added, and a loader that holds
        # an earlier state must reload in full rather than apply it as a delta.
        "full_reload": plan.previous is None,
        "versions": _versions(config),
        "counts": counts,
        "timings": {"pipeline_seconds": round(pipeline_seconds, 3)},
    }
