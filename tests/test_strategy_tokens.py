"""The ``tokens`` strategy (DocForge ``size``, LocalVectorDB ``tokens``): exact token windows with overlap
that never exceed the limit and never cut a character, and DocForge's headings-vs-size example."""

from __future__ import annotations

import pytest
from conftest import assert_invariants

from chunkline import ChunkConfig, ConfigError, chunk_markdown, parse_markdown
from chunkline.engine import span_budget

CJK_AND_EMOJI = (
    "潮位計のデータは毎時記録されます。満潮と干潮の差は季節によって変わります。"
    "👩‍🔧 maintenance crew 🚢⚓ arrives; café, naïve, Grüße, e\u0301, مرحبا, שלום. "
) * 60

# Headings long enough that the context line takes all the reserve may (a quarter of max_tokens, and never
# so much that the budget is not above overlap_tokens): 13 tokens at max_tokens 64, overlap_tokens 50.
STATION_GUIDE = (
    "# Getting started with the Tidewater harbour logger\n\n"
    "## Installing the logger on a tide gauge station\n\n"
    + " ".join(f"Step {n} checks one more setting of the harbour logger before the first reading." for n in range(12))
    + "\n\n## Reading the first tide levels from the gauge\n\n"
    + " ".join(f"Reading {n} is compared with the chart datum of the station." for n in range(12))
    + "\n"
)

PRODUCT_GUIDE = (
    "# Product Guide\n\n## Overview\nShort intro.\n\n## Details\n"
    + " ".join(
        f"Detail sentence number {number} explains one more setting of the harbour logger." for number in range(500)
    )
    + "\n"
)


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(64, 0), (64, 16), (100, 99), (512, 64)])
def test_windows_never_exceed_the_limit_nor_cut_a_character(max_tokens, overlap_tokens):
    config = ChunkConfig(strategy="tokens", max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(CJK_AND_EMOJI, config)
    assert_invariants(CJK_AND_EMOJI, chunks, config)
    assert len(chunks) > 1
    for chunk in chunks:
        # A verbatim slice of a str never holds half a code point; its UTF-8 bytes are the file's bytes.
        assert CJK_AND_EMOJI.encode("utf-8")[chunk.start_byte : chunk.end_byte].decode("utf-8") == chunk.text


def test_windows_advance_by_max_minus_overlap_tokens():
    # DocForge's arithmetic holds for the whole budget: no context line takes a share of it.
    config = ChunkConfig(strategy="tokens", max_tokens=64, overlap_tokens=16, embed_context="none")
    chunks = chunk_markdown(PRODUCT_GUIDE, config)
    # ASCII prose: every window but the last is full, and consecutive windows share text.
    assert all(chunk.token_count >= 60 for chunk in chunks[:-1])
    assert all(later.start_char < earlier.end_char for earlier, later in zip(chunks, chunks[1:]))


def test_docforge_headings_versus_size_example():
    # DocForge's headings strategy makes one chunk per section: no packing of small ones (min_tokens 0).
    docforge_headings = ChunkConfig(strategy="headings", max_tokens=512, overlap_tokens=64, min_tokens=0)
    headings = chunk_markdown(PRODUCT_GUIDE, docforge_headings)
    size = chunk_markdown(PRODUCT_GUIDE, ChunkConfig(strategy="tokens", max_tokens=512, overlap_tokens=64))
    overview = [chunk for chunk in headings if chunk.heading_path == ("Product Guide", "Overview")]
    details = [chunk for chunk in headings if chunk.heading_path == ("Product Guide", "Details")]
    # headings: Overview is its own chunk; the long Details section is sub-split by size.
    assert len(overview) == 1 and "Short intro." in overview[0].text and not overview[0].is_sub_split
    assert len(details) > 1 and all(chunk.is_sub_split for chunk in details)
    # size: windows of about 512 tokens with 64 of overlap, regardless of headings.
    assert len(size) > 1
    assert all(chunk.token_count <= 512 for chunk in size)
    assert size[0].text.startswith("# Product Guide\n\n## Overview\nShort intro.")
    assert all(chunk.heading_path for chunk in size)  # each still knows the section it starts in


@pytest.mark.parametrize("max_tokens", [63, 8193])
def test_docforge_bounds_are_validated(max_tokens):
    with pytest.raises(ConfigError, match="from 64 to 8192"):
        ChunkConfig(strategy="tokens", max_tokens=max_tokens, overlap_tokens=0)


def test_overlap_as_large_as_the_window_is_refused():
    with pytest.raises(ConfigError, match="overlap_tokens"):
        ChunkConfig(strategy="tokens", max_tokens=128, overlap_tokens=128)


# --------------------------------------------------------------------------------------------------
# An overlap that re-emits most of every window
# --------------------------------------------------------------------------------------------------


def test_windows_of_the_budget_left_by_the_context_line_advance_by_it_less_the_overlap():
    config = ChunkConfig(strategy="tokens", max_tokens=64, overlap_tokens=50)
    assert span_budget(parse_markdown(STATION_GUIDE), config) == 51

    chunks = chunk_markdown(STATION_GUIDE, config)

    # The same chunks as before the warning existed: 51-token windows advancing 1 token ("#", then " Getting").
    assert (len(chunks), sum(chunk.token_count for chunk in chunks)) == (329, 16779)
    assert chunks[0].token_count == 51 and (chunks[0].end_char, chunks[1].start_char) == (251, 1)
    assert all(chunk.embed_token_count <= 64 for chunk in chunks)


def test_an_overlap_of_most_of_the_window_warns_once_with_the_numbers(overlap_warnings):
    config = ChunkConfig(strategy="tokens", max_tokens=64, overlap_tokens=50)

    first = chunk_markdown(STATION_GUIDE, config, doc_id="guide/getting-started.md")
    second = chunk_markdown(STATION_GUIDE + "\nOne more line.\n", config, doc_id="guide/again.md")

    assert len(first) == 329 and len(second) > len(first)
    assert overlap_warnings() == [
        "overlap_tokens 50 leaves windows of 51 tokens (max_tokens 64 less 13 for the context line) advancing "
        "1 token: each token of text lands in about 51 chunks; lower overlap_tokens to 25 or less (32 or less "
        "with embed_context: none)"
    ]


def test_without_the_context_line_the_windows_keep_max_tokens_and_still_warn_under_half(overlap_warnings):
    # 64-token windows advancing 14 tokens: each chunk repeats 50 of its 64 tokens, most of it.
    config = ChunkConfig(strategy="tokens", max_tokens=64, overlap_tokens=50, embed_context="none")
    assert span_budget(parse_markdown(STATION_GUIDE), config) == 64

    chunks = chunk_markdown(STATION_GUIDE, config)

    assert (len(chunks), sum(chunk.token_count for chunk in chunks)) == (24, 1529)
    assert overlap_warnings() == [
        "overlap_tokens 50 leaves windows of 64 tokens (max_tokens 64) advancing 14 tokens: each token of text "
        "lands in about 5 chunks; lower overlap_tokens to 32 or less"
    ]


@pytest.mark.parametrize(
    "settings",
    [{}, {"max_tokens": 64, "overlap_tokens": 25}, {"max_tokens": 64, "overlap_tokens": 32, "embed_context": "none"}],
)
def test_an_overlap_of_half_the_window_or_less_does_not_warn(overlap_warnings, settings):
    config = ChunkConfig.from_dict({"strategy": "tokens", **settings})
    assert config.overlap_tokens * 2 <= span_budget(parse_markdown(PRODUCT_GUIDE), config)

    chunks = chunk_markdown(PRODUCT_GUIDE, config)

    assert len(chunks) > 1
    assert overlap_warnings() == []


def test_one_window_repeats_nothing_and_does_not_warn(overlap_warnings):
    config = ChunkConfig(strategy="tokens", max_tokens=512, overlap_tokens=400)

    assert len(chunk_markdown(STATION_GUIDE, config)) == 1
    assert overlap_warnings() == []
