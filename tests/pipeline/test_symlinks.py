"""Symbolic links in a local input, the same way in ``chunkline run`` and ``chunkline chunk``.

A link to a file or folder inside the input's root is read like the file or folder it leads to, under the
link's own path; a link whose target lies outside the root is an error row (stage ``match``, type
``LinkOutsideInput``) and is never read; a link to a folder it is inside (a loop) is an error row
(``LinkLoop``) and the run ends.
"""

from __future__ import annotations

import json
import os

import pytest

from chunkline.pipelines.cli import main

from .conftest import CORPUS, documents, rows, rows_by_doc, run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)

SECRET = b"# Private\n\nThe harbour master's door code is 4711.\n"


@pytest.fixture
def linked(tmp_path):
    """The corpus with links of every kind, and a private folder beside it."""
    corpus = write_corpus(tmp_path / "corpus")
    private = write_files(tmp_path / "private", {"codes.md": SECRET, "more/plans.md": SECRET})
    os.symlink("guide/installation.md", corpus / "install.md")  # a file inside, by a relative link
    os.symlink(corpus / "reference", corpus / "guide" / "ref")  # a folder inside
    os.symlink(private / "codes.md", corpus / "codes.md")  # a file outside
    os.symlink(private, corpus / "private-notes")  # a folder outside
    os.symlink("..", corpus / "guide" / "advanced" / "up")  # a loop: the folder it is in
    os.symlink("missing.md", corpus / "dangling.md")  # a link to nothing
    return corpus


def test_links_inside_the_input_are_read_like_their_targets(linked, tmp_path):
    output = tmp_path / "out"
    run([linked], output)
    docs = documents(output)
    chunks = rows_by_doc(output, "chunks")
    assert docs["install.md"]["status"] == "ok"
    assert [row["text"] for row in chunks["install.md"]] == [row["text"] for row in chunks["guide/installation.md"]]
    assert docs["guide/ref/api.markdown"]["status"] == "ok" and docs["guide/ref/glossary.md"]["status"] == "ok"
    assert "".join(row["text"] for row in chunks["guide/ref/api.markdown"]) == CORPUS["reference/api.markdown"].decode()
    # Every document of the corpus itself is there as well.
    assert {doc_id for doc_id, row in docs.items() if row["status"] == "ok"} == set(CORPUS) | {
        "install.md",
        "guide/ref/api.markdown",
        "guide/ref/glossary.md",
    }


def test_a_link_out_of_the_input_is_an_error_row_and_is_never_read(linked, tmp_path):
    output = tmp_path / "out"
    run([linked], output)
    errors = {row["doc_id"]: row for row in rows(output, "errors")}
    for doc_id, what in (("codes.md", "file"), ("private-notes", "folder")):
        error = errors[doc_id]
        assert (error["stage"], error["error_type"]) == ("match", "LinkOutsideInput")
        assert f"it is a link to the {what} '{tmp_path / 'private'}" in error["message"]
        assert f"outside the input's root '{linked}'" in error["message"]
        assert documents(output)[doc_id]["status"] == "error"
    everything = b"".join(path.read_bytes() for path in output.rglob("*") if path.is_file())
    assert b"4711" not in everything
    assert not any(doc_id.startswith("private-notes/") for doc_id in documents(output))


def test_a_link_loop_ends_as_an_error_row(linked, tmp_path):
    output = tmp_path / "out"
    run([linked], output)
    error = {row["doc_id"]: row for row in rows(output, "errors")}["guide/advanced/up"]
    assert (error["stage"], error["error_type"]) == ("match", "LinkLoop")
    assert f"a link to '{linked / 'guide'}', a folder it is inside" in error["message"]
    assert not any("/up/" in doc_id for doc_id in documents(output))


def test_a_dangling_link_is_a_read_error_row(linked, tmp_path):
    output = tmp_path / "out"
    run([linked], output)
    error = {row["doc_id"]: row for row in rows(output, "errors")}["dangling.md"]
    assert (error["stage"], error["error_type"]) == ("read", "FileNotFoundError")


def test_a_glob_follows_links_as_a_folder_input_does(linked, tmp_path):
    folder, glob = tmp_path / "folder", tmp_path / "glob"
    run([linked], folder)
    run([f"{linked}/**/*.md"], glob)
    folder_docs = {
        doc_id: row["status"] for doc_id, row in documents(folder).items() if not doc_id.endswith(".markdown")
    }
    glob_docs = {doc_id: row["status"] for doc_id, row in documents(glob).items()}
    assert glob_docs == folder_docs


def test_chunk_command_follows_and_reports_links_as_run_does(linked, tmp_path, capsys):
    output = tmp_path / "out"
    run([linked], output)
    capsys.readouterr()
    assert main(["chunk", str(linked), "--format", "jsonl"]) == 1  # files it could not read
    captured = capsys.readouterr()
    chunked = {json.loads(line)["doc_id"] for line in captured.out.splitlines()}
    assert chunked == {doc_id for doc_id, row in documents(output).items() if row["status"] == "ok"}
    assert f"chunkline: {linked}/codes.md: a link to '{tmp_path / 'private' / 'codes.md'}', outside" in captured.err
    assert f"chunkline: {linked}/private-notes: a link to '{tmp_path / 'private'}', outside" in captured.err
    assert (
        f"chunkline: {linked}/guide/advanced/up: a link to '{linked / 'guide'}', a folder it is inside" in captured.err
    )
    assert "4711" not in captured.out
