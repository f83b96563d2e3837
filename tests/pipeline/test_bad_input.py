"""Bad input becomes rows, never a crashed run, and nothing else is lost (PRODUCT invariant 6).

One corpus holds the good documents and one file of each bad kind: invalid UTF-8, a binary file named
``.md``, a file over ``input.max_file_bytes``, YAML front matter with a Python-object tag, a file that
vanishes between matching and reading, and a document the chunking strategy fails on.
"""

from __future__ import annotations

import hashlib
import random
import struct
import zlib
from pathlib import Path

import pytest
import yaml

import chunkline
import chunkline.dataset.document_rows as document_rows_module
import chunkline.dataset.inputs as inputs_module
import chunkline.transforms.read as read_module
from chunkline.pipelines.cli import main

from .conftest import (
    CORPUS,
    as_chunk,
    assert_document_chunks,
    documents,
    rows,
    rows_by_doc,
    run,
    write_corpus,
    write_files,
)

pytestmark = pytest.mark.timeout(300)

MAX_FILE_BYTES = 20_000

LATIN1 = "# Café notes\n\nNaïve readings from the old gauge, exported by a tool that wrote Latin-1.\n".encode("latin-1")
LATIN1_BAD_BYTE = LATIN1.index(b"\xe9")

VANISHING = b"# Draft\n\nThis draft is deleted after the files were listed and before it is read.\n"
STRATEGY_FAILS = b"# Fine markdown\n\nThe strategy fails on this document on purpose.\n"


def png_bytes() -> bytes:
    """A PNG signature and header chunk followed by (seeded) random image data."""
    header = struct.pack(">IIBBBBB", 64, 64, 8, 6, 0, 0, 0)
    ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    return b"\x89PNG\r\n\x1a\n" + ihdr + random.Random(20240501).randbytes(3000)


def huge_markdown() -> bytes:
    lines = [f"| {n} | quay-north | {n * 0.25:.2f} m |" for n in range(1500)]
    return ("# Tide export\n\n| n | gauge | level |\n| - | - | - |\n" + "\n".join(lines) + "\n").encode()


def unsafe_front_matter(marker: Path) -> bytes:
    return (
        "---\n"
        f'title: !!python/object/apply:os.system ["touch {marker}"]\n'
        "author: mallory\n"
        "---\n"
        "# Looks harmless\n\nBut its front matter asks the YAML loader to run a command.\n"
    ).encode()


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """The corpus with every bad kind, run once with ``encoding_errors: strict`` and once with ``replace``."""
    base = tmp_path_factory.mktemp("bad-input")
    root = write_corpus(base / "corpus")
    marker = base / "front-matter-code-ran"
    bad_files = {
        "legacy/latin1.md": LATIN1,
        "assets/logo.md": png_bytes(),
        "exports/huge.md": huge_markdown(),
        "unsafe.md": unsafe_front_matter(marker),
        "drafts/vanishing.md": VANISHING,
        "drafts/strategy-fails.md": STRATEGY_FAILS,
    }
    write_files(root, bad_files)
    assert len(bad_files["exports/huge.md"]) > MAX_FILE_BYTES > max(len(data) for data in CORPUS.values())

    original_match = inputs_module.match_input
    original_chunk = document_rows_module.chunk_document_with_section_rows

    def match_then_delete(url, input_index, config, **keywords):
        matched = list(original_match(url, input_index, config, **keywords))
        assert "drafts/vanishing.md" in {source.doc_id for source in matched}
        (root / "drafts" / "vanishing.md").unlink()  # gone after matching, before reading
        yield from matched

    def failing_strategy(document, config, counter, *, doc_id="", **keywords):
        if doc_id == "drafts/strategy-fails.md":
            raise IndexError("span list ran past the end of the document")
        return original_chunk(document, config, counter, doc_id=doc_id, **keywords)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inputs_module, "match_input", match_then_delete)
        patch.setattr(document_rows_module, "chunk_document_with_section_rows", failing_strategy)
        strict_summary = run([root], base / "strict", f"input.max_file_bytes={MAX_FILE_BYTES}")

    replace_summary = run(
        [root], base / "replace", f"input.max_file_bytes={MAX_FILE_BYTES}", "input.encoding_errors=replace"
    )
    return {
        "root": root,
        "marker": marker,
        "files": bad_files,
        "strict": base / "strict",
        "strict_summary": strict_summary,
        "replace": base / "replace",
        "replace_summary": replace_summary,
    }


def errors_by_doc(output) -> dict[str, dict]:
    table = rows(output, "errors")
    by_doc = {row["doc_id"]: row for row in table}
    assert len(by_doc) == len(table), "one error row per bad document"
    return by_doc


def test_each_bad_file_is_one_error_row_and_one_error_document(bad):
    errors = errors_by_doc(bad["strict"])
    kinds = {doc_id: (row["stage"], row["error_type"]) for doc_id, row in errors.items()}
    assert kinds == {
        "legacy/latin1.md": ("decode", "InvalidUtf8"),
        "assets/logo.md": ("decode", "BinaryFile"),
        "exports/huge.md": ("read", "FileTooLarge"),
        "unsafe.md": ("parse", "InvalidFrontMatter"),
        "drafts/vanishing.md": ("read", "FileNotFoundError"),
        "drafts/strategy-fails.md": ("chunk", "IndexError"),
    }
    docs = documents(bad["strict"])
    for doc_id, error in errors.items():
        row = docs[doc_id]
        assert row["status"] == "error", doc_id
        assert row["message"] == error["message"], doc_id
        assert row["chunk_count"] == 0 and row["token_count"] == 0, doc_id
        assert error["source_uri"] == row["source_uri"] == (bad["root"] / doc_id).resolve().as_uri()
    assert not {doc_id for doc_id in rows_by_doc(bad["strict"], "chunks")} & set(errors)
    summary = bad["strict_summary"]
    assert (summary.documents_ok, summary.documents_error, summary.documents_skipped) == (len(CORPUS), 6, 0)
    assert sorted(error["doc_id"] for error in summary.errors) == sorted(errors)


def test_error_messages_say_what_went_wrong(bad):
    errors = errors_by_doc(bad["strict"])
    assert f"at byte {LATIN1_BAD_BYTE}" in errors["legacy/latin1.md"]["message"]
    assert "encoding_errors" in errors["legacy/latin1.md"]["message"]
    assert "binary" in errors["assets/logo.md"]["message"]
    huge_size = len(bad["files"]["exports/huge.md"])
    assert f"{huge_size:,} bytes" in errors["exports/huge.md"]["message"]
    assert f"max_file_bytes ({MAX_FILE_BYTES:,})" in errors["exports/huge.md"]["message"]
    assert "python/object/apply:os.system" in errors["unsafe.md"]["message"]
    assert "cannot read" in errors["drafts/vanishing.md"]["message"]
    assert "vanishing.md" in errors["drafts/vanishing.md"]["message"]
    assert "span list ran past the end" in errors["drafts/strategy-fails.md"]["message"]


def test_error_documents_record_what_was_known_about_the_file(bad):
    docs = documents(bad["strict"])
    files = bad["files"]
    # Read, then rejected: size and hash of the bytes that were read.
    for doc_id in ("legacy/latin1.md", "assets/logo.md", "unsafe.md", "drafts/strategy-fails.md"):
        assert docs[doc_id]["size_bytes"] == len(files[doc_id]), doc_id
        assert docs[doc_id]["content_sha256"] == hashlib.sha256(files[doc_id]).hexdigest(), doc_id
    assert docs["legacy/latin1.md"]["encoding"] is None  # it could not be decoded
    # Never read: the size the listing reported, no hash.
    for doc_id in ("exports/huge.md", "drafts/vanishing.md"):
        assert docs[doc_id]["size_bytes"] == len(files[doc_id]), doc_id
        assert docs[doc_id]["content_sha256"] is None, doc_id


def test_python_object_tag_in_front_matter_never_runs(bad, tmp_path):
    assert not bad["marker"].exists(), "the front matter's os.system tag was executed"
    # Control: the payload is live; an unsafe YAML loader would have run it.
    control = tmp_path / "control-marker"
    front_matter = unsafe_front_matter(control).decode().split("---\n")[1]
    yaml.unsafe_load(front_matter)
    assert control.exists()


def test_every_good_document_is_fully_written(bad):
    docs = documents(bad["strict"])
    chunks = rows_by_doc(bad["strict"], "chunks")
    assert set(chunks) == set(CORPUS)
    for doc_id, data in CORPUS.items():
        assert_document_chunks(chunks[doc_id], data)
        row = docs[doc_id]
        assert row["status"] == "ok" and row["message"] is None
        assert row["content_sha256"] == hashlib.sha256(data).hexdigest()
        assert row["size_bytes"] == len(data)
        assert row["chunk_count"] == len(chunks[doc_id])
        assert row["token_count"] == sum(chunk["token_count"] for chunk in chunks[doc_id])


def test_good_documents_are_the_same_as_in_a_corpus_without_bad_files(bad, tmp_path):
    clean = write_corpus(tmp_path / "clean")
    run([clean], tmp_path / "out")

    def comparable(output):
        return sorted(
            (
                row["doc_id"],
                row["chunk_index"],
                row["text"],
                row["start_char"],
                row["end_char"],
                row["token_count"],
                tuple(row["heading_path"]),
                row["chunk_uuid"],
            )
            for row in rows(output, "chunks")
        )

    assert comparable(bad["strict"]) == comparable(tmp_path / "out")


def test_replace_chunks_invalid_utf8_with_replacement_characters(bad):
    docs = documents(bad["replace"])
    latin1 = docs["legacy/latin1.md"]
    assert latin1["status"] == "ok"
    assert latin1["encoding"] == "utf-8 (replaced)"
    assert latin1["content_sha256"] == hashlib.sha256(LATIN1).hexdigest()
    assert all(docs[doc_id]["encoding"] == "utf-8" for doc_id in CORPUS)
    chunks = rows_by_doc(bad["replace"], "chunks")["legacy/latin1.md"]
    text = LATIN1.decode("utf-8", errors="replace")
    assert "\ufffd" in "".join(row["text"] for row in chunks)
    assert chunks[0]["heading_path"] == ["Caf\ufffd notes"]
    for row in chunks:
        assert row["text"] == text[row["start_char"] : row["end_char"]]
    assert chunkline.reconstruct([as_chunk(row) for row in chunks]) == text


def test_replace_leaves_the_other_bad_kinds_as_errors(bad):
    errors = errors_by_doc(bad["replace"])
    assert {doc_id: row["error_type"] for doc_id, row in errors.items()} == {
        "assets/logo.md": "BinaryFile",
        "exports/huge.md": "FileTooLarge",
        "unsafe.md": "InvalidFrontMatter",
    }
    summary = bad["replace_summary"]
    # The good documents, latin1.md and strategy-fails.md (nothing patched in this run); vanishing.md is gone.
    assert (summary.documents_ok, summary.documents_error) == (len(CORPUS) + 2, 3)
    chunks = rows_by_doc(bad["replace"], "chunks")
    for doc_id, data in CORPUS.items():
        assert_document_chunks(chunks[doc_id], data)
    assert not bad["marker"].exists()


def test_replaced_document_byte_offsets_point_into_the_file(bad):
    """PRODUCT: start_byte/end_byte index the file's bytes. With ``encoding_errors: replace`` one invalid
    byte becomes U+FFFD (three bytes in UTF-8): the offsets must still point into the file."""
    chunks = rows_by_doc(bad["replace"], "chunks")["legacy/latin1.md"]
    assert chunks[-1]["end_byte"] == len(LATIN1)
    for row in chunks:
        assert LATIN1[row["start_byte"] : row["end_byte"]].decode("utf-8", errors="replace") == row["text"]


def test_read_step_reports_a_vanished_file_without_raising(tmp_path):
    """The read DoFn on its own: a matched file deleted before the read is a ``read`` problem."""
    root = write_files(tmp_path / "docs", {"kept.md": b"# Kept\n", "gone.md": b"# Gone\n"})
    config = read_module.InputConfig(paths=(str(root),))
    matched = {source.doc_id: source for source in inputs_module.match_input(str(root), 0, config)}
    (root / "gone.md").unlink()
    reader = read_module._ReadFileFn(config, ())
    reader.setup()
    (gone,) = reader.process(("gone.md", [matched["gone.md"]]))
    (kept,) = reader.process(("kept.md", [matched["kept.md"]]))
    assert gone.data is None and gone.problem is not None
    assert (gone.problem.stage, gone.problem.error_type, gone.problem.skipped) == ("read", "FileNotFoundError", False)
    assert kept.problem is None and kept.data == b"# Kept\n" and kept.size_bytes == 7


@pytest.fixture
def small_bad_corpus(tmp_path):
    root = write_corpus(tmp_path / "corpus")
    write_files(root, {"legacy/latin1.md": LATIN1})
    return root


def test_fail_on_error_exits_1_when_errors_exist(small_bad_corpus, tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["run", str(small_bad_corpus), "--output", str(output), "--fail-on-error"]) == 1
    captured = capsys.readouterr()
    assert "--fail-on-error" in captured.err
    assert "legacy/latin1.md [decode/InvalidUtf8]" in captured.out
    # The dataset is still published, errors and all.
    assert len(rows(output, "errors")) == 1
    assert set(rows_by_doc(output, "chunks")) == set(CORPUS)


def test_errors_without_fail_on_error_exit_0(small_bad_corpus, tmp_path, capsys):
    assert main(["run", str(small_bad_corpus), "--output", str(tmp_path / "out")]) == 0
    assert "1 error" in capsys.readouterr().out


def test_fail_on_error_exits_0_without_errors(corpus, tmp_path, capsys):
    assert main(["run", str(corpus), "--output", str(tmp_path / "out"), "--fail-on-error"]) == 0
    assert f"({len(CORPUS)} ok, 0 error, 0 skipped)" in capsys.readouterr().out
