"""Object storage for real: S3 served by moto and Azure Blob Storage served by Azurite, both started by
these tests on 127.0.0.1, plus the corpus, runs and listings the object-storage tests share.

* ``moto_endpoint`` (session): moto's S3 server, in a thread of the test process, on a free port.
* ``azurite_endpoint`` (session): Azurite's blob service (Node.js), on a free port. ``.ci/run`` installs it
  (:data:`AZURITE_INSTALL`); when it is missing the fixture fails and names that command.
* ``s3_bucket`` / ``azure_container``: a new bucket or container for each test, as a :class:`Store`.

chunkline reaches the stores through fsspec (s3fs, adlfs); the tests list, read and upload objects through
each storage's own SDK (boto3, azure-storage-blob), so what they see is what the store holds, with no
fsspec listing cache in between.

Test modules import the plain helpers with ``from .conftest import ...``; the fixtures are found by pytest.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from chunkline.dataset.publish import MANIFEST_NAME, SUCCESS_NAME, read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import RunSummary, run_pipeline

REPO = Path(__file__).resolve().parents[2]

AZURITE_VERSION = "3.37.0"
#: The setup step that installs Azurite; ``.ci/run`` and the README's test command run it.
AZURITE_INSTALL = f"npm install --no-audit --no-fund --prefix .ci/node azurite@{AZURITE_VERSION}"
AZURITE_BLOB = REPO / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's development account and its published key (the same in every Azurite installation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

S3_REGION = "us-east-1"

# --------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------

SAMPLE_CORPUS = REPO / "sample_corpus"

#: Documents added to the sample corpus: an object key with a space and non-ASCII letters, a file that is
#: not UTF-8 (an error row), and an empty file.
EXTRA_DOCUMENTS: dict[str, bytes] = {
    "notes/harbour café menu.md": (
        "# Harbour café menu\n\n## Breakfast\n\nKaffee, pain au chocolat and a view of berth 3 at high tide 🌊.\n"
        "\n## Lunch\n\nFish soup (Fischsuppe), served from 11:30 while the tide gauge reads under 420 cm.\n"
    ).encode(),
    "drafts/scanned-fax.md": b"# Fax from the port authority\n\nTide table for M\xe4rz, scanned at 200 dpi.\n",
    "guide/empty.md": b"",
}


#: The document of the corpus that is not UTF-8: the one error row of every run.
NOT_UTF8 = "drafts/scanned-fax.md"


def corpus_files() -> dict[str, bytes]:
    """doc_id -> bytes: the repository's sample corpus (its markdown files) and :data:`EXTRA_DOCUMENTS`."""
    files = {
        path.relative_to(SAMPLE_CORPUS).as_posix(): path.read_bytes()
        for path in sorted(SAMPLE_CORPUS.rglob("*.md"))
        if path.is_file()
    }
    assert len(files) >= 10, f"the sample corpus went missing from {SAMPLE_CORPUS}"
    return {**files, **EXTRA_DOCUMENTS}


def edited_corpus(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The corpus after a day of edits: one document grows a section, one is deleted, one is added."""
    edited = dict(files)
    edited["README.md"] = files["README.md"] + b"\n## Support\n\nCall the harbourmaster's office on VHF channel 14.\n"
    del edited["operations/windows-install.md"]
    edited["guide/faq.md"] = b"# FAQ\n\n## Why is the tide reading late?\n\nThe gauge reports once a minute.\n"
    return edited


def write_local(root: Path, files: Mapping[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


# --------------------------------------------------------------------------------------------------
# The stores
# --------------------------------------------------------------------------------------------------


@dataclass
class Store:
    """One bucket or container: how chunkline reaches it (``protocol``, ``storage_options``, or the
    ``environment`` a separate process needs) and how the tests list, read and change its objects."""

    protocol: str
    container: str
    storage_options: dict[str, Any]
    environment: dict[str, str] = field(default_factory=dict)

    def url(self, path: str = "", protocol: str | None = None) -> str:
        return f"{protocol or self.protocol}://{self.container}/{path}"

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        """Every object whose name starts with ``prefix``: name (relative to the container) -> bytes."""
        raise NotImplementedError

    def put(self, files: Mapping[str, bytes], prefix: str) -> None:
        raise NotImplementedError

    def delete(self, names: Iterable[str]) -> None:
        raise NotImplementedError

    def upload_corpus(self, files: Mapping[str, bytes], prefix: str = "docs") -> None:
        """Make ``prefix/`` hold exactly ``files``: upload them and delete any other object there."""
        stale = set(self.objects(f"{prefix}/")) - {f"{prefix}/{name}" for name in files}
        self.put(files, prefix)
        self.delete(stale)


@dataclass
class S3Store(Store):
    endpoint: str = ""

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="store-admin",
            aws_secret_access_key="store-admin-secret",
            region_name=S3_REGION,
        )

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        client = self.client()
        found = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.container, Prefix=prefix):
            for entry in page.get("Contents", []):
                found[entry["Key"]] = client.get_object(Bucket=self.container, Key=entry["Key"])["Body"].read()
        return found

    def put(self, files: Mapping[str, bytes], prefix: str) -> None:
        client = self.client()
        for name, data in files.items():
            client.put_object(Bucket=self.container, Key=f"{prefix}/{name}", Body=data)

    def delete(self, names: Iterable[str]) -> None:
        client = self.client()
        for name in names:
            client.delete_object(Bucket=self.container, Key=name)


@dataclass
class AzureStore(Store):
    connection_string: str = ""

    def client(self):
        from azure.storage.blob import ContainerClient

        return ContainerClient.from_connection_string(self.connection_string, self.container)

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        client = self.client()
        return {
            blob.name: client.download_blob(blob.name).readall()
            for blob in client.list_blobs(name_starts_with=prefix or None)
        }

    def put(self, files: Mapping[str, bytes], prefix: str) -> None:
        client = self.client()
        for name, data in files.items():
            client.upload_blob(f"{prefix}/{name}", data, overwrite=True)

    def delete(self, names: Iterable[str]) -> None:
        client = self.client()
        for name in names:
            client.delete_blob(name)


def unique_name(kind: str) -> str:
    """A bucket or container name no other test uses (lowercase letters, digits and dashes)."""
    return f"chunkline-{kind}-{uuid.uuid4().hex[:12]}"


def s3_options(endpoint: str, key: str, secret: str) -> dict[str, Any]:
    """s3fs storage options for the moto server."""
    return {"key": key, "secret": secret, "endpoint_url": endpoint, "client_kwargs": {"region_name": S3_REGION}}


def azurite_connection_string(endpoint: str, key: str = AZURITE_KEY) -> str:
    return f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};"


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's S3 server on 127.0.0.1 (any credentials are accepted unless a test turns IAM checks on)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(moto_endpoint) -> S3Store:
    """A new, empty bucket, with storage options carrying this test's own access key."""
    name = unique_name("s3")
    key, secret = f"AKIA{uuid.uuid4().hex[:16].upper()}", f"s3-secret-{uuid.uuid4().hex}"
    store = S3Store(
        protocol="s3",
        container=name,
        storage_options=s3_options(moto_endpoint, key, secret),
        environment={
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_ENDPOINT_URL_S3": moto_endpoint,
            "AWS_DEFAULT_REGION": S3_REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        endpoint=moto_endpoint,
    )
    store.client().create_bucket(Bucket=name)
    return store


def _azurite_port(log: Path) -> int | None:
    match = re.search(r"listens on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
    return int(match.group(1)) if match else None


@pytest.fixture(scope="session")
def azurite_endpoint(tmp_path_factory):
    """Azurite's blob service on 127.0.0.1, stopped at the end of the session."""
    if not AZURITE_BLOB.exists():
        pytest.fail(
            f"Azurite (the Azure Storage emulator) is not installed at {AZURITE_BLOB}. Install it from the "
            f"repository root with `{AZURITE_INSTALL}` (.ci/run and the README's test command do).",
            pytrace=False,
        )
    if shutil.which("node") is None:
        pytest.fail("Azurite needs Node.js: `node` is not on PATH.", pytrace=False)
    folder = tmp_path_factory.mktemp("azurite")
    log = folder / "azurite.log"
    with open(log, "wb") as output:
        # Port 0: Azurite takes a free port and prints it, so no other process can take it in between.
        process = subprocess.Popen(
            [
                str(AZURITE_BLOB),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                "0",
                "--location",
                str(folder / "data"),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None:
            if process.poll() is not None:
                pytest.fail(f"Azurite exited with status {process.returncode}:\n{log.read_text()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"Azurite did not start within 60 s:\n{log.read_text()}", pytrace=False)
            time.sleep(0.05)
            port = _azurite_port(log)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"Azurite's port {port} does not answer:\n{log.read_text()}", pytrace=False)
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    finally:
        # Azurite waits for idle keep-alive connections before it exits on SIGTERM; its data is scratch.
        process.terminate()
        try:
            process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def azure_container(azurite_endpoint) -> AzureStore:
    """A new, empty container, reached with the development account's connection string."""
    connection_string = azurite_connection_string(azurite_endpoint)
    store = AzureStore(
        protocol="az",
        container=unique_name("az"),
        storage_options={"connection_string": connection_string},
        environment={"AZURE_STORAGE_CONNECTION_STRING": connection_string},
        connection_string=connection_string,
    )
    store.client().create_container()
    return store


# --------------------------------------------------------------------------------------------------
# Running chunkline
# --------------------------------------------------------------------------------------------------


def run(
    inputs: Iterable[str],
    output: str,
    *,
    input_options: Mapping[str, Any] | None = None,
    output_options: Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> RunSummary:
    """Run the pipeline in-process as ``chunkline run --config FILE`` does, with storage options in the
    config file's ``input`` and ``output`` sections and only ``environ`` as the environment."""
    settings: dict[str, Any] = {}
    if input_options:
        settings["input"] = {"storage_options": dict(input_options)}
    if output_options:
        settings["output"] = {"storage_options": dict(output_options)}
    with tempfile.TemporaryDirectory() as folder:
        config_file = Path(folder) / "chunkline.yaml"
        config_file.write_text(yaml.safe_dump(settings))
        config = load_run_config(
            config_file, list(overrides), environ=dict(environ or {}), inputs=list(inputs), output=output
        )
    return run_pipeline(config)


#: Environment variables that would point a storage client somewhere else than the test's store.
_STORAGE_VARIABLES = re.compile(r"^(AWS_|AZURE_|GOOGLE_|GCLOUD_|CHUNKLINE_)")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any storage credentials or chunkline settings, plus ``extra``."""
    environment = {name: value for name, value in os.environ.items() if not _STORAGE_VARIABLES.match(name)}
    return {**environment, "PYTHONUNBUFFERED": "1", **extra}


def chunkline_cli(arguments: list[str], environment: Mapping[str, str], cwd: Path, timeout: float = 180):
    """``chunkline ARGUMENTS`` in a separate process; returns the completed process (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "chunkline.pipelines.cli", *arguments],
        env=dict(environment),
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# --------------------------------------------------------------------------------------------------
# Reading datasets back
# --------------------------------------------------------------------------------------------------

#: Columns that name where a document was read (and when it changed there), which differ between a
#: local run and a run on a store by design.
LOCATION_COLUMNS = {
    "chunks": ("source_uri",),
    "documents": ("source_uri", "modified_time", "source_mtime_ns", "source_etag", "source_version"),
    "errors": ("source_uri",),
}
_SORT_KEYS = {"chunks": ("chunk_id",), "documents": ("doc_id",), "errors": ("doc_id", "stage", "error_type", "message")}


def comparable_rows(url: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The rows of each table of the dataset at ``url``, without the location columns, in key order."""
    tables = {}
    for table, location in LOCATION_COLUMNS.items():
        rows = (
            read_dataset(url, table, storage_options=dict(storage_options or {}))
            .drop_columns(list(location))
            .to_pylist()
        )
        keys = _SORT_KEYS[table]
        tables[table] = sorted(rows, key=lambda row: tuple(str(row[key]) for key in keys))
    return tables


@pytest.fixture(scope="session")
def local_rows(tmp_path_factory):
    """``local_rows(files)``: the comparable rows of a local run on ``files`` with the same ``**/*.md``
    glob the store runs use (computed once per corpus)."""
    cache: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def rows_for(files: Mapping[str, bytes]) -> dict[str, list[dict[str, Any]]]:
        key = json.dumps({name: data.hex() for name, data in sorted(files.items())})
        if key not in cache:
            base = tmp_path_factory.mktemp("local")
            write_local(base / "docs", files)
            run([f"{base}/docs/**/*.md"], str(base / "dataset"))
            cache[key] = comparable_rows(str(base / "dataset"))
        return cache[key]

    return rows_for


def part_names(manifest: Mapping[str, Any], prefix: str) -> set[str]:
    """Object names (relative to the container) of every part file ``manifest`` names, under ``prefix``."""
    return {posixpath.join(prefix, name) for entry in manifest["tables"].values() for name in entry["files"]}


def assert_only_published_objects(store: Store, prefix: str, manifests: list[Mapping[str, Any]]) -> None:
    """The output holds the latest manifest's parts, and nothing else but manifests, ``_SUCCESS`` and the
    parts of the earlier manifests that the output may keep as snapshots: no staging, spill, lock or
    orphaned part object."""
    objects = store.objects(f"{prefix}/")
    latest = manifests[-1]
    assert json.loads(objects[f"{prefix}/{MANIFEST_NAME}"]) == latest
    missing = part_names(latest, prefix) - set(objects)
    assert not missing, f"parts the published manifest names are missing: {sorted(missing)}"
    named = set().union(*(part_names(manifest, prefix) for manifest in manifests))
    leftovers = sorted(
        name for name in objects if name not in named and posixpath.basename(name) not in (MANIFEST_NAME, SUCCESS_NAME)
    )
    assert not leftovers, f"objects no published manifest names: {leftovers}"


def published_manifest(store: Store, prefix: str) -> dict[str, Any]:
    return read_manifest(store.url(prefix), store.storage_options)
