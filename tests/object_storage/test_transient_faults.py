"""Transient faults on S3 and Azure: requests fail with the errors s3fs and adlfs raise once their own
retries are spent, and chunkline tries again until the run publishes the dataset a run without faults
publishes.

Faults are injected where each client hands its final error up: s3fs's request wrapper (``_error_wrapper``,
which every S3 call goes through after botocore's and s3fs's own retries) and azure-core's request pipeline
(``AsyncPipeline.run``, whose retry policy runs inside it). Each request kind fails the first time(s) it is
made for each object, with the errors taken in turn from a list of the real error types.

Also here: which errors of the real client libraries :func:`is_transient_storage_error` calls transient.
"""

from __future__ import annotations

import errno
import logging
import posixpath
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import aiohttp
import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from s3fs.errors import translate_boto_error

import chunkline.dataset.storage as files_module
from chunkline.dataset.publish import LOCK_NAME, MANIFEST_NAME
from chunkline.dataset.storage import is_transient_storage_error

from .conftest import AZURITE_ACCOUNT, NOT_UTF8, comparable_rows, corpus_files, published_manifest, run

pytestmark = pytest.mark.timeout(300)


# --------------------------------------------------------------------------------------------------
# The errors, as the client libraries raise them
# --------------------------------------------------------------------------------------------------


def s3_service_error(code: str, status: int, message: str) -> OSError:
    """What s3fs raises for an S3 error response: botocore's ClientError translated by s3fs."""
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return translate_boto_error(ClientError(response, "PutObject"))


class _ErrorResponse:
    """An Azure Storage error response (status, x-ms-error-code header and XML body), for azure-core to
    turn into the exception its storage clients raise."""

    def __init__(self, status: int, code: str, message: str):
        self.status_code, self.reason = status, message
        self.headers = {"x-ms-error-code": code, "Content-Type": "application/xml"}
        self.content_type = "application/xml"
        self._body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'.encode()
        self.request = None

    def body(self) -> bytes:
        return self._body

    def text(self, encoding: str | None = None) -> str:
        return self._body.decode()


def azure_http_error(status: int, code: str, message: str) -> HttpResponseError:
    return HttpResponseError(response=_ErrorResponse(status, code, message))


S3_TRANSIENT_ERRORS: dict[str, Callable[[], BaseException]] = {
    "SlowDown": lambda: s3_service_error("SlowDown", 503, "Please reduce your request rate."),
    "InternalError": lambda: s3_service_error(
        "InternalError", 500, "We encountered an internal error. Please try again."
    ),
    "EndpointConnectionError": lambda: EndpointConnectionError(endpoint_url="https://s3.eu-west-1.amazonaws.com"),
    "ReadTimeoutError": lambda: ReadTimeoutError(endpoint_url="https://s3.eu-west-1.amazonaws.com"),
    "ConnectionClosedError": lambda: ConnectionClosedError(endpoint_url="https://s3.eu-west-1.amazonaws.com"),
    "ServerDisconnectedError": lambda: aiohttp.ServerDisconnectedError(),
    "ClientPayloadError": lambda: aiohttp.ClientPayloadError("Response payload is not completed"),
    "ECONNRESET": lambda: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
}

AZURE_TRANSIENT_ERRORS: dict[str, Callable[[], BaseException]] = {
    "ServerBusy": lambda: azure_http_error(
        503, "ServerBusy", "The server is currently unable to receive requests. Please retry your request."
    ),
    "InternalError": lambda: azure_http_error(
        500, "InternalError", "The server encountered an internal error. Please retry the request."
    ),
    "OperationTimedOut": lambda: azure_http_error(
        500, "OperationTimedOut", "The operation could not be completed within the permitted time."
    ),
    "ServiceResponseError": lambda: ServiceResponseError("Connection reset by peer"),
    "ServiceRequestError": lambda: ServiceRequestError("Cannot connect to host 127.0.0.1:10000"),
}

S3_PERMANENT_ERRORS: dict[str, Callable[[], BaseException]] = {
    "AccessDenied": lambda: s3_service_error("AccessDenied", 403, "Access Denied"),
    "InvalidAccessKeyId": lambda: s3_service_error(
        "InvalidAccessKeyId", 403, "The AWS Access Key Id you provided does not exist in our records."
    ),
    "NoSuchBucket": lambda: s3_service_error("NoSuchBucket", 404, "The specified bucket does not exist"),
    "NoSuchKey": lambda: s3_service_error("NoSuchKey", 404, "The specified key does not exist."),
    "InvalidBucketName": lambda: s3_service_error("InvalidBucketName", 400, "The specified bucket is not valid."),
    "NoCredentialsError": lambda: NoCredentialsError(),
}

AZURE_PERMANENT_ERRORS: dict[str, Callable[[], BaseException]] = {
    "AuthenticationFailed": lambda: azure_http_error(
        403, "AuthenticationFailed", "Server failed to authenticate the request."
    ),
    "AuthorizationPermissionMismatch": lambda: azure_http_error(
        403,
        "AuthorizationPermissionMismatch",
        "This request is not authorized to perform this operation using this permission.",
    ),
    "ContainerNotFound": lambda: azure_http_error(404, "ContainerNotFound", "The specified container does not exist."),
    "BlobNotFound": lambda: azure_http_error(404, "BlobNotFound", "The specified blob does not exist."),
    "InvalidResourceName": lambda: azure_http_error(
        400, "InvalidResourceName", "The specifed resource name contains invalid characters."
    ),
}


def _raised_by_adlfs_upload(error: BaseException) -> BaseException:
    """What adlfs raises when uploading a block fails: a RuntimeError from the storage client's error."""
    try:
        raise RuntimeError(f"Failed to upload block: {error}!") from error
    except RuntimeError as raised:
        return raised


def _raised_by_the_azure_client(error: BaseException) -> BaseException:
    """The exception an Azure storage client raises for ``error`` coming out of its pipeline."""
    from azure.storage.blob._shared.response_handlers import process_storage_error

    if not isinstance(error, HttpResponseError):
        return error
    try:
        process_storage_error(error)
    except HttpResponseError as raised:
        return raised
    raise AssertionError("process_storage_error raised nothing")


@pytest.mark.parametrize(
    ("make", "transient"),
    [(make, True) for make in S3_TRANSIENT_ERRORS.values()]
    + [(make, False) for make in S3_PERMANENT_ERRORS.values()]
    + [(lambda make=make: _raised_by_the_azure_client(make()), True) for make in AZURE_TRANSIENT_ERRORS.values()]
    + [(lambda make=make: _raised_by_the_azure_client(make()), False) for make in AZURE_PERMANENT_ERRORS.values()]
    + [
        (lambda: _raised_by_adlfs_upload(_raised_by_the_azure_client(AZURE_TRANSIENT_ERRORS["ServerBusy"]())), True),
        (lambda: _raised_by_adlfs_upload(AZURE_TRANSIENT_ERRORS["ServiceResponseError"]()), True),
        (
            lambda: _raised_by_adlfs_upload(
                _raised_by_the_azure_client(AZURE_PERMANENT_ERRORS["AuthenticationFailed"]())
            ),
            False,
        ),
        (lambda: _raised_by_adlfs_upload(ValueError("block id is not valid base64")), False),
    ],
    ids=[f"s3-{name}" for name in S3_TRANSIENT_ERRORS]
    + [f"s3-{name}" for name in S3_PERMANENT_ERRORS]
    + [f"azure-{name}" for name in AZURE_TRANSIENT_ERRORS]
    + [f"azure-{name}" for name in AZURE_PERMANENT_ERRORS]
    + [
        "adlfs-upload-ServerBusy",
        "adlfs-upload-ServiceResponseError",
        "adlfs-upload-AuthenticationFailed",
        "adlfs-upload-ValueError",
    ],
)
def test_the_errors_s3fs_and_adlfs_raise_are_told_apart(make, transient):
    assert is_transient_storage_error(make()) is transient


# --------------------------------------------------------------------------------------------------
# Injecting them
# --------------------------------------------------------------------------------------------------


@dataclass
class Faults:
    """Which request kinds fail and how often per object; what failed, and every request seen."""

    fail_times: Mapping[str, int]
    """Request kind ("read", "write", "list", "head", "delete", "copy") -> failures before it succeeds."""
    errors: Mapping[str, Callable[[], BaseException]]
    only: Callable[[str, str], bool] = lambda kind, target: True
    """Which (kind, object name or listed prefix) may fail at all."""
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    requests: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def error_for(self, kind: str, target: str) -> BaseException | None:
        if not self.only(kind, target):
            return None
        with self._lock:
            self.requests[(kind, target)] += 1
            if self.requests[(kind, target)] > self.fail_times.get(kind, 0):
                return None
            name = list(self.errors)[len(self.failed) % len(self.errors)]
            self.failed.append((kind, target, name))
            return self.errors[name]()

    def failed_then_succeeded(self) -> bool:
        return all(self.requests[(kind, target)] > self.fail_times[kind] for kind, target, _ in self.failed)


_S3_KINDS = {
    "get_object": "read",
    "put_object": "write",
    "create_multipart_upload": "write",
    "upload_part": "write",
    "complete_multipart_upload": "write",
    "list_objects_v2": "list",
    "list_objects": "list",
    "head_object": "head",
    "head_bucket": "head",
    "delete_object": "delete",
    "delete_objects": "delete",
    "copy_object": "copy",
    "upload_part_copy": "copy",
}


@pytest.fixture
def s3_faults(monkeypatch, s3_bucket):
    """``s3_faults(fail_times)``: S3 requests to the test's bucket fail as :class:`Faults` says; retries
    wait milliseconds."""
    import s3fs.core

    monkeypatch.setattr(files_module, "STORAGE_RETRY_BASE_SECONDS", 0.001)
    # One attempt inside s3fs: an injected error is what s3fs raises once its own retries are spent (the
    # wrapper nests for reads, and the outer one would otherwise try again itself).
    monkeypatch.setattr(s3fs.core.S3FileSystem, "retries", 1)
    wrapped = s3fs.core._error_wrapper
    installed: list[Faults] = []

    async def failing_error_wrapper(func, *, args=(), kwargs=None, retries):
        arguments = kwargs or {}
        if installed and arguments.get("Bucket") == s3_bucket.container:
            kind = _S3_KINDS.get(func.__name__, func.__name__)
            objects = arguments.get("Delete", {}).get("Objects", [{}])
            target = arguments.get("Key") or arguments.get("Prefix") or objects[0].get("Key") or ""
            error = installed[0].error_for(kind, target)
            if error is not None:
                raise error
        return await wrapped(func, args=args, kwargs=kwargs, retries=retries)

    monkeypatch.setattr(s3fs.core, "_error_wrapper", failing_error_wrapper)

    def install(fail_times: Mapping[str, int], only=Faults.only) -> Faults:
        installed[:] = [Faults(fail_times, S3_TRANSIENT_ERRORS, only)]
        return installed[0]

    return install


def _azure_kind(method: str, query: Mapping[str, list[str]]) -> str:
    if method == "GET" and query.get("comp") == ["list"]:
        return "list"
    return {"GET": "read", "HEAD": "head", "PUT": "write", "DELETE": "delete"}.get(method, method.lower())


@pytest.fixture
def azure_faults(monkeypatch, azure_container):
    """``azure_faults(fail_times)``: requests to the test's container fail as :class:`Faults` says; retries
    wait milliseconds."""
    from azure.core.pipeline import AsyncPipeline

    monkeypatch.setattr(files_module, "STORAGE_RETRY_BASE_SECONDS", 0.001)
    run_request = AsyncPipeline.run
    installed: list[Faults] = []
    container_path = f"/{AZURITE_ACCOUNT}/{azure_container.container}"

    async def failing_run(self, request, **kwargs):
        url = urlsplit(request.url)
        path = unquote(url.path)
        if installed and (path == container_path or path.startswith(container_path + "/")):
            query = parse_qs(url.query)
            target = path[len(container_path) :].lstrip("/") or query.get("prefix", [""])[0]
            error = installed[0].error_for(_azure_kind(request.method, query), target)
            if error is not None:
                raise error
        return await run_request(self, request, **kwargs)

    monkeypatch.setattr(AsyncPipeline, "run", failing_run)

    def install(fail_times: Mapping[str, int], only=Faults.only) -> Faults:
        installed[:] = [Faults(fail_times, AZURE_TRANSIENT_ERRORS, only)]
        return installed[0]

    return install


def _part_names(manifest) -> dict[str, list[str]]:
    """Table -> the names of its part files (which carry a hash of their bytes)."""
    return {
        table: sorted(posixpath.basename(name) for name in entry["files"])
        for table, entry in manifest["tables"].items()
    }


def _run_with_and_without_faults(store, install, fail_times, caplog, only=Faults.only) -> Faults:
    """Publish the corpus at ``out-steady/`` without faults and at ``out/`` with them; check both
    datasets are the same, part file for part file, and every fault was retried. Returns the faults."""
    files = corpus_files()
    store.upload_corpus(files)
    options = store.storage_options
    source = store.url("docs/**/*.md")
    run([source], store.url("out-steady/"), input_options=options, output_options=options)

    faults = install(fail_times, only)
    caplog.set_level(logging.WARNING, logger="chunkline")
    summary = run([source], store.url("out/"), input_options=options, output_options=options)
    install({})

    assert [row["doc_id"] for row in summary.errors] == [NOT_UTF8], summary.errors
    assert (summary.documents_ok, summary.documents_error) == (len(files) - 1, 1)
    assert comparable_rows(store.url("out/"), options) == comparable_rows(store.url("out-steady/"), options)
    assert _part_names(published_manifest(store, "out")) == _part_names(published_manifest(store, "out-steady"))
    assert faults.failed, "no request failed"
    assert faults.failed_then_succeeded()
    assert caplog.text.count("retrying in") == len(faults.failed), "a fault was not retried by chunkline"
    return faults


def _not_the_lock(kind: str, target: str) -> bool:
    return posixpath.basename(target) != LOCK_NAME


# --------------------------------------------------------------------------------------------------
# Reads and writes of documents and of the dataset's files
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_s3_reads_and_writes_that_fail_are_retried_and_the_dataset_is_the_same(s3_bucket, s3_faults, caplog):
    faults = _run_with_and_without_faults(
        s3_bucket, s3_faults, {"read": 2, "write": 1, "copy": 1}, caplog, _not_the_lock
    )
    failed = {(kind, target) for kind, target, _ in faults.failed}
    # Every document (twice: two retries in a row), staged files, parts and the manifest failed.
    assert {("read", f"docs/{name}") for name, data in corpus_files().items() if data} <= failed
    assert any(kind == "write" and target.endswith(".parquet") for kind, target in failed)
    assert ("write", f"out/{MANIFEST_NAME}") in failed
    assert {name for _, _, name in faults.failed} == set(S3_TRANSIENT_ERRORS)
    assert "attempt 2 of 5, retrying" in caplog.text


@pytest.mark.slow
def test_azure_reads_and_writes_that_fail_are_retried_and_the_dataset_is_the_same(
    azure_container, azure_faults, caplog
):
    faults = _run_with_and_without_faults(azure_container, azure_faults, {"read": 2, "write": 1}, caplog, _not_the_lock)
    failed = {(kind, target) for kind, target, _ in faults.failed}
    assert {("read", f"docs/{name}") for name, data in corpus_files().items() if data} <= failed
    assert any(kind == "write" and target.endswith(".parquet") for kind, target in failed)
    assert ("write", f"out/{MANIFEST_NAME}") in failed
    # Among them the 503 and 500 responses Azure's SDK raises as a bare HttpResponseError, and uploads
    # that adlfs raises as a RuntimeError from the SDK's error.
    assert {name for _, _, name in faults.failed} == set(AZURE_TRANSIENT_ERRORS)


@pytest.mark.slow
def test_s3_listing_of_the_input_that_fails_is_retried_and_no_document_is_lost(s3_bucket, s3_faults, caplog):
    faults = _run_with_and_without_faults(
        s3_bucket, s3_faults, {"list": 2}, caplog, lambda kind, target: target.startswith("docs")
    )
    assert {kind for kind, _, _ in faults.failed} == {"list"}


# --------------------------------------------------------------------------------------------------
# Not retried yet: the output lock, and listings, lookups and deletes of the dataset's folders
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_s3_reads_and_writes_of_the_output_lock_that_fail_are_retried(s3_bucket, s3_faults, caplog):
    faults = _run_with_and_without_faults(
        s3_bucket,
        s3_faults,
        {"read": 1, "write": 1, "delete": 1},
        caplog,
        lambda kind, target: not _not_the_lock(kind, target),
    )
    assert {kind for kind, _, _ in faults.failed} >= {"read", "write"}


@pytest.mark.slow
def test_s3_listings_lookups_and_deletes_of_the_output_that_fail_are_retried(s3_bucket, s3_faults, caplog):
    faults = _run_with_and_without_faults(
        s3_bucket, s3_faults, {"list": 1, "head": 1, "delete": 1}, caplog, lambda kind, target: target.startswith("out")
    )
    assert {kind for kind, _, _ in faults.failed} == {"list", "head", "delete"}
