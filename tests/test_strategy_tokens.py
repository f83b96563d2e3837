"""The ``tokens`` strategy (DocForge ``size``, LocalVectorDB ``tokens``): exact token windows with overlap
that never exceed the limit and never cut a character, and DocForge's headings-vs-size example."""

from __future__ import annotations

import pytest
from conftest import assert_invariants

from chunkline import ChunkConfig, ConfigError, chunk_markdown

CJK_AND_EMOJI = (
    "潮位計のデータは毎時記録されます。満潮と干潮の差は季節によって変わります。"
    "👩‍🔧 maintenance crew 🚢⚓ arrives; café, naïve, Grüße, e\u0301, مرحبا, שלום. "
) * 60

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
