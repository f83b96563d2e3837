"""Exact character, byte and line/column positions through line endings and multi-byte text.

Expected values are worked out by hand in each test; ``assert_invariants`` then re-checks every chunk
against the naive per-character reference in conftest.
"""

from __future__ import annotations

import pytest
from conftest import assert_invariants

from chunkline import ChunkConfig, chunk_markdown

SPAN_FIELDS = (
    "start_char",
    "end_char",
    "start_byte",
    "end_byte",
    "start_line",
    "start_column",
    "end_line",
    "end_column",
)


#: One chunk per section (small sections not packed together, ``min_tokens: 0``), so that the positions of
#: several chunks of a short document are checked.
PER_SECTION = ChunkConfig(min_tokens=0)


def spans(chunks) -> list[tuple[int, ...]]:
    return [tuple(getattr(chunk, name) for name in SPAN_FIELDS) for chunk in chunks]


def window_config(max_tokens: int, overlap_tokens: int) -> ChunkConfig:
    return ChunkConfig.from_dict(
        {"max_tokens": max_tokens, "overlap_tokens": overlap_tokens, "headings": {"sub_split": "window"}}
    )


def test_crlf_fixture_keeps_its_crlf_bytes(read_fixture):
    text = read_fixture("crlf_line_endings.md")
    assert text.count("\r\n") == 10
    assert text.count("\n") == 10 and text.count("\r") == 10


def test_crlf_line_endings(read_fixture):
    text = read_fixture("crlf_line_endings.md")
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("Title",), ("Title", "Part")]
    # chunk 0: "# Title\r\n\r\nFirst paragraph.\r\n\r\n" (31 chars), its last "\n" is column 2 of line 4.
    # chunk 1: from line 5 to the "\n" of "Last line\r\n" (column 11 of line 10); "# not a heading" is code.
    assert spans(chunks) == [(0, 31, 0, 31, 1, 1, 4, 2), (31, 80, 31, 80, 5, 1, 10, 11)]
    assert_invariants(text, chunks)


def test_cr_only_line_endings():
    text = "# One\ralpha\r# Two\rbeta"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("One",), ("Two",)]
    assert spans(chunks) == [(0, 12, 0, 12, 1, 1, 2, 6), (12, 22, 12, 22, 3, 1, 4, 4)]
    assert_invariants(text, chunks)


def test_mixed_line_endings_and_lf_cr_is_two_breaks():
    text = "# A\r\nx\ry\n# B\n\rz"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.text for chunk in chunks] == ["# A\r\nx\ry\n", "# B\n\rz"]
    # "x\r" is line 2, "y\n" line 3; "\n\r" ends line 4 and then line 5, so "z" is alone on line 6.
    assert spans(chunks) == [(0, 9, 0, 9, 1, 1, 3, 2), (9, 15, 9, 15, 4, 1, 6, 1)]
    assert_invariants(text, chunks)


def test_byte_order_mark_is_one_character_of_three_bytes():
    text = "\ufeffintro\n# A\nx"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [(), ("A",)]
    assert spans(chunks) == [(0, 7, 0, 9, 1, 1, 1, 7), (7, 12, 9, 14, 2, 1, 3, 1)]
    assert_invariants(text, chunks)


def test_byte_order_mark_before_a_heading_does_not_hide_it():
    text = "\ufeff# Title\n\nBody.\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("Title",)]
    assert spans(chunks) == [(0, 16, 0, 18, 1, 1, 3, 6)]
    assert chunks[0].text.startswith("\ufeff")
    assert_invariants(text, chunks)


def test_nul_bytes_are_kept_verbatim():
    text = "# A\n\x00text\x00\n# B\nz\x00"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.text for chunk in chunks] == ["# A\n\x00text\x00\n", "# B\nz\x00"]
    assert spans(chunks) == [(0, 11, 0, 11, 1, 1, 2, 7), (11, 17, 11, 17, 3, 1, 4, 2)]
    assert_invariants(text, chunks)


def test_emoji_with_zwj_sequences_and_skin_tones():
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 5 code points, 18 bytes
    text = f"# {family} Family\n\nWe \u2764\ufe0f docs \U0001f44d\U0001f3fd.\n## Next\nok\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [(f"{family} Family",), (f"{family} Family", "Next")]
    # line 1: 15 characters, 28 bytes; line 2: "\n"; line 3: 15 characters, 25 bytes.
    assert spans(chunks) == [(0, 31, 0, 54, 1, 1, 3, 15), (31, 42, 54, 65, 4, 1, 5, 3)]
    assert_invariants(text, chunks)


def test_cjk_text():
    text = "# 漢字\n中文\n## 小節\n内容。\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("漢字",), ("漢字", "小節")]
    assert spans(chunks) == [(0, 8, 0, 16, 1, 1, 2, 3), (8, 18, 16, 36, 3, 1, 4, 4)]
    assert_invariants(text, chunks)


def test_combining_marks_count_as_their_own_characters():
    text = "# Cafe\u0301\n\nn\u0303o\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("Cafe\u0301",)]
    assert spans(chunks) == [(0, 13, 0, 15, 1, 1, 3, 4)]
    assert_invariants(text, chunks)


def test_line_separator_next_line_and_form_feed_are_not_line_breaks():
    text = "a\u2028b\x85c\x0cd\n# H\nx"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.text for chunk in chunks] == ["a\u2028b\x85c\x0cd\n", "# H\nx"]
    assert spans(chunks) == [(0, 8, 0, 11, 1, 1, 1, 8), (8, 13, 11, 16, 2, 1, 3, 1)]
    assert_invariants(text, chunks)


def test_hash_after_non_breaking_line_separators_is_not_a_heading():
    text = "intro\u2028# not a heading\x85# nor this\x0c# nor this\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [(chunk.text, chunk.heading_path) for chunk in chunks] == [(text, ())]
    assert (chunks[0].end_line, chunks[0].end_column) == (1, len(text))


def test_tabs_are_one_column_and_tab_indented_hash_is_code():
    text = "#\tTabbed heading\n\n\tcode # x\n\n\t# not a heading\n\ta\tb\n"
    chunks = chunk_markdown(text, PER_SECTION)

    assert [chunk.heading_path for chunk in chunks] == [("Tabbed heading",)]
    assert spans(chunks) == [(0, len(text), 0, len(text), 1, 1, 6, 5)]
    assert_invariants(text, chunks)


MULTIBYTE_DOCUMENT = (
    "\ufeff# Überblick 👨\u200d👩\u200d👧\r\n\r\n"
    + "Grüße aus Köln, naïve café, n\u0303 and ß. " * 12
    + "\r\n\r\n## 漢字の節\r"
    + "日本語の文章です。句読点で区切ります。" * 10
    + "\r## Emoji\n"
    + "🐦 鳥 \u2764\ufe0f 👍🏽 \u2028 \x85 \x0c\t\x00 " * 15
    + "\n"
)


@pytest.mark.parametrize(
    "config",
    [
        ChunkConfig(),
        ChunkConfig(max_tokens=64, overlap_tokens=8),
        ChunkConfig(max_tokens=16, overlap_tokens=4),
        ChunkConfig(max_tokens=8, overlap_tokens=0),
        window_config(64, 8),
        window_config(16, 4),
        window_config(8, 0),
    ],
    ids=["default", "b64-8", "b16-4", "b8-0", "w64-8", "w16-4", "w8-0"],
)
def test_sub_splits_through_multibyte_text_keep_exact_positions(config):
    chunks = chunk_markdown(MULTIBYTE_DOCUMENT, config)

    assert_invariants(MULTIBYTE_DOCUMENT, chunks, config)
    assert [chunk.heading_path for chunk in chunks][-1] == ("Überblick 👨\u200d👩\u200d👧", "Emoji")
    if config.max_tokens < 512:
        assert sum(chunk.is_sub_split for chunk in chunks) >= 6


@pytest.mark.parametrize("character, width", [("é", 2), ("漢", 3), ("🐦", 4)])
@pytest.mark.parametrize("max_tokens", [8, 20])
def test_byte_offsets_of_sub_splits_in_uniform_multibyte_text(character, width, max_tokens):
    text = (character * 7 + " ") * 40
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=2)
    chunks = chunk_markdown(text, config)

    assert len(chunks) > 3
    for chunk in chunks:
        spaces_before = text[: chunk.start_char].count(" ")
        assert chunk.start_byte == width * (chunk.start_char - spaces_before) + spaces_before
        assert (chunk.start_line, chunk.start_column) == (1, chunk.start_char + 1)
        assert (chunk.end_line, chunk.end_column) == (1, chunk.end_char)
    assert_invariants(text, chunks, config)


def test_crlf_document_sub_split_positions():
    text = "# Log\r\n\r\n" + "".join(f"entry {n}: disk usage at {n * 3 % 100} percent\r\n" for n in range(60))
    config = ChunkConfig(max_tokens=48, overlap_tokens=6)
    chunks = chunk_markdown(text, config)

    assert len(chunks) > 3
    for chunk in chunks[1:]:
        if text[chunk.start_char - 2 : chunk.start_char] == "\r\n":  # a piece that starts a line
            line_number = text[: chunk.start_char].count("\r\n") + 1
            assert (chunk.start_line, chunk.start_column) == (line_number, 1)
    assert_invariants(text, chunks, config)
