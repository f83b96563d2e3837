"""LocalVectorDB's unit methods: ``sentences``, ``paragraphs``, ``words``, ``lines`` and ``characters``.

Each of these strategies cuts the document into small contiguous *units* and packs consecutive units into
chunks of at most ``max_tokens`` tokens (LocalVectorDB's ``chunk_size``, always a token budget). The next
chunk repeats the last ``overlap`` units of the previous one, so **overlap is counted in the method's own
unit** -- sentences for ``sentences``, words for ``words``, characters for ``characters`` -- never in tokens.
An overlap that re-emits most of every chunk (``overlap: 50`` with ``sentences``, a common mistake when the
value is meant as tokens) is allowed but logs a warning; a negative one is refused.

==============  ======================================================================  ===============
strategy        a unit ends ...                                                         default overlap
==============  ======================================================================  ===============
``sentences``   after ``.``, ``!`` or ``?`` (and closing quotes or brackets) followed    1 sentence
                by whitespace, after ``。`` ``！`` ``？``, and at every markdown block
                edge (paragraph, heading, list item, ...)
``paragraphs``  after one or more blank lines (whitespace-only lines are blank)          1 paragraph
``words``       after each run of whitespace                                             20 words
``lines``       after each line break (``\\n``, ``\\r\\n`` or ``\\r``)                      3 lines
``characters``  after every character                                                    50 characters
==============  ======================================================================  ===============

Where the whitespace between two units holds a line break, the boundary is the start of the next line (its
indentation travels with it); otherwise it is just after the whitespace. Units partition the text, so every
chunk is a verbatim slice and the chunks reconstruct the document exactly.

Markdown structure still protects blocks: for ``sentences``, ``paragraphs`` and ``words`` a fenced code
block -- and likewise an indented code block, table, list item or HTML block -- that fits within
``max_tokens`` is one unit, never cut. ``lines`` and ``characters`` are deliberately raw: they look at the
text only, for logs, CSV and scripts without spaces. A single unit over the budget (a huge paragraph, a
code block longer than a chunk) is split on its own at its best boundaries (:mod:`chunkline.splitting`).

``characters`` packs by character count directly: the longest prefix within the budget is found with a
few exact token counts around the document's own token offsets, never one unit object per character.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import regex

from chunkline.packing import pack_units, units_from_cuts
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.structure import PROTECTED_KINDS, MarkdownDocument
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter

__all__ = [
    "CharactersParams",
    "LinesParams",
    "ParagraphsParams",
    "SentencesParams",
    "WordsParams",
    "boundary_after_whitespace",
    "fitting_protected_ranges",
    "keep_ranges_whole",
    "pack_characters",
    "paragraph_cuts",
    "sentence_cuts",
    "word_cuts",
]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------- parameters


def check_overlap(overlap: object, unit_name: str) -> None:
    """An overlap is a whole number of units, 0 or more."""
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise ValueError(f"overlap must be a whole number of {unit_name} >= 0, got {overlap!r}")


@dataclass(frozen=True)
class SentencesParams:
    """Parameters of the ``sentences`` strategy."""

    overlap: int = 1
    """Sentences the next chunk repeats from the end of the previous one (LocalVectorDB's chunk_overlap)."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "sentences")


@dataclass(frozen=True)
class ParagraphsParams:
    """Parameters of the ``paragraphs`` strategy."""

    overlap: int = 1
    """Paragraphs the next chunk repeats from the end of the previous one."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "paragraphs")


@dataclass(frozen=True)
class WordsParams:
    """Parameters of the ``words`` strategy."""

    overlap: int = 20
    """Words the next chunk repeats from the end of the previous one."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "words")


@dataclass(frozen=True)
class LinesParams:
    """Parameters of the ``lines`` strategy."""

    overlap: int = 3
    """Lines the next chunk repeats from the end of the previous one."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "lines")


@dataclass(frozen=True)
class CharactersParams:
    """Parameters of the ``characters`` strategy."""

    overlap: int = 50
    """Characters the next chunk repeats from the end of the previous one."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "characters")


# ------------------------------------------------------------------------------------ unit boundaries

# A line break is \r\n, \r or \n; everything else \s matches is horizontal whitespace here. (The standard
# library's \s is exactly str.isspace(); the regex module is used where a variable-width lookbehind is needed.)
# One whitespace run: up to and including its last line break (group 1: the indentation after it), or a
# run without a line break. The boundary is the start of group 1, or the end of the run.
_WHITESPACE_RUN = re.compile(r"\s*[\r\n]([^\S\r\n]*)|[^\S\r\n]+")
_SPACES = re.compile(r"\s*")
_SENTENCE_CLOSERS = "\"'\u2019\u201d)\\]\u300d\u300f\uff09"
# ., ! or ? with closing quotes or brackets, before whitespace -- but not the "1." of an ordered list item;
# or a CJK full stop, exclamation or question mark with its closers (no whitespace needed after those).
_SENTENCE_END = regex.compile(
    rf"(?<!^[ \t>]*\d{{1,9}})[.!?][{_SENTENCE_CLOSERS}]*(?=\s)|[\u3002\uff01\uff1f][{_SENTENCE_CLOSERS}]*",
    regex.MULTILINE,
)
# A line break followed by one or more blank (whitespace-only) lines; \r\n is one break, never \r then \n.
_BLANK_LINES = re.compile(r"(?:\r\n|\r(?!\n)|\n)(?:[^\S\r\n]*(?:\r\n|\r(?!\n)|\n))+")


def boundary_after_whitespace(text: str, position: int) -> int:
    """The unit boundary for a cut at ``position``: the start of the next line when the whitespace around
    ``position`` holds a line break, else the end of that whitespace (``position`` itself between two
    non-space characters)."""
    if position <= 0 or position >= len(text):
        return position
    run_start = position
    while run_start > 0 and text[run_start - 1].isspace():
        run_start -= 1
    run_end = _SPACES.match(text, position).end()
    last_break = max(text.rfind("\n", run_start, run_end), text.rfind("\r", run_start, run_end))
    return last_break + 1 if last_break >= 0 else run_end


def word_cuts(text: str) -> list[int]:
    """Boundaries after each whitespace run (at the next line's start when the run holds a line break)."""
    cuts = []
    append = cuts.append
    for match in _WHITESPACE_RUN.finditer(text):
        indentation_start = match.start(1)
        append(indentation_start if indentation_start >= 0 else match.end())
    return cuts


def sentence_cuts(text: str) -> list[int]:
    """Boundaries after each sentence end and the whitespace that follows it."""
    return [boundary_after_whitespace(text, match.end()) for match in _SENTENCE_END.finditer(text)]


def paragraph_cuts(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Boundaries after each run of blank lines in ``text[start:end]`` (the start of the next paragraph)."""
    return [match.end() for match in _BLANK_LINES.finditer(text, start, len(text) if end is None else end)]


def block_edges(document: MarkdownDocument) -> list[int]:
    """Start and end of every markdown block, as unit boundaries."""
    text = document.text
    edges: set[int] = set()
    for block in document.blocks:
        edges.add(block.start_char)
        edges.add(block.end_char)
    return [boundary_after_whitespace(text, edge) for edge in sorted(edges)]


# ---------------------------------------------------------------------------------- protected blocks

# How far the range's own tokenization can be off from a slice's exact count (as in chunkline.splitting).
_ESTIMATE_SLACK = 8


def fitting_protected_ranges(
    document: MarkdownDocument,
    offsets: TokenOffsets,
    max_tokens: int,
    kinds: Iterable[str] = PROTECTED_KINDS,
) -> list[tuple[int, int]]:
    """Merged ranges of the blocks of ``kinds`` that fit within ``max_tokens`` (each extended over the
    blank lines after it, so that its end is a unit boundary), ascending and disjoint."""
    text = document.text
    wanted = frozenset(kinds)
    ranges: list[tuple[int, int]] = []
    for block in document.blocks:
        if block.kind not in wanted or block.end_char - block.start_char < 2:
            continue
        estimate = offsets.estimate(block.start_char, block.end_char)
        if estimate > max_tokens + _ESTIMATE_SLACK:
            continue
        if estimate > max_tokens - _ESTIMATE_SLACK and offsets.count(block.start_char, block.end_char) > max_tokens:
            continue
        ranges.append((block.start_char, boundary_after_whitespace(text, block.end_char)))
    return merge_ranges(ranges)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or nested ranges merged, ascending."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def keep_ranges_whole(cuts: Sequence[int], ranges: Sequence[tuple[int, int]]) -> list[int]:
    """``cuts`` without those strictly inside one of the disjoint ascending ``ranges``, plus the ranges'
    edges: each range becomes whole units. Sorted and without duplicates."""
    if not ranges:
        return sorted(set(cuts))
    positions = np.asarray(cuts, dtype=np.int64)
    starts = np.fromiter((start for start, _ in ranges), dtype=np.int64, count=len(ranges))
    ends = np.fromiter((end for _, end in ranges), dtype=np.int64, count=len(ranges))
    slot = np.searchsorted(starts, positions, side="right") - 1
    safe_slot = np.maximum(slot, 0)
    inside = (slot >= 0) & (positions > starts[safe_slot]) & (positions < ends[safe_slot])
    return np.unique(np.concatenate((positions[~inside], starts, ends))).tolist()


def units_between(text: str, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """Units from sorted boundaries; whitespace before the first or after the last boundary joins its
    neighbour instead of becoming a unit of its own."""
    length = len(text)
    points = [cut for cut in cuts if 0 < cut < length]
    if points and text[: points[0]].isspace():
        points.pop(0)
    if points and text[points[-1] :].isspace():
        points.pop()
    return units_from_cuts(points, length)


# ---------------------------------------------------------------------------------------- strategies


def _pack(
    document: MarkdownDocument,
    config,
    counter: TokenCounter,
    cuts: Sequence[int],
    unit_name: str,
    *,
    protect_blocks: bool,
) -> list[ChunkSpan]:
    """Pack the units between ``cuts``, fitting protected blocks kept whole when ``protect_blocks``."""
    text = document.text
    if not text:
        return [ChunkSpan(0, 0, token_count=0)]
    offsets = TokenOffsets(text, 0, len(text), counter)
    if protect_blocks:
        cuts = keep_ranges_whole(cuts, fitting_protected_ranges(document, offsets, config.max_tokens))
    units = units_between(text, cuts)
    return pack_units(
        document, units, counter, config.max_tokens, config.params.overlap, unit_name=unit_name, offsets=offsets
    )


@register_strategy("sentences", SentencesParams)
def chunk_by_sentences(document: MarkdownDocument, config, counter: TokenCounter) -> list[ChunkSpan]:
    """Sentences packed within max_tokens, overlapping by `overlap` sentences (LocalVectorDB sentences)."""
    text = document.text
    cuts = sentence_cuts(text) + block_edges(document)
    return _pack(document, config, counter, sorted(set(cuts)), "sentences", protect_blocks=True)


@register_strategy("paragraphs", ParagraphsParams)
def chunk_by_paragraphs(document: MarkdownDocument, config, counter: TokenCounter) -> list[ChunkSpan]:
    """Blank-line separated paragraphs packed within max_tokens, overlapping by `overlap` paragraphs."""
    return _pack(document, config, counter, paragraph_cuts(document.text), "paragraphs", protect_blocks=True)


@register_strategy("words", WordsParams)
def chunk_by_words(document: MarkdownDocument, config, counter: TokenCounter) -> list[ChunkSpan]:
    """Whitespace-separated words packed within max_tokens, overlapping by `overlap` words."""
    return _pack(document, config, counter, word_cuts(document.text), "words", protect_blocks=True)


@register_strategy("lines", LinesParams)
def chunk_by_lines(document: MarkdownDocument, config, counter: TokenCounter) -> list[ChunkSpan]:
    """Lines packed within max_tokens, overlapping by `overlap` lines; markdown structure is ignored."""
    return _pack(document, config, counter, document.index.line_starts[1:], "lines", protect_blocks=False)


@register_strategy("characters", CharactersParams)
def chunk_by_characters(document: MarkdownDocument, config, counter: TokenCounter) -> list[ChunkSpan]:
    """The longest runs of characters within max_tokens, overlapping by `overlap` characters."""
    return pack_characters(document.text, counter, config.max_tokens, config.params.overlap)


# -------------------------------------------------------------------------------- character packing


def pack_characters(text: str, counter: TokenCounter, max_tokens: int, overlap_chars: int) -> list[ChunkSpan]:
    """Consecutive character ranges, each the longest that fits ``max_tokens``; the next one starts
    ``overlap_chars`` characters before the previous end (always at least one character further on)."""
    if not text:
        return [ChunkSpan(0, 0, token_count=0)]
    length = len(text)
    offsets = TokenOffsets(text, 0, length, counter)
    spans: list[ChunkSpan] = []
    start = 0
    repeated_chars = 0
    while True:
        end, token_count = _longest_fitting_end(offsets, start, length, max_tokens)
        if spans:
            repeated_chars += max(0, spans[-1].end_char - start)
        spans.append(ChunkSpan(start, end, None, False, token_count))
        if end >= length:
            break
        start = max(end - overlap_chars, start + 1)
    emitted_chars = sum(span.end_char - span.start_char for span in spans)
    if overlap_chars and repeated_chars * 2 > emitted_chars:
        logger.warning(
            "overlap of %d characters re-emits %.0f%% of the text in every chunk: overlap is counted in "
            "characters, not tokens; keep it well below a chunk's length",
            overlap_chars,
            100 * repeated_chars / emitted_chars,
        )
    return spans


def _longest_fitting_end(offsets: TokenOffsets, start: int, length: int, max_tokens: int) -> tuple[int, int]:
    """(end, exact token count) of the longest ``text[start:end]`` within ``max_tokens`` (one character at
    least, even when that character alone is over the budget).

    The document's token offsets give a first guess; galloping by tokens brackets the answer between an
    end that fits and one that does not, and a binary search over the characters in between finishes."""
    count = offsets.count
    if offsets.estimate(start, length) <= max_tokens + 2:
        total = count(start, length)
        if total <= max_tokens:
            return length, total

    def end_after(tokens: int, low_bound: int) -> int:
        return min(max(offsets.char_after_tokens(start, tokens), low_bound), length)

    guess = end_after(max_tokens, start + 1)
    guess_count = count(start, guess)
    if guess_count <= max_tokens:
        low, low_count, high, extra = guess, guess_count, length, 1
        while low < length:
            candidate = end_after(max_tokens + extra, low + 1)
            candidate_count = count(start, candidate)
            if candidate_count > max_tokens:
                high = candidate
                break
            low, low_count, extra = candidate, candidate_count, extra * 2
        if low >= length:
            return low, low_count
    else:
        high, fewer = guess, 1
        while True:
            candidate = start + 1 if max_tokens - fewer < 1 else min(end_after(max_tokens - fewer, start + 1), high - 1)
            candidate = max(candidate, start + 1)
            candidate_count = count(start, candidate)
            if candidate_count <= max_tokens or candidate == start + 1:
                low, low_count = candidate, candidate_count
                break
            high, fewer = candidate, fewer * 2
    while high - low > 1:
        middle = (low + high) // 2
        middle_count = count(start, middle)
        if middle_count <= max_tokens:
            low, low_count = middle, middle_count
        else:
            high = middle
    return low, low_count
