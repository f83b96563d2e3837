"""Planning a rebuild: which documents need the chunker, and which rows carry over unchanged.

A run on an output that already holds a published snapshot compares the input with that snapshot before
the pipeline starts:

1. If there is no snapshot, ``run.reindex`` is set, or anything that decides the rows differs from the
   snapshot's (the chunking config and tokenizer, chunkline's ``CHUNKING_VERSION``, the schema version,
   decoding and size settings, the shard count and Parquet settings), the run is a **full** rebuild: every
   document goes through the chunker. Its ``changes/`` tables still compare it with the previous snapshot.
2. Otherwise the inputs are listed and every document that was ``ok`` in the snapshot, still comes from the
   same ``source_uri`` and has the same content SHA-256 (its bytes are read and hashed here, by a pool of
   threads) is **carried over**: its rows are copied from the snapshot's parts, never chunked again. The
   others (edited, new, unreadable before, in error before, or sharing a doc_id with another file) are
   chunked; documents gone from the input are dropped.

The result is row for row what a full rebuild of the new corpus writes: carried rows are the rows the
chunker would make again, and only ``documents.modified_time`` is refreshed from the listing. For each shard
the plan is written to ``keep-<shard>.json`` under the run's staging prefix, where the sink's merge reads
it (see :mod:`chunkline.transforms.write`). When most documents changed, the run is simply a full one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.engine import CHUNKING_VERSION
from chunkline.pipelines.config import RunConfig
from chunkline.pipelines.files import fresh_filesystem, with_storage_retries, write_file_atomically
from chunkline.pipelines.publish import DamagedDatasetError, manifest_problem
from chunkline.schemas import SCHEMA_VERSION
from chunkline.transforms.read import SourceFile, match_input
from chunkline.transforms.write import PreviousSnapshot, keep_plan_path, shard_of

__all__ = ["RebuildPlan", "plan_rebuild", "rebuild_fingerprint", "write_shard_plans"]

logger = logging.getLogger("chunkline")

#: Above this share of documents to chunk, an incremental run would save little: it runs as a full one.
_INCREMENTAL_MAX_SHARE = 0.5
_HASHING_THREADS = 16


def rebuild_fingerprint(config: RunConfig) -> str:
    """A digest of every setting that decides the rows or the part files: equal fingerprints mean a
    document's rows can be carried over from one snapshot to the next."""
    decisive = {
        "chunking": json.loads(config.chunking.fingerprint()),
        "chunking_version": CHUNKING_VERSION,
        "schema_version": SCHEMA_VERSION,
        "encoding_errors": config.input.encoding_errors,
        "max_file_bytes": config.input.max_file_bytes,
        "shards": config.output.shards,
        "row_group_rows": config.output.row_group_rows,
        "compression": config.output.compression,
    }
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()


@dataclass
class RebuildPlan:
    """What a run chunks and what it carries over."""

    mode: str
    """``full`` or ``incremental``."""
    reason: str
    """Why the run is full, or a summary of the incremental plan, for the log and the manifest."""
    previous: PreviousSnapshot | None = None
    to_chunk: list[tuple[str, list[SourceFile]]] = field(default_factory=list)
    """Incremental runs: (doc_id, matched files) of every document that goes through the chunker."""
    carried: dict[str, datetime | None] = field(default_factory=dict)
    """Incremental runs: doc_id -> modification time of every document whose rows carry over."""
    touched_shards: set[int] = field(default_factory=set)
    """Shards where a document was added, changed or deleted."""
    moved_shards: set[int] = field(default_factory=set)
    """Shards where only a carried document's modification time moved."""

    @property
    def incremental(self) -> bool:
        return self.mode == "incremental"

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "documents_chunked": len(self.to_chunk) if self.incremental else None,
            "documents_carried_over": len(self.carried) if self.incremental else 0,
            "previous_snapshot": self.previous.snapshot if self.previous else None,
        }


def _previous_snapshot(manifest: dict[str, Any], output_url: str) -> PreviousSnapshot:
    """The snapshot ``manifest`` describes, as the sink reads it; a manifest naming any file outside its
    snapshot's table folders is refused, never followed."""
    problem = manifest_problem(manifest)
    if problem:
        raise DamagedDatasetError(f"the manifest of the snapshot to build on at {output_url} is damaged: {problem}")
    return PreviousSnapshot(
        root_url=output_url,
        parts={table: tuple(entry["files"]) for table, entry in manifest["tables"].items()},
        shards=int(manifest.get("config", {}).get("output", {}).get("shards", 0)) or 1,
        snapshot=manifest.get("snapshot") or manifest.get("run_id", ""),
    )


def plan_rebuild(config: RunConfig, previous_manifest: dict[str, Any] | None, previous_documents: pa.Table | None) -> RebuildPlan:
    """Decide how the run builds its snapshot from the previous one (see the module docstring).

    ``previous_documents`` is the previous snapshot's ``documents`` table (doc_id, source_uri, status,
    content_sha256, modified_time), read by the caller through the manifest."""
    output_url = config.output.url or ""
    if previous_manifest is None:
        return RebuildPlan("full", "no published snapshot at the output yet")
    compatible = previous_manifest.get("schema_version") == SCHEMA_VERSION
    previous = _previous_snapshot(previous_manifest, output_url) if compatible else None
    if previous is None:
        return RebuildPlan("full", f"the published snapshot has schema version {previous_manifest.get('schema_version')}")
    if config.run.reindex:
        return RebuildPlan("full", "reindex requested", previous)
    if previous_manifest.get("rebuild_fingerprint") != rebuild_fingerprint(config):
        return RebuildPlan("full", "the chunking, decoding or output settings differ from the published snapshot's", previous)
    if previous_documents is None:
        return RebuildPlan("full", "the published documents table could not be read", previous)
    matches: dict[str, list[SourceFile]] = defaultdict(list)
    for index, url in enumerate(config.input.paths):
        try:
            listed = with_storage_retries(
                lambda url=url, index=index: list(match_input(url, index, config.input)), url, "list", secrets=tuple(config.secrets())
            )
            for source in listed:
                matches[source.doc_id].append(source)
        except Exception:  # the full pipeline turns an unlistable input into its error row
            return RebuildPlan("full", f"input {index + 1} could not be listed here", previous)
    before: dict[str, dict[str, Any] | None] = {}
    for row in previous_documents.to_pylist():
        # A doc_id with two rows (a duplicate across inputs) is never carried over.
        before[row["doc_id"]] = None if row["doc_id"] in before else row
    candidates: list[SourceFile] = []
    to_chunk: list[tuple[str, list[SourceFile]]] = []
    for doc_id in sorted(matches):
        group = matches[doc_id]
        old = before.get(doc_id)
        source = group[0]
        if (
            len(group) == 1
            and source.problem is None
            and old is not None
            and old["status"] == "ok"
            and old["content_sha256"]
            and old["source_uri"] == source.source_uri
            and (source.size_bytes is None or source.size_bytes <= config.input.max_file_bytes)
        ):
            candidates.append(source)
        else:
            to_chunk.append((doc_id, group))
    digests = _content_digests(candidates, config)
    carried: dict[str, datetime | None] = {}
    for source in candidates:
        if digests.get(source.doc_id) == before[source.doc_id]["content_sha256"]:
            carried[source.doc_id] = source.modified_time
        else:
            to_chunk.append((source.doc_id, [source]))
    to_chunk.sort(key=lambda item: item[0])
    total = len(matches)
    if total and len(to_chunk) > _INCREMENTAL_MAX_SHARE * total:
        return RebuildPlan("full", f"{len(to_chunk)} of {total} documents need chunking", previous)
    shards = config.output.shards
    touched = {shard_of(doc_id, shards) for doc_id, _ in to_chunk}
    touched |= {shard_of(doc_id, shards) for doc_id in before if doc_id not in carried and doc_id not in matches}
    moved = {
        shard_of(doc_id, shards)
        for doc_id, modified in carried.items()
        if _microseconds(modified) != _microseconds(before[doc_id]["modified_time"])
    }
    deleted = sum(1 for doc_id in before if doc_id not in matches)
    reason = f"{len(to_chunk)} of {total} documents to chunk, {len(carried)} carried over, {deleted} gone"
    return RebuildPlan("incremental", reason, previous, to_chunk, carried, touched, moved - touched)


def _content_digests(sources: list[SourceFile], config: RunConfig) -> dict[str, str | None]:
    """doc_id -> SHA-256 of the file's bytes now (None if it cannot be read: it is then chunked, and the
    pipeline reports why)."""
    filesystems = {index: fresh_filesystem(url, config.input.storage_options)[0] for index, url in enumerate(config.input.paths)}
    secrets = tuple(config.secrets())

    def digest(source: SourceFile) -> tuple[str, str | None]:
        fs = filesystems[source.input_index]

        def read() -> bytes:
            with fs.open(source.path, "rb") as handle:
                return handle.read()

        try:
            return source.doc_id, hashlib.sha256(with_storage_retries(read, source.source_uri, "read", secrets=secrets)).hexdigest()
        except Exception:
            return source.doc_id, None

    local = all(isinstance(fs, LocalFileSystem) for fs in filesystems.values())
    if local or len(sources) < 64:
        # A local disk answers faster than threads hand work around; remote stores are waited on in parallel.
        return dict(map(digest, sources))
    with ThreadPoolExecutor(max_workers=_HASHING_THREADS) as pool:
        return dict(pool.map(digest, sources))


def _microseconds(value: datetime | None) -> int | None:
    if value is None:
        return None
    return round(value.timestamp() * 1_000_000)


def write_shard_plans(plan: RebuildPlan, config: RunConfig, staging_url: str) -> None:
    """Write each shard's ``keep-<shard>.json``: the carried documents with their modification times, and
    whether the shard's previous parts can be copied as they are."""
    fs, root = url_to_fs(staging_url, **config.output.storage_options)
    per_shard: dict[int, dict[str, int | None]] = defaultdict(dict)
    for doc_id, modified in plan.carried.items():
        per_shard[shard_of(doc_id, config.output.shards)][doc_id] = _microseconds(modified)
    for shard in range(config.output.shards):
        data = {
            "modified_times": per_shard.get(shard, {}),
            "rows_untouched": shard not in plan.touched_shards,
            "documents_untouched": shard not in plan.touched_shards and shard not in plan.moved_shards,
        }
        write_file_atomically(fs, keep_plan_path(root, shard), json.dumps(data, sort_keys=True).encode(), secrets=tuple(config.secrets()))
