"""Publishing a run as a new snapshot of the dataset, and reading the published dataset back.

The dataset at ``URL`` is a series of immutable snapshots and one pointer to the latest::

    URL/_manifest.json                        the latest snapshot's manifest: the pointer readers follow
    URL/_SUCCESS                              written after the pointer; holds the snapshot id
    URL/snapshots/<id>/_manifest.json         each kept snapshot's own manifest
    URL/snapshots/<id>/chunks/part-*.parquet  one folder per table; part names carry a hash of their bytes
    URL/snapshots/<id>/documents/...          (and errors/, changes/documents/, changes/upserts/,
                                               changes/deletes/)
    URL/_staging/<run id>/                    a running run's scratch files (spills, plan)
    URL/_lock.json                            held by the run that is writing the output

A run writes its part files straight into its own snapshot folder, which no reader looks at until the
root ``_manifest.json`` names it. Publishing writes the snapshot's manifest, then replaces the root
``_manifest.json`` in one write — the moment the new snapshot becomes the dataset. The root manifest also
lists the kept snapshots (the newest ``keep``); every other folder under ``snapshots/`` (older snapshots,
and what failed or killed runs left, even a killed run's own manifest) is then removed with the staging
area, and ``_SUCCESS`` is written. Nothing is renamed, so this holds on object stores where a rename is a copy and a delete: a
run killed at any point leaves the pointer on the previous snapshot, whole and readable, and the next run
that publishes removes what it left. :func:`read_dataset` (like ``chunkline inspect``) reads exactly the
parts the pointer names; to glob with another reader, glob one snapshot's folder
(:func:`dataset_files` lists its parts).

Only one run may write an output at a time: :func:`acquire_output_lock` (from
:mod:`chunkline.pipelines.lock`) takes ``_lock.json`` in one exclusive create that carries its content,
refuses with a clear message while another live run holds it, and lets exactly one of the runs that find a
dead run's lock replace it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from chunkline.schemas import SCHEMA_VERSION, TABLE_SCHEMAS
from chunkline.pipelines.config import storage_secrets
from chunkline.pipelines.files import (
    list_files,
    parquet_bytes,
    read_parquet_bytes,
    storage_call,
    scrub_secrets,
    storage_url,
    write_file_atomically,
)
from chunkline.pipelines.lock import (  # re-exported: the lock is part of this module's interface
    LOCK_NAME,
    ConcurrentRunError,
    OutputLock,
    _create_exclusively,
    _lock_is_stale,
    acquire_output_lock,
)

__all__ = [
    "LOCK_NAME",
    "MANIFEST_NAME",
    "SNAPSHOTS_FOLDER",
    "STAGING_FOLDER",
    "SUCCESS_NAME",
    "ConcurrentRunError",
    "DatasetNotFoundError",
    "OutputLock",
    "PublishedDataset",
    "acquire_output_lock",
    "dataset_files",
    "discard_run",
    "list_snapshots",
    "publish_run",
    "read_dataset",
    "read_manifest",
    "snapshot_url",
    "staging_url",
]

logger = logging.getLogger("chunkline")

MANIFEST_NAME = "_manifest.json"
SUCCESS_NAME = "_SUCCESS"
STAGING_FOLDER = "_staging"
SNAPSHOTS_FOLDER = "snapshots"
DATASET_FORMAT = "chunkline-dataset"
# Tables of the layout before snapshots, removed from an output's top level once it has a snapshot.
_TOP_LEVEL_TABLES = ("chunks", "documents", "errors")


class DatasetNotFoundError(FileNotFoundError):
    """There is no published chunkline dataset (or no such snapshot) at the URL."""


@dataclass(frozen=True)
class PublishedDataset:
    """What a publish step made visible."""

    url: str
    run_id: str
    manifest: dict[str, Any]


def _join(*parts: str) -> str:
    return posixpath.join(*[part.rstrip("/") if number == 0 else part.strip("/") for number, part in enumerate(parts)])


def staging_url(output_url: str, run_id: str) -> str:
    """Where a run keeps its scratch files (spills, plan)."""
    return _join(output_url, STAGING_FOLDER, run_id)


def snapshot_url(output_url: str, snapshot: str) -> str:
    """The folder of one snapshot."""
    return _join(output_url, SNAPSHOTS_FOLDER, snapshot)


def _empty_part(table: str) -> tuple[str, bytes]:
    schema = TABLE_SCHEMAS[table][0]
    data = parquet_bytes(schema.empty_table(), 1, "zstd")
    return f"part-00000-{hashlib.sha256(data).hexdigest()[:16]}.parquet", data


# ------------------------------------------------------------------------------------------ publish


def publish_run(
    output_url: str,
    run_id: str,
    manifest_fields: dict[str, Any],
    storage_options: dict[str, Any] | None = None,
    secrets: tuple[str, ...] = (),
    *,
    keep: int = 3,
    lock: OutputLock | None = None,
) -> PublishedDataset:
    """Make the snapshot that run ``run_id`` wrote under ``snapshots/<run_id>/`` the dataset at
    ``output_url``, then remove what no kept snapshot needs.

    Every storage call is retried after a transient error; ``secrets`` are kept out of the error messages.
    With ``lock``, the run must still hold it at the commit point. The root manifest lists the kept
    snapshots (the newest ``keep``, this one last): a folder it does not list — a failed or killed run's,
    even one killed after writing its own manifest — is never read and is removed."""
    started = time.perf_counter()
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    snapshot_folder = _join(SNAPSHOTS_FOLDER, run_id)
    snapshot_root = _join(root, snapshot_folder)
    tables: dict[str, dict[str, Any]] = {}
    for table in TABLE_SCHEMAS:
        table_folder = _join(snapshot_root, table)
        parts = [path for path in list_files(fs, table_folder, secrets) if path.endswith(".parquet")]
        rows = sum(
            storage_call(lambda path=path: _row_count(fs, path), storage_url(fs, path), "read", secrets) for path in parts
        )
        names = [posixpath.basename(path) for path in parts]
        if not names:
            # Every table has at least one file, so that readers globbing it find its schema.
            name, data = _empty_part(table)
            write_file_atomically(fs, _join(table_folder, name), data, secrets=secrets)
            names.append(name)
        tables[table] = {"files": [f"{snapshot_folder}/{table}/{name}" for name in names], "rows": rows}
    kept = (_kept_snapshots(fs, root, secrets) + [run_id])[-keep:]
    manifest = {
        "format": DATASET_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "snapshot": run_id,
        "snapshots": kept,
        "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tables": tables,
        **manifest_fields,
    }
    manifest.setdefault("timings", {})["publish_seconds"] = round(time.perf_counter() - started, 3)
    manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True).encode()
    write_file_atomically(fs, _join(snapshot_root, MANIFEST_NAME), manifest_bytes, secrets=secrets)
    if lock is not None:
        lock.verify()
    # The commit point: from here on the root manifest names the new snapshot.
    write_file_atomically(fs, _join(root, MANIFEST_NAME), manifest_bytes, secrets=secrets)
    try:
        _remove_unneeded(fs, root, kept, secrets)
    except Exception as error:  # the snapshot is published; what is left over goes with the next run
        logger.warning("chunkline: published snapshot %s, but could not remove old files (%s)", run_id, scrub_secrets(str(error), secrets))
    write_file_atomically(fs, _join(root, SUCCESS_NAME), f"{run_id}\n".encode(), secrets=secrets)
    return PublishedDataset(output_url, run_id, manifest)


def _list_folder(fs, folder: str, secrets: tuple[str, ...]) -> list[str]:
    """Names of the entries directly in ``folder`` (none if it does not exist)."""
    try:
        entries = storage_call(lambda: fs.ls(folder, detail=False), storage_url(fs, folder), "list", secrets)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(entry.rstrip("/")) for entry in entries)


def _kept_snapshots(fs, root: str, secrets: tuple[str, ...]) -> list[str]:
    """The snapshots the current root manifest keeps, oldest first (none for a new output)."""
    try:
        data = storage_call(lambda: fs.cat_file(_join(root, MANIFEST_NAME)), storage_url(fs, root), "read", secrets)
    except FileNotFoundError:
        return []
    manifest = json.loads(data)
    if "snapshots" in manifest:
        return list(manifest["snapshots"])
    return [manifest["snapshot"]] if "snapshot" in manifest else []


def _remove_unneeded(fs, root: str, kept: list[str], secrets: tuple[str, ...]) -> None:
    """Remove the staging area, every snapshot folder the root manifest does not keep (older ones, and the
    folders of failed or killed runs) and the tables of the layout before snapshots. Runs with the lock
    held: nothing else is writing."""
    _remove_tree(fs, _join(root, STAGING_FOLDER), secrets)
    for name in _list_folder(fs, _join(root, SNAPSHOTS_FOLDER), secrets):
        if name not in kept:
            _remove_tree(fs, _join(root, SNAPSHOTS_FOLDER, name), secrets)
    for table in _TOP_LEVEL_TABLES:
        _remove_tree(fs, _join(root, table), secrets)


def _row_count(fs, path: str) -> int:
    """Rows of the Parquet file at ``path`` (its footer only is read)."""
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def discard_run(output_url: str, run_id: str, storage_options: dict[str, Any] | None = None) -> None:
    """Remove what a failed run wrote (best effort): the published dataset is left as it was."""
    try:
        fs, root = url_to_fs(output_url, **(storage_options or {}))
        root = root.rstrip("/")
        for folder in (STAGING_FOLDER, SNAPSHOTS_FOLDER):
            _remove_tree(fs, _join(root, folder, run_id))
            parent = _join(root, folder)
            if fs.exists(parent) and not fs.ls(parent):
                fs.rmdir(parent)
    except Exception:  # cleaning up must never hide the run's own error
        pass


def _remove_tree(fs, path: str, secrets: tuple[str, ...] = ()) -> None:
    def remove() -> None:
        if fs.exists(path):
            fs.rm(path, recursive=True)

    storage_call(remove, storage_url(fs, path), "delete", secrets)


def read_manifest(url: str, storage_options: dict[str, Any] | None = None, *, snapshot: str | None = None) -> dict[str, Any]:
    """The manifest of the dataset published at ``url``: its latest snapshot's, or that of ``snapshot``,
    one of the snapshots the latest manifest keeps (see :func:`list_snapshots`)."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    secrets = tuple(storage_secrets(storage_options or {}))
    path = _join(root, MANIFEST_NAME)
    try:
        manifest = json.loads(storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets))
    except FileNotFoundError:
        raise DatasetNotFoundError(f"no chunkline dataset at {url}: {MANIFEST_NAME} not found") from None
    if manifest.get("format") != DATASET_FORMAT:
        raise DatasetNotFoundError(f"{storage_url(fs, path)} is not a chunkline manifest")
    if snapshot is None or snapshot == manifest.get("snapshot"):
        return manifest
    kept = manifest.get("snapshots", [])
    if snapshot not in kept:
        raise DatasetNotFoundError(f"no snapshot {snapshot} at {url}; kept snapshots: {', '.join(kept) or 'none'}")
    path = _join(root, SNAPSHOTS_FOLDER, snapshot, MANIFEST_NAME)
    return json.loads(storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets))


def list_snapshots(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The ids of the snapshots kept at ``url``, oldest first (the last is the latest); none if there is no
    dataset there yet."""
    try:
        manifest = read_manifest(url, storage_options)
    except DatasetNotFoundError:
        return []
    return list(manifest.get("snapshots") or [manifest.get("snapshot") or manifest["run_id"]])


def dataset_files(
    url: str, table: str = "chunks", storage_options: dict[str, Any] | None = None, *, snapshot: str | None = None
) -> list[str]:
    """URLs of exactly the part files of ``table`` in the latest (or the given) snapshot, for readers that
    take a list of files or a glob (DuckDB, polars, Spark): they all sit in one folder of that snapshot."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLE_SCHEMAS)}")
    manifest = read_manifest(url, storage_options, snapshot=snapshot)
    fs, root = url_to_fs(url, **(storage_options or {}))
    return [storage_url(fs, _join(root.rstrip("/"), name)) for name in manifest["tables"][table]["files"]]


def read_dataset(
    url: str,
    table: str = "chunks",
    *,
    columns: list[str] | None = None,
    as_pandas: bool = False,
    storage_options: dict[str, Any] | None = None,
    snapshot: str | None = None,
):
    """One table of the dataset published at ``url`` (its latest snapshot, or the kept ``snapshot``), read
    through its manifest.

    Returns a ``pyarrow.Table`` (or a pandas DataFrame with ``as_pandas=True``) holding exactly the parts
    the manifest names, so a rebuild in progress or a failed run's leftovers are never read."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLE_SCHEMAS)}")
    manifest = read_manifest(url, storage_options, snapshot=snapshot)
    if table not in manifest["tables"]:
        raise DatasetNotFoundError(f"the dataset at {url} has no {table} table (written by an older chunkline)")
    fs, root = url_to_fs(url, **(storage_options or {}))
    secrets = tuple(storage_secrets(storage_options or {}))
    schema = TABLE_SCHEMAS[table][0]
    parts = []
    for name in manifest["tables"][table]["files"]:
        path = _join(root.rstrip("/"), name)
        data = storage_call(lambda path=path: fs.cat_file(path), storage_url(fs, path), "read", secrets)
        parts.append(read_parquet_bytes(data, schema, columns))
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns], metadata=schema.metadata)
    result = pa.concat_tables(parts) if parts else schema.empty_table()
    if not as_pandas:
        return result
    frame = result.to_pandas()
    for field in result.schema:
        if pa.types.is_list(field.type):
            # pandas would hold numpy arrays; a list column stays a column of lists.
            frame[field.name] = result.column(field.name).to_pylist()
    return frame
