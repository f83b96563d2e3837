"""Credentials for S3 and Azure, from each place users keep them, reach the store and never leave the
process: no object the runs write, no local file, log line, ``chunkline`` output or error message holds
them.

* S3: the standard environment variables, a profile in a shared credentials file, and the config's
  ``storage_options``. moto checks credentials and IAM policies in these tests, so a run that succeeds
  used the credentials under test, and a role that may not read one document or write one folder gives
  the error rows and error messages to search.
* Azure: a SAS token (a fresh signature, made for this test from the development account's key) in a
  connection string, given to ``chunkline run`` through ``CHUNKLINE_*_STORAGE_OPTIONS__CONNECTION_STRING``
  and to ``chunkline inspect`` through ``AZURE_STORAGE_CONNECTION_STRING``; then a read-only SAS for a
  run that must fail.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import parse_qs, quote

import pytest

from chunkline.dataset.publish import read_dataset

from .conftest import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    NOT_UTF8,
    S3_REGION,
    chunkline_cli,
    clean_environment,
    corpus_files,
    run,
)
from .test_permanent_failures import iam_checks, s3_user_with_policy

pytestmark = pytest.mark.timeout(300)

PRIVATE = "private/harbour-master.md"


def _forms(*secrets: str) -> set[bytes]:
    """Each secret as text and percent-encoded, as a request URL would carry it."""
    return {form.encode() for secret in secrets for form in (secret, quote(secret, safe=""))}


def _holding(forms: set[bytes], places: dict[str, bytes]) -> list[str]:
    return sorted(name for name, data in places.items() if any(form in data for form in forms))


def _local_files(root: Path, *, besides: tuple[Path, ...] = ()) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in root.rglob("*") if path.is_file() and path not in besides}


@pytest.mark.parametrize("source", ["environment", "profile", "storage_options"])
@pytest.mark.slow
def test_s3_credentials_reach_s3_and_are_never_written_or_logged(
    source, s3_bucket, moto_endpoint, tmp_path, monkeypatch, caplog
):
    files = {**corpus_files(), PRIVATE: b"# Harbour master\n\nThe night shift's radio codes.\n"}
    s3_bucket.upload_corpus(files)
    bucket = s3_bucket.container
    key, secret = s3_user_with_policy(
        moto_endpoint,
        [
            {"Effect": "Allow", "Action": "s3:*", "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
            {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/docs/private/*"},
            {"Effect": "Deny", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/locked/*"},
        ],
    )
    # Only the credentials under test: none from the machine's environment or ~/.aws.
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    options = {"endpoint_url": moto_endpoint, "client_kwargs": {"region_name": S3_REGION}}
    credentials_file = tmp_path / "aws" / "credentials"
    if source == "environment":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    elif source == "profile":
        credentials_file.parent.mkdir()
        credentials_file.write_text(f"[harbour-ci]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials_file))
        options["profile"] = "harbour-ci"
    else:
        options.update(key=key, secret=secret)

    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="chunkline")
    local_output = tmp_path / "dataset"
    with iam_checks():
        # From S3 to a local dataset, then from S3 to S3; the private document is an error row.
        run([s3_bucket.url("docs/**/*.md")], str(local_output), input_options=options)
        summary = run(
            [s3_bucket.url("docs/**/*.md")], s3_bucket.url("out/"), input_options=options, output_options=options
        )
        with pytest.raises(Exception) as refused:
            run(
                [s3_bucket.url("docs/**/*.md")], s3_bucket.url("locked/"), input_options=options, output_options=options
            )

    assert {row["doc_id"] for row in summary.errors} == {PRIVATE, NOT_UTF8}
    (denied,) = [row for row in summary.errors if row["doc_id"] == PRIVATE]
    assert denied["error_type"] == "PermissionError" and s3_bucket.url(f"docs/{PRIVATE}") in denied["message"]
    assert s3_bucket.url("locked/") in str(refused.value)
    assert (
        read_dataset(str(local_output)).num_rows
        == read_dataset(s3_bucket.url("out/"), storage_options=s3_bucket.storage_options).num_rows
    )

    forms = _forms(secret) if source != "storage_options" else _forms(secret, key)
    places = {
        **{
            f"s3://{bucket}/{name}": data
            for name, data in s3_bucket.objects().items()
            if name.startswith(("out/", "locked/"))
        },
        **_local_files(tmp_path, besides=(credentials_file,)),
        "log": caplog.text.encode(),
        "error message": str(refused.value).encode(),
        "error rows": repr(summary.errors).encode(),
    }
    assert len([name for name in places if name.startswith(f"s3://{bucket}/out/")]) >= 5
    assert not _holding(forms, places)


def _sas_connection_string(endpoint: str, permission: str) -> tuple[str, str]:
    """A connection string holding a new account SAS for the blob service; returns it and the SAS."""
    from azure.storage.blob import ResourceTypes, generate_account_sas

    now = datetime.now(timezone.utc)
    sas = generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=permission,
        expiry=now + timedelta(hours=1),
        # A start time of its own makes this signature unlike any other test's.
        start=now - timedelta(minutes=5, seconds=uuid.uuid4().int % 3600),
    )
    return f"BlobEndpoint={endpoint};SharedAccessSignature={sas}", sas


@pytest.mark.slow
def test_azure_sas_credentials_reach_azure_and_are_never_written_or_logged(
    azure_container, azurite_endpoint, tmp_path, caplog
):
    azure_container.upload_corpus(corpus_files())
    connection_string, sas = _sas_connection_string(azurite_endpoint, "rwdlac")
    signature = parse_qs(sas)["sig"][0]
    output = azure_container.url("out/")

    environment = clean_environment(
        CHUNKLINE_INPUT_STORAGE_OPTIONS__CONNECTION_STRING=connection_string,
        CHUNKLINE_OUTPUT_STORAGE_OPTIONS__CONNECTION_STRING=connection_string,
    )
    ran = chunkline_cli(["run", azure_container.url("docs/**/*.md"), "--output", output], environment, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr.decode()
    inspected = chunkline_cli(
        ["inspect", output, "--errors", "5"],
        clean_environment(AZURE_STORAGE_CONNECTION_STRING=connection_string),
        cwd=tmp_path,
    )
    assert inspected.returncode == 0, inspected.stderr.decode()
    assert NOT_UTF8 in inspected.stdout.decode()

    # A SAS that may read and list but not write: the run fails, and says where.
    read_only, read_only_sas = _sas_connection_string(azurite_endpoint, "rl")
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="chunkline")
    with pytest.raises(Exception) as refused:
        run(
            [azure_container.url("docs/**/*.md")],
            azure_container.url("read-only/"),
            input_options={"connection_string": read_only},
            output_options={"connection_string": read_only},
        )
    assert f"{azure_container.container}/read-only" in str(refused.value)

    forms = _forms(sas, signature, parse_qs(read_only_sas)["sig"][0], read_only_sas, AZURITE_KEY)
    blobs = azure_container.objects()
    places = {
        **{f"az://{azure_container.container}/{name}": data for name, data in blobs.items()},
        **_local_files(tmp_path),
        "run stdout": ran.stdout,
        "run stderr": ran.stderr,
        "inspect stdout": inspected.stdout,
        "inspect stderr": inspected.stderr,
        "log": caplog.text.encode(),
        "error message": str(refused.value).encode(),
    }
    assert len([name for name in blobs if name.startswith("out/")]) >= 5
    assert not _holding(forms, places)


# --------------------------------------------------------------------------------------------------
# What counts as a secret
# --------------------------------------------------------------------------------------------------

#: Storage options as s3fs, gcsfs and adlfs users write them, each credential value unique.
EVERY_KIND_OF_CREDENTIAL = {
    "input": {
        "key": "AKIAINPUTKEY00000001",
        "secret": "input-secret/with+base64=",
        "token": "input-session-token-4c1d",
        "client_kwargs": {"aws_secret_access_key": "nested-secret-9e2b", "region_name": "eu-west-1"},
    },
    "output": {
        "account_name": "harbourstorage",
        "account_key": "output-account-key-77f0==",
        "sas_token": "sv=2024-11-04&ss=b&sp=rwl&se=2031-01-01T00%3A00%3A00Z&sig=SaSsIg%2Bvalue%2F1%3D",
        "client_secret": "principal-secret-5b8a",
        "credential": "credential-string-3e6f",
        "connection_string": (
            "DefaultEndpointsProtocol=https;AccountName=harbourstorage;AccountKey=connkey/Zm9v+YmFy==;"
            "EndpointSuffix=core.windows.net"
        ),
    },
}


def test_every_credential_option_of_the_object_store_filesystems_is_a_secret():
    from chunkline.dataset.settings import RunConfig

    config = RunConfig.from_dict(
        {name: {"storage_options": options} for name, options in EVERY_KIND_OF_CREDENTIAL.items()}
    )
    secrets = set(config.secrets())
    for options in EVERY_KIND_OF_CREDENTIAL.values():
        for value in options.values():
            for text in value.values() if isinstance(value, dict) else [value]:
                assert text in secrets
    # The parts a message may carry alone: a connection string's key, a SAS signature decoded and encoded.
    assert {
        "connkey/Zm9v+YmFy==",
        "SaSsIg+value/1=",
        "SaSsIg%2Bvalue%2F1%3D",
        quote("output-account-key-77f0==", safe=""),
    } <= secrets
    public = repr(config.to_public_dict())
    assert not [secret for secret in secrets if secret in public and secret not in ("harbourstorage", "eu-west-1")]


def test_a_storage_error_that_repeats_the_request_url_does_not_reveal_the_sas_of_a_connection_string(caplog):
    """The Azure SDK sends a connection string's SAS as the query of every request URL, and aiohttp's
    response errors print the URL they requested."""
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    from chunkline.dataset.settings import RunConfig
    from chunkline.dataset.storage import StorageError, with_storage_retries

    sas = EVERY_KIND_OF_CREDENTIAL["output"]["sas_token"]
    connection_string = f"BlobEndpoint=https://harbourstorage.blob.core.windows.net;SharedAccessSignature={sas}"
    config = RunConfig.from_dict({"output": {"storage_options": {"connection_string": connection_string}}})
    url = URL(f"https://harbourstorage.blob.core.windows.net/chunks/out/_manifest.json?{sas}", encoded=True)
    request = aiohttp.RequestInfo(url, "PUT", CIMultiDictProxy(CIMultiDict()), url)

    def put():
        raise aiohttp.ClientResponseError(request, (), status=503, message="Server Busy")

    caplog.set_level(logging.WARNING, logger="chunkline")
    with pytest.raises(StorageError) as caught:
        with_storage_retries(
            put, "az://chunks/out/_manifest.json", "write", secrets=tuple(config.secrets()), sleep=lambda _: None
        )
    message = str(caught.value)
    assert "still failing after 5 attempts" in message and "503" in message and "chunks/out/_manifest.json" in message
    for text in (message, caplog.text):
        assert not _holding(_forms(sas, "SaSsIg+value/1=", "SaSsIg%2Bvalue%2F1%3D"), {"text": text.encode()}), text
