"""The contract every registered strategy keeps, checked for each one without a test of its own.

Every strategy in the registry — built in, or installed by another package through the
``chunkline.strategies`` entry point (``tests/strategy_plugin`` is such a package) — is run on the
fixtures, on the sample corpus and on generated markdown, and must keep PRODUCT.md's invariants:
verbatim slices and exact reconstruction, exact positions and token counts, the token limit (unless the
strategy declares a soft bound and the chunk is one such atomic unit), protected blocks that fit kept
whole (for strategies that keep blocks whole), and the same chunks every time. A strategy that declares
``merges_fragments`` also leaves no chunk under ``min_tokens`` (and none of headings or front matter
only) that could have joined a neighbour, and gives its own chunks with ``min_tokens: 0``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    FIXTURES,
    assert_invariants,
    assert_no_fragment_could_have_merged,
    assert_protected_blocks_whole,
    exact_token_count,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

from chunkline import ChunkConfig, available_strategies, chunk_markdown, get_strategy, parse_markdown
from chunkline.tokenizers import get_token_counter

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
DOCUMENTS = sorted(FIXTURES.glob("*.md")) + sorted(SAMPLE_CORPUS.rglob("*.md"))
STRATEGIES = available_strategies()
MERGING = [name for name in STRATEGIES if get_strategy(name).merges_fragments]


def config_for(name: str, max_tokens: int, overlap_tokens: int, min_tokens: int | None = None) -> ChunkConfig:
    return ChunkConfig(
        strategy=name,
        max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
        min_tokens=min_tokens,
        params=get_strategy(name).default_params(),
    )


def soft_limit_check(name: str, text: str, max_tokens: int):
    """Whether an over-limit chunk is one of the strategy's declared atomic units (with at most a
    heading and blank lines around it)."""
    kinds = get_strategy(name).soft_limit_kinds
    if not kinds:
        return None
    counter = get_token_counter()
    units = [
        (block.start_char, block.start_char + len(text[block.start_char : block.end_char].rstrip()))
        for block in parse_markdown(text).blocks
        if block.kind in kinds
    ]

    def allowed(chunk) -> bool:
        for start, end in units:
            if chunk.start_char <= start and end <= chunk.end_char:
                rest = text[chunk.start_char : start] + text[end : chunk.end_char]
                if (
                    exact_token_count(counter, text[start:end]) > max_tokens
                    and exact_token_count(counter, rest) <= max_tokens
                ):
                    return True
        return False

    return allowed


def check_strategy(name: str, text: str, max_tokens: int, overlap_tokens: int, min_tokens: int | None = None) -> None:
    config = config_for(name, max_tokens, overlap_tokens, min_tokens)
    chunks = chunk_markdown(text, config, doc_id="doc.md", source_uri="file:///doc.md")
    assert_invariants(
        text,
        chunks,
        config,
        doc_id="doc.md",
        source_uri="file:///doc.md",
        over_limit_allowed=soft_limit_check(name, text, max_tokens),
    )
    if get_strategy(name).keeps_blocks_whole:
        assert_protected_blocks_whole(text, chunks, max_tokens, get_token_counter())
    if get_strategy(name).merges_fragments:
        assert_no_fragment_could_have_merged(text, chunks, config)
    assert chunk_markdown(text, config, doc_id="doc.md", source_uri="file:///doc.md") == chunks


def test_the_registry_holds_the_built_in_strategies_and_the_installed_plugin():
    expected = {"headings", "tokens", "blocks", "scored", "thematic-breaks"}
    assert expected <= set(STRATEGIES)
    plugin = get_strategy("thematic-breaks")
    assert plugin.chunk.__module__ == "chunkline_thematic_breaks"


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("max_tokens, overlap_tokens", [(64, 8), (512, 50)])
@pytest.mark.slow
def test_strategy_keeps_the_contract_on_fixtures_and_the_sample_corpus(name, max_tokens, overlap_tokens):
    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        try:
            check_strategy(name, text, max_tokens, overlap_tokens)
        except AssertionError as error:
            raise AssertionError(f"{name} on {path.name} ({max_tokens}/{overlap_tokens}): {error}") from error


@pytest.mark.parametrize("name", MERGING)
@pytest.mark.parametrize("max_tokens, overlap_tokens, min_tokens", [(64, 8, 32), (512, 50, 128)])
@pytest.mark.slow
def test_strategy_that_merges_fragments_keeps_the_contract_at_other_min_tokens(
    name, max_tokens, overlap_tokens, min_tokens
):
    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        try:
            check_strategy(name, text, max_tokens, overlap_tokens, min_tokens)
        except AssertionError as error:
            raise AssertionError(
                f"{name} on {path.name} ({max_tokens}/{overlap_tokens}/{min_tokens}): {error}"
            ) from error


@pytest.mark.parametrize("name", MERGING)
@pytest.mark.slow
def test_strategy_that_merges_fragments_gives_its_own_chunks_with_min_tokens_zero(name):
    from chunkline.context import ChunkContext
    from chunkline.engine import build_chunks, span_budget
    from chunkline.tokenizers import counter_for

    def layout(chunks) -> list[tuple]:
        return [(c.start_char, c.end_char, c.heading_path, c.is_sub_split, c.token_count) for c in chunks]

    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        config = config_for(name, 64, 8, min_tokens=0)
        document = parse_markdown(text)
        counter = counter_for(config)
        # The strategy alone, at the budget the engine gives it (max_tokens less the embed_text reserve).
        context = ChunkContext(document, config, counter, max_tokens=span_budget(document, config, counter))
        own = build_chunks(document, get_strategy(name).run(context), name, counter)
        assert layout(chunk_markdown(text, config)) == layout(own), path.name


@pytest.mark.parametrize("name", STRATEGIES)
def test_strategy_keeps_the_contract_on_an_empty_document(name):
    chunks = chunk_markdown("", config_for(name, 64, 8))
    assert [(chunk.text, chunk.token_count, chunk.start_char, chunk.end_char) for chunk in chunks] == [("", 0, 0, 0)]


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=60)
@given(
    text=markdown_documents(),
    max_tokens=st.integers(64, 300),
    overlap_share=st.floats(0, 0.5),
    min_tokens=st.one_of(st.none(), st.integers(0, 63)),
)
@pytest.mark.slow
def test_strategy_keeps_the_contract_on_generated_markdown(name, text, max_tokens, overlap_share, min_tokens):
    check_strategy(name, text, max_tokens, int(max_tokens * overlap_share), min_tokens)


#: Surrogate code points as a Python string can hold them (from ``chr``, JSON or an API, never from
#: decoding UTF-8): lone highs and lows, a valid pair, a pair reversed, two highs then a low.
SURROGATES = ["\ud800", "\udfff", "\udbff", "\udc00", "\ud83d\ude00", "\ude00\ud83d", "\ud800\ud800\udc00"]


@st.composite
def markdown_with_surrogates(draw) -> str:
    """Generated markdown with surrogates inserted anywhere: in words, headings, fences, next to spaces and
    line breaks, at the very start and end."""
    text = draw(markdown_documents())
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(text)))
        text = text[:position] + draw(st.sampled_from(SURROGATES)) + text[position:]
    return text


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize(
    "text",
    [
        "a\ud800b",
        "\ud800",
        "# Title \udc00\n\nBody \ud83d\ude00 text.\n",
        "# [Link](http://a\ud800b) and <http://c\udc00d>\n\nBody.\n",
        "---\ntitle: \ud800\n---\n# After\n",
    ],
    ids=["lone", "only", "heading", "heading-links", "front-matter"],
)
def test_strategy_chunks_text_with_surrogates(name, text):
    check_strategy(name, text, 64, 8)


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=40)
@given(text=markdown_with_surrogates(), max_tokens=st.integers(64, 300), overlap_share=st.floats(0, 0.5))
@pytest.mark.slow
def test_strategy_keeps_the_contract_on_generated_markdown_with_surrogates(name, text, max_tokens, overlap_share):
    check_strategy(name, text, max_tokens, int(max_tokens * overlap_share))


def test_an_installed_strategy_runs_by_name_in_the_pipeline(tmp_path):
    from chunkline.dataset.publish import read_dataset
    from chunkline.dataset.settings import load_run_config
    from chunkline.pipelines.run import run_pipeline

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "notes.md").write_text("# Notes\n\nFirst part.\n\n---\n\nSecond part.\n\n***\n\nThird part.\n")
    config = load_run_config(
        None, ["chunking.strategy=thematic-breaks"], environ={}, inputs=[str(corpus)], output=str(tmp_path / "out")
    )
    summary = run_pipeline(config)
    assert summary.documents_ok == 1
    chunks = read_dataset(str(tmp_path / "out"), "chunks").to_pylist()
    assert [row["text"] for row in chunks] == [
        "# Notes\n\nFirst part.\n\n",
        "---\n\nSecond part.\n\n",
        "***\n\nThird part.\n",
    ]
    assert {row["strategy"] for row in chunks} == {"thematic-breaks"}
