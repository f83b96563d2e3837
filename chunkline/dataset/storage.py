"""Writing dataset files so that no reader ever sees half of one, and getting past transient storage errors
(no Beam here)."""

from __future__ import annotations

import errno
import io
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.dataset.row_groups import row_bytes, row_group_ends

__all__ = [
    "StorageError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "fresh_filesystem",
    "link_file",
    "list_files",
    "make_parent_folder",
    "scrub_secrets",
    "storage_call",
    "is_transient_storage_error",
    "PART_ENCODING",
    "PLAIN_ENCODED_TABLES",
    "parquet_bytes",
    "parquet_writer_options",
    "read_file_bytes",
    "storage_url",
    "with_storage_retries",
    "write_file_atomically",
]

logger = logging.getLogger("chunkline")

T = TypeVar("T")

#: Attempts of one storage operation (the first one included) before its error is final.
STORAGE_ATTEMPTS = 5
#: Wait before the second attempt; it doubles before each further attempt ...
STORAGE_RETRY_BASE_SECONDS = 0.2
#: ... up to this many seconds.
STORAGE_RETRY_MAX_SECONDS = 5.0

# OSErrors that no second attempt can fix: the path, the permissions, the disk or the call are wrong.
_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    io.UnsupportedOperation,
)
_PERMANENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ENOENT",
        "EEXIST",
        "EACCES",
        "EPERM",
        "EISDIR",
        "ENOTDIR",
        "ENOSPC",
        "EDQUOT",
        "EROFS",
        "ENAMETOOLONG",
        "EINVAL",
    )
    if hasattr(errno, name)
)
# Transient errors of storage clients that are not OSErrors, matched by class name so that no optional
# package (botocore, aiohttp, requests, google-api-core, azure-core) is imported.
_TRANSIENT_CLASS_NAMES = frozenset(
    {
        "BadGateway",
        "ChunkedEncodingError",
        "ClientConnectionError",
        "ClientPayloadError",
        "ConnectTimeoutError",
        "ConnectionClosedError",
        "ConnectionError",
        "EndpointConnectionError",
        "FSTimeoutError",
        "GatewayTimeout",
        "IncompleteReadError",
        "InternalServerError",
        "ProtocolError",
        "ReadTimeoutError",
        "ResponseStreamingError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ServiceRequestError",
        "ServiceResponseError",
        "ServiceUnavailable",
        "Timeout",
        "TimeoutError",
        "TooManyRequests",
    }
)
# Error codes of an S3-style ``ClientError`` (``error.response["Error"]["Code"]``) that mean "try again".
_TRANSIENT_SERVICE_CODES = frozenset(
    {
        "InternalError",
        "RequestTimeout",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "500",
        "503",
    }
)
# HTTP statuses that mean "try again": timeout, throttling, server errors. Azure's SDK raises its 500 and
# 503 ("ServerBusy") as a plain HttpResponseError that only its status code tells apart from a 403 or 404.
_TRANSIENT_HTTP_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Protocols of object stores, whose filesystems (s3fs, gcsfs, adlfs) create a bucket or container for
# ``makedirs`` rather than a folder.
_OBJECT_STORE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


class StorageError(OSError):
    """A storage operation that failed for good: its error was still transient after
    :data:`STORAGE_ATTEMPTS` attempts, or (for the dataset's own reads and writes) was permanent."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """A dataset read or write that found no such object, bucket or container."""


class StoragePermissionError(StorageError, PermissionError):
    """A dataset read or write that the storage refused (credentials, policy)."""


def is_transient_storage_error(error: BaseException) -> bool:
    """Whether ``error`` is a storage failure that a later attempt may get past.

    Every OSError except a wrong path, missing permission or full/read-only disk (by class or errno), the
    connection and timeout errors of the common storage clients (by class name), S3-style throttling and
    server errors (by service error code), and any client's HTTP error whose status is a timeout, throttling
    or server error (Azure's ``status_code``, aiohttp's ``status``, gcsfs's and Google's ``code``). Any other
    error is judged by the error it was raised from: adlfs raises a failed upload or delete as a
    ``RuntimeError`` from the storage client's error."""
    return _is_transient(error, 0)


def _is_transient(error: BaseException, depth: int) -> bool:
    if isinstance(error, StorageError):
        return False  # retried already
    if isinstance(error, OSError):
        return not isinstance(error, _PERMANENT_OS_ERRORS) and error.errno not in _PERMANENT_ERRNOS
    if any(cls.__name__ in _TRANSIENT_CLASS_NAMES for cls in type(error).__mro__):
        return True
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = (response.get("Error") or {}).get("Code")
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return str(code) in _TRANSIENT_SERVICE_CODES or status in _TRANSIENT_HTTP_STATUSES
    if _http_status(error) in _TRANSIENT_HTTP_STATUSES:
        return True
    cause = error.__cause__
    return cause is not None and depth < 8 and _is_transient(cause, depth + 1)


def _http_status(error: BaseException) -> int | None:
    """The HTTP status a storage client's error carries, if any."""
    for holder in (error, getattr(error, "response", None)):
        for name in ("status_code", "status", "code"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def scrub_secrets(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every secret value replaced by ``***``."""
    for secret in secrets:
        if secret and secret in message:
            message = message.replace(secret, "***")
    return message


def with_storage_retries(
    operation: Callable[[], T],
    url: str,
    action: str,
    *,
    secrets: tuple[str, ...] = (),
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``operation()``, attempted again after a transient storage error with exponential backoff.

    At most :data:`STORAGE_ATTEMPTS` attempts, waiting :data:`STORAGE_RETRY_BASE_SECONDS` doubled at each
    retry and capped at :data:`STORAGE_RETRY_MAX_SECONDS`. A permanent error (see
    :func:`is_transient_storage_error`) is raised at once, unchanged. When every attempt failed, a
    :class:`StorageError` names ``action`` and ``url`` and the last error; ``secrets`` are replaced by
    ``***`` in it and in the logged warnings, and the original exception is not chained (its message may
    repeat a credential)."""
    for attempt in range(1, STORAGE_ATTEMPTS + 1):
        try:
            return operation()
        except Exception as error:
            if not is_transient_storage_error(error):
                raise
            reason = scrub_secrets(f"{type(error).__name__}: {error}", secrets)
            if attempt == STORAGE_ATTEMPTS:
                raise StorageError(
                    f"cannot {action} {scrub_secrets(url, secrets)}: "
                    f"still failing after {attempt} attempts; last error {reason}"
                ) from None
            delay = min(STORAGE_RETRY_BASE_SECONDS * 2 ** (attempt - 1), STORAGE_RETRY_MAX_SECONDS)
            logger.warning(
                "chunkline: cannot %s %s (%s); attempt %d of %d, retrying in %.1f s",
                action,
                scrub_secrets(url, secrets),
                reason,
                attempt,
                STORAGE_ATTEMPTS,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def storage_url(fs, path: str) -> str:
    """``path`` of ``fs`` as a URL, for messages."""
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # a filesystem that cannot say; the path is still useful
        return path


def fresh_filesystem(url: str, storage_options: Mapping[str, Any] | None = None):
    """``url_to_fs(url, **storage_options)``, with the filesystem's listing cache emptied.

    fsspec hands out one filesystem instance per process, thread and storage options, and s3fs keeps what it
    listed there: a later run in the same process would open an object changed since with the size and
    ETag of its old version, and s3fs fails that read (``FileExpired``) however often it is retried."""
    fs, path = url_to_fs(url, **dict(storage_options or {}))
    fs.invalidate_cache()
    return fs, path


def read_file_bytes(fs, path: str, *, secrets: tuple[str, ...] = ()) -> bytes:
    """The bytes of ``path``, read again after a transient storage error."""

    def read() -> bytes:
        with fs.open(path, "rb") as handle:
            return handle.read()

    return storage_call(read, storage_url(fs, path), "read", secrets)


def write_file_atomically(
    fs, path: str, data: bytes | Callable[[], Iterable[bytes]], *, secrets: tuple[str, ...] = ()
) -> None:
    """Write ``data`` to ``path`` so that no reader sees a partial file; a transient storage error is
    retried (see :func:`with_storage_retries`). ``data`` may be a function giving the bytes in pieces
    (called again for each attempt), so that a long file is never held whole.

    On a local disk the bytes go to a temporary name first and are renamed into place (a failed attempt's
    temporary file is removed); object stores make a single PUT visible all at once, and get no folders:
    there ``makedirs`` would create a missing bucket or container, so a mistyped URL fails instead."""
    parent = path.rsplit("/", 1)[0]
    local = isinstance(fs, LocalFileSystem) or "file" in _protocols(fs)
    object_store = not _OBJECT_STORE_PROTOCOLS.isdisjoint(_protocols(fs))

    def write_to(handle) -> None:
        if isinstance(data, bytes | bytearray | memoryview):
            handle.write(data)
        else:
            for piece in data():
                handle.write(piece)

    def write() -> None:
        if not object_store:
            fs.makedirs(parent, exist_ok=True)
        if not local:
            with fs.open(path, "wb") as handle:
                write_to(handle)
            return
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with fs.open(temporary, "wb") as handle:
                write_to(handle)
            fs.mv(temporary, path)
        except BaseException:
            try:
                if fs.exists(temporary):
                    fs.rm(temporary)
            except Exception:  # cleaning up must never hide the write's own error
                pass
            raise

    storage_call(write, storage_url(fs, path), "write", secrets)


def link_file(fs, source: str, destination: str) -> bool:
    """Give the local file ``source`` a second name, ``destination`` (a hard link: no bytes are copied),
    creating its folder; True when ``destination`` now names ``source``'s file.

    False, with no link made, when ``fs`` is not the local disk or the link cannot be made (another
    device, no hard links on this filesystem, too many links, or ``destination`` names another file): the
    caller writes the bytes instead. The link appears in one step, so no reader sees part of a file."""
    if not isinstance(fs, LocalFileSystem):
        return False
    parent = destination.rsplit("/", 1)[0]
    try:
        os.makedirs(parent, exist_ok=True)
        os.link(source, destination)
    except FileExistsError:  # a retried step linked it already
        try:
            return os.path.samefile(source, destination)
        except OSError:
            return False
    except OSError:  # EXDEV, EPERM, ENOTSUP, EMLINK ...; any other failure, the write reports
        return False
    return True


def storage_call(operation: Callable[[], T], url: str, action: str, secrets: tuple[str, ...] = ()) -> T:
    """:func:`with_storage_retries`, where a permanent error (a missing bucket, denied access) ends in a
    :class:`StorageError` that names the URL too: storage clients rarely say which object they refused,
    and the run that fails on it has to."""
    try:
        return with_storage_retries(operation, url, action, secrets=secrets)
    except StorageError:
        raise
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        message = f"cannot {action} {scrub_secrets(url, secrets)}: {type(error).__name__}: {scrub_secrets(first_line, secrets)}"
        # Still a FileNotFoundError or PermissionError where it was one, for callers that tell them apart.
        if isinstance(error, FileNotFoundError):
            raise StorageNotFoundError(message) from None
        if isinstance(error, PermissionError):
            raise StoragePermissionError(message) from None
        raise StorageError(message) from None


def list_files(fs, folder: str, secrets: tuple[str, ...] = ()) -> list[str]:
    """Every file below ``folder``, sorted (none if it does not exist), the listing retried."""
    try:
        return sorted(storage_call(lambda: fs.find(folder), storage_url(fs, folder), "list", secrets))
    except FileNotFoundError:
        return []


def make_parent_folder(fs, path: str, *, secrets: tuple[str, ...] = ()) -> None:
    """Create the folder ``path`` goes into, where folders exist: on object stores ``makedirs`` would create
    a bucket or container instead, and objects need no folder."""
    if _OBJECT_STORE_PROTOCOLS.isdisjoint(_protocols(fs)):
        parent = path.rsplit("/", 1)[0]
        storage_call(lambda: fs.makedirs(parent, exist_ok=True), storage_url(fs, parent), "create", secrets)


def _protocols(fs) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def read_parquet_bytes(data: bytes, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """The Parquet file ``data`` as a table of ``schema`` (or of its ``columns``); a nullable column the file
    lacks (it was written before the column was added) is all nulls.

    Read through ``ParquetFile`` rather than ``pq.read_table``, whose dataset machinery costs a tenth of a
    second on its first call in a process: a small incremental rebuild would pay it several times over."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns], metadata=schema.metadata)
    present = set(parquet.schema_arrow.names)
    missing = [field.name for field in schema if field.name not in present and field.nullable]
    if not missing:
        return parquet.read(columns=columns).cast(schema)
    # A part written before a nullable column was added: the column reads as nulls.
    table = parquet.read(columns=[name for name in schema.names if name in present])
    arrays = [
        table.column(field.name).cast(field.type) if field.name in present else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


#: The tables whose parts are written without dictionary encoding: one row per chunk or section, where nearly
#: every value of the ids, hashes, texts and offsets is its row's own, so a dictionary is built for nothing
#: and then given up (or kept, as large as the values). Without one their parts take less time to write and
#: are a little smaller; the other tables (a row per document, or a few columns) keep the writer's default.
PLAIN_ENCODED_TABLES = frozenset({"chunks", "changes/upserts", "sections", "changes/section_upserts"})

#: Which writer settings made the part files (beside the compression and row groups): a part written with
#: other ones holds the same rows in other bytes, so a run does not carry rows over from it (see
#: :func:`chunkline.dataset.rebuild.rebuild_fingerprint`).
PART_ENCODING = "plain-row-tables-1"


def parquet_writer_options(schema: pa.Schema) -> dict[str, Any]:
    """The Parquet writer's settings for a part of the table of ``schema`` (named by its ``chunkline.table``
    metadata), beside the compression and row groups: the same for a part written whole
    (:func:`parquet_bytes`) or one row group at a time (:class:`~chunkline.dataset.merge.PartWriter`)."""
    table = (schema.metadata or {}).get(b"chunkline.table", b"").decode()
    return {"use_dictionary": table not in PLAIN_ENCODED_TABLES, "write_statistics": True, "store_schema": True}


def parquet_bytes(table: pa.Table, row_group_rows: int, compression: str, row_group_bytes: int | None = None) -> bytes:
    """The Parquet encoding of ``table`` (deterministic for the same rows and library versions), in row groups
    of ``row_group_rows`` rows ended at ``row_group_bytes`` bytes of rows (see
    :mod:`chunkline.dataset.row_groups`)."""
    sink = io.BytesIO()
    ends = row_group_ends(
        row_bytes(table) if row_group_bytes is not None else np.zeros(table.num_rows, np.int64),
        row_group_rows,
        row_group_bytes,
    )
    if all(end == min((index + 1) * row_group_rows, table.num_rows) for index, end in enumerate(ends)):
        # Row groups of row_group_rows rows: the table is written at once.
        pq.write_table(
            table, sink, row_group_size=row_group_rows, compression=compression, **parquet_writer_options(table.schema)
        )
        return sink.getvalue()
    with pq.ParquetWriter(
        sink, table.schema, compression=compression, **parquet_writer_options(table.schema)
    ) as writer:
        for start, end in zip([0, *ends], ends):
            writer.write_table(table.slice(start, end - start).combine_chunks(), row_group_size=end - start)
    return sink.getvalue()
