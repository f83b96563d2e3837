"""Encoding a document's tokens on a second thread while it is parsed gives the chunks of encoding it where
the engine needs it: for every strategy on the sample corpus, on generated markdown, on hostile files
(surrogates, special-token text, CR-only lines, a 1 MB line), in the in-process chunker's rows and in
``chunkline chunk``'s output; a failed encoding fails as it does without the thread, and a forked child
encodes on a thread of its own."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import hostile_corpus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

from chunkline import encode_ahead
from chunkline.config import ChunkConfig
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.decoding import decode_file
from chunkline.dataset.document_rows import DocumentChunker
from chunkline.dataset.inputs import SourceFile
from chunkline.engine import chunk_markdown
from chunkline.registry import available_strategies
from chunkline.tokenizers import TiktokenCounter, counter_for

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
SAMPLE_TEXTS = {path.name: path.read_text(encoding="utf-8") for path in sorted(SAMPLE_CORPUS.rglob("*.md"))}
STRATEGY_PARAMS = {"regex": {"pattern": r"\n(?=## )"}}


@pytest.fixture
def every_document_ahead(monkeypatch):
    """Encode every document ahead, however short (the sample corpus's files are under the threshold)."""
    monkeypatch.setattr(encode_ahead, "MIN_CHARS_AHEAD", 0)


def _config(strategy: str, **fields) -> ChunkConfig:
    params = {strategy: STRATEGY_PARAMS[strategy]} if strategy in STRATEGY_PARAMS else {}
    return ChunkConfig.from_dict({"strategy": strategy, "max_tokens": 160, **params, **fields})


@pytest.mark.parametrize("strategy", available_strategies())
@pytest.mark.slow
def test_every_strategy_chunks_the_sample_corpus_alike_with_and_without_the_thread(strategy, every_document_ahead):
    config = _config(strategy)
    for name, text in SAMPLE_TEXTS.items():
        alone = chunk_markdown(text, config, doc_id=name, encode_ahead=False)
        ahead = chunk_markdown(text, config, doc_id=name, encode_ahead=True)
        assert ahead == alone, name


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(document=markdown_documents(), strategy=st.sampled_from(["headings", "blocks", "tokens", "sections"]))
@pytest.mark.slow
def test_generated_markdown_chunks_alike_with_and_without_the_thread(document, strategy, monkeypatch):
    monkeypatch.setattr(encode_ahead, "MIN_CHARS_AHEAD", 0)
    config = _config(strategy, embed_context="breadcrumb")
    assert chunk_markdown(document, config, encode_ahead=True) == chunk_markdown(document, config, encode_ahead=False)


@pytest.mark.parametrize(
    "name",
    [
        "tiktoken_special_tokens",
        "emoji_zwj_sequences",
        "combining_marks",
        "cr_only_line_endings",
        "single_line_1mb",
        "code_block_20000_lines",
    ],
)
@pytest.mark.slow
def test_hostile_files_chunk_alike_with_and_without_the_thread(name):
    text = decode_file(getattr(hostile_corpus, name)(), "replace")[0]
    config = ChunkConfig(max_tokens=256)
    assert chunk_markdown(text, config, encode_ahead=True) == chunk_markdown(text, config, encode_ahead=False)


def test_lone_surrogates_chunk_alike_with_and_without_the_thread(every_document_ahead):
    text = "# Probe\n\nA lone \ud800 surrogate and \udfff another.\n\n" + SAMPLE_TEXTS["glossary.md"]
    config = ChunkConfig(max_tokens=128)
    assert chunk_markdown(text, config, encode_ahead=True) == chunk_markdown(text, config, encode_ahead=False)


class _RecordingCounter(TiktokenCounter):
    """A tiktoken counter that records the thread each whole-text encoding ran on."""

    __slots__ = ("threads",)

    def __init__(self, counter: TiktokenCounter):
        super().__init__(counter.encoding)
        self.threads: list[str] = []

    def encode_array(self, text):
        self.threads.append(threading.current_thread().name)
        return super().encode_array(text)


def test_a_large_document_is_encoded_on_the_encoding_thread_and_a_short_one_is_not():
    counter = _RecordingCounter(counter_for(ChunkConfig()))
    large = "\n\n".join(SAMPLE_TEXTS.values())
    assert len(large) >= encode_ahead.MIN_CHARS_AHEAD
    pending = encode_ahead.start_encoding(large, counter)
    offsets = pending()
    assert offsets.token_count == len(counter.encoding.encode_ordinary(large))
    assert counter.threads == [encode_ahead.THREAD_NAME]
    assert encode_ahead.start_encoding(SAMPLE_TEXTS["glossary.md"], counter) is None


def _encoding_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == encode_ahead.THREAD_NAME]


def test_the_encoding_thread_is_joined_before_chunk_markdown_returns_or_raises(monkeypatch):
    large = "\n\n".join(SAMPLE_TEXTS.values())
    counter = _RecordingCounter(counter_for(ChunkConfig()))
    monkeypatch.setattr("chunkline.engine.counter_for", lambda config: counter)
    assert chunk_markdown(large, ChunkConfig(), encode_ahead=True)
    assert counter.threads[0] == encode_ahead.THREAD_NAME  # it did encode on the thread
    assert not _encoding_threads()

    def parse_fails(text, parser):
        raise RuntimeError("the parser broke")

    monkeypatch.setattr("chunkline.encode_ahead.parse_markdown", parse_fails)
    with pytest.raises(RuntimeError, match="the parser broke"):
        chunk_markdown(large, ChunkConfig(), encode_ahead=True)
    assert len(counter.threads) == 2 and not _encoding_threads()


def test_a_counter_that_holds_the_gil_is_never_handed_to_the_thread(every_document_ahead):
    class HoldsTheGil:
        encodes_without_gil = False

    assert encode_ahead.start_encoding(SAMPLE_TEXTS["cli.md"], HoldsTheGil()) is None


class _FailingCounter(TiktokenCounter):
    __slots__ = ()

    def encode_array(self, text):
        raise RuntimeError("the tokenizer broke")


def test_an_encoding_that_fails_on_the_thread_fails_where_it_does_without_it(monkeypatch, every_document_ahead):
    failing = _FailingCounter(counter_for(ChunkConfig()).encoding)
    monkeypatch.setattr("chunkline.engine.counter_for", lambda config: failing)
    for encode_on_thread in (False, True):
        with pytest.raises(RuntimeError, match="the tokenizer broke"):
            chunk_markdown(SAMPLE_TEXTS["cli.md"], ChunkConfig(), encode_ahead=encode_on_thread)


def _chunk_in_child(text: str, results) -> None:
    chunks = chunk_markdown(text, ChunkConfig(), encode_ahead=True)
    results.put((len(chunks), sum(chunk.token_count for chunk in chunks)))


def test_a_forked_child_encodes_on_a_thread_of_its_own():
    large = "\n\n".join(SAMPLE_TEXTS.values())
    expected = chunk_markdown(large, ChunkConfig(), encode_ahead=True)  # the parent's thread is running
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_chunk_in_child, args=(large, results))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    assert results.get(timeout=5) == (len(expected), sum(chunk.token_count for chunk in expected))


def _sources(texts: dict[str, str]) -> list[SourceFile]:
    return [
        SourceFile(name, f"file:///corpus/{name}", 0, f"/corpus/{name}", len(text.encode()), None, text.encode())
        for name, text in texts.items()
    ]


def test_the_in_process_chunker_gives_the_same_rows_with_the_thread(every_document_ahead):
    def rows(encode_on_thread: bool):
        chunker = DocumentChunker(ChunkConfig(max_tokens=128), "strict", (), encode_ahead=encode_on_thread)
        return [list(document_rows) for document_rows in run_bundle(chunker, _sources(SAMPLE_TEXTS))]

    with_thread, without = rows(True), rows(False)
    assert sum(table == "chunks" for document in without for table, _ in document) > 100
    assert with_thread == without


def test_chunk_command_output_is_the_same_with_the_thread(tmp_path, monkeypatch, capsys):
    from chunkline.pipelines.cli import main

    (tmp_path / "big.md").write_text("\n\n".join(SAMPLE_TEXTS.values()), encoding="utf-8")
    outputs = []
    for cores in (2, 1):
        monkeypatch.setattr(encode_ahead, "available_cores", lambda cores=cores: cores)
        assert main(["chunk", "--format", "jsonl", str(tmp_path / "big.md")]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert outputs[0].count('"chunk_id"') > 50
