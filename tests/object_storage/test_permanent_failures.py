"""Permanent storage failures on S3 and Azure: access denied, wrong credentials, a bucket or container that
does not exist. Each ends the run at once (no retries: they cannot help) with an error that names the URL,
and leaves the previously published dataset exactly as it was.

moto checks credentials and IAM policies only when asked to (``iam_checks``); Azurite always checks the
account key's signature.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from chunkline.dataset.publish import MANIFEST_NAME, read_dataset

from .conftest import (
    S3_REGION,
    assert_only_published_objects,
    azurite_connection_string,
    comparable_rows,
    corpus_files,
    edited_corpus,
    published_manifest,
    run,
    s3_options,
    unique_name,
)

pytestmark = pytest.mark.timeout(300)

#: A permanent error fails the run in well under what five attempts with backoff would take.
QUICK_SECONDS = 15


@contextmanager
def iam_checks():
    """moto authenticates every request and applies IAM policies while this is open."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    previous = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0
    try:
        yield
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = previous


def s3_user_with_policy(endpoint: str, statements: list[dict]) -> tuple[str, str]:
    """A new IAM user with ``statements`` as its policy; returns its access key id and secret."""
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="store-admin",
        aws_secret_access_key="store-admin-secret",
        region_name=S3_REGION,
    )
    user = unique_name("user")
    iam.create_user(UserName=user)
    iam.put_user_policy(
        UserName=user,
        PolicyName="chunkline",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def _publish_first(store, local_rows):
    """The dataset every test here starts from: the corpus published at ``out/``; returns its manifest,
    every object under ``out/`` and the edited corpus (uploaded, so the failing run has news to publish)."""
    files = corpus_files()
    store.upload_corpus(files)
    options = store.storage_options
    run([store.url("docs/**/*.md")], store.url("out/"), input_options=options, output_options=options)
    assert comparable_rows(store.url("out/"), options) == local_rows(files)
    edited = edited_corpus(files)
    store.upload_corpus(edited)
    return published_manifest(store, "out"), store.objects("out/"), edited


def _fails_quickly_naming(location: str, caplog, attempt):
    """Run ``attempt()``: it raises quickly, naming ``location`` (adlfs spells an az:// URL abfs://),
    with no retry logged."""
    caplog.set_level(logging.WARNING, logger="chunkline")
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        attempt()
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert location in message, message
    assert elapsed < QUICK_SECONDS, f"a permanent error took {elapsed:.1f} s to end the run"
    assert "retrying in" not in caplog.text
    return message


@pytest.mark.slow
def test_s3_access_denied_at_the_commit_point_ends_the_run_and_the_previous_dataset_stays(
    s3_bucket, moto_endpoint, local_rows, caplog
):
    first, before, edited = _publish_first(s3_bucket, local_rows)
    bucket = s3_bucket.container
    # A role that may do everything in the bucket except replace the dataset's manifest.
    key, secret = s3_user_with_policy(
        moto_endpoint,
        [
            {"Effect": "Allow", "Action": "s3:*", "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
            {"Effect": "Deny", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/out/{MANIFEST_NAME}"},
        ],
    )
    role = s3_options(moto_endpoint, key, secret)
    with iam_checks():
        message = _fails_quickly_naming(
            s3_bucket.url(f"out/{MANIFEST_NAME}"),
            caplog,
            lambda: run(
                [s3_bucket.url("docs/**/*.md")], s3_bucket.url("out/"), input_options=role, output_options=role
            ),
        )
    assert "Access Denied" in message and secret not in message

    # Readers still get the first dataset, whole; the next run with the right role publishes the edits
    # and removes what the failed run left.
    assert published_manifest(s3_bucket, "out") == first
    assert {name: data for name, data in s3_bucket.objects("out/").items() if name in before} == before
    assert comparable_rows(s3_bucket.url("out/"), s3_bucket.storage_options) == local_rows(corpus_files())
    options = s3_bucket.storage_options
    run([s3_bucket.url("docs/**/*.md")], s3_bucket.url("out/"), input_options=options, output_options=options)
    assert comparable_rows(s3_bucket.url("out/"), options) == local_rows(edited)
    assert_only_published_objects(s3_bucket, "out", [first, published_manifest(s3_bucket, "out")])


def _one_document(folder: Path) -> Path:
    """An input holding one document: an empty one would fail the run before it reaches the output."""
    (folder / "docs").mkdir()
    (folder / "docs" / "tide.md").write_bytes(b"# Tide\n\nHigh water at 06:12.\n")
    return folder / "docs"


@pytest.mark.slow
def test_s3_credentials_that_are_not_valid_end_the_run_and_the_previous_dataset_stays(
    s3_bucket, moto_endpoint, local_rows, caplog, tmp_path
):
    first, before, _ = _publish_first(s3_bucket, local_rows)
    revoked = s3_options(moto_endpoint, "AKIAREVOKED000000000", f"revoked-{uuid.uuid4().hex}")
    with iam_checks():
        message = _fails_quickly_naming(
            s3_bucket.url("out"),
            caplog,
            lambda: run([str(_one_document(tmp_path))], s3_bucket.url("out/"), output_options=revoked),
        )
    assert revoked["secret"] not in message
    assert s3_bucket.objects("out/") == before
    assert (
        read_dataset(s3_bucket.url("out/"), storage_options=s3_bucket.storage_options).num_rows
        == first["tables"]["chunks"]["rows"]
    )


def test_s3_output_bucket_that_does_not_exist_ends_the_run_and_is_not_created(s3_bucket, caplog, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tide.md").write_bytes(b"# Tide\n\nHigh water at 06:12.\n")
    missing = unique_name("missing")
    _fails_quickly_naming(
        f"s3://{missing}/out",
        caplog,
        lambda: run([str(tmp_path / "docs")], f"s3://{missing}/out/", output_options=s3_bucket.storage_options),
    )
    buckets = {entry["Name"] for entry in s3_bucket.client().list_buckets()["Buckets"]}
    assert missing not in buckets, "the run created the mistyped output bucket"


@pytest.mark.slow
def test_azure_account_key_that_is_wrong_ends_the_run_and_the_previous_dataset_stays(
    azure_container, azurite_endpoint, local_rows, caplog, tmp_path
):
    first, before, _ = _publish_first(azure_container, local_rows)
    # A well-formed account key (64 bytes, base64) that is not the account's: every request is refused.
    wrong_key = base64.b64encode(f"rotated-{uuid.uuid4().hex}".encode().ljust(64, b"=")).decode()
    wrong = {"connection_string": azurite_connection_string(azurite_endpoint, wrong_key)}
    message = _fails_quickly_naming(
        f"{azure_container.container}/out",
        caplog,
        lambda: run([str(_one_document(tmp_path))], azure_container.url("out/"), output_options=wrong),
    )
    assert wrong_key not in message
    assert azure_container.objects("out/") == before
    assert published_manifest(azure_container, "out") == first


def test_azure_output_container_that_does_not_exist_ends_the_run_and_is_not_created(azure_container, caplog, tmp_path):
    from azure.storage.blob import BlobServiceClient

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tide.md").write_bytes(b"# Tide\n\nHigh water at 06:12.\n")
    missing = unique_name("missing")
    _fails_quickly_naming(
        f"{missing}/out",
        caplog,
        lambda: run([str(tmp_path / "docs")], f"az://{missing}/out/", output_options=azure_container.storage_options),
    )
    service = BlobServiceClient.from_connection_string(azure_container.connection_string)
    assert missing not in {container.name for container in service.list_containers()}, "the run created the container"
