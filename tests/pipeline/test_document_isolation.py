"""Per-document isolation: nothing one document holds (its front matter, its bytes, its text, the rows
made from it) can stop ``chunkline run`` or cost other documents anything.

Whatever fails for a document — decoding, parsing, its front matter, the strategy, building its rows,
fitting them to the tables' Arrow schemas — becomes that document's one ``errors`` row and a ``documents``
row with status ``error``; the run exits 0 and publishes every other document.
"""

from __future__ import annotations

import json
import os

import pytest
from hostile_corpus import front_matter_billion_laughs, front_matter_odd_keys, front_matter_recursive_alias
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_front_matter import yaml_front_matter
from test_hostile_tokenizers import PANICKING, save

import chunkline.dataset.document_rows as document_rows_module
import chunkline.encode_ahead as encode_ahead_module
import chunkline.registry as registry_module
from chunkline import parse_markdown
from chunkline.config import ChunkConfig
from chunkline.dataset.inputs import SourceFile
from chunkline.pipelines.cli import main
from chunkline.record import ChunkSpan
from chunkline.strategies.headings import HeadingsParams
from chunkline.transforms.chunk import ChunkDocuments

from .conftest import CORPUS, assert_document_chunks, documents, rows, rows_by_doc, write_files

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def no_chunkline_environment(monkeypatch):
    """Settings come only from what each test sets."""
    for name in list(os.environ):
        if name.startswith("CHUNKLINE_"):
            monkeypatch.delenv(name)


def run_cli(corpus, output, *arguments: str) -> int:
    return main(["run", str(corpus), "--output", str(output), *arguments])


def assert_one_documents_row_each_and_the_rest_chunked(files, output, failed: dict[str, tuple[str, str]]) -> None:
    """One documents row for each of ``files`` (doc_id -> bytes); ``failed`` are error rows of
    (stage, error_type), every other document is ok and its chunk rows rebuild its bytes."""
    docs = documents(output)
    names = sorted(files)
    assert sorted(docs) == names
    errors = rows(output, "errors")
    assert sorted((row["doc_id"], row["stage"], row["error_type"]) for row in errors) == sorted(
        (doc_id, stage, error_type) for doc_id, (stage, error_type) in failed.items()
    )
    chunks = rows_by_doc(output, "chunks")
    for doc_id in names:
        if doc_id in failed:
            assert docs[doc_id]["status"] == "error" and docs[doc_id]["chunk_count"] == 0, doc_id
            assert docs[doc_id]["message"] and "\n" not in docs[doc_id]["message"], doc_id
            assert doc_id not in chunks
        else:
            assert docs[doc_id]["status"] == "ok", (doc_id, docs[doc_id]["message"])
            assert_document_chunks(chunks[doc_id], files[doc_id])


# --------------------------------------------------------------------------------------------------
# Front matter
# --------------------------------------------------------------------------------------------------


CI_DOCUMENT = (
    b"---\nname: CI\non:\n  push:\n    branches: [main]\nyes: true\n2024: audit year\n2024-01-01: cut-over\n"
    b"null: unset\n---\n# Continuous integration\n\nEvery push to main runs the tests.\n"
)


def test_front_matter_with_odd_keys_aliases_and_recursion_publishes_with_every_document(tmp_path):
    files = {
        **CORPUS,
        "ci/workflow.md": CI_DOCUMENT,
        "odd_keys.md": front_matter_odd_keys(),
        "laughs.md": front_matter_billion_laughs(),
        "loop.md": front_matter_recursive_alias(),
    }
    corpus = write_files(tmp_path / "corpus", files)
    output = tmp_path / "out"
    assert run_cli(corpus, output) == 0
    assert_one_documents_row_each_and_the_rest_chunked(
        files, output, {"laughs.md": ("parse", "InvalidFrontMatter"), "loop.md": ("parse", "InvalidFrontMatter")}
    )
    docs = documents(output)
    assert json.loads(docs["ci/workflow.md"]["front_matter"]) == {
        "name": "CI",
        "on": {"push": {"branches": ["main"]}},
        "yes": True,
        "2024": "audit year",
        "2024-01-01": "cut-over",
        "null": "unset",
    }
    odd = json.loads(docs["odd_keys.md"]["front_matter"])
    assert odd["tide"] == {"unit": "cm", "every": 30} and odd["labels"] == ["tide", "wind"]
    assert odd["calibration"] == "nan"
    assert "aliases expand it past" in docs["laughs.md"]["message"]
    assert "recursive alias" in docs["loop.md"]["message"]


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(bodies=st.lists(yaml_front_matter(), min_size=3, max_size=12))
@pytest.mark.slow
def test_generated_yaml_front_matter_always_publishes_one_row_per_document(tmp_path_factory, bodies):
    files = {
        f"generated/doc{number}.md": f"---\n{body}---\n# Document {number}\n\nBody text {number}.\n".encode()
        for number, body in enumerate(bodies)
    }
    corpus = write_files(tmp_path_factory.mktemp("corpus"), {"README.md": CORPUS["README.md"], **files})
    output = tmp_path_factory.mktemp("out") / "dataset"
    assert run_cli(corpus, output) == 0
    docs = documents(output)
    assert sorted(docs) == sorted(["README.md", *files])
    for doc_id, data in files.items():
        front_matter = parse_markdown(data.decode("utf-8")).front_matter
        row = docs[doc_id]
        if front_matter is not None and front_matter.error is not None:
            assert row["status"] == "error" and row["message"] == front_matter.error
        else:
            assert row["status"] == "ok", row["message"]
            expected = front_matter.data if front_matter is not None else None
            assert (json.loads(row["front_matter"]) if row["front_matter"] is not None else None) == expected


# --------------------------------------------------------------------------------------------------
# Failures after decoding: the parser, the rows, the schemas
# --------------------------------------------------------------------------------------------------


def register_strategy(monkeypatch, name: str, chunk) -> None:
    strategy = registry_module.Strategy(name, HeadingsParams, chunk, "a test strategy")
    monkeypatch.setitem(registry_module._registry, name, strategy)


def test_a_row_its_table_cannot_hold_is_that_documents_error_not_a_failed_write(tmp_path, monkeypatch):
    """A strategy that returns a heading path of numbers (a plugin's bug) for one document: the chunks
    table holds lists of strings, so that document's rows would fail the whole shard's write."""

    def numbered_headings(document, config, counter):
        if "Quick start" in document.text:
            return [ChunkSpan(0, len(document.text), heading_path=(1, 2))]
        return [ChunkSpan(0, len(document.text), heading_path=("whole document",))]

    register_strategy(monkeypatch, "test-numbered-headings", numbered_headings)
    corpus = write_files(tmp_path / "corpus", CORPUS)
    output = tmp_path / "out"
    assert run_cli(corpus, output, "--set", "chunking.strategy=test-numbered-headings") == 0
    assert_one_documents_row_each_and_the_rest_chunked(CORPUS, output, {"README.md": ("chunk", "RowDoesNotFitSchema")})
    (error,) = rows(output, "errors")
    assert error["message"].startswith("a chunks row of this document cannot be stored: ")


def test_a_document_the_parser_fails_on_is_one_error_row(tmp_path, monkeypatch):
    real_parse = encode_ahead_module.parse_markdown

    def parse_or_overflow(text, parser):
        if "Quick start" in text:
            raise RecursionError("maximum recursion depth exceeded while parsing a block")
        return real_parse(text, parser)

    monkeypatch.setattr(encode_ahead_module, "parse_markdown", parse_or_overflow)
    corpus = write_files(tmp_path / "corpus", CORPUS)
    output = tmp_path / "out"
    assert run_cli(corpus, output) == 0
    assert_one_documents_row_each_and_the_rest_chunked(CORPUS, output, {"README.md": ("parse", "RecursionError")})
    assert documents(output)["README.md"]["message"] == (
        "markdown could not be parsed: maximum recursion depth exceeded while parsing a block"
    )


def test_a_failure_after_chunking_leaves_no_chunk_rows_and_a_clean_error_document(monkeypatch):
    """Rows are only emitted once every step of the document succeeded: an error document never carries
    the chunk count, title or front matter of the half-made ok row."""

    class FrontMatterFails:
        """The chunker's JSON encoder, failing to write the front matter of the documents row."""

        @staticmethod
        def encode(*args, **kwargs):
            raise KeyError("front_matter")

    monkeypatch.setattr(document_rows_module, "_FRONT_MATTER_JSON", FrontMatterFails)
    source = SourceFile(
        "notes.md", "file:///corpus/notes.md", 0, "/corpus/notes.md", 24, None, b"---\nk: v\n---\n# Notes\n\nText.\n"
    )
    (element,) = ChunkDocuments(ChunkConfig()).chunk_in_process([source])
    assert [table for table, _ in element] == ["documents", "errors"]
    document_row, error_row = element[0][1], element[1][1]
    assert document_row["status"] == "error" and document_row["chunk_count"] == 0
    assert document_row["token_count"] == 0 and document_row["title"] is None and document_row["front_matter"] is None
    assert document_row["encoding"] == "utf-8"
    assert (error_row["stage"], error_row["error_type"]) == ("chunk", "KeyError")
    assert error_row["message"] == "its rows could not be built: 'front_matter'"


# --------------------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "workers",
    [
        pytest.param((), id="in-process"),
        pytest.param(("--set", "run.workers=2"), id="worker-processes", marks=pytest.mark.slow),
    ],
)
def test_a_tokenizer_that_panics_on_one_document_is_that_documents_error_row(tmp_path, workers):
    """A valid tokenizer.json whose Split pre-tokenizer regex ``(a+)+b`` meets a run of 36 ``a``: the
    regex engine gives up and the Rust code panics (a ``BaseException``, which ``except Exception`` misses)."""
    build, trigger = PANICKING["split-nested-quantifier"]
    tokenizer_file = save(build(), tmp_path, "split-nested-quantifier")
    files = {**CORPUS, "runs.md": f"# Runs\n\nA run of the letter a:\n\n{trigger}\n".encode()}
    corpus = write_files(tmp_path / "corpus", files)
    output = tmp_path / "out"
    settings = ["--set", "tokenizer=huggingface", "--set", f"tokenizer_file={tokenizer_file}", *workers]
    assert run_cli(corpus, output, *settings) == 0
    assert_one_documents_row_each_and_the_rest_chunked(files, output, {"runs.md": ("chunk", "TokenizerFailedError")})
    assert documents(output)["runs.md"]["message"] == (
        f"the Hugging Face tokenizer {tokenizer_file} failed on this text (Onig: Regex search error: "
        "retry-limit-in-match over); its normalizer or pre-tokenizer cannot handle it"
    )


def test_a_rust_panic_in_the_parser_is_that_documents_error_row(tmp_path, monkeypatch):
    """The fast parser is a Rust extension too: a panic there (pyo3's ``BaseException``) is one document's
    error, as any exception of the parser is."""
    build, trigger = PANICKING["split-nested-quantifier"]
    try:
        build().encode(trigger)
    except BaseException as error:  # the real pyo3 PanicException class, raised by Rust code
        panic = error
    real_parse = encode_ahead_module.parse_markdown

    def parse_or_panic(text, parser):
        if "Quick start" in text:
            raise panic
        return real_parse(text, parser)

    monkeypatch.setattr(encode_ahead_module, "parse_markdown", parse_or_panic)
    corpus = write_files(tmp_path / "corpus", CORPUS)
    output = tmp_path / "out"
    assert run_cli(corpus, output) == 0
    assert_one_documents_row_each_and_the_rest_chunked(CORPUS, output, {"README.md": ("parse", "PanicException")})
    assert documents(output)["README.md"]["message"] == (
        "markdown could not be parsed: Onig: Regex search error: retry-limit-in-match over"
    )
