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
``_manifest.json`` in one write — the moment the new snapshot becomes the dataset — then removes the
staging area, the folders of failed runs and all but the newest ``keep`` snapshots, and writes
``_SUCCESS``. Nothing is renamed, so this holds on object stores where a rename is a copy and a delete: a
run killed at any point leaves the pointer on the previous snapshot, whole and readable, and the next run
that publishes removes what it left. :func:`read_dataset` (like ``chunkline inspect``) reads exactly the
parts the pointer names; to glob with another reader, glob one snapshot's folder
(:func:`dataset_files` lists its parts).

Only one run may write an output at a time: :func:`acquire_output_lock` takes ``_lock.json`` (exclusively
on a local disk; written and read back on object stores) and refuses with a clear message while another
live run holds it. A lock left by a killed run on this machine, or older than ``output.lock_expiry_seconds``,
is taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.schemas import SCHEMA_VERSION, TABLE_SCHEMAS
from chunkline.pipelines.files import (
    parquet_bytes,
    read_parquet_bytes,
    storage_url,
    with_storage_retries,
    write_file_atomically,
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

MANIFEST_NAME = "_manifest.json"
SUCCESS_NAME = "_SUCCESS"
STAGING_FOLDER = "_staging"
SNAPSHOTS_FOLDER = "snapshots"
LOCK_NAME = "_lock.json"
DATASET_FORMAT = "chunkline-dataset"
# Tables of the layout before snapshots, removed from an output's top level once it has a snapshot.
_TOP_LEVEL_TABLES = ("chunks", "documents", "errors")


class DatasetNotFoundError(FileNotFoundError):
    """There is no published chunkline dataset (or no such snapshot) at the URL."""


class ConcurrentRunError(RuntimeError):
    """Another run is writing the same output."""


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


# ---------------------------------------------------------------------------------------------- lock


@dataclass
class OutputLock:
    """The lock a run holds on its output while it writes it."""

    fs: Any
    path: str
    run_id: str
    secrets: tuple[str, ...] = ()

    def holder(self) -> dict[str, Any] | None:
        try:
            with self.fs.open(self.path, "rb") as handle:
                return json.loads(handle.read())
        except FileNotFoundError:
            return None
        except ValueError:  # a lock half-written by a killed run on a local disk
            return {}

    def verify(self) -> None:
        """Raise :class:`ConcurrentRunError` unless this run still holds the lock."""
        holder = self.holder()
        if not holder or holder.get("run_id") != self.run_id:
            raise ConcurrentRunError(
                f"run {self.run_id} lost the lock on {storage_url(self.fs, self.path)} to "
                f"{(holder or {}).get('run_id', 'nobody')}; it publishes nothing"
            )

    def release(self) -> None:
        """Remove the lock if this run holds it (best effort: a stale lock is taken over anyway)."""
        try:
            holder = self.holder()
            if holder is not None and holder.get("run_id") == self.run_id:
                self.fs.rm(self.path)
        except Exception:  # releasing must never hide the run's own outcome
            pass


def _lock_is_stale(holder: dict[str, Any], expiry_seconds: float) -> bool:
    if not holder:
        return True
    started = holder.get("started_at_epoch", 0)
    if time.time() - float(started) > expiry_seconds:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder.get("pid", 0)), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError, OSError):
            return False
    return False


def acquire_output_lock(
    output_url: str,
    run_id: str,
    storage_options: dict[str, Any] | None = None,
    *,
    expiry_seconds: float = 86_400,
    secrets: tuple[str, ...] = (),
) -> OutputLock:
    """Take the output's ``_lock.json`` for ``run_id``, or raise :class:`ConcurrentRunError` naming the run
    that holds it."""
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    lock = OutputLock(fs, _join(root, LOCK_NAME), run_id, secrets)
    content = json.dumps(
        {
            "run_id": run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "started_at_epoch": time.time(),
        },
        sort_keys=True,
    ).encode()
    for _attempt in range(2):
        holder = lock.holder()
        if holder is not None:
            if not _lock_is_stale(holder, expiry_seconds):
                raise ConcurrentRunError(
                    f"another chunkline run ({holder.get('run_id')}, pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {holder.get('started_at')}) is writing {output_url}; wait "
                    f"for it to finish, or remove {storage_url(fs, lock.path)} if that run is no longer alive"
                )
            fs.rm(lock.path)
        fs.makedirs(root, exist_ok=True)
        if isinstance(fs, LocalFileSystem):
            try:
                descriptor = os.open(lock.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue  # another run took it between our look and our create: look again
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(content)
            return lock
        write_file_atomically(fs, lock.path, content, secrets=secrets)
        # Object stores have no exclusive create: the last writer wins, and the loser sees it here.
        time.sleep(0.05)
        lock.verify()
        return lock
    lock.verify()
    return lock


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

    Every read and write is retried after a transient storage error; ``secrets`` are kept out of the
    error messages. With ``lock``, the run must still hold it at the commit point."""
    started = time.perf_counter()
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    snapshot_folder = _join(SNAPSHOTS_FOLDER, run_id)
    snapshot_root = _join(root, snapshot_folder)
    tables: dict[str, dict[str, Any]] = {}
    for table in TABLE_SCHEMAS:
        table_folder = _join(snapshot_root, table)
        parts = sorted(path for path in fs.find(table_folder) if path.endswith(".parquet")) if fs.exists(table_folder) else []
        rows = 0
        for path in parts:
            rows += with_storage_retries(lambda path=path: _row_count(fs, path), storage_url(fs, path), "read", secrets=secrets)
        names = [posixpath.basename(path) for path in parts]
        if not names:
            # Every table has at least one file, so that readers globbing it find its schema.
            name, data = _empty_part(table)
            write_file_atomically(fs, _join(table_folder, name), data, secrets=secrets)
            names.append(name)
        tables[table] = {"files": [f"{snapshot_folder}/{table}/{name}" for name in names], "rows": rows}
    manifest = {
        "format": DATASET_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "snapshot": run_id,
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
    _remove_unneeded(fs, root, run_id, keep)
    write_file_atomically(fs, _join(root, SUCCESS_NAME), f"{run_id}\n".encode(), secrets=secrets)
    return PublishedDataset(output_url, run_id, manifest)


def _published_snapshots(fs, root: str) -> tuple[list[str], list[str]]:
    """(published snapshot ids oldest first, folders of runs that never published)."""
    folder = _join(root, SNAPSHOTS_FOLDER)
    if not fs.exists(folder):
        return [], []
    published, unpublished = [], []
    for path in sorted(fs.ls(folder, detail=False)):
        name = posixpath.basename(path.rstrip("/"))
        (published if fs.exists(_join(folder, name, MANIFEST_NAME)) else unpublished).append(name)
    return published, unpublished


def _remove_unneeded(fs, root: str, current: str, keep: int) -> None:
    """Remove the staging area, failed runs' snapshot folders, snapshots beyond the newest ``keep`` and
    the tables of the layout before snapshots. Runs with the lock held: nothing else is writing."""
    _remove_tree(fs, _join(root, STAGING_FOLDER))
    published, unpublished = _published_snapshots(fs, root)
    kept = set(published[-keep:]) | {current}
    for name in unpublished + [name for name in published if name not in kept]:
        _remove_tree(fs, _join(root, SNAPSHOTS_FOLDER, name))
    for table in _TOP_LEVEL_TABLES:
        _remove_tree(fs, _join(root, table))


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


def _option_values(storage_options: dict[str, Any] | None) -> tuple[str, ...]:
    """Every string in ``storage_options`` (any could be a credential), to keep out of error messages."""
    values: list[str] = []
    pending: list[Any] = [storage_options or {}]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and len(value) >= 4:
            values.append(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    return tuple(sorted(set(values), key=len, reverse=True))


def _remove_tree(fs, path: str) -> None:
    if fs.exists(path):
        fs.rm(path, recursive=True)


def read_manifest(url: str, storage_options: dict[str, Any] | None = None, *, snapshot: str | None = None) -> dict[str, Any]:
    """The manifest of the dataset published at ``url`` (its latest snapshot, or the kept ``snapshot``)."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    path = _join(root, MANIFEST_NAME) if snapshot is None else _join(root, SNAPSHOTS_FOLDER, snapshot, MANIFEST_NAME)
    try:
        manifest = json.loads(
            with_storage_retries(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets=_option_values(storage_options))
        )
    except FileNotFoundError:
        if snapshot is not None:
            raise DatasetNotFoundError(f"no snapshot {snapshot} at {url}; kept snapshots: {', '.join(list_snapshots(url, storage_options)) or 'none'}") from None
        raise DatasetNotFoundError(f"no chunkline dataset at {url}: {MANIFEST_NAME} not found") from None
    if manifest.get("format") != DATASET_FORMAT:
        raise DatasetNotFoundError(f"{storage_url(fs, path)} is not a chunkline manifest")
    return manifest


def list_snapshots(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The ids of the published snapshots kept at ``url``, oldest first (the last is the latest)."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    return _published_snapshots(fs, root.rstrip("/"))[0]


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
    schema = TABLE_SCHEMAS[table][0]
    parts = []
    for name in manifest["tables"][table]["files"]:
        path = _join(root.rstrip("/"), name)
        data = with_storage_retries(
            lambda path=path: fs.cat_file(path), storage_url(fs, path), "read", secrets=_option_values(storage_options)
        )
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
