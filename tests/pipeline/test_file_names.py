"""File names that are not valid UTF-8: the run goes on, and every id is valid UTF-8 and distinct.

A local disk's names are bytes; Python lists the ones that are not UTF-8 with lone surrogates, which no
Arrow column or Beam string coder accepts. Such a file's ``doc_id`` and ``source_uri`` percent-escape the
undecodable bytes (``caf\\xe9.md`` -> ``caf%E9.md``), a literal ``%`` that would read as such an escape is
written ``%25``, and the file is still read through its real name, in full and incremental runs and in
``chunkline chunk``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.pipelines.cli import main

from .conftest import assert_document_chunks, documents, rows, rows_by_doc, run, write_corpus

pytestmark = pytest.mark.timeout(600)

LATIN1_NAME = b"caf\xe9.md"  # "café.md" written by a Latin-1 system
LATIN1_TEXT = b"# Caf\xc3\xa9 menu\n\nEspresso and croissants from seven.\n"
LITERAL_NAME = b"caf%E9.md"  # a name that really holds "%E9"


def write_raw(folder: Path, name: bytes, data: bytes) -> Path:
    path = os.path.join(os.fsencode(folder), name)
    with open(path, "wb") as handle:
        handle.write(data)
    return Path(os.fsdecode(path))


@pytest.fixture
def named(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    write_raw(corpus, LATIN1_NAME, LATIN1_TEXT)
    write_raw(corpus / "guide", b"r\xe9glages-\xff\xfe.md", b"# R\xc3\xa9glages\n\nTwo bad bytes in the name.\n")
    write_raw(corpus, LITERAL_NAME, b"# Literal\n\nThe name holds a percent sign.\n")
    return corpus


def test_a_name_that_is_not_utf8_gets_a_percent_escaped_id_and_is_read_through_its_real_name(named, tmp_path):
    output = tmp_path / "out"
    summary = run([named], output)
    docs = documents(output)
    assert docs["caf%E9.md"]["status"] == "ok"
    assert docs["guide/r%E9glages-%FF%FE.md"]["status"] == "ok"
    assert docs["caf%E9.md"]["source_uri"] == f"file://{named}/caf%E9.md"
    assert_document_chunks(rows_by_doc(output, "chunks")["caf%E9.md"], LATIN1_TEXT)
    # The literal "%E9" is escaped, so the two files cannot share an id.
    assert docs["caf%25E9.md"]["status"] == "ok"
    assert summary.documents_error == 0 and summary.documents_ok == len(docs)


@pytest.mark.slow
def test_an_incremental_run_carries_such_a_file_over_and_sees_its_edit(named, tmp_path):
    output = tmp_path / "out"
    run([named], output)
    unchanged = run([named], output)
    assert unchanged.rebuild["mode"] == "incremental" and unchanged.rebuild["documents_chunked"] == 0
    write_raw(named, LATIN1_NAME, LATIN1_TEXT + b"\n## Hours\n\nSeven to noon.\n")
    edited = run([named], output)
    assert edited.rebuild["mode"] == "incremental" and edited.rebuild["documents_chunked"] == 1
    assert edited.changes["changed"] == 1 and edited.changes["deleted"] == 0
    assert rows_by_doc(output, "chunks")["caf%E9.md"][-1]["text"].endswith("## Hours\n\nSeven to noon.\n")


def test_chunk_command_names_such_a_file_as_run_does(named, capsys):
    assert main(["chunk", str(named), "--format", "jsonl"]) == 0
    out = capsys.readouterr().out
    doc_ids = {json.loads(line)["doc_id"] for line in out.splitlines()}
    assert {"caf%E9.md", "caf%25E9.md", "guide/r%E9glages-%FF%FE.md"} <= doc_ids
    for line in out.splitlines():
        line.encode("utf-8")  # no lone surrogate reached the output


# Names of one path part: any bytes but "/" and NUL, not "." or "..", within the usual 255-byte limit.
name_bytes = st.binary(min_size=1, max_size=40).filter(lambda name: b"/" not in name and b"\0" not in name)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(name_bytes, min_size=1, max_size=6, unique=True))
@pytest.mark.slow
def test_any_byte_names_give_one_documents_row_each_with_distinct_valid_utf8_ids(names):
    with tempfile.TemporaryDirectory() as base:
        corpus = Path(base) / "corpus"
        corpus.mkdir()
        for number, name in enumerate(names):
            write_raw(corpus, name + b".md", f"# Document {number}\n\nBody {number}.\n".encode())
        output = Path(base) / "out"
        assert main(["run", str(corpus), "--output", str(output), "--set", "output.shards=1"]) == 0
        docs = documents(output)  # one row per doc_id
        assert len(docs) == len(names)
        errors = {row["doc_id"]: row for row in rows(output, "errors")}
        for doc_id, row in docs.items():
            doc_id.encode("utf-8")
            row["source_uri"].encode("utf-8")
            assert row["status"] in ("ok", "error")
            if row["status"] == "error":
                # Only a name that Windows would read as absolute or climbing (``C:x``, ``\\x``, ``..\\x``).
                assert errors[doc_id]["error_type"] == "PathOutsideInput", errors[doc_id]


@given(names=st.lists(st.binary(min_size=1, max_size=12), min_size=2, max_size=8, unique=True))
def test_utf8_name_is_one_to_one_and_always_valid_utf8(names):
    from chunkline.dataset.inputs import utf8_name

    listed = [os.fsdecode(name) for name in names]  # what a local listing gives for these bytes
    escaped = [utf8_name(name) for name in listed]
    assert len(set(escaped)) == len(escaped)
    for original, name in zip(names, escaped):
        name.encode("utf-8")
        if b"%" not in original:
            try:
                assert name == original.decode("utf-8")  # a valid name without "%" is kept as it is
            except UnicodeDecodeError:
                pass


def test_utf8_name_keeps_ordinary_percent_signs():
    from chunkline.dataset.inputs import utf8_name

    assert utf8_name("my%20file.md") == "my%20file.md"
    assert utf8_name("100%.md") == "100%.md"
    assert utf8_name("caf%E9.md") == "caf%25E9.md"
    assert utf8_name(os.fsdecode(b"caf\xe9.md")) == "caf%E9.md"
