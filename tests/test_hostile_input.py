"""Hostile input: every strategy and the whole pipeline survive the hostile corpus with every invariant kept.

The corpus is ``tests/hostile_corpus.py`` (one generated file per kind: empty files, odd line endings, NUL
bytes, invalid UTF-8, a PNG named ``.md``, a 1 MB line, deep nesting, 20,000 headings, unclosed fences,
unsafe front matter, special-token text, emoji, right-to-left text...).

Engine level: every registered strategy (``max_tokens`` 512, ``overlap_tokens`` 50, the strategy's default
parameters) chunks every file that decodes as UTF-8 without an exception, and keeps PRODUCT.md's
invariants (``conftest.assert_invariants``; protected blocks whole for strategies that keep blocks whole;
the soft bound of ``blocks`` through ``test_strategy_contract.soft_limit_check``; the same chunks twice).
Lines marked ``NOT A HEADING`` (in code, HTML blocks, comments, JSX) never reach a heading path.

Sizes: every strategy gets every file at full size (1 MB line, 20,000 headings, 60,000 sentences...).
Measured on 2 cores, the engine matrix (13 strategies x 34 files) takes about 85 s and the whole module
about 2 minutes; the slowest case is ``blocks`` on ``headings_20000.md`` (19,000 chunks), about 6 s.

Pipeline level: ``chunkline run`` (in-process runner) on the whole corpus with every strategy finishes;
each file of ``EXPECTED_ERRORS`` is exactly one ``errors`` row of its stage and type and a ``documents`` row
with status ``error``; every other file is ``ok`` and its chunk rows rebuild its bytes exactly. A regex
that backtracks catastrophically costs one error row and half a second, not the run; the
``!!python/object/apply:os.system`` front matter never runs.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path

import hostile_corpus
import pytest
import yaml
from conftest import assert_invariants, assert_protected_blocks_whole
from hostile_corpus import EXPECTED_ERRORS, HOSTILE_FILES, NOT_A_HEADING, PYTHON_OBJECT_MARKER, write_hostile_corpus
from pipeline.conftest import assert_document_chunks, documents, rows, rows_by_doc
from test_strategy_contract import config_for, soft_limit_check

from chunkline import available_strategies, chunk_markdown, get_strategy, parse_markdown
from chunkline.pipelines.cli import main
from chunkline.tokenizers import get_token_counter

STRATEGIES = available_strategies()
MAX_TOKENS, OVERLAP_TOKENS = 512, 50


@functools.cache
def hostile_bytes(name: str) -> bytes:
    """The bytes of a hostile file (built once per session)."""
    return HOSTILE_FILES[name]()


def hostile_text(name: str) -> str:
    return hostile_bytes(name).decode("utf-8")


def _decodes_as_utf8(name: str) -> bool:
    try:
        hostile_text(name)
    except UnicodeDecodeError:
        return False
    return True


#: Files the engine is given: every hostile file that decodes as UTF-8 (the pipeline refuses the others
#: before the engine sees them).
UTF8_FILES = [name for name in HOSTILE_FILES if _decodes_as_utf8(name)]

#: Files with lines that a CommonMark parser must not take for headings.
FILES_WITH_HEADING_TRAPS = [name for name in UTF8_FILES if NOT_A_HEADING.encode() in hostile_bytes(name)]


# --------------------------------------------------------------------------------------------------
# The corpus itself
# --------------------------------------------------------------------------------------------------


def test_every_hostile_file_is_documented_deterministic_and_named_for_its_kind():
    assert len(HOSTILE_FILES) >= 35
    for name, make_bytes in HOSTILE_FILES.items():
        assert name.endswith(".md"), name
        assert make_bytes.__doc__ and make_bytes.__doc__.strip(), f"{name}: no docstring"
        assert name.removesuffix(".md") == make_bytes.__name__, f"{name} is built by {make_bytes.__name__}"
        data = make_bytes()
        assert isinstance(data, bytes), name
        assert make_bytes() == data, f"{name} is not deterministic"
    assert set(EXPECTED_ERRORS) <= set(HOSTILE_FILES)


@pytest.mark.slow
def test_the_big_files_have_the_advertised_sizes():
    assert len(hostile_bytes("single_line_1mb.md")) == 1_000_000
    assert b"\n" not in hostile_bytes("single_line_1mb.md")
    blob = hostile_bytes("base64_blob_300kb.md")
    assert len(blob) >= 300_000 and max(len(word) for word in blob.split()) >= 299_000
    assert hostile_bytes("nested_block_quotes_5000.md").count(b"> " * 5000) >= 1
    assert hostile_bytes("nested_list_levels_2000.md").count(b"- " * 2000) == 1
    headings = parse_markdown(hostile_text("headings_20000.md")).headings
    assert len(headings) == 20_000
    sentences = hostile_text("section_of_60000_sentences.md")
    assert sentences.count(".") + sentences.count("?") == 60_000
    assert len(parse_markdown(sentences).headings) == 1
    assert hostile_text("code_block_20000_lines.md").count("\n") > 20_000


def test_the_script_writes_the_corpus(tmp_path):
    script = Path(hostile_corpus.__file__)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "corpus")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    written = {path.name: path.read_bytes() for path in (tmp_path / "corpus").iterdir()}
    assert set(written) == set(HOSTILE_FILES)
    for name, data in written.items():
        if name != "front_matter_python_object.md":  # its payload names the folder it was written to
            assert data == hostile_bytes(name), name
    assert not (tmp_path / "corpus" / PYTHON_OBJECT_MARKER).exists()


# --------------------------------------------------------------------------------------------------
# Engine level: every strategy on every file
# --------------------------------------------------------------------------------------------------


def check_hostile_document(name: str, strategy: str, text: str) -> None:
    """Chunk ``text`` with ``strategy`` and check every invariant, the determinism and the headings."""
    config = config_for(strategy, MAX_TOKENS, OVERLAP_TOKENS)
    doc_id, source_uri = f"hostile/{name}", f"file:///hostile/{name}"
    chunks = chunk_markdown(text, config, doc_id=doc_id, source_uri=source_uri)
    assert_invariants(
        text,
        chunks,
        config,
        doc_id=doc_id,
        source_uri=source_uri,
        over_limit_allowed=soft_limit_check(strategy, text, MAX_TOKENS),
    )
    if get_strategy(strategy).keeps_blocks_whole:
        assert_protected_blocks_whole(text, chunks, MAX_TOKENS, get_token_counter())
    for chunk in chunks:
        assert not any(NOT_A_HEADING in title for title in chunk.heading_path), (chunk.chunk_index, chunk.heading_path)
    assert chunk_markdown(text, config, doc_id=doc_id, source_uri=source_uri) == chunks


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", UTF8_FILES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_every_strategy_keeps_the_invariants_on_every_hostile_file(strategy, name):
    check_hostile_document(name, strategy, hostile_text(name))


@pytest.mark.parametrize("name", FILES_WITH_HEADING_TRAPS)
def test_hash_lines_in_code_html_and_jsx_are_not_headings(name):
    text = hostile_text(name)
    titles = [heading.heading_text for heading in parse_markdown(text).headings]
    assert titles, f"{name} has real headings around the traps"
    assert not [title for title in titles if NOT_A_HEADING in title]


#: How the headings inside quotes and list items of the corpus begin.
NESTED_HEADING_TITLES = ("Quoted", "Doubly", "Setext in a quote", "Heading in", "Another", "Nested item", "A heading")
FILES_WITH_NESTED_HEADINGS = ["headings_in_block_quotes.md", "headings_in_list_items.md", "nested_block_quotes_5000.md"]


@pytest.mark.parametrize("name", FILES_WITH_NESTED_HEADINGS)
def test_headings_inside_quotes_and_list_items_are_not_document_sections(name):
    titles = [heading.heading_text for heading in parse_markdown(hostile_text(name)).headings]
    assert titles
    assert not [title for title in titles if title.startswith(NESTED_HEADING_TITLES)]


def test_unclosed_and_unsafe_front_matter_are_told_apart():
    assert parse_markdown(hostile_text("front_matter_yaml.md")).front_matter.data["owner"] == {"team": "ops"}
    assert parse_markdown(hostile_text("front_matter_toml.md")).front_matter.data["owner"] == {"team": "ops"}
    assert parse_markdown(hostile_text("front_matter_unclosed.md")).front_matter is None
    unsafe = parse_markdown(hostile_text("front_matter_python_object.md")).front_matter
    assert unsafe.data is None and "python/object/apply:os.system" in unsafe.error


# --------------------------------------------------------------------------------------------------
# Pipeline level: `chunkline run` on the whole corpus
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory) -> Path:
    """The hostile corpus, written once for the module's pipeline runs."""
    return write_hostile_corpus(tmp_path_factory.mktemp("hostile") / "corpus")


def strategy_settings(strategy: str) -> list[str]:
    settings = ["--set", f"chunking.strategy={strategy}"]
    if strategy == "regex":
        settings += ["--set", "chunking.regex.pattern=^#"]
    return settings


def run_cli(inputs: Path, output: Path, *arguments: str) -> float:
    """``chunkline run INPUT --output OUTPUT ...`` in this process; returns its wall time in seconds."""
    started = time.monotonic()
    exit_code = main(["run", str(inputs), "--output", str(output), *arguments])
    assert exit_code == 0, "errors in rows must not fail a run without --fail-on-error"
    return time.monotonic() - started


def assert_corpus_written(corpus: Path, output: Path, expected_errors: dict[str, tuple[str, str]]) -> None:
    """Every expected error is exactly one error row and one error document; every other file is ok and
    its chunk rows rebuild it exactly."""
    names = sorted(path.name for path in corpus.glob("*.md"))
    errors = rows(output, "errors")
    assert sorted((row["doc_id"], row["stage"], row["error_type"]) for row in errors) == sorted(
        (name, stage, error_type) for name, (stage, error_type) in expected_errors.items()
    )
    docs = documents(output)
    assert sorted(docs) == names
    chunks = rows_by_doc(output, "chunks")
    assert set(chunks) == set(names) - set(expected_errors)
    for name in names:
        row = docs[name]
        if name in expected_errors:
            assert row["status"] == "error" and row["message"], (name, row)
            assert row["chunk_count"] == 0, name
            continue
        assert row["status"] == "ok", (name, row["message"])
        data = (corpus / name).read_bytes()
        assert_document_chunks(chunks[name], data)
        assert row["chunk_count"] == len(chunks[name]), name
        assert row["token_count"] == sum(chunk["token_count"] for chunk in chunks[name]), name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_chunkline_run_writes_the_whole_hostile_corpus_with_every_strategy(strategy, corpus_folder, tmp_path):
    output = tmp_path / "out"
    run_cli(corpus_folder, output, *strategy_settings(strategy))
    assert_corpus_written(corpus_folder, output, EXPECTED_ERRORS)
    assert {row["strategy"] for row in rows(output, "chunks")} == {strategy}
    assert not (corpus_folder / PYTHON_OBJECT_MARKER).exists(), "the front matter's os.system tag was executed"


#: For each expected error type: words that say what is wrong (all of them), and words that say what to
#: do (at least one).
WHAT_IS_WRONG = {
    "InvalidUtf8": ("UTF-8", "at byte"),
    "BinaryFile": ("binary",),
    "InvalidFrontMatter": ("front matter", "at line"),
}
#: For files whose error type has several causes: words that name this file's cause.
CAUSE_NAMED = {
    "front_matter_python_object.md": ("python/object/apply:os.system",),
    "front_matter_billion_laughs.md": ("aliases expand",),
    "front_matter_recursive_alias.md": ("recursive alias",),
}
WHAT_TO_DO = {
    "InvalidUtf8": ("encoding_errors",),
    "BinaryFile": ("exclude", "remove", "rename", "delete"),
    "InvalidFrontMatter": ("fix", "remove", "delete", "quote", "write the values out"),
}


@pytest.fixture(scope="module")
def default_run(corpus_folder, tmp_path_factory) -> Path:
    """The dataset of ``chunkline run`` on the hostile corpus with the default configuration."""
    output = tmp_path_factory.mktemp("default-run") / "out"
    run_cli(corpus_folder, output)
    return output


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(EXPECTED_ERRORS))
@pytest.mark.slow
def test_error_messages_say_what_is_wrong_and_what_to_do(name, default_run):
    (error,) = [row for row in rows(default_run, "errors") if row["doc_id"] == name]
    message, error_type = error["message"], error["error_type"]
    assert documents(default_run)[name]["message"] == message
    expected_words = WHAT_IS_WRONG[error_type] + CAUSE_NAMED.get(name, ())
    missing = [words for words in expected_words if words.lower() not in message.lower()]
    assert not missing, f"{name} [{error_type}]: the message does not say {missing}: {message!r}"
    assert any(words.lower() in message.lower() for words in WHAT_TO_DO[error_type]), (
        f"{name} [{error_type}]: the message does not say what to do (none of {WHAT_TO_DO[error_type]}): {message!r}"
    )


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_catastrophically_backtracking_regex_costs_one_error_row_not_the_run(corpus_folder, tmp_path):
    corpus = write_hostile_corpus(tmp_path / "corpus")
    (corpus / "long_run_of_a.md").write_bytes(b"# A long run of a\n\n" + b"a" * 5000 + b"\n\nThe end.\n")
    output = tmp_path / "out"
    seconds = run_cli(
        corpus,
        output,
        "--set",
        "chunking.strategy=regex",
        "--set",
        "chunking.regex.pattern=(a+)+(x)$",
        "--set",
        "chunking.regex.timeout_seconds=0.5",
    )
    assert_corpus_written(corpus, output, {**EXPECTED_ERRORS, "long_run_of_a.md": ("chunk", "RegexTimeoutError")})
    (error,) = [row for row in rows(output, "errors") if row["doc_id"] == "long_run_of_a.md"]
    assert "(a+)+(x)$" in error["message"] and "timeout_seconds" in error["message"]
    assert seconds < 60, f"the run took {seconds:.1f} s: the pattern's time limit did not hold"


def test_python_object_front_matter_never_runs(corpus_folder, default_run, tmp_path):
    marker = corpus_folder.resolve() / PYTHON_OBJECT_MARKER
    document = corpus_folder / "front_matter_python_object.md"
    assert str(marker) in document.read_text()
    chunk_markdown(document.read_text())
    assert documents(default_run)["front_matter_python_object.md"]["status"] == "error"
    assert not marker.exists(), "the front matter's os.system tag was executed"

    # Control: the payload is live; an unsafe YAML loader would have run it.
    control = tmp_path / "control.marker"
    front_matter = hostile_corpus.front_matter_python_object(control).decode().split("---\n")[1]
    yaml.unsafe_load(front_matter)
    assert control.exists()
