"""Publishing a staged run as the dataset, and reading a published dataset back.

A dataset at ``URL`` is::

    URL/_manifest.json          names the run and exactly the part files of each table
    URL/_SUCCESS                written last; holds the run id of the manifest it confirms
    URL/chunks/part-*.parquet   one folder per table; part names carry a hash of their bytes
    URL/documents/part-*.parquet
    URL/errors/part-*.parquet

A run writes its parts under ``URL/_staging/<run id>/`` while the pipeline runs; a failed run therefore
leaves the published dataset as it was. Publishing then moves the parts into the table folders (a part
already there under the same content-addressed name is kept as is), replaces ``_manifest.json`` in one
write, which is the moment the new dataset becomes the dataset, deletes every part the new manifest does
not name, and writes ``_SUCCESS``. Nothing in this relies on renaming folders, so it holds on object
stores where a rename is a copy and a delete: the manifest, written last and in one piece, is what names the
dataset, and :func:`read_dataset` (like ``chunkline inspect``) reads only what it names. A reader that globs
``chunks/*.parquet`` directly sees exactly the dataset once publishing has finished.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from chunkline.schemas import SCHEMA_VERSION, TABLE_SCHEMAS
from chunkline.pipelines.files import parquet_bytes, storage_url, with_storage_retries, write_file_atomically

__all__ = [
    "MANIFEST_NAME",
    "SUCCESS_NAME",
    "STAGING_FOLDER",
    "DatasetNotFoundError",
    "PublishedDataset",
    "publish_run",
    "read_manifest",
    "read_dataset",
    "discard_run",
]

MANIFEST_NAME = "_manifest.json"
SUCCESS_NAME = "_SUCCESS"
STAGING_FOLDER = "_staging"
DATASET_FORMAT = "chunkline-dataset"


class DatasetNotFoundError(FileNotFoundError):
    """There is no published chunkline dataset at the URL."""


@dataclass(frozen=True)
class PublishedDataset:
    """What a publish step made visible."""

    url: str
    run_id: str
    manifest: dict[str, Any]


def _join(*parts: str) -> str:
    return posixpath.join(*[part.rstrip("/") if number == 0 else part.strip("/") for number, part in enumerate(parts)])


def staging_url(output_url: str, run_id: str) -> str:
    """Where a run stages its files."""
    return _join(output_url, STAGING_FOLDER, run_id)


def _staged_parts(fs, staging_root: str, table: str) -> list[str]:
    folder = _join(staging_root, table)
    if not fs.exists(folder):
        return []
    return sorted(path for path in fs.find(folder) if path.endswith(".parquet"))


def _empty_part(table: str) -> tuple[str, bytes]:
    schema = TABLE_SCHEMAS[table][0]
    data = parquet_bytes(schema.empty_table(), 1, "zstd")
    return f"part-00000-{hashlib.sha256(data).hexdigest()[:16]}.parquet", data


def publish_run(
    output_url: str,
    run_id: str,
    manifest_fields: dict[str, Any],
    storage_options: dict[str, Any] | None = None,
    secrets: tuple[str, ...] = (),
) -> PublishedDataset:
    """Make the run staged under ``_staging/<run_id>`` the dataset at ``output_url``.

    Every read, move and write is retried after a transient storage error; ``secrets`` are kept out of the
    error messages."""
    started = time.perf_counter()
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    staging_root = _join(root, STAGING_FOLDER, run_id)
    tables: dict[str, dict[str, Any]] = {}
    for table in TABLE_SCHEMAS:
        names: list[str] = []
        rows = 0
        table_folder = _join(root, table)
        fs.makedirs(table_folder, exist_ok=True)
        staged = _staged_parts(fs, staging_root, table)
        if not staged:
            # Every table has at least one file, so that readers globbing it find its schema.
            name, data = _empty_part(table)
            destination = _join(table_folder, name)
            if not fs.exists(destination):
                write_file_atomically(fs, destination, data, secrets=secrets)
            names.append(name)
        for path in staged:
            name = posixpath.basename(path)
            destination = _join(table_folder, name)
            rows += with_storage_retries(
                lambda path=path: _row_count(fs, path), storage_url(fs, path), "read", secrets=secrets
            )
            if not fs.exists(destination):  # content-addressed: an existing name already holds these bytes
                with_storage_retries(
                    lambda path=path, destination=destination: _move(fs, path, destination),
                    storage_url(fs, path),
                    "move",
                    secrets=secrets,
                )
            names.append(name)
        tables[table] = {"files": [f"{table}/{name}" for name in names], "rows": rows}
    manifest = {
        "format": DATASET_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tables": tables,
        **manifest_fields,
    }
    manifest.setdefault("timings", {})["publish_seconds"] = round(time.perf_counter() - started, 3)
    # The commit point: from here on the new manifest names the dataset.
    manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True).encode()
    write_file_atomically(fs, _join(root, MANIFEST_NAME), manifest_bytes, secrets=secrets)
    for table, entry in tables.items():
        keep = {posixpath.basename(name) for name in entry["files"]}
        table_folder = _join(root, table)
        for path in fs.ls(table_folder, detail=False):
            if posixpath.basename(path) not in keep:
                fs.rm(path)
    _remove_tree(fs, _join(root, STAGING_FOLDER))
    write_file_atomically(fs, _join(root, SUCCESS_NAME), f"{run_id}\n".encode(), secrets=secrets)
    return PublishedDataset(output_url, run_id, manifest)


def _row_count(fs, path: str) -> int:
    """Rows of the Parquet file at ``path`` (its footer only is read)."""
    with fs.open(path, "rb") as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def _move(fs, source: str, destination: str) -> None:
    """Move ``source`` to ``destination``; done already if an earlier attempt got as far as the copy and only
    the source's removal failed."""
    if fs.exists(source):
        fs.mv(source, destination)


def discard_run(output_url: str, run_id: str, storage_options: dict[str, Any] | None = None) -> None:
    """Remove what a failed run staged (best effort): the published dataset is left as it was."""
    try:
        fs, root = url_to_fs(output_url, **(storage_options or {}))
        staging = _join(root.rstrip("/"), STAGING_FOLDER)
        _remove_tree(fs, _join(staging, run_id))
        if fs.exists(staging) and not fs.ls(staging):
            fs.rmdir(staging)
    except Exception:  # cleaning up must never hide the run's own error
        pass


def _remove_tree(fs, path: str) -> None:
    if fs.exists(path):
        fs.rm(path, recursive=True)


def read_manifest(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest of the dataset published at ``url``."""
    fs, root = url_to_fs(url, **(storage_options or {}))
    path = _join(root.rstrip("/"), MANIFEST_NAME)
    try:
        with fs.open(path, "rb") as handle:
            manifest = json.loads(handle.read())
    except FileNotFoundError:
        raise DatasetNotFoundError(f"no chunkline dataset at {url}: {MANIFEST_NAME} not found") from None
    if manifest.get("format") != DATASET_FORMAT:
        raise DatasetNotFoundError(f"{url}/{MANIFEST_NAME} is not a chunkline manifest")
    return manifest


def read_dataset(
    url: str,
    table: str = "chunks",
    *,
    columns: list[str] | None = None,
    as_pandas: bool = False,
    storage_options: dict[str, Any] | None = None,
):
    """One table of the dataset published at ``url``, read through its manifest.

    Returns a ``pyarrow.Table`` (or a pandas DataFrame with ``as_pandas=True``) holding exactly the parts
    the manifest names, so a rebuild in progress or a failed run's leftovers are never read."""
    if table not in TABLE_SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(TABLE_SCHEMAS)}")
    manifest = read_manifest(url, storage_options)
    fs, root = url_to_fs(url, **(storage_options or {}))
    schema = TABLE_SCHEMAS[table][0]
    parts = []
    for name in manifest["tables"][table]["files"]:
        with fs.open(_join(root.rstrip("/"), name), "rb") as handle:
            parts.append(pq.read_table(pa.BufferReader(handle.read()), columns=columns, schema=schema))
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
