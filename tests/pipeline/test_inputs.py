"""Every input form the pipeline reads here: a folder, file:// URLs, globs, a single file, memory://,
a zip archive, include/exclude patterns and extensions, and doc_ids that stay inside the input root."""

from __future__ import annotations

import posixpath
import re
import zipfile
from pathlib import Path

import fsspec
import pytest

from chunkline.dataset.publish import read_dataset
from chunkline.dataset.rebuild import PublishRefusedError
from chunkline.settings import ConfigError

from .conftest import (
    CORPUS,
    all_file_digests,
    assert_document_chunks,
    documents,
    rows,
    rows_by_doc,
    run,
    write_corpus,
    write_files,
)

pytestmark = pytest.mark.timeout(300)

#: Columns that depend on the document's bytes and the config only, not on where it was read from.
CONTENT_COLUMNS = (
    "chunk_id",
    "doc_id",
    "chunk_index",
    "text",
    "start_char",
    "end_char",
    "start_byte",
    "end_byte",
    "start_line",
    "start_column",
    "end_line",
    "end_column",
    "heading_path",
    "token_count",
    "strategy",
)


def content(chunk_rows):
    """The chunk rows reduced to the columns that do not depend on the storage, sorted."""
    return sorted(tuple(repr(row[name]) for name in CONTENT_COLUMNS) for row in chunk_rows)


def assert_valid_doc_id(doc_id: str) -> None:
    assert doc_id, "empty doc_id"
    assert not doc_id.startswith("/"), doc_id
    assert "\\" not in doc_id, doc_id
    assert all(part not in ("", ".", "..") for part in doc_id.split("/")), doc_id
    assert posixpath.normpath(doc_id) == doc_id, doc_id


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus read from a plain local folder: (corpus root, output) of one in-process run."""
    base = tmp_path_factory.mktemp("inputs-reference")
    root = write_corpus(base / "corpus")
    output = base / "out"
    summary = run([root], output)
    assert summary.documents_ok == len(CORPUS) and summary.documents_error == 0
    return root, output


def assert_reads_like_reference(output, reference_output, doc_ids) -> None:
    """The dataset at ``output`` holds exactly ``doc_ids``, chunked exactly as in the reference run."""
    doc_ids = set(doc_ids)
    chunk_rows = rows(output, "chunks")
    assert {row["doc_id"] for row in chunk_rows} == doc_ids
    expected = [row for row in rows(reference_output, "chunks") if row["doc_id"] in doc_ids]
    assert content(chunk_rows) == content(expected)
    statuses = {doc_id: row["status"] for doc_id, row in documents(output).items()}
    assert statuses == {doc_id: "ok" for doc_id in doc_ids}
    assert rows(output, "errors") == []
    for doc_id in doc_ids:
        assert_valid_doc_id(doc_id)


def test_local_folder_reads_every_markdown_file_and_nothing_else(reference):
    root, output = reference
    by_doc = rows_by_doc(output, "chunks")
    assert set(by_doc) == set(CORPUS)  # notes.txt and diagram.svg are not markdown
    for doc_id, data in CORPUS.items():
        assert_document_chunks(by_doc[doc_id], data)
        assert_valid_doc_id(doc_id)
    docs = documents(output)
    for doc_id, data in CORPUS.items():
        row = docs[doc_id]
        assert row["source_uri"] == (root / doc_id).resolve().as_uri()
        assert row["size_bytes"] == len(data)
        assert row["chunk_count"] == len(by_doc[doc_id])
        assert row["token_count"] == sum(chunk["token_count"] for chunk in by_doc[doc_id])
        assert {chunk["source_uri"] for chunk in by_doc[doc_id]} == {row["source_uri"]}
    assert docs["README.md"]["title"] == "Harbour Telemetry"
    assert '"updated": "2024-05-01"' in docs["README.md"]["front_matter"]
    # The empty file is a document with one empty chunk, not an error.
    assert [(c["start_char"], c["end_char"], c["text"]) for c in by_doc["guide/empty.md"]] == [(0, 0, "")]


def test_file_url_and_trailing_slash_give_the_same_dataset(reference, tmp_path):
    root, reference_output = reference
    for number, url in enumerate((root.resolve().as_uri(), f"{root}/")):
        output = tmp_path / f"out{number}"
        run([url], output)
        assert_reads_like_reference(output, reference_output, CORPUS)


def test_glob_input_takes_what_the_glob_matches_relative_to_its_root(reference, tmp_path):
    root, reference_output = reference
    output = tmp_path / "out"
    run([f"{root}/**/*.md"], output)
    # A glob picks its own files: `.markdown` is not matched by *.md, extensions do not apply.
    expected = {doc_id for doc_id in CORPUS if doc_id.endswith(".md")}
    assert "reference/api.markdown" not in expected
    assert_reads_like_reference(output, reference_output, expected)


def test_glob_below_the_first_folder_level(reference, tmp_path):
    root, reference_output = reference
    output = tmp_path / "out"
    run([f"{root}/guide/*/*.md"], output)
    # The doc_id is relative to the part of the glob before its first wildcard.
    chunk_rows = rows(output, "chunks")
    assert {row["doc_id"] for row in chunk_rows} == {"advanced/tuning.md"}
    expected = rows_by_doc(reference_output, "chunks")["guide/advanced/tuning.md"]
    assert [row["text"] for row in sorted(chunk_rows, key=lambda r: r["chunk_index"])] == [r["text"] for r in expected]


def test_single_file_input_has_its_file_name_as_doc_id(reference, tmp_path):
    root, reference_output = reference
    output = tmp_path / "out"
    run([root / "guide" / "installation.md"], output)
    by_doc = rows_by_doc(output, "chunks")
    assert set(by_doc) == {"installation.md"}
    assert_document_chunks(by_doc["installation.md"], CORPUS["guide/installation.md"])
    expected = rows_by_doc(reference_output, "chunks")["guide/installation.md"]
    assert [r["text"] for r in by_doc["installation.md"]] == [r["text"] for r in expected]
    assert documents(output)["installation.md"]["status"] == "ok"


@pytest.mark.slow
def test_input_path_with_dot_dot_gives_clean_doc_ids(reference, tmp_path, monkeypatch):
    root, reference_output = reference
    output = tmp_path / "out"
    run([f"{root}/guide/advanced/../.."], output)
    assert_reads_like_reference(output, reference_output, CORPUS)
    # Relative inputs that climb out of the working directory, as a folder and as a glob.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    relative = Path(posixpath.relpath(root, work))
    assert str(relative).startswith("..")
    run([str(relative)], tmp_path / "relative")
    assert_reads_like_reference(tmp_path / "relative", reference_output, CORPUS)
    run([f"{relative}/reference/../**/*.md"], tmp_path / "relative-glob")
    assert_reads_like_reference(
        tmp_path / "relative-glob", reference_output, {doc_id for doc_id in CORPUS if doc_id.endswith(".md")}
    )


def test_memory_input_and_output(reference, memory_fs):
    _, reference_output = reference
    for doc_id, data in {**CORPUS, "notes.txt": b"not markdown"}.items():
        memory_fs.pipe(f"/corpus/{doc_id}", data)
    summary = run(["memory://corpus"], "memory://published")
    assert summary.documents_ok == len(CORPUS)
    assert memory_fs.exists("/published/_manifest.json") and memory_fs.exists("/published/_SUCCESS")
    assert not memory_fs.exists("/published/_staging")
    assert_reads_like_reference("memory://published", reference_output, CORPUS)
    by_doc = rows_by_doc("memory://published", "chunks")
    for doc_id, data in CORPUS.items():
        assert_document_chunks(by_doc[doc_id], data)
        assert {row["source_uri"] for row in by_doc[doc_id]} == {f"memory:///corpus/{doc_id}"}


def test_zip_archive_input(reference, tmp_path):
    _, reference_output = reference
    archive = tmp_path / "corpus.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for doc_id, data in sorted(CORPUS.items()):
            bundle.writestr(doc_id, data)
        bundle.writestr("notes.txt", b"not markdown")
    output = tmp_path / "out"
    run([f"zip::{archive.resolve().as_uri()}"], output)
    assert_reads_like_reference(output, reference_output, CORPUS)
    by_doc = rows_by_doc(output, "chunks")
    for doc_id, data in CORPUS.items():
        assert_document_chunks(by_doc[doc_id], data)


def test_zip_archive_subfolder_is_the_root(reference, tmp_path):
    _, reference_output = reference
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for doc_id, data in sorted(CORPUS.items()):
            bundle.writestr(f"site/docs/{doc_id}", data)
    output = tmp_path / "out"
    run([f"zip://site/docs::{archive.resolve().as_uri()}"], output)
    assert_reads_like_reference(output, reference_output, CORPUS)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["input.include=[guide/*]"], {"guide/installation.md", "guide/advanced/tuning.md", "guide/empty.md"}),
        (['input.exclude=["*/advanced/*", CHANGELOG.md]'], set(CORPUS) - {"guide/advanced/tuning.md", "CHANGELOG.md"}),
        (
            ["input.include=[guide/*, reference/*]", 'input.exclude=["*.markdown", guide/empty.md]'],
            {"guide/installation.md", "guide/advanced/tuning.md", "reference/glossary.md"},
        ),
    ],
    ids=["include", "exclude", "include-and-exclude"],
)
@pytest.mark.slow
def test_include_and_exclude_patterns_match_doc_ids(reference, tmp_path, overrides, expected):
    root, reference_output = reference
    output = tmp_path / "out"
    summary = run([root], output, *overrides)
    # Left-out files are not documents at all: no skipped rows for them.
    assert set(documents(output)) == expected
    assert summary.documents_ok == len(expected) and summary.documents_skipped == 0
    assert_reads_like_reference(output, reference_output, expected)


def test_extensions_select_folder_files_case_insensitively(tmp_path):
    root = write_files(
        tmp_path / "notes",
        {
            "a.md": b"# A\n\nalpha\n",
            "B.MD": b"# B\n\nbravo\n",
            "c.markdown": b"# C\n\ncharlie\n",
            "d.txt": b"# D\n\ndelta\n",
            "sub/e.TXT": b"# E\n\necho\n",
            "sub/f.rst": b"F\n=\n",
        },
    )
    run([root], tmp_path / "default")
    assert set(documents(tmp_path / "default")) == {"a.md", "B.MD", "c.markdown"}
    run([root], tmp_path / "txt", "input.extensions=[.txt]")
    docs = documents(tmp_path / "txt")
    assert set(docs) == {"d.txt", "sub/e.TXT"}
    assert {row["text"] for row in rows(tmp_path / "txt", "chunks")} == {"# D\n\ndelta\n", "# E\n\necho\n"}


def test_extension_without_a_dot_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="extensions"):
        run([tmp_path], tmp_path / "out", "input.extensions=[md]")
    assert not (tmp_path / "out").exists()


def test_same_doc_id_in_two_inputs_first_input_wins_second_is_skipped(tmp_path):
    first = write_files(tmp_path / "site", {"index.md": b"# Site\n\nThe site's index.\n", "guide.md": b"# Guide\n"})
    second = write_files(tmp_path / "wiki", {"index.md": b"# Wiki\n\nThe wiki's index.\n", "faq.md": b"# FAQ\n"})
    for order, winner, loser in (((first, second), first, second), ((second, first), second, first)):
        output = tmp_path / f"out-{winner.name}"
        summary = run(order, output)
        assert (summary.documents_ok, summary.documents_skipped, summary.documents_error) == (3, 1, 0)
        assert summary.errors == []
        assert rows(output, "errors") == []
        document_rows = rows(output, "documents")
        index_rows = {row["source_uri"]: row for row in document_rows if row["doc_id"] == "index.md"}
        assert set(index_rows) == {(winner / "index.md").resolve().as_uri(), (loser / "index.md").resolve().as_uri()}
        kept = index_rows[(winner / "index.md").resolve().as_uri()]
        skipped = index_rows[(loser / "index.md").resolve().as_uri()]
        assert kept["status"] == "ok" and kept["message"] is None
        assert skipped["status"] == "skipped"
        assert "index.md" in skipped["message"] and "input 1" in skipped["message"]
        assert skipped["chunk_count"] == 0
        index_chunks = rows_by_doc(output, "chunks")["index.md"]
        assert_document_chunks(index_chunks, (winner / "index.md").read_bytes())
        assert {row["source_uri"] for row in index_chunks} == {(winner / "index.md").resolve().as_uri()}
        assert {row["doc_id"] for row in document_rows} == {"index.md", "guide.md", "faq.md"}


def test_the_same_files_reached_through_two_inputs_are_reported_ok(reference, tmp_path):
    """A folder listed twice (or a folder and a glob over it): every document is chunked once and the
    documents table says so; one ``ok`` row per document, whatever else it reports."""
    root, reference_output = reference
    output = tmp_path / "out"
    summary = run([root, f"{root}/**/*.md"], output)
    chunk_rows = rows(output, "chunks")
    assert content(chunk_rows) == content(rows(reference_output, "chunks"))
    statuses: dict[str, set[str]] = {}
    for row in rows(output, "documents"):
        statuses.setdefault(row["doc_id"], set()).add(row["status"])
    assert set(statuses) == set(CORPUS)
    not_ok = sorted(doc_id for doc_id, found in statuses.items() if "ok" not in found)
    assert not_ok == [], f"chunked documents without an ok documents row: {not_ok}"
    assert summary.documents_ok == len(CORPUS)


def test_a_missing_input_fails_the_run_and_publishes_nothing(reference, tmp_path):
    """A missing input (a renamed folder, an unmounted disk) must not publish a snapshot without its
    documents: the run fails, naming it, and the dataset stays as it was."""
    root, _ = reference
    output = tmp_path / "out"
    run([root], output)
    before = all_file_digests(output)
    missing = tmp_path / "no-such-folder"
    with pytest.raises(
        PublishRefusedError, match=f"input {re.escape(str(missing))} does not exist; nothing was published"
    ):
        run([root, missing], output)
    assert all_file_digests(output) == before


def test_read_dataset_of_memory_output_without_reference_run(memory_fs):
    """memory:// output is read through its manifest like any other URL."""
    memory_fs.pipe("/docs/one.md", b"# One\n\nFirst document.\n")
    memory_fs.pipe("/docs/deep/two.md", b"# Two\n\n## Part\n\nSecond document.\n")
    run(["memory://docs"], "memory://ds")
    table = read_dataset("memory://ds", "chunks", columns=["doc_id", "chunk_index", "heading_path"])
    assert sorted(zip(table.column("doc_id").to_pylist(), table.column("chunk_index").to_pylist())) == [
        ("deep/two.md", 0),
        ("one.md", 0),
    ]
    paths = dict(zip(table.column("doc_id").to_pylist(), table.column("heading_path").to_pylist()))
    assert paths["one.md"] == ["One"]
    assert paths["deep/two.md"] == ["Two", "Part"]  # "# Two" heads the text of "## Part": that text's path


def _zip(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return f"zip::{path.resolve().as_uri()}"


def test_source_uri_of_a_zip_member_can_be_opened(tmp_path):
    """source_uri is "the URL the document was read from": for a zip member it must lead back to the
    archive, not only to the member's path inside some archive."""
    archive = tmp_path / "site.zip"
    url = _zip(archive, {"index.md": b"# Site\n\nWelcome.\n"})
    output = tmp_path / "out"
    run([url], output)
    (row,) = rows(output, "documents")
    assert row["status"] == "ok"
    with fsspec.open(row["source_uri"], "rb") as handle:
        assert handle.read() == b"# Site\n\nWelcome.\n"


def test_same_doc_id_in_two_zip_archives(tmp_path):
    """Two archives that both hold index.md: the first archive's copy is chunked and reported ok, the
    second's is reported skipped."""
    first = _zip(tmp_path / "2024.zip", {"index.md": b"# Edition 2024\n", "a.md": b"# A\n"})
    second = _zip(tmp_path / "2025.zip", {"index.md": b"# Edition 2025\n", "b.md": b"# B\n"})
    output = tmp_path / "out"
    summary = run([first, second], output)
    assert [row["text"] for row in rows_by_doc(output, "chunks")["index.md"]] == ["# Edition 2024\n"]
    statuses = sorted(row["status"] for row in rows(output, "documents") if row["doc_id"] == "index.md")
    assert statuses == ["ok", "skipped"]
    assert (summary.documents_ok, summary.documents_skipped) == (3, 1)


@pytest.mark.parametrize("as_url", [False, True])
def test_a_local_files_source_uri_is_the_one_fsspec_gives_its_path(tmp_path, monkeypatch, as_url):
    from fsspec.implementations.local import LocalFileSystem

    from chunkline.dataset.inputs import match_input
    from chunkline.dataset.settings import InputConfig

    names = ["plain.md", "with space.md", "100% sure.md", "caf\u00e9.md", "sharp#1.md", "q?.md", "sub/x y/deep.md"]
    write_files(tmp_path / "in put", {name: b"# A\n\ntext\n" for name in names})
    monkeypatch.chdir(tmp_path)
    url = (tmp_path / "in put").as_uri().replace("%20", " ") if as_url else "in put/"
    found = list(match_input(url, 0, InputConfig(paths=(url,))))
    assert sorted(source.doc_id for source in found) == sorted(names)
    local = LocalFileSystem()
    for source in found:
        assert source.source_uri == local.unstrip_protocol(source.path)
        assert source.source_uri == "file://" + str(tmp_path / "in put" / source.doc_id)
