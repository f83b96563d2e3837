"""Property tests: markdown generated from a grammar of blocks, chunked with random budgets.

Every generated document must keep the invariants of conftest.assert_invariants; in addition the
heading split must match the document's sections, protected blocks that fit are never split (boundary
mode), and chunking is deterministic.
"""

from __future__ import annotations

import pytest
from conftest import assert_invariants, assert_protected_blocks_whole, exact_token_count, heading_paths_of_sections
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

from chunkline import ChunkConfig, chunk_markdown, parse_markdown
from chunkline.engine import span_budget
from chunkline.tokenizers import get_token_counter


@st.composite
def budgets(draw, sub_split: str) -> ChunkConfig:
    max_tokens = draw(st.integers(8, 300))
    overlap_tokens = draw(st.integers(0, max_tokens - 1))
    # The heading split alone (``min_tokens: 0``): tests/test_fragments.py holds the packing of small
    # sections to its own properties.
    return ChunkConfig.from_dict(
        {
            "max_tokens": max_tokens,
            "overlap_tokens": overlap_tokens,
            "min_tokens": 0,
            "headings": {"sub_split": sub_split},
        }
    )


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------


def assert_heading_split_matches_sections(text: str, chunks, config: ChunkConfig, doc_id: str = "") -> None:
    """With every heading level splitting, each section is one chunk when it fits, or several sub-split
    chunks covering exactly that section when it does not; every chunk carries its section's path."""
    counter = get_token_counter(config.tokenizer)
    document = parse_markdown(text)
    # The strategy's budget: max_tokens less what the embed_text context of each chunk takes.
    budget = span_budget(document, config, doc_id=doc_id)
    expected_paths = heading_paths_of_sections(document)
    for chunk in chunks:
        assert chunk.heading_path == expected_paths[chunk.section_index], chunk.chunk_index
    for number, section in enumerate(document.sections):
        inside = [c for c in chunks if section.start_char <= c.start_char < section.end_char]
        assert inside, f"section {number} has no chunk"
        assert inside[0].start_char == section.start_char and inside[-1].end_char == section.end_char
        assert all(c.section_index == number for c in inside)
        if exact_token_count(counter, text[section.start_char : section.end_char]) <= budget:
            assert [(c.start_char, c.end_char, c.is_sub_split) for c in inside] == [
                (section.start_char, section.end_char, False)
            ]
        else:
            assert len(inside) >= 2 and all(c.is_sub_split for c in inside)


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


@settings(max_examples=1000)
@given(text=markdown_documents(), config=budgets("boundaries"))
@pytest.mark.slow
def test_boundary_sub_split_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config, doc_id="docs/generated.md")

    assert_invariants(text, chunks, config, doc_id="docs/generated.md")
    assert_heading_split_matches_sections(text, chunks, config, "docs/generated.md")
    assert_protected_blocks_whole(text, chunks, config.max_tokens, get_token_counter(config.tokenizer))


@settings(max_examples=500)
@given(text=markdown_documents(), config=budgets("window"))
@pytest.mark.slow
def test_window_sub_split_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config, doc_id="docs/generated.md")

    assert_invariants(text, chunks, config, doc_id="docs/generated.md")
    assert_heading_split_matches_sections(text, chunks, config, "docs/generated.md")


@settings(max_examples=150)
@given(
    text=markdown_documents(),
    config=st.builds(
        lambda levels, max_tokens, sub_split: ChunkConfig.from_dict(
            {
                "max_tokens": max_tokens,
                "overlap_tokens": max_tokens // 5,
                "min_tokens": 0,  # every heading in range starts a chunk: no packing of small sections
                "headings": {
                    "min_heading_level": min(levels),
                    "max_heading_level": max(levels),
                    "sub_split": sub_split,
                },
            }
        ),
        st.tuples(st.integers(1, 6), st.integers(1, 6)),
        st.integers(16, 200),
        st.sampled_from(["boundaries", "window"]),
    ),
)
@pytest.mark.slow
def test_heading_level_range_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    params = config.params
    starts = {c.start_char for c in chunks if not c.is_sub_split}
    for heading in parse_markdown(text).headings:
        in_range = params.min_heading_level <= heading.heading_level <= params.max_heading_level
        if in_range and text[: heading.start_char].strip():
            assert any(c.start_char == heading.start_char for c in chunks), heading
        if not in_range:
            assert heading.start_char not in starts or heading.start_char == 0


@settings(max_examples=100)
@given(text=markdown_documents(), config=st.sampled_from(["boundaries", "window"]).flatmap(budgets))
@pytest.mark.slow
def test_chunking_is_deterministic(text, config):
    first = chunk_markdown(text, config, doc_id="a/b.md", source_uri="memory://a/b.md")
    second = chunk_markdown(text, config, doc_id="a/b.md", source_uri="memory://a/b.md")

    assert first == second
    assert [c.to_dict() for c in first] == [c.to_dict() for c in second]
