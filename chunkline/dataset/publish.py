"""Publishing a run as a new snapshot of the dataset, and reading the published dataset back.

The dataset's folders and file names are in :mod:`chunkline.dataset.layout`.

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

Nothing read from an earlier snapshot is trusted unchecked: manifests are checked to name only part files
of their own snapshot's table folders (:func:`manifest_problem`), and every part read, carried over or
copied is checked against the hash its name carries, its rows against the manifest's counts
(:func:`verify_part`, :func:`verify_snapshot`). Before a run builds on the output, :func:`verify_output`
finds the newest kept snapshot that verifies, so a damaged part or manifest costs one full rebuild, never
the output; readers get one :class:`DamagedDatasetError` line naming what is damaged. ``_SUCCESS`` is a
marker for tools that wait for one, never read by chunkline: a stale one is rewritten by the next run.

Only one run may write an output at a time: :func:`acquire_output_lock` (from
:mod:`chunkline.dataset.lock`) takes ``_lock.json`` in one exclusive create that carries its content,
refuses with a clear message while another live run holds it, and lets exactly one of the runs that find a
dead run's lock replace it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.dataset.front_matter_columns import parse_front_matter_columns
from chunkline.dataset.layout import (
    DATASET_FORMAT,
    MANIFEST_NAME,
    PART_NAME,
    SNAPSHOT_ID,
    SNAPSHOTS_FOLDER,
    STAGING_FOLDER,
    SUCCESS_NAME,
    join_path,
    part_name,
    snapshot_url,
    staging_url,
)
from chunkline.dataset.lock import (  # re-exported: the lock is part of this module's interface
    LOCK_NAME,
    ConcurrentRunError,
    OutputLock,
    acquire_output_lock,
)
from chunkline.dataset.settings import storage_secrets
from chunkline.dataset.storage import (
    list_files,
    parquet_bytes,
    read_file_bytes,
    read_parquet_bytes,
    scrub_secrets,
    storage_call,
    storage_url,
    write_file_atomically,
)
from chunkline.schemas import ROW_TABLES, SCHEMA_VERSION, TABLE_SCHEMAS, table_schemas

__all__ = [
    "LOCK_NAME",
    "MANIFEST_NAME",
    "PART_NAME",
    "SNAPSHOTS_FOLDER",
    "STAGING_FOLDER",
    "SUCCESS_NAME",
    "CHANGE_TIME_FOLLOWS_WRITES",
    "CheckedParts",
    "ConcurrentRunError",
    "DamagedDatasetError",
    "DatasetNotFoundError",
    "OutputLock",
    "OutputState",
    "PartsHashedAhead",
    "PublishedDataset",
    "acquire_output_lock",
    "dataset_files",
    "dataset_schemas",
    "discard_run",
    "list_snapshots",
    "manifest_problem",
    "publish_run",
    "read_dataset",
    "read_manifest",
    "read_verified_part",
    "snapshot_url",
    "snapshots_after",
    "staging_url",
    "verify_local_part",
    "verify_output",
    "verify_part",
    "verify_snapshot",
]

logger = logging.getLogger("chunkline")

# Tables of the layout before snapshots, removed from an output's top level once it has a snapshot.
_TOP_LEVEL_TABLES = ("chunks", "documents", "errors")

# The row tables every schema version's snapshots hold (``sections`` came with schema version 4).
_TABLES_OF_EVERY_VERSION = ("chunks", "documents", "errors")


class DatasetNotFoundError(FileNotFoundError):
    """There is no published chunkline dataset (or no such snapshot) at the URL."""


class DamagedDatasetError(DatasetNotFoundError):
    """A published snapshot, or the root manifest, that fails verification: a part missing, truncated or
    changed, a row count that does not match the parts, a manifest that does not parse or names files
    outside its snapshot's table folders. Its message is one line naming what is damaged and what to do."""


@dataclass(frozen=True)
class PublishedDataset:
    """What a publish step made visible."""

    url: str
    run_id: str
    manifest: dict[str, Any]


def _empty_part(schema: pa.Schema) -> tuple[str, bytes]:
    # From no batches: Schema.empty_table() imports pandas, through pyarrow's check for pandas data.
    data = parquet_bytes(pa.Table.from_batches([], schema=schema), 1, "zstd")
    return part_name(0, data), data


def dataset_schemas(manifest: dict[str, Any]) -> dict[str, tuple[pa.Schema, tuple[str, ...]]]:
    """Every table's schema and key in the snapshot ``manifest`` describes: ``TABLE_SCHEMAS`` with the
    front-matter columns its run promoted (its ``config.output.front_matter_columns``)."""
    output = (manifest.get("config") or {}).get("output") or {}
    return table_schemas(parse_front_matter_columns(output.get("front_matter_columns") or {}))


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
    previous_kept: list[str] | None = None,
) -> PublishedDataset:
    """Make the snapshot that run ``run_id`` wrote under ``snapshots/<run_id>/`` the dataset at
    ``output_url``, then remove what no kept snapshot needs.

    Every storage call is retried after a transient error; ``secrets`` are kept out of the error messages.
    With ``lock``, the run must still hold it at the commit point. The root manifest lists the kept
    snapshots (the newest ``keep``, this one last): a folder it does not list — a failed or killed run's,
    even one killed after writing its own manifest — is never read and is removed. ``previous_kept`` are the
    snapshots to keep from before this run, oldest first, as :func:`verify_output` found them (damaged ones
    left out); by default, those the root manifest lists."""
    started = time.perf_counter()
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    snapshot_folder = join_path(SNAPSHOTS_FOLDER, run_id)
    snapshot_root = join_path(root, snapshot_folder)
    tables: dict[str, dict[str, Any]] = {}
    schemas = dataset_schemas(manifest_fields)
    for table in TABLE_SCHEMAS:
        table_folder = join_path(snapshot_root, table)
        parts = [path for path in list_files(fs, table_folder, secrets) if path.endswith(".parquet")]
        rows = sum(
            storage_call(lambda path=path: _row_count(fs, path), storage_url(fs, path), "read", secrets)
            for path in parts
        )
        names = [posixpath.basename(path) for path in parts]
        if not names:
            # Every table has at least one file, so that readers globbing it find its schema.
            name, data = _empty_part(schemas[table][0])
            write_file_atomically(fs, join_path(table_folder, name), data, secrets=secrets)
            names.append(name)
        tables[table] = {"files": [f"{snapshot_folder}/{table}/{name}" for name in names], "rows": rows}
    before = _kept_snapshots(fs, root, secrets) if previous_kept is None else list(previous_kept)
    kept = ([name for name in before if name != run_id] + [run_id])[-keep:]
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
    write_file_atomically(fs, join_path(snapshot_root, MANIFEST_NAME), manifest_bytes, secrets=secrets)
    if lock is not None:
        lock.verify()
    # The commit point: from here on the root manifest names the new snapshot.
    write_file_atomically(fs, join_path(root, MANIFEST_NAME), manifest_bytes, secrets=secrets)
    try:
        _remove_unneeded(fs, root, kept, secrets)
    except Exception as error:  # the snapshot is published; what is left over goes with the next run
        logger.warning(
            "chunkline: published snapshot %s, but could not remove old files (%s)",
            run_id,
            scrub_secrets(str(error), secrets),
        )
    write_file_atomically(fs, join_path(root, SUCCESS_NAME), f"{run_id}\n".encode(), secrets=secrets)
    return PublishedDataset(output_url, run_id, manifest)


def _list_folder(fs, folder: str, secrets: tuple[str, ...]) -> list[str]:
    """Names of the entries directly in ``folder`` (none if it does not exist)."""
    try:
        entries = storage_call(lambda: fs.ls(folder, detail=False), storage_url(fs, folder), "list", secrets)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(entry.rstrip("/")) for entry in entries)


def _kept_snapshots(fs, root: str, secrets: tuple[str, ...]) -> list[str]:
    """The snapshots the current root manifest keeps, oldest first (none for a new output, or when the root
    manifest is damaged: then no snapshot it named can be trusted)."""
    try:
        data = storage_call(lambda: fs.cat_file(join_path(root, MANIFEST_NAME)), storage_url(fs, root), "read", secrets)
    except FileNotFoundError:
        return []
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        return []
    if manifest_problem(manifest) is not None:
        return []
    return list(manifest.get("snapshots") or [manifest["snapshot"]])


def _remove_unneeded(fs, root: str, kept: list[str], secrets: tuple[str, ...]) -> None:
    """Remove the staging area, every snapshot folder the root manifest does not keep (older ones, and the
    folders of failed or killed runs) and the tables of the layout before snapshots. Runs with the lock
    held: nothing else is writing."""
    _remove_tree(fs, join_path(root, STAGING_FOLDER), secrets)
    for name in _list_folder(fs, join_path(root, SNAPSHOTS_FOLDER), secrets):
        if name not in kept:
            _remove_tree(fs, join_path(root, SNAPSHOTS_FOLDER, name), secrets)
    for table in _TOP_LEVEL_TABLES:
        _remove_tree(fs, join_path(root, table), secrets)


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
            _remove_tree(fs, join_path(root, folder, run_id))
            parent = join_path(root, folder)
            if fs.exists(parent) and not fs.ls(parent):
                fs.rmdir(parent)
    except Exception:  # cleaning up must never hide the run's own error
        pass


def _remove_tree(fs, path: str, secrets: tuple[str, ...] = ()) -> None:
    def remove() -> None:
        if fs.exists(path):
            fs.rm(path, recursive=True)

    storage_call(remove, storage_url(fs, path), "delete", secrets)


# ---------------------------------------------------------------------------------------- verifying


def verify_part(url: str, data: bytes) -> None:
    """Raise :class:`DamagedDatasetError` unless ``data``, read from the part at ``url``, hashes to the value
    its name carries."""
    _verify_part_hash(url, hashlib.sha256(data))


#: A local file as ``stat`` tells it apart: (device, inode, size in bytes, modification time in ns).
LocalFileIdentity = tuple[int, int, int, int]


def local_file_identity(status: os.stat_result) -> LocalFileIdentity:
    """The :data:`LocalFileIdentity` of a file from its ``stat``."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def _file_state(status: os.stat_result) -> tuple[LocalFileIdentity, int]:
    """A local file's identity and change time from its ``stat``: what :data:`CheckedParts` keys and checks."""
    return local_file_identity(status), status.st_ctime_ns


def _sha256_of_file(handle, buffer: bytearray, stop: threading.Event | None = None) -> Any:
    """The SHA-256 of what is left to read of the open file ``handle``, read into ``buffer`` a buffer at a time;
    None when ``stop`` is set before the end."""
    digest = hashlib.sha256()
    view = memoryview(buffer)
    while size := handle.readinto(buffer):
        if stop is not None and stop.is_set():
            return None
        digest.update(view[:size])
    return digest


#: Local parts whose bytes a run hashed and found matching their names (:attr:`OutputState.verified_parts`,
#: :class:`PartsHashedAhead`): the identity of the file while it was hashed -> (the part's file name, the
#: file's change time in ns then). A file written to and given back its modification time has another
#: change time; so has a file given another name (a hard link), which is why the carry of a linked part
#: (:func:`verify_local_part`) matches the identity and name alone.
CheckedParts = Mapping[LocalFileIdentity, tuple[str, int]]

#: Whether a file's ``st_ctime_ns`` is the time its inode last changed (where a write moves it), as on
#: POSIX systems; on Windows it is the time the file was made, so no part is trusted by it there.
CHANGE_TIME_FOLLOWS_WRITES = os.name != "nt"


def read_verified_part(fs, path: str, *, secrets: tuple[str, ...] = (), verified: CheckedParts | None = None) -> bytes:
    """The bytes of the part at ``path``, checked against the hash its name carries (:func:`verify_part`).

    ``verified``: the local parts this run has hashed already. A local file that is one of them under the
    same name, the same inode, size, modification and change times from before it was read to after, holds
    the bytes that were checked, and is not hashed again."""
    if verified and type(fs) is LocalFileSystem and CHANGE_TIME_FOLLOWS_WRITES:
        data, state = storage_call(lambda: _read_part(fs, path), storage_url(fs, path), "read", secrets)
        if state is not None and verified.get(state[0]) == (posixpath.basename(path), state[1]):
            return data
    else:
        data = read_file_bytes(fs, path, secrets=secrets)
    verify_part(storage_url(fs, path), data)
    return data


def verify_local_part(
    url: str,
    path: str,
    *,
    secrets: tuple[str, ...] = (),
    verified: CheckedParts | None = None,
) -> None:
    """:func:`verify_part` for the part at ``url`` read from ``path`` on the local disk, hashed as it is read
    a megabyte at a time: its bytes are not needed afterwards, so they are never held whole.

    ``verified``: the local parts this run has hashed already (:attr:`OutputState.verified_parts`), by
    identity. A file at ``path`` that is one of them (the same inode, so a hard link to it; its size and
    modification time unchanged since, so not written to) under the same name holds the bytes that were
    checked, and is not read again."""
    if verified:
        try:
            identity = local_file_identity(os.stat(path))
        except OSError:  # the read below says what is wrong
            identity = None
        if identity is not None and verified.get(identity, ("",))[0] == posixpath.basename(url):
            return

    def sha256_of_file() -> Any:
        with open(path, "rb", buffering=0) as handle:
            return _sha256_of_file(handle, bytearray(1 << 20))

    _verify_part_hash(url, storage_call(sha256_of_file, url, "read", secrets))


def _verify_part_hash(url: str, digest: Any) -> None:
    match = PART_NAME.fullmatch(posixpath.basename(url))
    if match is None or digest.hexdigest()[:16] != match.group(2):
        raise DamagedDatasetError(
            f"part {url} is damaged: its bytes do not match the hash in its name (truncated or changed); "
            "the next chunkline run on this output rebuilds from the inputs"
        )


def _shown(value: Any, limit: int = 200) -> str:
    """``value`` as it may appear in a one-line message: its repr (newlines escaped), cut at ``limit``."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def manifest_problem(manifest: Any, snapshot: str | None = None) -> str | None:
    """What is wrong with a parsed manifest (of ``snapshot``, if given), or None if it is well formed.

    Nothing in a manifest is trusted before this: every file it names must be a part file inside its own
    snapshot's folder for that table (``snapshots/<id>/<table>/part-<shard>-<hash>.parquet``: no ``..``,
    no absolute path, no other table's or snapshot's folder), at most one per shard, and every row count a
    count. Whether the parts exist and hold those rows is :func:`verify_snapshot`'s to check."""
    if not isinstance(manifest, dict):
        return "it is not a JSON object"
    if manifest.get("format") != DATASET_FORMAT:
        return f"its format is {_shown(manifest.get('format'))}, not {DATASET_FORMAT!r}"
    name = manifest.get("snapshot")
    if not isinstance(name, str) or not SNAPSHOT_ID.fullmatch(name):
        return f"its snapshot id {_shown(name)} is not a valid id"
    if snapshot is not None and name != snapshot:
        return f"it names snapshot {name}, not {snapshot}"
    kept = manifest.get("snapshots", [name])
    well_formed = isinstance(kept, list) and all(isinstance(item, str) and SNAPSHOT_ID.fullmatch(item) for item in kept)
    if not well_formed or kept[-1:] != [name]:
        return "its list of kept snapshots is not valid"
    output = (manifest.get("config") or {}).get("output") if isinstance(manifest.get("config"), dict) else None
    shards = (output or {}).get("shards", 1) if isinstance(output, dict) else 1
    if not _is_count(shards) or shards < 1:
        return f"its shard count {_shown(shards)} is not a positive count"
    try:
        parse_front_matter_columns((output or {}).get("front_matter_columns") or {} if isinstance(output, dict) else {})
    except ValueError as error:
        return f"its output.{error}"
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        return "it lists no tables"
    # A snapshot of an earlier schema version has no sections table; it is still a dataset to read.
    required = ROW_TABLES if manifest.get("schema_version") == SCHEMA_VERSION else _TABLES_OF_EVERY_VERSION
    for table in required:
        if table not in tables:
            return f"it lists no {table} table"
    for table, entry in tables.items():
        if table not in TABLE_SCHEMAS:
            return f"it lists an unknown table {_shown(table)}"
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), list) or not entry["files"]:
            return f"its {table} table lists no files"
        if not _is_count(entry.get("rows")):
            return f"its {table} row count {_shown(entry.get('rows'))} is not a count"
        folder = f"{SNAPSHOTS_FOLDER}/{name}/{table}/"
        seen_shards: set[int] = set()
        for file in entry["files"]:
            match = (
                PART_NAME.fullmatch(file[len(folder) :]) if isinstance(file, str) and file.startswith(folder) else None
            )
            if match is None:
                return f"its {table} table names {_shown(file)}, which is not a part file of {folder}"
            shard = int(match.group(1))
            if shard >= shards or shard in seen_shards:
                return f"its {table} table names {file}, a second part of shard {shard} or one past its {shards} shards"
            seen_shards.add(shard)
    return None


def _parse_manifest(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the manifest, None) or (None, what is wrong with it)."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        return None, "it is not valid JSON (truncated or changed)"
    problem = manifest_problem(manifest)
    return (None, problem) if problem else (manifest, None)


def _parts_problem(
    fs,
    root: str,
    manifest: dict[str, Any],
    secrets: tuple[str, ...],
    *,
    read_tables: tuple[str, ...],
    verified: dict[LocalFileIdentity, tuple[str, int]] | None = None,
    hashed_ahead: CheckedParts | None = None,
) -> str | None:
    """What is wrong with a well-formed manifest's parts, or None if they verify.

    Each table folder must hold exactly the parts the manifest names (no part missing, none it does not
    name); the parts of ``read_tables`` are read whole, each checked against the hash in its name, and their
    footers' row counts against the manifest's. Each local part whose hash matched goes into ``verified``
    (its identity while it was read -> its name and change time, see :data:`CheckedParts`), when one is
    given. A local part in ``hashed_ahead`` whose file has not changed since (see :class:`PartsHashedAhead`)
    has only its footer read."""
    snapshot = manifest["snapshot"]
    for table, entry in manifest["tables"].items():
        names = entry["files"]
        folder = join_path(root, SNAPSHOTS_FOLDER, snapshot, table)
        present = {
            f"{SNAPSHOTS_FOLDER}/{snapshot}/{table}/{posixpath.basename(path)}"
            for path in list_files(fs, folder, secrets)
            if path.endswith(".parquet") and posixpath.dirname(path).rstrip("/") == folder.rstrip("/")
        }
        missing = [name for name in names if name not in present]
        if missing:
            return f"part {missing[0]} is missing"
        unnamed = sorted(present - set(names))
        if unnamed:
            return f"its {table} folder holds {unnamed[0]}, which its manifest does not name"
        if table not in read_tables:
            continue
        rows = 0
        # Parts are read and hashed two at a time (both release the GIL): the time a rerun spends checking
        # what it builds on is mostly this. The first part in the manifest's order that fails is reported.
        pool = ThreadPoolExecutor(max_workers=VERIFY_THREADS)
        try:
            checks = pool.map(lambda name: _check_part(fs, root, name, secrets, hashed_ahead), names)
            for name, (problem, part_rows, state) in zip(names, checks):
                if problem is not None:
                    return problem
                if verified is not None and state is not None:
                    verified[state[0]] = (posixpath.basename(name), state[1])
                rows += part_rows
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # the parts after a damaged one are not read
        if rows != entry["rows"]:
            return f"its {table} parts hold {rows} rows, but its manifest says {entry['rows']}"
    return None


VERIFY_THREADS = 2
"""How many parts :func:`verify_output` reads and hashes at once."""


def _check_part(
    fs, root: str, name: str, secrets: tuple[str, ...], hashed_ahead: CheckedParts | None = None
) -> tuple[str | None, int, tuple[LocalFileIdentity, int] | None]:
    """(what is wrong with the part ``name``, or None; its footer's row count; the identity and change time of
    its local file when it verified, see :func:`_read_part`)."""
    path = join_path(root, name)
    if hashed_ahead and type(fs) is LocalFileSystem and CHANGE_TIME_FOLLOWS_WRITES:
        rows_and_state = _footer_of_part_hashed_ahead(path, posixpath.basename(name), hashed_ahead)
        if rows_and_state is not None:
            return None, *rows_and_state
    try:
        data, state = storage_call(lambda: _read_part(fs, path), storage_url(fs, path), "read", secrets)
    except FileNotFoundError:
        return f"part {name} is missing", 0, None
    try:
        verify_part(name, data)
        return None, pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows, state
    except DamagedDatasetError:
        return f"part {name} does not match the hash in its name (truncated or changed)", 0, None
    except Exception:  # the right hash but no Parquet footer: damaged all the same
        return f"part {name} cannot be read as Parquet", 0, None


def _footer_of_part_hashed_ahead(
    path: str, file_name: str, hashed_ahead: CheckedParts
) -> tuple[int, tuple[LocalFileIdentity, int]] | None:
    """(the row count in its footer, its file's identity and change time) for the local part at ``path``
    when ``hashed_ahead`` holds its file as it is now (the same inode, size, modification and change times)
    under ``file_name``; None when it does not, or the file changed while its footer was read: the part is
    then read whole."""
    try:
        before = _file_state(os.stat(path))
        if hashed_ahead.get(before[0]) != (file_name, before[1]):
            return None
        with open(path, "rb") as handle:
            rows = pq.ParquetFile(handle).metadata.num_rows
        after = _file_state(os.stat(path))
    except Exception:  # missing, unreadable, no footer: the whole read says what is wrong
        return None
    return (rows, before) if after == before else None


def _read_part(fs, path: str) -> tuple[bytes, tuple[LocalFileIdentity, int] | None]:
    """The bytes of the part at ``path``, and, on the local disk, the identity and change time of the file
    they were read from (None when the file changed while it was read, or elsewhere)."""
    if type(fs) is not LocalFileSystem:
        return fs.cat_file(path), None
    with open(path, "rb") as handle:
        before = _file_state(os.fstat(handle.fileno()))
        data = handle.read()
        after = _file_state(os.fstat(handle.fileno()))
    return data, (before if before == after and len(data) == before[0][2] else None)


def _damaged_message(url: str, snapshot: str, problem: str, kept: list[str]) -> str:
    others = [name for name in kept if name != snapshot]
    message = f"snapshot {snapshot} of {url} is damaged: {problem}; the next chunkline run on this output rebuilds it"
    if others:
        message += f", or read a kept snapshot ({', '.join(others)}) with --snapshot ID"
    return message


def verify_snapshot(url: str, manifest: dict[str, Any], storage_options: dict[str, Any] | None = None) -> None:
    """Raise :class:`DamagedDatasetError` (one line naming the part or the count) unless the snapshot that
    ``manifest`` (from :func:`read_manifest`) describes is whole: every part present and named, each part's
    bytes matching the hash in its name, and each table's row count its parts' footers'."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    secrets = tuple(storage_secrets(storage_options or {}))
    problem = _parts_problem(fs, root.rstrip("/"), manifest, secrets, read_tables=tuple(manifest["tables"]))
    if problem:
        raise DamagedDatasetError(
            _damaged_message(url, manifest["snapshot"], problem, list(manifest.get("snapshots") or []))
        )


@dataclass(frozen=True)
class OutputState:
    """What a run may build on at its output, as :func:`verify_output` found it."""

    manifest: dict[str, Any] | None
    """The manifest of the newest kept snapshot that verifies (None: a new output, or none verifies)."""
    latest_trusted: bool
    """True when that snapshot is the one the root manifest publishes (an incremental run may build on it)."""
    damage: tuple[str, ...] = ()
    """One line per damaged thing found (the root manifest, a snapshot, a part)."""
    kept: tuple[str, ...] | None = None
    """The snapshots from before this run that the next root manifest keeps, oldest first (damaged ones
    left out); None for a new output."""
    repaired: tuple[str, ...] = ()
    """What was put right on the way (``_SUCCESS``, a snapshot's own copy of the root manifest)."""
    root_damaged: bool = False
    """The root manifest could not be trusted: the run publishes a new one."""
    damaged_snapshots: tuple[str, ...] = ()
    """The kept snapshots that failed verification (no longer kept), newest first."""
    verified_parts: CheckedParts = dataclass_field(default_factory=dict)
    """The parts of ``manifest`` on the local disk whose bytes were hashed here, by the identity of their file
    then (-> the part's file name and the file's change time, see :data:`CheckedParts`): a part carried over
    as a hard link to one of them, or read by a merge, unchanged since, is not hashed again (see
    :func:`verify_local_part`, :func:`read_verified_part`)."""


HASH_AHEAD_READ_BYTES = 8 << 20
"""How much of a part :class:`PartsHashedAhead` reads and hashes at a time. Both give up the GIL while they
work, and each read takes it back twice: large reads keep the thread from waiting on the listing's Python
code (which holds the GIL up to its switch interval, 5 ms) at every megabyte."""


class PartsHashedAhead:
    """The published snapshot's local parts hashed on a thread of their own while the run does its other
    work before it takes the output's lock (listing its inputs): :func:`verify_output`, with the lock held,
    then reads only the footers of those whose files have not changed since, instead of every byte again.

    It only reads, and takes no lock: a part that does not match the hash in its name, or changes while it
    is hashed, is left out, and the check under the lock reads it and says what is wrong. Outputs that are
    not on the local disk, and any on Windows (see :data:`CHANGE_TIME_FOLLOWS_WRITES`), are not hashed
    ahead (:meth:`hashed` gives none)."""

    def __init__(self, output_url: str, storage_options: dict[str, Any] | None = None) -> None:
        self._hashed: dict[LocalFileIdentity, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            fs, root = url_to_fs(output_url, **(storage_options or {}))
        except Exception:  # the run reports a bad output URL itself
            return
        if (
            type(fs) is LocalFileSystem
            and CHANGE_TIME_FOLLOWS_WRITES
            and os.path.isfile(join_path(root.rstrip("/"), MANIFEST_NAME))
        ):
            self._thread = threading.Thread(
                target=self._hash_parts, args=(root.rstrip("/"),), name="chunkline-hash-parts", daemon=True
            )
            self._thread.start()

    def hashed(self) -> CheckedParts:
        """The parts hashed ahead (see :data:`CheckedParts`), once the thread is done."""
        if self._thread is not None:
            self._thread.join()
        return self._hashed

    def cancel(self) -> None:
        """Stop hashing (between two reads) and wait for the thread: the run will not use what it found."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _hash_parts(self, root: str) -> None:
        try:
            with open(join_path(root, MANIFEST_NAME), "rb") as handle:
                manifest, _ = _parse_manifest(handle.read())
            if manifest is None:
                return
            buffer = bytearray(HASH_AHEAD_READ_BYTES)  # one for all: each new one would be new pages to fault in
            for table in ROW_TABLES:
                for name in manifest["tables"].get(table, {}).get("files", []):
                    if self._stop.is_set():
                        return
                    try:
                        self._hash_part(join_path(root, name), posixpath.basename(name), buffer)
                    except OSError:  # missing or unreadable: the check under the lock says so; the next one
                        continue
        except Exception:  # anything amiss is for the check under the lock to find and report
            logger.debug("chunkline: hashing the published parts ahead stopped", exc_info=True)

    def _hash_part(self, path: str, file_name: str, buffer: bytearray) -> None:
        match = PART_NAME.fullmatch(file_name)
        if match is None:
            return
        with open(path, "rb", buffering=0) as handle:
            before = _file_state(os.fstat(handle.fileno()))
            digest = _sha256_of_file(handle, buffer, self._stop)
            after = _file_state(os.fstat(handle.fileno()))
        if digest is not None and digest.hexdigest()[:16] == match.group(2) and before == after:
            identity, change_time = before
            self._hashed[identity] = (file_name, change_time)


def verify_output(
    output_url: str,
    storage_options: dict[str, Any] | None = None,
    secrets: tuple[str, ...] = (),
    *,
    repair: bool = True,
    hashed_ahead: CheckedParts | None = None,
) -> OutputState:
    """Check the output's published state before a run builds on it; call it with the output's lock held.

    The root manifest must parse and be well formed (:func:`manifest_problem`); then the kept snapshots are
    tried newest first until one verifies: its parts present and named, the chunks, documents and errors
    parts (what a run reads, carries over or copies) hashing to their names, its row counts its parts'. A
    snapshot that fails is never built on. When the root manifest itself is damaged (it does not parse, or
    its file list or counts do not match the published snapshot while the snapshot's own manifest does),
    it is not trusted: the snapshot folders are tried newest first through their own manifests, and the run
    publishes a new root manifest. Older kept snapshots are only checked to have a well-formed manifest of
    their own (their parts are verified whenever they are read); those that have none are no longer kept.

    With ``repair``, a ``_SUCCESS`` that names another snapshot than the root manifest is rewritten (or
    removed when no root manifest can be trusted), and the published snapshot's own copy of the root
    manifest is restored from it. ``hashed_ahead``: the parts :class:`PartsHashedAhead` hashed before the
    lock was taken; those whose files have not changed since are not read again."""
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    root_path = join_path(root, MANIFEST_NAME)
    try:
        root_bytes = storage_call(lambda: fs.cat_file(root_path), storage_url(fs, root_path), "read", secrets)
    except FileNotFoundError:
        return OutputState(None, False)
    published, root_problem = _parse_manifest(root_bytes)
    damage: list[str] = []
    repaired: list[str] = []

    def own_manifest(name: str) -> tuple[dict[str, Any] | None, str | None]:
        path = join_path(root, SNAPSHOTS_FOLDER, name, MANIFEST_NAME)
        try:
            data = storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets)
        except FileNotFoundError:
            return None, f"its manifest {SNAPSHOTS_FOLDER}/{name}/{MANIFEST_NAME} is missing"
        manifest, problem = _parse_manifest(data)
        if manifest is not None and manifest["snapshot"] != name:
            return None, f"its manifest names snapshot {manifest['snapshot']}"
        return manifest, (f"its manifest is damaged: {problem}" if problem else None)

    if published is None:
        damage.append(f"the root manifest {storage_url(fs, root_path)} is damaged: {root_problem}")
        candidates = list(reversed(_list_folder(fs, join_path(root, SNAPSHOTS_FOLDER), secrets)))
    else:
        candidates = list(reversed(published.get("snapshots") or [published["snapshot"]]))
    chosen: dict[str, Any] | None = None
    root_damaged = published is None
    dropped: set[str] = set()
    verified: dict[LocalFileIdentity, tuple[str, int]] = {}
    for name in candidates:
        if published is not None and name == published["snapshot"]:
            manifest, problem = published, None
        else:
            manifest, problem = own_manifest(name)
        if chosen is not None:  # an older kept snapshot: its manifest must still be there to be kept
            if problem:
                damage.append(f"kept snapshot {name} is damaged: {problem}; it is no longer kept")
                dropped.add(name)
            continue
        if problem is None:
            verified = {}
            problem = _parts_problem(
                fs, root, manifest, secrets, read_tables=ROW_TABLES, verified=verified, hashed_ahead=hashed_ahead
            )
        if problem is not None and manifest is published:
            # The root manifest may be what is wrong: the snapshot's own copy, if it differs and verifies,
            # describes the snapshot as it was published.
            own, own_problem = own_manifest(name)
            verified = {}
            if (
                own is not None
                and own != published
                and not _parts_problem(
                    fs, root, own, secrets, read_tables=ROW_TABLES, verified=verified, hashed_ahead=hashed_ahead
                )
            ):
                damage.append(f"the root manifest {storage_url(fs, root_path)} is damaged: {problem}")
                chosen, root_damaged = own, True
                continue
        if problem is None:
            chosen = manifest
        elif published is not None:
            damage.append(f"snapshot {name} is damaged: {problem}")
            dropped.add(name)
    if published is None:
        kept: tuple[str, ...] = (chosen["snapshot"],) if chosen else ()
    else:
        kept = tuple(name for name in (published.get("snapshots") or [published["snapshot"]]) if name not in dropped)
    if repair:
        repaired += _repair_success(fs, root, published["snapshot"] if published is not None else None, secrets)
    latest_trusted = chosen is not None and not root_damaged and chosen["snapshot"] == published["snapshot"]
    if latest_trusted and repair:
        own, own_problem = own_manifest(published["snapshot"])
        if own != published:
            # Its own copy holds the root manifest's bytes, written just before the commit point.
            own_path = join_path(root, SNAPSHOTS_FOLDER, published["snapshot"], MANIFEST_NAME)
            write_file_atomically(fs, own_path, root_bytes, secrets=secrets)
            repaired.append(
                f"snapshot {published['snapshot']}: {own_problem or 'its manifest differed from the root manifest'}; "
                "restored from the root manifest"
            )
    damaged_snapshots = tuple(name for name in candidates if name in dropped)
    return OutputState(
        chosen,
        latest_trusted,
        tuple(damage),
        kept,
        tuple(repaired),
        root_damaged,
        damaged_snapshots,
        verified_parts=verified if chosen is not None else {},
    )


def _repair_success(fs, root: str, published: str | None, secrets: tuple[str, ...]) -> list[str]:
    """Make ``_SUCCESS`` name the ``published`` snapshot (remove it when there is none to trust); returns
    what was repaired. A run killed right after its commit point leaves it naming the snapshot before."""
    path = join_path(root, SUCCESS_NAME)
    try:
        success = storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets)
    except FileNotFoundError:
        success = None
    expected = f"{published}\n".encode() if published is not None else None
    if success == expected:
        return []
    named = _shown((success or b"").decode("utf-8", "replace").strip(), 80) if success else "nothing"
    if expected is None:
        _remove_tree(fs, path, secrets)
        return [f"{SUCCESS_NAME}: it named {named}, but no root manifest can be trusted; removed"]
    write_file_atomically(fs, path, expected, secrets=secrets)
    return [f"{SUCCESS_NAME}: it named {named}, not the published snapshot {published}; rewritten"]


# ------------------------------------------------------------------------------------------ reading


def read_manifest(
    url: str, storage_options: dict[str, Any] | None = None, *, snapshot: str | None = None
) -> dict[str, Any]:
    """The manifest of the dataset published at ``url``: its latest snapshot's, or that of ``snapshot``,
    one of the snapshots the latest manifest keeps (see :func:`list_snapshots`).

    A manifest that does not parse or is not well formed (:func:`manifest_problem`) raises
    :class:`DamagedDatasetError`. When the root manifest is damaged, a ``snapshot`` is still read from its
    own folder's manifest."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    root = root.rstrip("/")
    secrets = tuple(storage_secrets(storage_options or {}))
    path = join_path(root, MANIFEST_NAME)
    try:
        data = storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"no chunkline dataset at {url}: {MANIFEST_NAME} not found") from None
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        manifest = None
    if isinstance(manifest, dict) and manifest.get("format") != DATASET_FORMAT:
        raise DatasetNotFoundError(f"{storage_url(fs, path)} is not a chunkline manifest")
    problem = "it is not valid JSON (truncated or changed)" if manifest is None else manifest_problem(manifest)
    if problem:
        if snapshot is not None:
            return _snapshot_manifest(fs, root, url, snapshot, secrets, kept=[])
        folders = _list_folder(fs, join_path(root, SNAPSHOTS_FOLDER), secrets)
        hint = (
            f", or read one of the snapshot folders ({', '.join(folders[-3:])}) with --snapshot ID" if folders else ""
        )
        raise DamagedDatasetError(
            f"the root manifest {storage_url(fs, path)} is damaged: {problem}; the next chunkline run on this "
            f"output publishes a new one{hint}"
        )
    if snapshot is None or snapshot == manifest["snapshot"]:
        return manifest
    kept = manifest.get("snapshots", [])
    if snapshot not in kept:
        raise DatasetNotFoundError(f"no snapshot {snapshot} at {url}; kept snapshots: {', '.join(kept) or 'none'}")
    return _snapshot_manifest(fs, root, url, snapshot, secrets, kept=kept)


def _snapshot_manifest(
    fs, root: str, url: str, snapshot: str, secrets: tuple[str, ...], *, kept: list[str]
) -> dict[str, Any]:
    """The own manifest of ``snapshot``, checked to be well formed and to describe that snapshot."""
    if not SNAPSHOT_ID.fullmatch(snapshot):
        raise DatasetNotFoundError(f"{_shown(snapshot)} is not a snapshot id (see chunkline inspect {url})")
    path = join_path(root, SNAPSHOTS_FOLDER, snapshot, MANIFEST_NAME)
    try:
        data = storage_call(lambda: fs.cat_file(path), storage_url(fs, path), "read", secrets)
    except FileNotFoundError:
        if not kept:
            raise DatasetNotFoundError(f"no snapshot {snapshot} at {url}: {storage_url(fs, path)} not found") from None
        problem = f"its manifest {storage_url(fs, path)} is missing"
        raise DamagedDatasetError(_damaged_message(url, snapshot, problem, kept)) from None
    manifest, problem = _parse_manifest(data)
    if manifest is not None and manifest["snapshot"] != snapshot:
        manifest, problem = None, f"its manifest names snapshot {manifest['snapshot']}"
    if manifest is None:
        raise DamagedDatasetError(_damaged_message(url, snapshot, f"its manifest is damaged: {problem}", kept))
    return manifest


def list_snapshots(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The ids of the snapshots kept at ``url``, oldest first (the last is the latest); none if there is no
    dataset there yet. A damaged root manifest raises :class:`DamagedDatasetError`."""
    try:
        manifest = read_manifest(url, storage_options)
    except DamagedDatasetError:
        raise
    except DatasetNotFoundError:
        return []
    return list(manifest.get("snapshots") or [manifest["snapshot"]])


def snapshots_after(url: str, synced: str | None, storage_options: dict[str, Any] | None = None) -> list[str] | None:
    """The snapshots after ``synced`` up to the latest, oldest first, when each one's ``changes/`` is
    relative to the one before it, so that a loader synced to ``synced`` catches up by applying them in
    order; None when only a full load can catch up (nothing synced yet, a snapshot on the way no longer
    kept, a run whose delta does not start from the snapshot before it, a snapshot marked ``full_reload``
    because no earlier one could be compared with, or a snapshot on the way that is damaged)."""
    if synced is None:
        return None
    try:
        kept = set(list_snapshots(url, storage_options))
        chain, snapshot = [], read_manifest(url, storage_options)["snapshot"]
        while snapshot != synced:
            if snapshot not in kept:
                return None
            manifest = read_manifest(url, storage_options, snapshot=snapshot)
            if manifest.get("full_reload"):
                return None
            chain.append(snapshot)
            snapshot = manifest.get("rebuild", {}).get("previous_snapshot")
    except DamagedDatasetError:  # a delta on the way cannot be trusted; the latest is loaded in full
        return None
    return chain[::-1]


def dataset_files(
    url: str, table: str = "chunks", storage_options: dict[str, Any] | None = None, *, snapshot: str | None = None
) -> list[str]:
    """Exactly the part files of ``table`` in the latest (or the given) snapshot, for readers that take a
    list of files or a glob (pandas, pyarrow, Beam's ``ReadFromParquet``, DuckDB, polars, Spark): they all
    sit in one folder of that snapshot. A local dataset's parts are plain absolute paths
    (``/data/out/snapshots/.../part-00000-....parquet``), which every one of those readers opens, where a
    ``file://`` URL is refused by Beam's ``FileSystems``; a remote one's keep their protocol, as fsspec
    writes it (``s3://bucket/...``, ``gs://...``, ``memory://...``), to be opened with the same
    storage options. The manifest is checked; the parts are not read here (:func:`verify_snapshot` reads
    and checks them)."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLE_SCHEMAS)}")
    manifest = read_manifest(url, storage_options, snapshot=snapshot)
    fs, root = url_to_fs(url, **(storage_options or {}))
    paths = [join_path(root.rstrip("/"), name) for name in manifest["tables"][table]["files"]]
    if isinstance(fs, LocalFileSystem):
        return paths
    return [storage_url(fs, path) for path in paths]


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
    the manifest names, so a rebuild in progress or a failed run's leftovers are never read. Every part is
    verified as it is read: a part missing, one whose bytes do not match the hash in its name, or parts
    that hold other than the manifest's row count raise :class:`DamagedDatasetError`, naming the part."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLE_SCHEMAS)}")
    manifest = read_manifest(url, storage_options, snapshot=snapshot)
    if table not in manifest["tables"]:
        raise DatasetNotFoundError(f"the dataset at {url} has no {table} table (written by an older chunkline)")
    fs, root = url_to_fs(url, **(storage_options or {}))
    secrets = tuple(storage_secrets(storage_options or {}))
    schema = dataset_schemas(manifest)[table][0]
    kept = list(manifest.get("snapshots") or [])
    entry = manifest["tables"][table]
    parts = []
    for name in entry["files"]:
        path = join_path(root.rstrip("/"), name)
        try:
            data = storage_call(lambda path=path: fs.cat_file(path), storage_url(fs, path), "read", secrets)
        except FileNotFoundError:
            raise DamagedDatasetError(
                _damaged_message(url, manifest["snapshot"], f"part {name} is missing", kept)
            ) from None
        try:
            verify_part(name, data)
        except DamagedDatasetError:
            problem = f"part {name} does not match the hash in its name (truncated or changed)"
            raise DamagedDatasetError(_damaged_message(url, manifest["snapshot"], problem, kept)) from None
        parts.append(read_parquet_bytes(data, schema, columns))
    rows = sum(part.num_rows for part in parts)
    if rows != entry["rows"]:
        problem = f"its {table} parts hold {rows} rows, but its manifest says {entry['rows']}"
        raise DamagedDatasetError(_damaged_message(url, manifest["snapshot"], problem, kept))
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns], metadata=schema.metadata)
    result = pa.concat_tables(parts) if parts else pa.Table.from_batches([], schema=schema)
    if not as_pandas:
        return result
    frame = result.to_pandas()
    for field in result.schema:
        if pa.types.is_list(field.type):
            # pandas would hold numpy arrays; a list column stays a column of lists.
            frame[field.name] = result.column(field.name).to_pylist()
    return frame
