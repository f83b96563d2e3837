"""Where the overlap of a sub-split chunk starts: at a line or sentence start when its window holds one.

A piece after the first begins up to ``overlap_tokens`` back into the previous one. These tests read each
overlap back from the chunks: its start is a line start or a sentence start (the one keeping the most
overlap within the budget) whenever the previous piece has one that near its end, else a word start.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

import pytest
from conftest import assert_invariants, exact_token_count, is_word_boundary
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

from chunkline import ChunkConfig, chunk_markdown, parse_markdown
from chunkline.structure import PROTECTED_KINDS

# After a sentence's end mark, optional closing quotes or brackets, then all the spaces that follow (a
# CJK mark needs none, and takes line breaks too).
_AFTER_LATIN_END = re.compile(r"[.!?][\"'\u2019\u201d)\]]*[ \t]+$")
_AFTER_CJK_END = re.compile(r"[\u3002\uff01\uff1f][\"'\u2019\u201d)\]]*\s*$")


def is_line_start(text: str, position: int) -> bool:
    """After a line break: ``\n``, or a lone ``\r`` (the two of ``\r\n`` break once, after the ``\n``)."""
    if position == 0:
        return True
    before = text[position - 1]
    return before == "\n" or (before == "\r" and text[position : position + 1] != "\n")


def is_sentence_start(text: str, position: int) -> bool:
    following = text[position : position + 1]
    before = max(position - 16, 0)
    if following not in (" ", "\t") and _AFTER_LATIN_END.search(text, before, position):
        return True
    return not following.isspace() and bool(_AFTER_CJK_END.search(text, before, position))


def is_clean_start(text: str, position: int) -> bool:
    return is_line_start(text, position) or is_sentence_start(text, position)


def overlapping_pairs(chunks):
    """(previous, chunk) for every sub-split chunk that starts inside the chunk before it."""
    return [
        (previous, chunk)
        for previous, chunk in zip(chunks, chunks[1:])
        if chunk.is_sub_split and previous.is_sub_split and chunk.start_char < previous.end_char
    ]


def inside_protected(text: str):
    """A test: is a position strictly inside a protected block (where the splitter never starts)?"""
    ranges = [
        (block.start_char, block.end_char) for block in parse_markdown(text).blocks if block.kind in PROTECTED_KINDS
    ]
    return lambda position: any(start < position < end for start, end in ranges)


def assert_overlaps_start_cleanly(text: str, chunks, overlap_tokens: int, counter) -> tuple[int, int]:
    """Every overlap starts at a clean start if the previous piece had one in reach, else at a word start;
    returns (clean starts, word-start fallbacks)."""
    protected = inside_protected(text)
    clean_starts = [position for position in range(1, len(text)) if is_clean_start(text, position)]
    clean_starts = [position for position in clean_starts if not protected(position)]
    clean = fallback = 0
    for previous, chunk in overlapping_pairs(chunks):
        start, end = chunk.start_char, previous.end_char
        assert is_word_boundary(text, start), f"overlap starts mid-word at {start}: {text[start - 10 : start + 10]!r}"
        assert exact_token_count(counter, text[start:end]) <= overlap_tokens + 1
        if is_clean_start(text, start):
            clean += 1
            # No clean start earlier in the previous piece would have kept more overlap within the budget
            # (the window is sized on the document's tokens, a slice's own count can differ at its edges).
            for earlier in clean_starts[
                bisect_right(clean_starts, previous.start_char) : bisect_left(clean_starts, start)
            ]:
                assert exact_token_count(counter, text[earlier:end]) > overlap_tokens - 2, (
                    f"a clean start at {earlier} keeps more overlap than the one chosen at {start}"
                )
        else:
            fallback += 1
            # A word start was the only choice: no clean start lies between it and the previous piece's end.
            later = clean_starts[bisect_right(clean_starts, start) : bisect_left(clean_starts, end)]
            assert not later, f"overlap starts mid-sentence at {start} though a clean start lay at {later[0]}"
    return clean, fallback


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(96, 40), (100, 45), (64, 20), (128, 50), (160, 60)])
def test_overlap_in_long_paragraphs_starts_at_a_sentence(read_fixture, counter, max_tokens, overlap_tokens):
    text = read_fixture("long_paragraphs_design_notes.md")
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)

    clean, fallback = assert_overlaps_start_cleanly(text, chunks, overlap_tokens, counter)
    # A piece that ends with a sentence longer than the window overlaps from a word start; most do not.
    assert clean >= 3
    assert_invariants(text, chunks, config)


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(96, 30), (64, 20), (128, 40)])
def test_overlap_in_hard_wrapped_prose_starts_at_a_line(read_fixture, counter, max_tokens, overlap_tokens):
    text = read_fixture("hard_wrapped_release_notes.md")
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)

    clean, fallback = assert_overlaps_start_cleanly(text, chunks, overlap_tokens, counter)
    assert clean >= 3 and fallback == 0
    # The sentences run over many lines: a line start inside a sentence is as good a start as a sentence's.
    starts = [chunk.start_char for _, chunk in overlapping_pairs(chunks)]
    assert any(is_line_start(text, start) and not is_sentence_start(text, start) for start in starts)
    assert_invariants(text, chunks, config)


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(64, 12), (48, 10)])
def test_overlap_in_a_run_on_sentence_falls_back_to_a_word_start(read_fixture, counter, max_tokens, overlap_tokens):
    text = read_fixture("run_on_license_clause.md")
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)

    clean, fallback = assert_overlaps_start_cleanly(text, chunks, overlap_tokens, counter)
    # One sentence of ~250 tokens: most windows hold no sentence start, and the overlap is still kept.
    assert fallback >= 3
    assert_invariants(text, chunks, config)


def long_sentences_with_short_replies(count: int = 12) -> str:
    """A paragraph of long sentences (~35 tokens) each answered by a short one (~4 tokens)."""
    topics = ["replication lag", "compaction debt", "cache misses", "lock contention"]
    sentences = []
    for i in range(count):
        topic = topics[i % 4]
        sentences.append(
            f"During the load test on cluster {i} the operators watched {topic} climb steadily over an hour "
            f"while the request rate stayed flat and the error budget for the week was slowly used up."
        )
        sentences.append(f"Case {i} was closed.")
    return "# Incident review\n\n" + " ".join(sentences) + "\n"


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(100, 30), (128, 25), (80, 20)])
def test_overlap_starts_at_a_short_sentence_rather_than_mid_sentence(counter, max_tokens, overlap_tokens):
    # Each window holds only the short closing sentence's start, near the piece's end: the overlap is
    # small but starts cleanly, where a word start further back would begin mid-sentence.
    text = long_sentences_with_short_replies()
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)

    pairs = overlapping_pairs(chunks)
    assert len(pairs) >= 3
    # A piece that ends with a long sentence overlaps from a word start in it (its start is out of reach).
    assert sum(text[chunk.start_char :].startswith("Case ") for _, chunk in pairs) >= 2
    assert_overlaps_start_cleanly(text, chunks, overlap_tokens, counter)
    assert_invariants(text, chunks, config)


def test_overlap_start_keeps_the_most_overlap_among_sentence_starts(counter):
    # Short sentences: several sentence starts lie within each window; the earliest that fits wins.
    body = " ".join(f"Step {i} checks the {word} and logs it." for i, word in enumerate(["cache", "index"] * 30))
    text = f"# Checklist\n\n{body}\n"
    config = ChunkConfig(max_tokens=80, overlap_tokens=30)
    chunks = chunk_markdown(text, config)

    pairs = overlapping_pairs(chunks)
    assert len(pairs) >= 5
    for previous, chunk in pairs:
        shared = exact_token_count(counter, text[chunk.start_char : previous.end_char])
        # A sentence here is ~10 tokens: the overlap keeps at least two of them, never over the budget.
        assert 18 <= shared <= config.overlap_tokens + 1
        assert text[chunk.start_char :].startswith("Step ")
    assert_invariants(text, chunks, config)


#: Strategies that sub-split an oversized section with ``overlap_tokens``, as configured here.
SUB_SPLITTING = {"headings": {}, "regex": {"regex": {"pattern": r"^#{1,3} "}}}


@pytest.mark.parametrize("strategy", sorted(SUB_SPLITTING))
@settings(max_examples=40, deadline=None)
@given(text=markdown_documents(), max_tokens=st.integers(48, 200), overlap_share=st.floats(0.05, 0.5))
@pytest.mark.slow
def test_generated_markdown_overlaps_start_cleanly(counter, strategy, text, max_tokens, overlap_share):
    overlap_tokens = max(1, int(max_tokens * overlap_share))
    settings_ = {"strategy": strategy, "max_tokens": max_tokens, "overlap_tokens": overlap_tokens}
    config = ChunkConfig.from_dict({**settings_, **SUB_SPLITTING[strategy]})
    chunks = chunk_markdown(text, config)

    assert_overlaps_start_cleanly(text, chunks, overlap_tokens, counter)
    assert_invariants(text, chunks, config)
