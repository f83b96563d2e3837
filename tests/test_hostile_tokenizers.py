"""Hostile Hugging Face ``tokenizer.json`` files, built here: pre-tokenizer and normalizer regexes that the
regex engine gives up on, post-processors that add more special tokens than a chunk has room for, and added
special tokens written in the documents themselves.

Each one ends as one document's error row (the other documents chunk), as a configuration error before
any work, or as ordinary chunks that keep the token contract: never as an exception that stops a run.

The regex engine of ``tokenizers`` (Oniguruma) stops a match after a fixed number of backtracking steps and
the Rust code then panics; pyo3 raises that panic as ``pyo3_runtime.PanicException``, a ``BaseException``
that ``except Exception`` does not catch. chunkline turns it into a :class:`TokenizerFailedError` where the
tokenizer is called, so that whatever isolates one document's failures isolates this one too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

import chunkline.dataset.document_rows as document_rows_module
from chunkline import ChunkConfig, chunk_markdown, get_strategy, parse_markdown, reconstruct
from chunkline.config import ConfigError
from chunkline.dataset.inputs import SourceFile
from chunkline.evaluation.corpus import Corpus, CorpusDocument
from chunkline.evaluation.evaluate import EvaluationError, chunk_corpus
from chunkline.tokenizers import HuggingFaceCounter, TokenizerFailedError, counter_for, is_rust_panic
from chunkline.transforms.chunk import ChunkDocuments

WORDS = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "b": 4, "notes": 5, "guide": 6}


def word_level(normalizer=None, pre_tokenizer=None) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(WORDS, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer or normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizer or pre_tokenizers.Whitespace()
    return tokenizer


def save(tokenizer: Tokenizer, folder: Path, name: str) -> str:
    path = folder / f"{name}.json"
    tokenizer.save(str(path))
    return str(path)


#: Tokenizers whose regex gives up on one text (Oniguruma's retry limit: the Rust code panics), and a
#: paragraph that trips each.
PANICKING = {
    "split-nested-quantifier": (
        lambda: word_level(pre_tokenizer=pre_tokenizers.Split(Regex("(a+)+b"), behavior="isolated")),
        "a" * 36,
    ),
    "split-overlapping-alternation": (
        lambda: word_level(pre_tokenizer=pre_tokenizers.Split(Regex("(a|aa)+$"), behavior="isolated")),
        "a" * 40 + "!",
    ),
    "split-repeated-words": (
        lambda: word_level(pre_tokenizer=pre_tokenizers.Split(Regex(r"(\w+\s?)*$"), behavior="isolated")),
        "word " * 30 + "!",
    ),
    "split-inside-a-sequence": (
        lambda: word_level(
            pre_tokenizer=pre_tokenizers.Sequence(
                [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("(a+)+b"), behavior="removed")]
            )
        ),
        "x " + "a" * 40,
    ),
    "normalizer-replace": (
        lambda: word_level(normalizer=normalizers.Replace(Regex("(a+)+b"), "b")),
        "a" * 40,
    ),
}

GOOD_DOCUMENT = "# Guide\n\nNotes on b, and a b.\n\n## More\n\nGuide notes.\n"


def document_with(trigger: str) -> str:
    return f"# Notes\n\nA first paragraph.\n\n{trigger}\n\n## After\n\nNotes.\n"


def source(doc_id: str, text: str) -> SourceFile:
    data = text.encode()
    return SourceFile(doc_id, f"file:///corpus/{doc_id}", 0, f"/corpus/{doc_id}", len(data), None, data)


def config_for(tokenizer_file: str, **settings) -> ChunkConfig:
    settings.setdefault("max_tokens", 64)
    settings.setdefault("overlap_tokens", 0)
    return ChunkConfig(tokenizer="huggingface", tokenizer_file=tokenizer_file, **settings)


@pytest.fixture(params=sorted(PANICKING))
def panicking(request, tmp_path) -> tuple[str, str]:
    """A tokenizer.json whose regex gives up on one paragraph, and that paragraph."""
    build, trigger = PANICKING[request.param]
    return save(build(), tmp_path, request.param), trigger


@pytest.mark.slow
def test_the_tokenizers_package_still_panics_with_a_base_exception(panicking):
    """What the tests below rely on: the raw tokenizer raises pyo3's panic, which is no ``Exception``."""
    tokenizer_file, trigger = panicking
    with pytest.raises(BaseException) as raised:
        Tokenizer.from_file(tokenizer_file).encode(trigger)
    assert is_rust_panic(raised.value) and not isinstance(raised.value, Exception)


@pytest.mark.slow
def test_a_panicking_tokenizer_is_one_documents_error_row_and_the_others_chunk(panicking):
    tokenizer_file, trigger = panicking
    documents = {"bad.md": document_with(trigger), "good.md": GOOD_DOCUMENT}
    elements = list(
        ChunkDocuments(config_for(tokenizer_file)).chunk_in_process(source(d, t) for d, t in documents.items())
    )
    by_doc: dict[str, list[tuple[str, dict]]] = {}
    for element in elements:
        for table, row in element:
            by_doc.setdefault(row["doc_id"], []).append((table, row))

    bad = by_doc["bad.md"]
    assert [table for table, _ in bad] == ["documents", "errors"]
    assert bad[0][1]["status"] == "error" and bad[0][1]["chunk_count"] == 0
    error = bad[1][1]
    assert (error["stage"], error["error_type"]) == ("chunk", "TokenizerFailedError")
    assert error["message"].startswith(f"the Hugging Face tokenizer {tokenizer_file} failed on this text (")
    assert "\n" not in error["message"] and "retry-limit" in error["message"]

    good_chunks = [row for table, row in by_doc["good.md"] if table == "chunks"]
    (good_document,) = [row for table, row in by_doc["good.md"] if table == "documents"]
    assert good_document["status"] == "ok" and good_document["chunk_count"] == len(good_chunks) > 0
    assert "".join(row["text"] for row in good_chunks) == GOOD_DOCUMENT


@pytest.mark.slow
def test_a_panicking_tokenizer_is_an_exception_from_the_python_api(panicking):
    tokenizer_file, trigger = panicking
    config = config_for(tokenizer_file)
    assert reconstruct(chunk_markdown(GOOD_DOCUMENT, config)) == GOOD_DOCUMENT
    with pytest.raises(TokenizerFailedError, match="failed on this text"):
        chunk_markdown(document_with(trigger), config)
    assert reconstruct(chunk_markdown(GOOD_DOCUMENT, config)) == GOOD_DOCUMENT  # the tokenizer still works


@pytest.mark.slow
def test_a_panicking_tokenizer_names_the_document_in_the_beam_transforms(panicking):
    """``ChunklineChunker`` and the Beam YAML ``ChunkMarkdownRows`` chunk through ``chunk_element``: its
    :class:`DocumentChunkingError` is an ``Exception``, so Beam's exception handling routes it to the dead
    letter output."""
    from chunkline.transforms.rag import DocumentChunkingError, chunk_element

    tokenizer_file, trigger = panicking
    config = config_for(tokenizer_file)
    element = {"doc_id": "bad.md", "text": document_with(trigger)}
    with pytest.raises(DocumentChunkingError, match=r"^document 'bad.md' could not be chunked: the Hugging Face"):
        chunk_element(element, config, counter_for(config), text_field="text", doc_id_field="doc_id")


@pytest.mark.slow
def test_a_panicking_tokenizer_stops_an_evaluation_with_a_line_naming_the_document(panicking):
    tokenizer_file, trigger = panicking
    corpus = Corpus(
        {
            doc_id: CorpusDocument(doc_id, f"file:///corpus/{doc_id}", parse_markdown(text))
            for doc_id, text in {"bad.md": document_with(trigger), "good.md": GOOD_DOCUMENT}.items()
        }
    )
    with pytest.raises(EvaluationError, match=r"^bad\.md: the Hugging Face tokenizer .* failed on this text"):
        chunk_corpus(corpus, config_for(tokenizer_file))


def test_a_regex_that_backtracks_short_of_the_limit_is_slow_but_chunks_exactly(tmp_path):
    """A run of 16 ``a`` under ``(a+)+b`` backtracks about 2**17 steps from its first letter without
    reaching the regex engine's retry limit: no panic, no error, only time that grows with each such run
    (2**n steps for a run of n letters). The document is chunked with exact counts; the size is bounded
    here so that it takes a fraction of a second."""
    build, _ = PANICKING["split-nested-quantifier"]
    tokenizer_file = save(build(), tmp_path, "split-nested-quantifier")
    text = "# Runs\n\n" + " ".join(["a" * 16] * 10) + "\n\n## Then\n\nA b.\n"
    chunks = chunk_markdown(text, config_for(tokenizer_file, max_tokens=16))
    assert reconstruct(chunks) == text
    fresh = Tokenizer.from_file(tokenizer_file)
    assert [chunk.token_count for chunk in chunks] == [len(fresh.encode(chunk.text).ids) for chunk in chunks]


class _Interrupting:
    """A tokenizer whose encode raises ``interruption`` (a user's Ctrl-C, an exit request)."""

    def __init__(self, interruption: type[BaseException]):
        self.interruption = interruption

    def encode(self, *args, **kwargs):
        raise self.interruption()

    def num_special_tokens_to_add(self, is_pair: bool) -> int:
        return 0


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_an_interrupt_inside_the_tokenizer_is_not_taken_for_a_documents_error(monkeypatch, interruption):
    counter = HuggingFaceCounter(_Interrupting(interruption), "tokenizer.json", "0" * 64, False)
    monkeypatch.setattr(document_rows_module, "counter_for", lambda config: counter)
    with pytest.raises(interruption):
        list(ChunkDocuments(ChunkConfig()).chunk_in_process([source("notes.md", GOOD_DOCUMENT)]))


# --------------------------------------------------------------------------------------------------
# Special tokens: added by the post-processor, and written in the text
# --------------------------------------------------------------------------------------------------


def byte_level(special_tokens_added: int, added_special: tuple[str, ...] = ()) -> Tokenizer:
    """A byte-level BPE tokenizer without merges (one token per UTF-8 byte: a character takes up to four)
    whose post-processor puts ``special_tokens_added`` ``[CLS]`` tokens before every text."""
    vocabulary = {character: rank for rank, character in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocabulary["[CLS]"] = len(vocabulary)
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in ("[CLS]", *added_special)])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=" ".join(["[CLS]"] * special_tokens_added + ["$A"]), special_tokens=[("[CLS]", vocabulary["[CLS]"])]
    )
    return tokenizer


#: (special tokens the post-processor adds, max_tokens): each leaves less than 4 tokens for text.
TOO_MANY_SPECIAL_TOKENS = {
    "as-many-as-max-tokens": (8, 8),
    "more-than-max-tokens": (40, 8),
    "one-token-of-room": (63, 64),
    "three-tokens-of-room": (61, 64),
    "a-huge-post-processor": (5000, 512),
}


@pytest.mark.parametrize("case", sorted(TOO_MANY_SPECIAL_TOKENS))
def test_special_tokens_that_leave_no_room_for_text_are_a_config_error(tmp_path, case):
    special_tokens, max_tokens = TOO_MANY_SPECIAL_TOKENS[case]
    tokenizer_file = save(byte_level(special_tokens), tmp_path, case)
    config = config_for(tokenizer_file, max_tokens=max_tokens, count_special_tokens=True)
    room = max(max_tokens - special_tokens, 0)
    expected = (
        f"chunking.tokenizer_file {tokenizer_file}: its post-processor adds {special_tokens} special tokens to "
        f"every count (count_special_tokens: true), which leaves {room} of chunking.max_tokens {max_tokens} "
        f"for text, and one character can take 4: set max_tokens to at least {special_tokens + 4}, or "
        "count_special_tokens: false"
    )
    for attempt in (lambda: counter_for(config), lambda: chunk_markdown(GOOD_DOCUMENT, config)):
        with pytest.raises(ConfigError) as raised:
            attempt()
        assert str(raised.value) == expected
    # Not counted, the special tokens take no room.
    uncounted = config_for(tokenizer_file, max_tokens=max_tokens, count_special_tokens=False)
    assert reconstruct(chunk_markdown(GOOD_DOCUMENT, uncounted)) == GOOD_DOCUMENT


LONG_HEADINGS_DOCUMENT = (
    "# A guide to the tide gauges of the northern harbour\n\n"
    "## Installing the collector on a new mooring\n\n"
    "Bolt the sensor to the pier, run the cable to the cabinet and power it on. "
    "The collector then reports every ten minutes, caf\u00e9 to caf\u00e9, \U0001f30a included.\n"
)


@pytest.mark.parametrize("strategy", ["headings", "sentences", "scored"])
def test_four_tokens_of_room_are_kept_for_text_when_headings_ask_for_context(tmp_path, strategy):
    """With 8 special tokens and ``max_tokens`` 12, the context line's reserve must not take the four
    tokens left for the text: chunks hold several characters each, none over the limit."""
    tokenizer_file = save(byte_level(8), tmp_path, "eight-special-tokens")
    config = config_for(
        tokenizer_file,
        max_tokens=12,
        count_special_tokens=True,
        strategy=strategy,
        params=get_strategy(strategy).default_params(),
    )
    chunks = chunk_markdown(LONG_HEADINGS_DOCUMENT, config)
    assert reconstruct(chunks) == LONG_HEADINGS_DOCUMENT
    fresh = Tokenizer.from_file(tokenizer_file)
    for chunk in chunks:
        assert chunk.token_count == len(fresh.encode(chunk.text).ids) <= 12, chunk.text
        assert chunk.embed_token_count <= 12, chunk.embed_text
    # Four bytes of text per chunk at most, less where a chunk ends at a boundary: never one byte each.
    assert len(chunks) <= len(LONG_HEADINGS_DOCUMENT.encode()) // 2


SPECIAL_TOKENS_IN_TEXT = ("<|endoftext|>", "<s>", "</s>", "[SEP]", "<unk>")

DOCUMENT_WITH_SPECIAL_TOKENS = (
    "# Prompt formats\n\n"
    "A model's input ends with <|endoftext|>; a sentence is wrapped as <s> text </s>.\n\n"
    "```text\n[CLS] question [SEP] passage [SEP]\n<s>[CLS]<|endoftext|></s><unk>\n```\n\n"
    "| token | meaning |\n|---|---|\n| [CLS] | class |\n| <s> | start |\n\n" + "[CLS]" * 40 + "\n"
)


@pytest.mark.parametrize("count_special_tokens", [False, True], ids=["uncounted", "counted"])
@pytest.mark.parametrize("strategy", ["headings", "tokens", "characters", "blocks"])
def test_added_special_tokens_written_in_the_text_are_counted_as_the_model_counts_them(
    tmp_path, strategy, count_special_tokens
):
    tokenizer_file = save(byte_level(2, SPECIAL_TOKENS_IN_TEXT), tmp_path, "added-special-tokens")
    max_tokens = 64
    config = config_for(
        tokenizer_file,
        max_tokens=max_tokens,
        count_special_tokens=count_special_tokens,
        strategy=strategy,
        params=get_strategy(strategy).default_params(),
    )
    chunks = chunk_markdown(DOCUMENT_WITH_SPECIAL_TOKENS, config)
    assert reconstruct(chunks) == DOCUMENT_WITH_SPECIAL_TOKENS
    fresh = Tokenizer.from_file(tokenizer_file)
    for chunk in chunks:
        expected = len(fresh.encode(chunk.text, add_special_tokens=count_special_tokens).ids)
        assert chunk.token_count == expected, chunk.text
        soft = chunk.text.startswith("```") and chunk.text.rstrip().endswith("```")
        assert chunk.token_count <= max_tokens or soft, chunk.text
