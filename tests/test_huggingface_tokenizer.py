"""Counting with an embedding model's own Hugging Face ``tokenizer.json`` (``tokenizer: huggingface``).

Two tokenizers: a WordPiece tokenizer (BERT-style normalizer, pre-tokenizer and ``[CLS] $A [SEP]``
post-processor, as BGE, E5, GTE and MiniLM use) trained here on the sample corpus, and the Llama-2
SentencePiece-BPE ``tokenizer.json`` that the ``wordllama`` package ships. Each registered strategy must
keep the token contract with them: ``token_count`` is a fresh count of the chunk's text by the tokenizer
loaded on its own, no chunk is over ``max_tokens`` (unless it is a declared atomic unit), and the chunks
rebuild the document.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest
import tokenizers
from conftest import FIXTURES, assert_invariants, assert_no_fragment_could_have_merged
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

from chunkline import ChunkConfig, available_strategies, chunk_markdown, get_strategy, parse_markdown
from chunkline.config import ConfigError
from chunkline.text_index import as_tokenizers_see_it
from chunkline.tokenizers import HuggingFaceCounter, TokenizerUnavailableError, counter_for, get_token_counter

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
CORPUS = sorted(SAMPLE_CORPUS.rglob("*.md"))
STRATEGIES = available_strategies()


@pytest.fixture(scope="module")
def wordpiece_file(tmp_path_factory) -> str:
    """A small uncased WordPiece tokenizer trained on the sample corpus, saved as a tokenizer.json."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.train_from_iterator((path.read_text(encoding="utf-8") for path in CORPUS), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))],
    )
    path = tmp_path_factory.mktemp("wordpiece") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


def llama_tokenizer_path() -> Path | None:
    try:
        import wordllama
    except ImportError:
        return None
    found = sorted((Path(wordllama.__file__).parent / "tokenizers").glob("*.json"))
    return found[0] if found else None


@pytest.fixture(params=["wordpiece", "llama2"])
def tokenizer_file(request, wordpiece_file) -> str:
    if request.param == "wordpiece":
        return wordpiece_file
    path = llama_tokenizer_path()
    if path is None:
        pytest.skip("the wordllama package (which ships a Llama-2 tokenizer.json) is not installed")
    return str(path)


def config_for(name: str, tokenizer_file: str, max_tokens: int, overlap_tokens: int, special: bool) -> ChunkConfig:
    return ChunkConfig(
        strategy=name,
        max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
        tokenizer="huggingface",
        tokenizer_file=tokenizer_file,
        count_special_tokens=special,
        params=get_strategy(name).default_params(),
    )


def fresh_count(tokenizer_file: str, text: str, special: bool) -> int:
    """The count of a tokenizer loaded on its own, not through chunkline's cache."""
    if not text:
        return 0
    tokenizer = _fresh_tokenizer(tokenizer_file)
    return len(tokenizer.encode(as_tokenizers_see_it(text)[0], add_special_tokens=special).ids)


_FRESH: dict[str, object] = {}


def _fresh_tokenizer(tokenizer_file: str):
    if tokenizer_file not in _FRESH:
        _FRESH[tokenizer_file] = tokenizers.Tokenizer.from_file(tokenizer_file)
    return _FRESH[tokenizer_file]


def check_strategy(name: str, text: str, tokenizer_file: str, max_tokens: int, overlap: int, special: bool) -> None:
    config = config_for(name, tokenizer_file, max_tokens, overlap, special)
    chunks = chunk_markdown(text, config, doc_id="doc.md", source_uri="file:///doc.md")
    kinds = get_strategy(name).soft_limit_kinds
    units = [
        (block.start_char, block.start_char + len(text[block.start_char : block.end_char].rstrip()))
        for block in parse_markdown(text).blocks
        if kinds and block.kind in kinds
    ]

    def atomic_unit_over_the_limit(chunk) -> bool:
        for start, end in units:
            if chunk.start_char <= start and end <= chunk.end_char:
                rest = text[chunk.start_char : start] + text[end : chunk.end_char]
                if (
                    fresh_count(tokenizer_file, text[start:end], special) > max_tokens
                    and fresh_count(tokenizer_file, rest, special) <= max_tokens
                ):
                    return True
        return False

    for chunk in chunks:
        assert chunk.token_count == fresh_count(tokenizer_file, chunk.text, special), (chunk.start_char, chunk.text)
        assert chunk.token_count <= max_tokens or atomic_unit_over_the_limit(chunk), (chunk.start_char, chunk.text)
    assert_invariants(
        text,
        chunks,
        config,
        doc_id="doc.md",
        source_uri="file:///doc.md",
        over_limit_allowed=atomic_unit_over_the_limit,
    )
    if get_strategy(name).merges_fragments:
        assert_no_fragment_could_have_merged(text, chunks, config)


#: The fixtures of small sections, lone headings and front matter that chunking.min_tokens packs.
FRAGMENT_FIXTURES = [
    "lone_heading_before_long_section.md",
    "over_budget_section_under_front_matter.md",
    "parent_heading_then_subsection.md",
    "small_last_section.md",
    "tiny_sections_in_a_row.md",
    "title_after_front_matter.md",
]


@pytest.mark.parametrize("name", [name for name in STRATEGIES if get_strategy(name).merges_fragments])
@pytest.mark.slow
def test_fragments_are_packed_within_the_model_s_own_counts(name, tokenizer_file):
    for fixture in FRAGMENT_FIXTURES:
        text = (FIXTURES / fixture).read_text(encoding="utf-8")
        for max_tokens, special in ((96, False), (160, True)):
            try:
                check_strategy(name, text, tokenizer_file, max_tokens, 12, special)
            except AssertionError as error:
                raise AssertionError(f"{name} on {fixture} ({max_tokens}): {error}") from error


@pytest.mark.parametrize("special", [False, True], ids=["text-only", "with-special-tokens"])
@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.slow
def test_strategy_keeps_exact_counts_and_the_limit_on_the_sample_corpus(name, special, tokenizer_file):
    for path in CORPUS + sorted(FIXTURES.glob("*.md"))[:6]:
        text = path.read_text(encoding="utf-8")
        try:
            check_strategy(name, text, tokenizer_file, 96, 12, special)
        except AssertionError as error:
            raise AssertionError(f"{name} on {path.name}: {error}") from error


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=15, deadline=None)
@given(
    text=markdown_documents(),
    max_tokens=st.integers(64, 300),
    overlap_share=st.floats(0, 0.5),
    special=st.booleans(),
    surrogate=st.sampled_from(["", "\ud800", "\ud83d\ude00", "é\u0301"]),
)
@pytest.mark.slow
def test_strategy_keeps_exact_counts_and_the_limit_on_generated_markdown(
    name, text, max_tokens, overlap_share, special, surrogate, wordpiece_file
):
    text = text[: len(text) // 2] + surrogate + text[len(text) // 2 :]
    check_strategy(name, text, wordpiece_file, max_tokens, int(max_tokens * overlap_share), special)
    path = llama_tokenizer_path()
    if path is not None:
        check_strategy(name, text, str(path), max_tokens, int(max_tokens * overlap_share), special)


def test_count_special_tokens_adds_the_special_tokens_the_model_adds(tokenizer_file):
    text = (SAMPLE_CORPUS / "README.md").read_text(encoding="utf-8")
    plain = get_token_counter("huggingface", tokenizer_file)
    special = get_token_counter("huggingface", tokenizer_file, count_special_tokens=True)
    added = _fresh_tokenizer(tokenizer_file).num_special_tokens_to_add(False)
    assert added >= 1  # [CLS] and [SEP] for WordPiece, <s> for Llama-2
    assert special.count(text) == plain.count(text) + added
    ids = special.encode("A heading\n\nand a paragraph.")
    assert ids[0] == _fresh_tokenizer(tokenizer_file).token_to_id("[CLS]" if "wordpiece" in tokenizer_file else "<s>")

    chunks = chunk_markdown(text, config_for("headings", tokenizer_file, 128, 0, True))
    assert all(chunk.token_count == plain.count(chunk.text) + added for chunk in chunks)
    assert max(chunk.token_count for chunk in chunks) <= 128


def test_a_wrong_sha256_is_one_clear_line(wordpiece_file):
    wrong = "0" * 64
    with pytest.raises(TokenizerUnavailableError) as raised:
        counter_for(ChunkConfig(tokenizer="huggingface", tokenizer_file=wordpiece_file, tokenizer_sha256=wrong))
    message = str(raised.value)
    assert "\n" not in message and wrong in message and "sha256" in message and wordpiece_file in message


def test_the_right_sha256_loads_and_case_does_not_matter(wordpiece_file):
    digest = hashlib.sha256(Path(wordpiece_file).read_bytes()).hexdigest()
    counter = counter_for(ChunkConfig(tokenizer="huggingface", tokenizer_file=wordpiece_file, tokenizer_sha256=digest))
    assert isinstance(counter, HuggingFaceCounter) and counter.sha256 == digest
    upper = get_token_counter("huggingface", wordpiece_file, digest.upper())
    assert upper.count("Two words") == counter.count("Two words") == 2


@pytest.mark.parametrize(
    "contents, expected",
    [(None, "no such file"), (b'{"not": "a tokenizer"}', "is not a Hugging Face tokenizer.json")],
    ids=["missing", "not-a-tokenizer"],
)
def test_a_missing_or_malformed_file_is_one_clear_line(tmp_path, contents, expected):
    path = tmp_path / "tokenizer.json"
    if contents is not None:
        path.write_bytes(contents)
    with pytest.raises(TokenizerUnavailableError) as raised:
        chunk_markdown("# A\n\ntext\n", ChunkConfig(tokenizer="huggingface", tokenizer_file=str(path)))
    message = str(raised.value)
    assert "\n" not in message and expected in message and str(path) in message


def test_a_huggingface_tokenizer_needs_its_file_and_tiktoken_takes_no_huggingface_settings():
    with pytest.raises(ConfigError, match="tokenizer_file"):
        ChunkConfig(tokenizer="huggingface")
    with pytest.raises(ConfigError, match="count_special_tokens"):
        ChunkConfig(count_special_tokens=True)
    with pytest.raises(ConfigError, match="64 hexadecimal"):
        ChunkConfig(tokenizer="huggingface", tokenizer_file="t.json", tokenizer_sha256="abc")
    config = ChunkConfig.from_dict(
        {"tokenizer": "huggingface", "tokenizer_file": "t.json", "count_special_tokens": True}
    )
    assert (config.tokenizer, config.tokenizer_file, config.count_special_tokens) == ("huggingface", "t.json", True)


def test_the_fingerprint_changes_with_the_tokenizer_and_not_with_where_its_file_lives(wordpiece_file, tmp_path):
    tiktoken_default = ChunkConfig().fingerprint()
    wordpiece = ChunkConfig(tokenizer="huggingface", tokenizer_file=wordpiece_file)
    with_special = ChunkConfig(tokenizer="huggingface", tokenizer_file=wordpiece_file, count_special_tokens=True)
    copy = tmp_path / "copy" / "tokenizer.json"
    copy.parent.mkdir()
    copy.write_bytes(Path(wordpiece_file).read_bytes())
    moved = ChunkConfig(tokenizer="huggingface", tokenizer_file=str(copy))
    fingerprints = [tiktoken_default, wordpiece.fingerprint(), with_special.fingerprint()]
    path = llama_tokenizer_path()
    if path is not None:
        fingerprints.append(ChunkConfig(tokenizer="huggingface", tokenizer_file=str(path)).fingerprint())
    assert len(set(fingerprints)) == len(fingerprints)
    assert moved.fingerprint() == wordpiece.fingerprint()
    digest = hashlib.sha256(Path(wordpiece_file).read_bytes()).hexdigest()
    assert digest in wordpiece.fingerprint()
    # A tiktoken config's fingerprint is what it was before Hugging Face settings existed.
    assert "count_special_tokens" not in tiktoken_default and "tokenizer_sha256" not in tiktoken_default


def test_the_counter_pickles_to_the_cached_one(wordpiece_file):
    counter = get_token_counter("huggingface", wordpiece_file, count_special_tokens=True)
    assert pickle.loads(pickle.dumps(counter)) is counter
    other = get_token_counter("huggingface", wordpiece_file)
    assert pickle.loads(pickle.dumps(other)) is other and other is not counter


def test_the_file_is_read_through_fsspec(wordpiece_file):
    import fsspec

    url = "memory://models/wordpiece/tokenizer.json"
    with fsspec.open(url, "wb") as handle:
        handle.write(Path(wordpiece_file).read_bytes())
    counter = get_token_counter("huggingface", url)
    text = "Markdown chunking for retrieval.\n\n## Heading\n"
    assert counter.count(text) == fresh_count(wordpiece_file, text, False)
