"""What a rerun reads: only the files whose listed size, modification time, ETag or version moved.

A rerun compares each listed file's size and change tokens with those its ``documents`` row recorded; a
file whose metadata is unchanged is carried over without being opened, and one whose metadata moved is
read and hashed (the hash decides: same bytes, carried over with the new metadata). The reads are counted
where they happen, by wrapping ``open`` and ``os.open`` for the local corpus folder and the memory
filesystem's reads for a ``memory://`` corpus. Every rerun's tables are byte for byte a full rebuild's,
except after an edit that restored its file's size and modification time: the documented exception, which
``run.verify_content`` (``--verify-content``) catches.
"""

from __future__ import annotations

import builtins
import json
import os
import posixpath
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.core import url_to_fs
from fsspec.implementations.memory import MemoryFileSystem

from chunkline.dataset.inputs import change_tokens, listing_is_trusted
from chunkline.dataset.layout import MANIFEST_NAME, part_name, part_shard
from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.storage import parquet_bytes
from chunkline.pipelines.cli import main
from chunkline.schemas import ROW_TABLES

from .conftest import CORPUS, documents, rows_by_doc, run, table_digests

pytestmark = pytest.mark.timeout(300)

EDITED = "guide/installation.md"
METADATA_COLUMNS = ["source_mtime_ns", "source_etag", "source_version"]


class DocumentReads:
    """The corpus files a run opened for reading, each time it opened one (relative paths)."""

    def __init__(self) -> None:
        self.roots: list[str] = []
        self.opened: list[str] = []

    def note(self, path) -> None:
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        for root in self.roots:
            if text.startswith(root):
                self.opened.append(text[len(root) :])

    def clear(self) -> None:
        self.opened.clear()


@pytest.fixture
def document_reads(monkeypatch) -> DocumentReads:
    """Counts every open of a file below ``reads.roots``: ``open``/``os.open`` for local files, the memory
    filesystem's ``_open`` and ``cat_file`` for ``memory://`` ones."""
    reads = DocumentReads()
    real_open, real_os_open = builtins.open, os.open
    real_memory_open, real_memory_cat = MemoryFileSystem._open, MemoryFileSystem.cat_file

    def counting_open(file, mode="r", *args, **kwargs):
        if "r" in mode:
            reads.note(file)
        return real_open(file, mode, *args, **kwargs)

    def counting_os_open(path, flags, *args, **kwargs):
        if not flags & (os.O_WRONLY | os.O_RDWR):
            reads.note(path)
        return real_os_open(path, flags, *args, **kwargs)

    def counting_memory_open(self, path, mode="rb", *args, **kwargs):
        if "r" in mode:
            reads.note(self._strip_protocol(path))
        return real_memory_open(self, path, mode, *args, **kwargs)

    def counting_memory_cat(self, path, *args, **kwargs):
        reads.note(self._strip_protocol(path))
        return real_memory_cat(self, path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(os, "open", counting_os_open)
    monkeypatch.setattr(MemoryFileSystem, "_open", counting_memory_open)
    monkeypatch.setattr(MemoryFileSystem, "cat_file", counting_memory_cat)
    return reads


@pytest.fixture(params=["local", "memory"])
def corpus_store(request, tmp_path, memory_fs, document_reads):
    """(input URL, write(relative path, bytes)) of the corpus on a local disk or in ``memory://``; its reads
    are counted by ``document_reads``."""
    if request.param == "local":
        root = tmp_path / "corpus"

        def write(name: str, data: bytes) -> None:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        url = str(root)
        document_reads.roots.append(f"{root}/")
    else:

        def write(name: str, data: bytes) -> None:
            memory_fs.pipe_file(f"/corpus/{name}", data)

        url = "memory://corpus"
        document_reads.roots.append("/corpus/")
    for name, data in CORPUS.items():
        write(name, data)
    return url, write


@pytest.mark.slow
def test_an_unchanged_rerun_opens_no_document_and_writes_a_full_rebuilds_parts(corpus_store, tmp_path, document_reads):
    url, _ = corpus_store
    output = tmp_path / "out"
    run([url], output)
    assert sorted(set(document_reads.opened)) == sorted(CORPUS), "the first run reads every document"
    before = table_digests(output, ROW_TABLES)
    document_reads.clear()

    second = run([url], output)
    assert document_reads.opened == [], "an unchanged rerun opened a document"
    assert second.rebuild["documents_read_to_compare"] == 0
    assert second.rebuild["documents_carried_over"] == len(CORPUS)
    assert table_digests(output, ROW_TABLES) == before
    fresh = run([url], tmp_path / "fresh")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)
    assert fresh.rebuild["mode"] == "full"


@pytest.mark.slow
def test_an_edited_document_is_the_only_one_read_again(corpus_store, tmp_path, document_reads):
    url, write = corpus_store
    output = tmp_path / "out"
    run([url], output)
    write(EDITED, CORPUS[EDITED] + b"\n## Upgrading\n\nStop the gauge, then install the new release.\n")
    document_reads.clear()

    summary = run([url], output)
    assert set(document_reads.opened) == {EDITED}
    assert summary.rebuild["documents_read_to_compare"] == 1 and summary.rebuild["documents_chunked"] == 1
    assert "Upgrading" in "".join(row["text"] for row in rows_by_doc(output, "chunks")[EDITED])
    run([url], tmp_path / "fresh")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)


@pytest.mark.slow
def test_a_touched_document_is_read_once_and_carried_over_with_its_new_metadata(tmp_path, document_reads):
    corpus = tmp_path / "corpus"
    for name, data in CORPUS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(data)
    document_reads.roots.append(f"{corpus}/")
    output = tmp_path / "out"
    run([corpus], output)
    touched_ns = 1_700_000_000_123_456_789
    os.utime(corpus / EDITED, ns=(touched_ns, touched_ns))
    document_reads.clear()

    summary = run([corpus], output)
    assert document_reads.opened == [EDITED], "the touched file is hashed once and not chunked"
    assert summary.rebuild["documents_chunked"] == 0 and summary.rebuild["documents_read_to_compare"] == 1
    row = documents(output)[EDITED]
    assert row["source_mtime_ns"] == touched_ns
    assert row["modified_time"].timestamp() == pytest.approx(touched_ns / 1e9, abs=1e-6)
    run([corpus], tmp_path / "fresh")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)


@pytest.mark.slow
def test_an_edit_that_restores_size_and_mtime_is_seen_only_with_verify_content(tmp_path, document_reads):
    corpus = tmp_path / "corpus"
    for name, data in CORPUS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(data)
    document_reads.roots.append(f"{corpus}/")
    output = tmp_path / "out"
    run([corpus], output)
    published_chunks = table_digests(output, ["chunks"])
    path = corpus / EDITED
    status = path.stat()
    edited = CORPUS[EDITED].replace(b"Install", b"INSTALL", 1)
    assert edited != CORPUS[EDITED] and len(edited) == len(CORPUS[EDITED])
    path.write_bytes(edited)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_mtime_ns == status.st_mtime_ns and path.stat().st_size == status.st_size
    document_reads.clear()

    unseen = run([corpus], output)
    # The documented exception: the metadata says unchanged, so the file is not opened.
    assert document_reads.opened == [] and unseen.rebuild["documents_chunked"] == 0
    assert table_digests(output, ["chunks"]) == published_chunks
    assert "INSTALL" not in "".join(row["text"] for row in rows_by_doc(output, "chunks")[EDITED])

    assert main(["run", str(corpus), "--output", str(output), "--verify-content"]) == 0
    assert sorted(set(document_reads.opened)) == sorted(CORPUS), "--verify-content hashes every document"
    seen = read_manifest(str(output))
    assert seen["config"]["run"]["verify_content"] is True
    assert seen["rebuild"]["documents_read_to_compare"] == len(CORPUS) and seen["rebuild"]["documents_chunked"] == 1
    assert "INSTALL" in "".join(row["text"] for row in rows_by_doc(output, "chunks")[EDITED])
    run([corpus], tmp_path / "fresh")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)


def _drop_metadata_columns(output: Path) -> None:
    """Make the published snapshot look written before the metadata columns existed: its documents parts
    rewritten without them (named by their new bytes), both manifests naming the new parts."""
    fs, root = url_to_fs(str(output))
    manifest = read_manifest(str(output))
    names = []
    for name in manifest["tables"]["documents"]["files"]:
        table = pq.read_table(f"{root}/{name}").drop_columns(METADATA_COLUMNS)
        table = table.replace_schema_metadata(table.schema.metadata)
        data = parquet_bytes(table, 65536, "zstd")
        new_name = posixpath.join(posixpath.dirname(name), part_name(part_shard(name), data))
        fs.pipe_file(f"{root}/{new_name}", data)
        fs.rm_file(f"{root}/{name}")
        names.append(new_name)
    manifest["tables"]["documents"]["files"] = names
    text = json.dumps(manifest, indent=2, sort_keys=True).encode()
    fs.pipe_file(f"{root}/{MANIFEST_NAME}", text)
    fs.pipe_file(f"{root}/snapshots/{manifest['snapshot']}/{MANIFEST_NAME}", text)


@pytest.mark.slow
def test_a_dataset_written_before_the_metadata_columns_is_hashed_once_then_rerun_by_metadata(tmp_path, document_reads):
    corpus = tmp_path / "corpus"
    for name, data in CORPUS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(data)
    document_reads.roots.append(f"{corpus}/")
    output = tmp_path / "out"
    run([corpus], output)
    _drop_metadata_columns(output)
    assert all(value is None for value in read_dataset(str(output), "documents").column("source_mtime_ns").to_pylist())
    document_reads.clear()

    hashed = run([corpus], output)
    assert hashed.rebuild["mode"] == "incremental"
    assert hashed.rebuild["documents_read_to_compare"] == len(CORPUS) and hashed.rebuild["documents_chunked"] == 0
    assert sorted(document_reads.opened) == sorted(CORPUS), "each document hashed once, none chunked"
    assert {row["change"] for row in read_dataset(str(output), "changes/documents").to_pylist()} == {"unchanged"}
    run([corpus], tmp_path / "fresh")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)
    document_reads.clear()

    by_metadata = run([corpus], output)
    assert document_reads.opened == [] and by_metadata.rebuild["documents_read_to_compare"] == 0


@pytest.mark.parametrize(
    "info, expected",
    [
        (
            {"name": "a.md", "size": 3, "type": "file", "mtime": 1_700_000_000.25},
            (1_700_000_000_250_000_000, None, None),
        ),
        (
            {
                "Key": "b/a.md",
                "size": 3,
                "ETag": '"9a0364b9e99bb480dd25e1f0284c8555"',
                "LastModified": "2026-12-01T10:00:00.5Z",
            },
            (1_796_119_200_500_000_000, '"9a0364b9e99bb480dd25e1f0284c8555"', None),
        ),
        (
            {
                "name": "b/a.md",
                "size": 3,
                "etag": "CKih16GU",
                "generation": 1_733_000_000_123_456,
                "updated": "2026-12-01T10:00:00Z",
            },
            (1_796_119_200_000_000_000, "CKih16GU", "1733000000123456"),
        ),
        (
            {
                "name": "c/a.md",
                "size": 3,
                "etag": "0x8DC",
                "version_id": "2026-12-01T10:00:00.0000000Z",
                "last_modified": "2026-12-01T10:00:00+00:00",
            },
            (1_796_119_200_000_000_000, "0x8DC", "2026-12-01T10:00:00.0000000Z"),
        ),
        ({"name": "/a.md", "size": 3, "type": "file"}, (None, None, None)),
    ],
    ids=["local", "s3", "gcs", "azure", "none"],
)
def test_change_tokens_are_read_from_each_stores_listing(info, expected):
    assert change_tokens(info) == expected


def test_an_http_listing_is_not_trusted_to_say_a_file_is_unchanged(memory_fs):
    """An HTTP server's ETag may be weak or missing and its Last-Modified is optional: such files are read
    and hashed on every run, whatever their listing says."""
    assert not listing_is_trusted(fsspec.filesystem("http"))
    assert not listing_is_trusted(fsspec.filesystem("https"))
    assert listing_is_trusted(memory_fs) and listing_is_trusted(fsspec.filesystem("file"))
