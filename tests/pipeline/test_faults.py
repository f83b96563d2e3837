"""Faults during a run: a failing strategy, an exception escaping a DoFn, storage that fails once or for
good, and a retried bundle that staged its rows twice.

Elsewhere:

* a file that vanishes between matching and reading: ``test_bad_input.py`` (``drafts/vanishing.md`` in the
  ``bad`` fixture, and ``test_read_step_reports_a_vanished_file_without_raising``);
* a run killed with SIGKILL, during the pipeline and during publishing: ``test_killed_run.py``;
* the manifest write failing after the parts were moved: ``test_publishing.py``
  (``test_failure_before_the_manifest_is_written_keeps_the_old_dataset_for_readers``).
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import re
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

import chunkline.dataset.in_process as in_process_module
import chunkline.dataset.storage as files_module
import chunkline.pipelines.run as run_module
import chunkline.registry as registry_module
import chunkline.transforms.chunk as chunk_module
import chunkline.transforms.read as read_module
import chunkline.transforms.write as write_module
from chunkline.dataset.document_rows import DocumentChunker
from chunkline.dataset.file_reader import MatchedFileReader
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.sink import SpillRows
from chunkline.dataset.storage import StorageError, is_transient_storage_error, with_storage_retries
from chunkline.schemas import ROW_TABLES
from chunkline.strategies.headings import HeadingsParams
from chunkline.transforms.write import WriteSettings

from .conftest import (
    CORPUS,
    all_file_digests,
    assert_document_chunks,
    documents,
    manifest,
    rows,
    rows_by_doc,
    run,
    table_digests,
    write_corpus,
    write_files,
)

pytestmark = pytest.mark.timeout(300)

TABLES = ROW_TABLES


def _edit_corpus(root: Path) -> None:
    with open(root / "README.md", "ab") as handle:
        handle.write(b"\n## Support\n\nAsk in #harbour-telemetry on the port's chat.\n")
    write_files(root, {"guide/faq.md": b"# FAQ\n\n## Why is the tide late?\n\nThe gauge reports every minute.\n"})


def _published_files(output: Path) -> dict[str, str]:
    return {name: digest for name, digest in all_file_digests(output).items() if not name.startswith("_staging/")}


# --------------------------------------------------------------------------------------------------
# An exception inside the chunker is an error row, by design
# --------------------------------------------------------------------------------------------------


class SpanBookkeepingError(Exception):
    """Not a ValueError: an unexpected bug in a user's strategy."""


def test_a_strategy_that_raises_on_the_third_document_gives_one_error_row_and_the_run_goes_on(tmp_path, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    headings = registry_module.get_strategy("headings")
    lock = threading.Lock()
    seen: list[str] = []

    def fails_on_the_third_document(document, config, counter):
        with lock:
            seen.append(document.text)
            number = len(seen)
        if number == 3:
            raise SpanBookkeepingError("span list ran past the end of the document")
        return headings.chunk(document, config, counter)

    name = "test-fails-on-third-document"
    strategy = registry_module.Strategy(
        name, HeadingsParams, fails_on_the_third_document, "fails once", merges_fragments=True
    )
    monkeypatch.setitem(registry_module._registry, name, strategy)

    summary = run([root], tmp_path / "out", f"chunking.strategy={name}")
    assert len(seen) == len(CORPUS)
    texts = {data.decode("utf-8"): doc_id for doc_id, data in CORPUS.items()}
    failed = texts[seen[2]]
    (error,) = rows(tmp_path / "out", "errors")
    assert (error["doc_id"], error["stage"], error["error_type"]) == (failed, "chunk", "SpanBookkeepingError")
    assert error["message"] == "span list ran past the end of the document"
    docs = documents(tmp_path / "out")
    assert set(docs) == set(CORPUS)
    assert docs[failed]["status"] == "error" and docs[failed]["chunk_count"] == 0
    assert summary.documents_ok == len(CORPUS) - 1 and summary.documents_error == 1

    # Every other document is chunked exactly as the headings strategy chunks it.
    run([root], tmp_path / "headings")
    expected = rows_by_doc(tmp_path / "headings", "chunks")
    found = rows_by_doc(tmp_path / "out", "chunks")
    assert failed not in found
    assert set(found) == set(expected) - {failed}
    for doc_id, group in found.items():
        assert_document_chunks(group, CORPUS[doc_id])
        assert [{**row, "strategy": "headings"} for row in group] == expected[doc_id]


# --------------------------------------------------------------------------------------------------
# An exception that escapes a DoFn fails the run, and nothing is published
# --------------------------------------------------------------------------------------------------


class WorkerCrash(RuntimeError):
    pass


@pytest.mark.parametrize(
    "dofn, beam_args",
    [
        (read_module._ReadFileFn, ["--runner", "FnApiRunner"]),
        (chunk_module._ChunkDocumentsFn, ["--runner", "FnApiRunner"]),
        (write_module._SpillRowsFn, ["--runner", "FnApiRunner"]),
        # The same steps called without a runner (a run in this process with no Beam argument).
        (MatchedFileReader, None),
        (DocumentChunker, None),
        (SpillRows, None),
    ],
    ids=["read", "chunk", "spill", "read-without-runner", "chunk-without-runner", "spill-without-runner"],
)
@pytest.mark.slow
def test_an_exception_escaping_a_dofn_on_the_nth_element_fails_the_run_and_publishes_nothing(
    tmp_path, monkeypatch, dofn, beam_args
):
    root = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([root], output)
    before = all_file_digests(output)
    manifest_before = (output / "_manifest.json").read_bytes()
    _edit_corpus(root)

    original = dofn.process
    calls = []

    def crashes_on_the_fourth_element(self, element):
        calls.append(element)
        if len(calls) == 4:
            raise WorkerCrash(f"{dofn.__name__} lost its worker on element 4")
        yield from original(self, element)

    with monkeypatch.context() as patch:
        # One document per element (runs chunk documents in batches), so that the step sees a fourth element.
        batches_of = in_process_module.batches_of
        patch.setattr(run_module, "BATCH_DOCUMENTS", 1)
        patch.setattr(in_process_module, "batches_of", lambda sources: batches_of(sources, documents=1))
        patch.setattr(dofn, "process", crashes_on_the_fourth_element)
        with pytest.raises(Exception, match="lost its worker on element 4"):
            # Every document, not just the two edited ones.
            run([root], output, "run.reindex=true", beam_args=beam_args)
    assert len(calls) == 4, "the run went on after the exception"

    assert all_file_digests(output) == before, "a failed run changed the published dataset"
    assert (output / "_manifest.json").read_bytes() == manifest_before
    assert not (output / "_staging").exists(), "a failed run left its staging folder"

    run([root], output)
    run([root], tmp_path / "uninterrupted")
    assert table_digests(output, TABLES) == table_digests(tmp_path / "uninterrupted", TABLES)
    assert "guide/faq.md" in documents(output)
    assert not (output / "_staging").exists()


# --------------------------------------------------------------------------------------------------
# Storage that fails: retried when transient, a clear error when not
# --------------------------------------------------------------------------------------------------

_TEMPORARY_SUFFIX = re.compile(r"\.tmp-[0-9a-f]{32}$")


class FlakyFileSystem(LocalFileSystem):
    """A local disk behind a storage that fails.

    ``mode`` "once": the first write of each file fails halfway (EIO, a partial file left behind), and so
    does the first read of each staged file and, with ``flaky_inputs``, of each input file (ECONNRESET).
    "always": every write fails, with a message that repeats the ``token`` storage option like a careless
    storage client. "off": a plain local disk."""

    protocol = "flaky"
    root_marker = "/"
    mode = "off"
    flaky_inputs = False
    failed_writes: list[str] = []
    failed_reads: list[str] = []

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        path = self._strip_protocol(path)
        key = _TEMPORARY_SUFFIX.sub("", path)  # an atomic write's temporary file stands for its target
        cls = type(self)
        if "w" in mode and cls.mode == "always":
            cls.failed_writes.append(key)
            token = self.storage_options.get("token", "")
            raise OSError(errno.EIO, f"Input/output error writing {path} with token {token}")
        if "w" in mode and cls.mode == "once" and key not in cls.failed_writes:
            cls.failed_writes.append(key)
            with super()._open(path, mode, **kwargs) as handle:
                handle.write(b"PAR1 half a file")
            raise OSError(errno.EIO, f"Input/output error writing {path}")
        reads_fail = "/_staging/" in path or "/snapshots/" in path or cls.flaky_inputs
        if "r" in mode and cls.mode == "once" and reads_fail and key not in cls.failed_reads:
            cls.failed_reads.append(key)
            raise ConnectionResetError(errno.ECONNRESET, f"Connection reset by peer reading {path}")
        return super()._open(path, mode, block_size=block_size, **kwargs)


@pytest.fixture
def flaky(monkeypatch):
    """The ``flaky://`` protocol, and retries that wait milliseconds instead of seconds."""
    registry = __import__("fsspec.registry", fromlist=["_registry"])._registry
    monkeypatch.setitem(registry, "flaky", FlakyFileSystem)
    monkeypatch.setattr(FlakyFileSystem, "mode", "off")
    monkeypatch.setattr(FlakyFileSystem, "flaky_inputs", False)
    monkeypatch.setattr(FlakyFileSystem, "failed_writes", [])
    monkeypatch.setattr(FlakyFileSystem, "failed_reads", [])
    monkeypatch.setattr(files_module, "STORAGE_RETRY_BASE_SECONDS", 0.001)
    FlakyFileSystem.clear_instance_cache()
    yield FlakyFileSystem
    FlakyFileSystem.clear_instance_cache()


@pytest.mark.slow
def test_storage_writes_and_reads_that_fail_once_are_retried_and_the_dataset_is_the_same(tmp_path, flaky, caplog):
    root = write_corpus(tmp_path / "corpus")
    run([root], tmp_path / "local")
    flaky.mode = "once"
    caplog.set_level(logging.WARNING, logger="chunkline")
    summary = run([root], f"flaky://{tmp_path}/flaky")

    output = tmp_path / "flaky"
    assert table_digests(output, TABLES) == table_digests(tmp_path / "local", TABLES)
    assert summary.documents_ok == len(CORPUS) and summary.errors == []
    # Every kind of file failed once: spill files, the snapshot's parts and manifest, the root manifest and
    # _SUCCESS.
    failed = [path.removeprefix(f"{output}/") for path in flaky.failed_writes]
    assert any(name.startswith("_staging/") and name.endswith(".arrow") for name in failed), failed
    assert any(name.startswith("snapshots/") and name.endswith(".parquet") for name in failed), failed
    assert any(name.startswith("snapshots/") and name.endswith("/_manifest.json") for name in failed), failed
    assert {"_manifest.json", "_SUCCESS"} <= set(failed)
    assert len(failed) == len(set(failed))
    assert any(path.endswith(".arrow") for path in flaky.failed_reads)
    assert any(path.endswith(".parquet") for path in flaky.failed_reads)
    # Each retry was logged; no half-written file or temporary file is left.
    assert "attempt 1 of 5, retrying" in caplog.text and "flaky://" in caplog.text
    assert not [path for path in output.rglob("*") if ".tmp-" in path.name]
    assert not (output / "_staging").exists()
    for table in TABLES:
        for name in manifest(output)["tables"][table]["files"]:
            assert pq.ParquetFile(output / name).metadata.num_rows >= 0
    published, local = manifest(output), manifest(tmp_path / "local")
    assert published["counts"] == local["counts"]
    for table in TABLES:
        assert published["tables"][table]["rows"] == local["tables"][table]["rows"]
        assert [name.rsplit("/", 1)[1] for name in published["tables"][table]["files"]] == [
            name.rsplit("/", 1)[1] for name in local["tables"][table]["files"]
        ]


def test_input_reads_that_fail_once_are_retried_and_no_document_is_lost(tmp_path, flaky):
    root = write_corpus(tmp_path / "corpus")
    run([f"flaky://{root}"], tmp_path / "steady")
    flaky.mode, flaky.flaky_inputs = "once", True
    summary = run([f"flaky://{root}"], tmp_path / "retried")
    assert {path.removeprefix(f"{root}/") for path in flaky.failed_reads} == set(CORPUS)
    assert summary.errors == [] and summary.documents_ok == len(CORPUS)
    assert table_digests(tmp_path / "retried", TABLES) == table_digests(tmp_path / "steady", TABLES)


SECRET_TOKEN = "tok-9c0ffee-secret-51a7"


def test_storage_that_keeps_failing_ends_the_run_with_an_error_naming_the_url(tmp_path, flaky, caplog, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    url = f"flaky://{tmp_path}/dataset"
    run([root], url, f"output.storage_options.token={SECRET_TOKEN}")
    output = tmp_path / "dataset"
    before = all_file_digests(output)
    _edit_corpus(root)

    flaky.mode = "always"
    caplog.set_level(logging.WARNING, logger="chunkline")
    with pytest.raises(Exception) as caught:
        run([root], url, f"output.storage_options.token={SECRET_TOKEN}")
    message = str(caught.value)
    match = re.search(r"cannot write (flaky://\S+): still failing after 5 attempts; last error OSError: ", message)
    assert match, message
    assert match.group(1).startswith(f"flaky://{tmp_path}/dataset/_staging/")
    assert "token ***" in message
    # Five attempts of the first write, then the run stopped.
    assert len(flaky.failed_writes) == 5 and len(set(flaky.failed_writes)) == 1
    assert caplog.text.count("retrying in") == 4
    for text in (message, caplog.text):
        assert SECRET_TOKEN not in text
    # Nothing half-published: the previous dataset, byte for byte, and no staging folder.
    assert all_file_digests(output) == before
    assert not (output / "_staging").exists()


def test_a_permanent_storage_error_is_not_retried():
    attempts = []

    def denied():
        attempts.append(1)
        raise PermissionError(errno.EACCES, "Access Denied")

    with pytest.raises(PermissionError, match="Access Denied"):
        with_storage_retries(denied, "s3://bucket/out/_manifest.json", "write", sleep=lambda seconds: None)
    assert len(attempts) == 1


def test_retries_back_off_exponentially_and_are_bounded():
    waits: list[float] = []
    attempts = []

    def unreachable():
        attempts.append(1)
        raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")

    with pytest.raises(StorageError, match=r"cannot read s3://bucket/a\.md: still failing after 5 attempts") as caught:
        with_storage_retries(unreachable, "s3://bucket/a.md", "read", sleep=waits.append)
    assert len(attempts) == 5
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6])
    assert caught.value.__cause__ is None and caught.value.__suppress_context__

    recovered = []

    def fails_twice():
        recovered.append(1)
        if len(recovered) < 3:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        return b"bytes"

    waits.clear()
    assert with_storage_retries(fails_twice, "gs://bucket/a.md", "read", sleep=waits.append) == b"bytes"
    assert waits == pytest.approx([0.2, 0.4])


def test_retry_waits_are_capped(monkeypatch):
    monkeypatch.setattr(files_module, "STORAGE_RETRY_BASE_SECONDS", 3.0)
    waits: list[float] = []
    with pytest.raises(StorageError):
        with_storage_retries(lambda: (_ for _ in ()).throw(OSError(errno.EIO, "I/O")), "u", "write", sleep=waits.append)
    assert waits == pytest.approx([3.0, 5.0, 5.0, 5.0])


def _named(name: str, base: type = Exception, **attributes) -> BaseException:
    error = type(name, (base,), {})("failure")
    for key, value in attributes.items():
        setattr(error, key, value)
    return error


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError("Connection broken: IncompleteRead"), True),
        (ConnectionResetError(errno.ECONNRESET, "reset"), True),
        (TimeoutError("timed out"), True),
        (OSError(errno.EBUSY, "SlowDown"), True),
        (FileNotFoundError(errno.ENOENT, "missing"), False),
        (PermissionError(errno.EACCES, "denied"), False),
        (IsADirectoryError(errno.EISDIR, "a folder"), False),
        (NotADirectoryError(errno.ENOTDIR, "not a folder"), False),
        (FileExistsError(errno.EEXIST, "exists"), False),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (OSError(errno.EROFS, "Read-only file system"), False),
        (StorageError("already retried"), False),
        (io.UnsupportedOperation("not writable"), False),
        (_named("EndpointConnectionError"), True),
        (_named("ReadTimeoutError"), True),
        (_named("ServerDisconnectedError"), True),
        (_named("FSTimeoutError"), True),
        (_named("ServiceUnavailable"), True),
        (_named("ClientError", response={"Error": {"Code": "SlowDown"}}), True),
        (_named("ClientError", response={"Error": {"Code": "AccessDenied"}}), False),
        (_named("NoCredentialsError"), False),
        (ValueError("bad parquet"), False),
        (KeyError("x"), False),
    ],
    ids=lambda value: value if isinstance(value, bool) else f"{type(value).__name__}-{getattr(value, 'errno', '')}",
)
def test_which_storage_errors_are_transient(error, transient):
    assert is_transient_storage_error(error) is transient


# --------------------------------------------------------------------------------------------------
# A retried bundle stages its rows twice; the merge keeps each row once
# --------------------------------------------------------------------------------------------------


def _document_elements() -> list[list[tuple[str, dict]]]:
    """The corpus as the ChunkDocuments step emits it: one list of (table, row) pairs per document."""
    return _document_elements_of(CORPUS)


def _document_elements_of(files: dict[str, bytes]) -> list[list[tuple[str, dict]]]:
    chunker = chunk_module._ChunkDocumentsFn(chunk_module.ChunkConfig(), "strict", ())
    chunker.setup()
    elements = []
    for doc_id, data in sorted(files.items()):
        source = SourceFile(doc_id, f"file:///corpus/{doc_id}", 0, f"/corpus/{doc_id}", len(data), None, data=data)
        elements.extend(chunker.process(source))
    return elements


def _spill(settings: WriteSettings, bundles: list[tuple[list, bool]]) -> list[str]:
    """Run the spill DoFn over bundles of elements; a bundle with ``False`` dies before finish_bundle.
    Returns the spill ids every bundle output, the dead ones' too (a runner drops those; handed them, the
    merge still keeps each row once)."""
    spiller = write_module._SpillRowsFn(settings)
    spiller.setup()
    spill_ids = []
    for elements, finishes in bundles:
        spiller.start_bundle()
        for element in elements:
            spill_ids += spiller.process(element)
        if finishes:
            spiller.finish_bundle()
    return spill_ids


def _merge(settings: WriteSettings, spill_ids: list[str]) -> dict[str, bytes]:
    """Merge every shard: part name ("chunks/part-...") -> bytes, for the tables of rows."""
    merger = write_module._MergeShardFn(settings)
    merger.setup()
    parts = {}
    for shard in range(settings.shards):
        for path in merger.process(shard, spill_ids):
            name = path.split("/snapshot-", 1)[1].split("/", 1)[1]
            if not name.startswith("changes/"):
                parts[name] = Path(path).read_bytes()
    return parts


def _settings(base: Path, name: str, spill_bytes: int = 32_000_000) -> WriteSettings:
    return WriteSettings(
        staging_url=str(base / f"_staging-{name}"),
        snapshot_url=str(base / f"snapshot-{name}"),
        shards=3,
        row_group_rows=1000,
        spill_bytes=spill_bytes,
    )


def test_rows_staged_twice_by_a_retried_bundle_are_merged_once(tmp_path):
    elements = _document_elements()
    clean = _settings(tmp_path, "clean")
    expected = _merge(clean, _spill(clean, [(elements, True)]))
    assert {name.split("/")[0] for name in expected} == {"chunks", "documents", "sections"}

    # A bundle that spilled every element (a tiny spill buffer) and died after the fifth, then was retried
    # whole by the runner; and another worker's bundle that finished but whose result was lost and redone.
    retried = _settings(tmp_path, "retried", spill_bytes=1)
    retried_ids = _spill(retried, [(elements[:5], False), (elements, True)])
    duplicated = _settings(tmp_path, "duplicated")
    duplicated_ids = _spill(duplicated, [(elements, True), (elements, True)])
    spill_folder = tmp_path / "_staging-duplicated" / "spill" / "chunks"
    assert all(len(list(shard.iterdir())) == 2 for shard in spill_folder.iterdir())

    for settings, spill_ids in ((retried, retried_ids), (duplicated, duplicated_ids)):
        merged = _merge(settings, spill_ids)
        assert merged.keys() == expected.keys()
        for name, data in merged.items():
            assert data == expected[name], name
            assert name.rsplit("-", 1)[1] == f"{hashlib.sha256(data).hexdigest()[:16]}.parquet"
        chunk_keys = [
            (row["doc_id"], row["chunk_index"])
            for name, data in merged.items()
            if name.startswith("chunks/")
            for row in pq.read_table(_buffer(data), columns=["doc_id", "chunk_index"]).to_pylist()
        ]
        assert (
            len(chunk_keys)
            == len(set(chunk_keys))
            == sum(1 for element in elements for table, _ in element if table == "chunks")
        )


def _buffer(data: bytes):
    import pyarrow as pa

    return pa.BufferReader(data)


def test_spill_files_copied_twice_merge_to_the_same_part(tmp_path):
    """The same spill file staged twice under two names (a retried write whose first copy did land)."""
    elements = _document_elements()
    settings = _settings(tmp_path, "copied")
    spill_ids = _spill(settings, [(elements, True)])
    expected = _merge(settings, spill_ids)
    for spill_file in list((tmp_path / "_staging-copied" / "spill").rglob("*.arrow")):
        shutil.copy(spill_file, spill_file.with_name(f"copy-{spill_file.name}"))
    for name in list(expected):
        (tmp_path / "snapshot-copied" / name).unlink()
    assert _merge(settings, spill_ids) == expected


def test_the_merge_reads_only_the_spills_of_its_own_run(tmp_path):
    """An earlier run of the same pipeline spilled every document, one of them since edited and one since
    deleted, then failed before its merge; its spill files are still in the run's folders. The merge of
    the run after it keeps none of their rows: its parts are those of a run over the new documents alone."""
    elements = _document_elements()
    edited, deleted = "guide/advanced/tuning.md", "CHANGELOG.md"
    edited_rows = next(element for element in elements if element[0][1]["doc_id"] == edited)
    assert sum(table == "chunks" for table, _ in edited_rows) > 1
    shortened = next(
        element
        for element in _document_elements_of({edited: b"# Tuning the collector\n\nThe defaults suit most ports.\n"})
    )
    now = [shortened if element is edited_rows else element for element in elements]
    now = [element for element in now if element[0][1]["doc_id"] != deleted]

    clean = _settings(tmp_path, "clean")
    expected = _merge(clean, _spill(clean, [(now, True)]))
    again = _settings(tmp_path, "again")
    _spill(again, [(elements, True)])  # the failed run: its spill ids died with it
    assert _merge(again, _spill(again, [(now, True)])) == expected
