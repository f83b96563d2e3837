"""The dataset's layout: its folders, file names and part names, with no storage calls.

The dataset at ``URL`` is a series of immutable snapshots and one pointer to the latest::

    URL/_manifest.json                        the latest snapshot's manifest: the pointer readers follow
    URL/_SUCCESS                              written after the pointer; holds the snapshot id
    URL/snapshots/<id>/_manifest.json         each kept snapshot's own manifest
    URL/snapshots/<id>/chunks/part-*.parquet  one folder per table; part names carry a hash of their bytes
    URL/snapshots/<id>/documents/...          (and errors/, changes/documents/, changes/upserts/,
                                               changes/deletes/)
    URL/_staging/<run id>/                    a running run's scratch files (spills, plan)
    URL/_lock.json                            held by the run that is writing the output

Part names carry their shard and a hash of their bytes (:func:`part_name`), so the same rows always get the
same name and every read of a part can check that it got the bytes that were written.
"""

from __future__ import annotations

import hashlib
import posixpath
import re

__all__ = [
    "DATASET_FORMAT",
    "MANIFEST_NAME",
    "PART_NAME",
    "SNAPSHOT_ID",
    "SNAPSHOTS_FOLDER",
    "SPILL_FOLDER",
    "STAGING_FOLDER",
    "SUCCESS_NAME",
    "join_path",
    "keep_plan_path",
    "listing_path",
    "part_name",
    "part_shard",
    "snapshot_url",
    "staging_url",
]

MANIFEST_NAME = "_manifest.json"
SUCCESS_NAME = "_SUCCESS"
STAGING_FOLDER = "_staging"
SPILL_FOLDER = "spill"
"""Below a run's staging area: the rows its workers spilled, per table and shard."""
SNAPSHOTS_FOLDER = "snapshots"
DATASET_FORMAT = "chunkline-dataset"

#: A part file's name: ``part-<shard>-<first 16 hex digits of the SHA-256 of its bytes>.parquet``. The hash
#: lets every read of a part check that it got the bytes that were written.
PART_NAME = re.compile(r"part-(\d{5})-([0-9a-f]{16})\.parquet")


def part_name(shard: int, data: bytes) -> str:
    """The name of a part file: its shard and the start of the SHA-256 of its bytes
    (``part-00003-1f2e3d4c5b6a7980.parquet``), so the same rows always get the same name."""
    return f"part-{shard:05d}-{hashlib.sha256(data).hexdigest()[:16]}.parquet"


def part_shard(path: str) -> int | None:
    """The shard number in a part file's name (``part-00003-<hash>.parquet`` -> 3)."""
    name = posixpath.basename(path)
    pieces = name.split("-")
    if len(pieces) >= 3 and pieces[0] == "part" and pieces[1].isdigit():
        return int(pieces[1])
    return None


# Snapshot ids are run ids (``20261130T101500.123456Z-3f9a1c``): no slash, no leading dot, so no ``..``.
SNAPSHOT_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]*")


def join_path(*parts: str) -> str:
    """``parts`` joined with ``/``: the first keeps its leading slash, the others lose theirs."""
    return posixpath.join(*[part.rstrip("/") if number == 0 else part.strip("/") for number, part in enumerate(parts)])


def staging_url(output_url: str, run_id: str) -> str:
    """Where a run keeps its scratch files (spills, plan)."""
    return join_path(output_url, STAGING_FOLDER, run_id)


def snapshot_url(output_url: str, snapshot: str) -> str:
    """The folder of one snapshot."""
    return join_path(output_url, SNAPSHOTS_FOLDER, snapshot)


def keep_plan_path(staging_root: str, shard: int) -> str:
    """Where an incremental run's plan for one shard lives (see :mod:`chunkline.dataset.rebuild`)."""
    return f"{staging_root.rstrip('/')}/plan/keep-{shard:05d}.arrow"


def listing_path(staging_root: str) -> str:
    """Where a run stages the driver's listing of the documents its pipeline reads (see
    :func:`chunkline.dataset.inputs.write_listing`)."""
    return f"{staging_root.rstrip('/')}/plan/to-read.jsonl"
