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
text only, for logs, CSV and scripts without spaces (they register ``keeps_blocks_whole=False``). A single unit over the budget (a huge paragraph, a
code block longer than a chunk) is split on its own at its best boundaries (:mod:`chunkline.splitting`).

``characters`` packs by character count directly: the longest prefix within the budget is found with a
few exact token counts around the document's own token offsets, never one unit object per character.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import regex

from chunkline.capacity import Capacity
from chunkline.context import ChunkContext
from chunkline.packing import pack_units
from chunkline.protected import after_blank_lines, fitting_protected_ranges, keep_ranges_whole, merge_ranges
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.settings import MAX_WHOLE_NUMBER
from chunkline.structure import MarkdownDocument
from chunkline.token_offsets import TokenOffsets

__all__ = [
    "CharactersParams",
    "LinesParams",
    "ParagraphsParams",
    "SentencesParams",
    "UnitParams",
    "WordsParams",
    "after_blank_lines",
    "check_overlap",
    "fitting_protected_ranges",
    "keep_ranges_whole",
    "merge_ranges",
    "pack_characters",
    "paragraph_cuts",
    "sentence_cuts",
    "units_between",
    "word_cuts",
]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------- parameters


def check_overlap(overlap: object, unit_name: str) -> None:
    """An overlap is a whole number of units, 0 or more (and at most ``MAX_WHOLE_NUMBER``)."""
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= MAX_WHOLE_NUMBER:
        raise ValueError(
            f"overlap must be a whole number of {unit_name} from 0 to {MAX_WHOLE_NUMBER:,}, got {overlap!r}"
        )


@dataclass(frozen=True)
class UnitParams:
    """Parameters of a unit strategy: its overlap, counted in its own unit."""

    overlap: int = 0
    """Units the next chunk repeats from the end of the previous one (LocalVectorDB's chunk_overlap)."""
    unit: ClassVar[str] = "units"

    def __post_init__(self) -> None:
        check_overlap(self.overlap, self.unit)


def _unit_params(unit: str, overlap: int) -> type[UnitParams]:
    """The parameters of the strategy named ``unit``, whose default overlap is ``overlap`` units."""
    name = f"{unit.capitalize()}Params"
    namespace = {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"Parameters of the ``{unit}`` strategy.",
        "__annotations__": {"overlap": "int"},
        "overlap": overlap,
        "unit": unit,
    }
    return dataclass(frozen=True)(type(name, (UnitParams,), namespace))


SentencesParams = _unit_params("sentences", 1)
ParagraphsParams = _unit_params("paragraphs", 1)
WordsParams = _unit_params("words", 20)
LinesParams = _unit_params("lines", 3)
CharactersParams = _unit_params("characters", 50)


# ------------------------------------------------------------------------------------ unit boundaries

# A line break is \r\n, \r or \n; all other whitespace is horizontal here. Where the whitespace between two
# units holds a line break, the boundary is just after its last line break; otherwise after the whitespace.
_LINE_BREAK = r"(?:\r\n|\r(?!\n)|\n)"  # \r\n is one break, never \r then \n
# The whitespace after a unit: up to its last line break (the empty group 1 marks the boundary there) and
# the next line's indentation, or a run of horizontal whitespace. (The standard library's \s is exactly
# str.isspace().)
_GAP_WITH_BREAK = r"\s*[\r\n]()[^\S\r\n]*"
_SENTENCE_CLOSERS = "\"'\u2019\u201d)\\]\u300d\u300f\uff09"
# ., ! or ? and closing quotes or brackets before whitespace -- not the "1." of an ordered list item (the
# regex module allows that variable-width lookbehind) -- or a CJK full stop, exclamation or question mark
# with its closers, which need no whitespace after them; then the whitespace that follows.
_SENTENCE_END = regex.compile(
    rf"(?:(?<!^[ \t>]*\d{{1,9}})[.!?][{_SENTENCE_CLOSERS}]*(?=\s)|[\u3002\uff01\uff1f][{_SENTENCE_CLOSERS}]*)"
    rf"(?:{_GAP_WITH_BREAK}|[^\S\r\n]*)",
    regex.MULTILINE,
)
# A line break followed by one or more blank (whitespace-only) lines.
_BLANK_LINES = re.compile(rf"{_LINE_BREAK}(?:[^\S\r\n]*{_LINE_BREAK})+")


def _gap_boundaries(matches) -> list[int]:
    """The boundary of each match of a pattern ending in a whitespace gap: the position of its group 1
    (just after the gap's last line break) when that took part, else the match's end."""
    cuts = []
    append = cuts.append
    for match in matches:
        after_break = match.start(1)
        append(after_break if after_break >= 0 else match.end())
    return cuts


def word_cuts(text: str) -> list[int]:
    """Boundaries after each whitespace run (at the next line's start when the run holds a line break).

    Vectorized: a document has about one word per six characters, too many for a Python loop per match."""
    if not text:
        return []
    codes = _code_points(text)
    space = _IS_SPACE[codes] if codes.dtype == np.uint8 else _IS_SPACE[np.minimum(codes, len(_IS_SPACE) - 1)]
    # run_ends[k]: the first non-space after the k-th whitespace run; run_starts[k]: that run's start.
    run_ends = np.flatnonzero(space[:-1] & ~space[1:]) + 1
    run_starts = np.flatnonzero(space & ~np.concatenate(([False], space[:-1])))[: len(run_ends)]
    breaks = np.flatnonzero((codes == 10) | (codes == 13))
    if len(breaks):
        slot = np.searchsorted(breaks, run_ends) - 1
        last_break = breaks[np.maximum(slot, 0)]
        holds_break = (slot >= 0) & (last_break >= run_starts)
        run_ends = np.where(holds_break, last_break + 1, run_ends)
    return run_ends.tolist()


def _code_points(text: str) -> np.ndarray:
    """The text's code points as an array (one byte each for ASCII)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _space_table() -> np.ndarray:
    """``table[c]``: whether code point ``c`` is whitespace (``str.isspace``); the last entry stands for
    every code point past the table."""
    highest = 0x3000  # IDEOGRAPHIC SPACE, the highest whitespace code point
    table = np.zeros(highest + 2, dtype=bool)
    for code in range(highest + 1):
        table[code] = chr(code).isspace()
    return table


_IS_SPACE = _space_table()


def sentence_cuts(text: str) -> list[int]:
    """Boundaries after each sentence end and the whitespace that follows it."""
    return _gap_boundaries(_SENTENCE_END.finditer(text))


def paragraph_cuts(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Boundaries after each run of blank lines in ``text[start:end]`` (the start of the next paragraph)."""
    return [match.end() for match in _BLANK_LINES.finditer(text, start, len(text) if end is None else end)]


def block_edges(document: MarkdownDocument) -> list[int]:
    """Start and end of every markdown block, as unit boundaries (a block starts at a line start; its end
    moves past the blank lines after it)."""
    text = document.text
    edges: set[int] = set()
    for block in document.blocks:
        edges.add(block.start_char)
        edges.add(block.end_char)
    return sorted({after_blank_lines(text, edge) for edge in edges})


def units_between(text: str, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """Units from sorted, distinct boundaries; whitespace before the first or after the last boundary
    joins its neighbour instead of becoming a unit of its own."""
    length = len(text)
    low = bisect_right(cuts, 0)
    high = bisect_left(cuts, length)
    if low < high and text[: cuts[low]].isspace():
        low += 1
    if low < high and text[cuts[high - 1] :].isspace():
        high -= 1
    bounds = [0, *cuts[low:high], length]
    return list(zip(bounds, bounds[1:]))


# ---------------------------------------------------------------------------------------- strategies


def _pack(context: ChunkContext, cuts: Sequence[int], *, protect_blocks: bool) -> list[ChunkSpan]:
    """Pack the units between ``cuts``, fitting protected blocks kept whole when ``protect_blocks``."""
    text = context.text
    if protect_blocks:
        cuts = keep_ranges_whole(cuts, context.protected_ranges)
    params = context.params
    return pack_units(context, units_between(text, cuts), params.overlap, unit_name=params.unit)


@register_strategy("sentences", SentencesParams)
def chunk_by_sentences(context: ChunkContext) -> list[ChunkSpan]:
    """Sentences packed within max_tokens, overlapping by `overlap` sentences (LocalVectorDB sentences)."""
    cuts = sentence_cuts(context.text) + block_edges(context.document)
    return _pack(context, sorted(set(cuts)), protect_blocks=True)


@register_strategy("paragraphs", ParagraphsParams)
def chunk_by_paragraphs(context: ChunkContext) -> list[ChunkSpan]:
    """Blank-line separated paragraphs packed within max_tokens, overlapping by `overlap` paragraphs."""
    return _pack(context, paragraph_cuts(context.text), protect_blocks=True)


@register_strategy("words", WordsParams)
def chunk_by_words(context: ChunkContext) -> list[ChunkSpan]:
    """Whitespace-separated words packed within max_tokens, overlapping by `overlap` words."""
    return _pack(context, word_cuts(context.text), protect_blocks=True)


@register_strategy("lines", LinesParams, keeps_blocks_whole=False)
def chunk_by_lines(context: ChunkContext) -> list[ChunkSpan]:
    """Lines packed within max_tokens, overlapping by `overlap` lines; markdown structure is ignored."""
    return _pack(context, context.document.index.line_starts[1:], protect_blocks=False)


@register_strategy("characters", CharactersParams, keeps_blocks_whole=False)
def chunk_by_characters(context: ChunkContext) -> list[ChunkSpan]:
    """The longest runs of characters within max_tokens, overlapping by `overlap` characters."""
    return pack_characters(context.capacity, context.params.overlap)


# -------------------------------------------------------------------------------- character packing


def pack_characters(capacity: Capacity, overlap_chars: int) -> list[ChunkSpan]:
    """Consecutive character ranges of the offsets' text, each the longest that fits the budget; the next
    one starts ``overlap_chars`` characters before the previous end (always at least one character
    further on)."""
    offsets, max_tokens = capacity.offsets, capacity.max_tokens
    length = len(offsets.text)
    spans: list[ChunkSpan] = []
    start = 0
    repeated_chars = 0
    while True:
        end, token_count = _longest_fitting_end(offsets, start, length, max_tokens)
        if spans and end <= spans[-1].end_char:
            # The overlap and the next character do not fit together: this chunk goes without overlap.
            start = spans[-1].end_char
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
    if offsets.estimate(start, length) <= max_tokens + Capacity.SLACK:
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
