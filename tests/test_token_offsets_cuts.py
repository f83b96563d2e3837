"""Exact token counts of slices read off one encoding of the whole range (``chunkline.token_offsets``).

``TokenOffsets.count(start, end)`` encodes only the ragged stretches between a slice's ends and the nearest
"clean cuts" inside it (unindented line starts; a space or tab after a non-whitespace character) and reads
the rest off the range's token offsets. Whatever the slice, the result must equal encoding the slice.

Checked with cl100k_base on the hostile corpus, and with every pre-tokenizer pattern of
``SPACE_CUT_PATTERNS`` (r50k/p50k, cl100k, o200k) through a small encoding built on that pattern: its merges
join pairs of the characters that markdown puts side by side, so that a slice whose pieces were cut
differently from the range's would count differently.
"""

from __future__ import annotations

import itertools
import random

import hostile_corpus
import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.text_index import as_tokenizers_see_it
from chunkline.token_offsets import SPACE_CUT_PATTERNS, TokenOffsets
from chunkline.tokenizers import TiktokenCounter

#: Fragments markdown puts next to each other: list and quote markers, indentation, line breaks of every
#: kind, punctuation before a line that starts with "/", contractions, digits, non-ASCII letters and spaces.
FRAGMENTS = [
    "word",
    "Quote",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    "- ",
    "> ",
    "1. ",
    "* ",
    "-",
    ">",
    "...",
    ".",
    "/path",
    "/",
    "it's",
    "'ll",
    "123456",
    "é",
    "e\u0301",
    "\u00a0",
    "\u3000",
    "日本語",
    "😀",
    "```",
    "|",
    "--",
    "#",
    "_",
]


texts = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=60).map("".join)


def synthetic_counter(pattern: str) -> TiktokenCounter:
    """A counter over ``pattern`` with byte tokens and merges of every pair of common markdown bytes.

    ``.\n`` and ``/-`` merge first: a piece ``.\n/`` then ends a token before its ``/``, and ``/-->`` on its
    own encodes to fewer tokens than ``/`` and ``-->`` apart."""
    ranks = {bytes([value]): value for value in range(256)}
    for pair in (b".\n", b"/-"):
        ranks[pair] = len(ranks)
    common = [character.encode() for character in " \t\n\r->*.#|/_'1aeordsltQ"]
    for first, second in itertools.product(common, repeat=2):
        ranks.setdefault(first + second, len(ranks))
    return TiktokenCounter(tiktoken.Encoding("synthetic", pat_str=pattern, mergeable_ranks=ranks, special_tokens={}))


def family(pattern: str) -> str:
    name = "o200k" if r"\p{Lu}" in pattern else "cl100k" if r"[\r\n]" in pattern else "r50k"
    return name + ("-possessive" if "++" in pattern else "")


PATTERN_COUNTERS = {family(pattern): synthetic_counter(pattern) for pattern in SPACE_CUT_PATTERNS}


def test_the_bundled_encoding_has_space_cuts(counter):
    assert counter.encoding._pat_str in SPACE_CUT_PATTERNS


@pytest.mark.parametrize("name", sorted(PATTERN_COUNTERS))
@settings(max_examples=300)
@given(text=texts, data=st.data())
@pytest.mark.slow
def test_slice_counts_match_encoding_the_slice(name, text, data):
    counter = PATTERN_COUNTERS[name]
    offsets = TokenOffsets(text, 0, len(text), counter)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert offsets.count(start, end) == counter.count(text[start:end])
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=8))))
    assert offsets.counts_between(cuts) == [counter.count(text[a:b]) for a, b in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("name", sorted(PATTERN_COUNTERS))
def test_a_line_starting_with_a_slash_after_punctuation_is_counted_exactly(name):
    # o200k's pattern lets "/" follow punctuation and a line break in one piece: that line start is no cut.
    counter = PATTERN_COUNTERS[name]
    text = "Read the docs.\n/usr/share/doc holds them.\n/--> an arrow, after a line break.\n//- > a list\n"
    offsets = TokenOffsets(text, 0, len(text), counter)
    for start in range(len(text) + 1):
        for end in range(start, len(text) + 1):
            assert offsets.count(start, end) == counter.count(text[start:end]), (start, end)


@pytest.mark.parametrize(
    "name",
    [
        "nested_block_quotes_5000.md",
        "nested_list_levels_2000.md",
        "emoji_zwj_sequences.md",
        "combining_marks.md",
        "mixed_line_endings.md",
        "cr_only_line_endings.md",
        "right_to_left_text.md",
        "line_separator_u2028.md",
        "tiktoken_special_tokens.md",
    ],
)
def test_cl100k_counts_of_slices_of_hostile_files(counter, name):
    text = hostile_corpus.HOSTILE_FILES[name]().decode("utf-8")
    offsets = TokenOffsets(text, 0, len(text), counter)
    rng = random.Random(name)
    for _ in range(300):
        start = rng.randrange(len(text))
        end = min(len(text), start + rng.randrange(1, 2500))
        assert offsets.count(start, end) == counter.count(text[start:end]), (start, end)


# --------------------------------------------------------------------------------------------------
# Text with surrogate code points (only a Python string can hold them)
# --------------------------------------------------------------------------------------------------

SURROGATE_FRAGMENTS = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d\ude00", "\ude00\ud83d"]
texts_with_surrogates = st.lists(st.sampled_from(FRAGMENTS + SURROGATE_FRAGMENTS * 3), min_size=1, max_size=60).map(
    "".join
)


@settings(max_examples=300)
@given(text=texts_with_surrogates)
def test_surrogates_are_read_as_tiktoken_reads_them_and_mapped_back_to_their_offsets(text):
    seen, sources = as_tokenizers_see_it(text)
    assert seen == text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if sources is None:
        assert seen == text
        return
    assert sources[0] == 0 and sources[-1] == len(text) and len(sources) == len(seen) + 1
    for number, character in enumerate(seen):
        piece = text[sources[number] : sources[number + 1]]
        assert piece.encode("utf-16", "surrogatepass").decode("utf-16", "replace") == character


@pytest.mark.parametrize("name", ["cl100k_base", *sorted(PATTERN_COUNTERS)])
@settings(max_examples=200)
@given(text=texts_with_surrogates, data=st.data())
@pytest.mark.slow
def test_slice_counts_of_text_with_surrogates_match_encoding_the_slice(counter, name, text, data):
    counter = counter if name == "cl100k_base" else PATTERN_COUNTERS[name]
    offsets = TokenOffsets(text, 0, len(text), counter)
    ends = offsets.token_end_chars
    assert ends == sorted(ends) and all(0 <= end <= len(text) for end in ends)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert offsets.count(start, end) == counter.count(text[start:end])
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=8))))
    assert offsets.counts_between(cuts) == [counter.count(text[a:b]) for a, b in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("name", ["cl100k_base", *sorted(PATTERN_COUNTERS)])
@settings(max_examples=200)
@given(text=texts_with_surrogates, data=st.data())
def test_clean_cuts_and_counts_are_the_clean_cuts_and_the_counts_between_them(counter, name, text, data):
    # A range inside the text, cuts that repeat (empty sections) and characters whose bytes end tokens
    # inside them (several tokens then end at one character offset).
    counter = counter if name == "cl100k_base" else PATTERN_COUNTERS[name]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    offsets = TokenOffsets(text, start, end, counter)
    cuts = sorted([start, end, *data.draw(st.lists(st.integers(start, end), max_size=8))])
    clean = offsets.clean_cuts(cuts)
    counts = offsets.counts_between(cuts, clean)
    assert offsets.clean_cuts_and_counts(cuts) == (clean, counts)
    assert counts == [counter.count(text[a:b]) for a, b in zip(cuts, cuts[1:])]
