"""Splitting a range of text that is over the token limit into pieces that fit, at the best boundaries.

The splitter cuts where the text's own structure allows, trying boundary levels from the strongest down:

``BLOCK`` (between markdown blocks) > ``LINE`` > ``SENTENCE`` > ``WORD`` > ``TOKEN`` > ``CHARACTER``.

For each piece it takes the strongest level whose furthest fitting boundary still fills at least half of
the token budget, so a small paragraph in front of a long one does not become a chunk of its own, and falls
to a weaker level only when the strong ones would leave most of the budget unused. Positions strictly inside
a protected block (fenced or indented code, table, list item, HTML block) that fits within the limit are
never boundaries, so such a block always lands whole in one piece. Words are cut only when one word is
longer than the budget, and a character only when one character encodes to more tokens than the budget.

Every piece's token count is verified with the real tokenizer; the overlap between consecutive pieces
(``overlap_tokens``) starts at a line or sentence start when its window holds one, else between
words, and never exceeds its budget.

:func:`split_token_windows` is mdvdb's plain sliding window over token ids, kept as an option; its windows
are snapped to character boundaries so that chunk text is still a verbatim slice of the document.
"""

from __future__ import annotations

import enum
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from chunkline.capacity import Capacity
from chunkline.structure import PROTECTED_KINDS, Block, MarkdownDocument
from chunkline.text_index import TextIndex
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter

__all__ = [
    "BoundaryLevel",
    "Piece",
    "first_piece_of_range",
    "split_at_boundaries",
    "split_document_range",
    "split_token_windows",
]


class BoundaryLevel(enum.IntEnum):
    """Where a cut may fall, strongest first."""

    BLOCK = 5
    LINE = 4
    SENTENCE = 3
    WORD = 2
    TOKEN = 1
    CHARACTER = 0


@dataclass(frozen=True, slots=True)
class Piece:
    """A half-open character range and its exact token count."""

    start_char: int
    end_char: int
    token_count: int


# A sentence ends at ., ! or ? (or their CJK forms), optionally followed by closing quotes or brackets;
# the boundary is after the whitespace that follows, so the next piece starts with the next sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u2019\u201d)\]]*[ \t]+|[\u3002\uff01\uff1f][\"'\u2019\u201d)\]]*\s*")
# A search for sentence ends starts this far back, so that one whose closers and spaces begin before the
# searched stretch is still found whole.
_SENTENCE_LOOKBACK = 16
_WHITESPACE_RUN = re.compile(r"\s+")
# Fraction of the budget a piece must reach before the splitter prefers a weaker boundary to fill it.
_MIN_FILL = 0.5
# Characters before a limit that the first backward look for a boundary covers.
_FIRST_WINDOW = 64


_WHOLE_WORD_LEVELS = tuple(level for level in BoundaryLevel if level >= BoundaryLevel.WORD)
_SORTED_LEVELS = frozenset({BoundaryLevel.BLOCK, BoundaryLevel.LINE, BoundaryLevel.TOKEN})
# Where an overlap may start, as groups tried in turn: a line or sentence start (equally clean), else a
# word start.
_OVERLAP_START_LEVELS = ((BoundaryLevel.LINE, BoundaryLevel.SENTENCE), (BoundaryLevel.WORD,))


@dataclass(frozen=True, slots=True)
class _SplitRequest:
    """``text[start:end]`` to split into pieces of at most ``max_tokens`` tokens sharing up to
    ``overlap_tokens``: ``blocks`` are the blocks inside the range, ``offsets`` token offsets of a range
    that holds it."""

    text: str
    index: TextIndex
    start: int
    end: int
    blocks: Sequence[Block]
    offsets: TokenOffsets
    max_tokens: int
    overlap_tokens: int


class _RangeSplitter:
    def __init__(self, request: _SplitRequest):
        self.text = request.text
        self.index = request.index
        self.start = start = request.start
        self.end = end = request.end
        self.max_tokens = request.max_tokens
        self.overlap_tokens = request.overlap_tokens
        self.tokens = request.offsets
        self.capacity = Capacity(request.offsets, request.max_tokens)
        blocks = request.blocks
        fitting = self._fitting_protected_blocks(blocks)
        # A fitting block's content end (before its trailing line break) is a cut too: a block of exactly
        # max_tokens tokens fits there, though not with its line break.
        self.block_boundaries = sorted(
            {position for block in blocks for position in (block.start_char, block.end_char)}.union(
                content_end for _, content_end in fitting
            )
            - {start, end}
        )
        self.forbidden_starts, self.forbidden_ends = self._merged(fitting)

    def _fitting_protected_blocks(self, blocks: Sequence[Block]) -> list[tuple[int, int]]:
        """(start, content end) of each protected block whose content, trailing whitespace excluded, fits."""
        fitting: list[tuple[int, int]] = []
        text = self.text
        protected = [block for block in blocks if block.kind in PROTECTED_KINDS]
        if not protected:
            return fitting
        estimates = self.tokens.estimates(
            [block.start_char for block in protected], [block.end_char for block in protected]
        ).tolist()
        for block, estimate in zip(protected, estimates):
            if not self.capacity.may_fit(estimate):
                continue
            content_end = block.start_char + len(text[block.start_char : block.end_char].rstrip())
            if content_end - block.start_char < 2:
                continue
            # Far from the limit the estimate decides; near it, the block's own exact count does.
            if self.capacity.surely_fits(estimate) or self.capacity.within(block.start_char, content_end):
                fitting.append((block.start_char, content_end))
        return fitting

    @staticmethod
    def _merged(fitting: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Merged open intervals (start, end) strictly inside which no cut may fall."""
        fitting.sort()
        starts: list[int] = []
        ends: list[int] = []
        for block_start, block_end in fitting:
            if starts and block_start < ends[-1]:
                ends[-1] = max(ends[-1], block_end)
            else:
                starts.append(block_start)
                ends.append(block_end)
        return starts, ends

    def allowed(self, position: int) -> bool:
        """False strictly inside a protected block that fits; its two edges are allowed."""
        slot = bisect_left(self.forbidden_starts, position) - 1
        return slot < 0 or position >= self.forbidden_ends[slot]

    def candidates(self, level: BoundaryLevel, low: int, high: int, text_end: int | None = None) -> list[int]:
        """Boundaries of ``level`` in the closed interval [low, high], ascending, allowed or not.

        Whitespace after ``text_end`` (``high`` by default) is not looked at: a run cut there ends there."""
        if high < low:
            return []
        text = self.text
        if text_end is None:
            text_end = high
        if level is BoundaryLevel.BLOCK:
            positions = self.block_boundaries[
                bisect_left(self.block_boundaries, low) : bisect_right(self.block_boundaries, high)
            ]
        elif level is BoundaryLevel.LINE:
            line_starts = self.index.line_starts
            positions = line_starts[bisect_left(line_starts, low) : bisect_right(line_starts, high)]
        elif level is BoundaryLevel.SENTENCE:
            matches = _SENTENCE_END.finditer(text, max(low - _SENTENCE_LOOKBACK, 0), text_end)
            positions = [match.end() for match in matches]
            positions = [position for position in positions if low <= position <= high]
        elif level is BoundaryLevel.WORD:
            positions = [match.end() for match in _WHITESPACE_RUN.finditer(text, max(low - 1, 0), text_end)]
            positions = [position for position in positions if low <= position <= high]
        elif level is BoundaryLevel.TOKEN:
            ends = self.tokens.aligned_end_chars
            positions = ends[bisect_left(ends, low) : bisect_right(ends, high)]
        else:
            positions = list(range(low, high + 1))
        return positions

    def last_allowed(self, level: BoundaryLevel, low: int, high: int) -> int | None:
        """The last allowed boundary of ``level`` in [low, high].

        Looked for backwards from ``high``, jumping over protected blocks, so that finding a cut near
        ``high`` costs the same in a long range as in a short one: sorted boundaries are walked by
        bisection, and the boundaries a regular expression finds are looked for in windows that widen
        eightfold."""
        if level is BoundaryLevel.CHARACTER:
            blocked = self._forbidden_start(high)
            position = high if blocked is None else blocked
            return position if position >= low else None
        if level in _SORTED_LEVELS:
            return self._last_allowed_sorted(self._sorted_boundaries(level), low, high)
        window = _FIRST_WINDOW
        top = high
        while top >= low:
            bottom = max(low, top - window)
            # A regular expression sees one character past the window, so that a whitespace run that goes
            # on past ``top`` is not cut short there (``high`` itself is the caller's limit).
            positions = self.candidates(level, bottom, top, min(top + 1, high))
            skip_above = top
            for position in reversed(positions):
                if position > skip_above:
                    continue
                blocked = self._forbidden_start(position)
                if blocked is None:
                    return position
                skip_above = blocked  # the block's start is the next cut to try
            top = min(bottom - 1, skip_above)
            window *= 8
        return None

    def _sorted_boundaries(self, level: BoundaryLevel) -> list[int]:
        if level is BoundaryLevel.BLOCK:
            return self.block_boundaries
        if level is BoundaryLevel.LINE:
            return self.index.line_starts
        return self.tokens.aligned_end_chars

    def _last_allowed_sorted(self, positions: list[int], low: int, high: int) -> int | None:
        slot = bisect_right(positions, high) - 1
        while slot >= 0 and positions[slot] >= low:
            blocked = self._forbidden_start(positions[slot])
            if blocked is None:
                return positions[slot]
            slot = bisect_right(positions, blocked) - 1
        return None

    def _forbidden_start(self, position: int) -> int | None:
        """The start of the protected block that holds ``position`` strictly inside, if any."""
        slot = bisect_left(self.forbidden_starts, position) - 1
        if slot >= 0 and position < self.forbidden_ends[slot]:
            return self.forbidden_starts[slot]
        return None

    def count(self, start: int, end: int) -> int:
        return self.tokens.count(start, end)

    def best_end(self, start: int, limit: int) -> int | None:
        """The cut after ``start`` and at most at ``limit``.

        The strongest level whose furthest cut fills half the budget wins; if none does, the furthest cut
        between words (or stronger) wins; only when no word ends in reach is a word cut, at a token and
        then at a character."""
        fallback: int | None = None
        for level in _WHOLE_WORD_LEVELS:
            found = self.last_allowed(level, start + 1, limit)
            if found is None:
                continue
            if self.tokens.estimate(start, found) >= self.max_tokens * _MIN_FILL:
                return found
            if fallback is None or found > fallback:
                fallback = found
        if fallback is not None:
            return fallback
        found = self.last_allowed(BoundaryLevel.TOKEN, start + 1, limit)
        if found is not None:
            return found
        return limit if self.allowed(limit) else None

    def piece_from(self, start: int) -> Piece:
        """The longest well-cut piece starting at ``start`` that fits the budget."""
        if self.capacity.may_fit(self.tokens.estimate(start, self.end)):
            count = self.count(start, self.end)
            if count <= self.max_tokens:
                return Piece(start, self.end, count)
        limit = min(self.tokens.char_after_tokens(start, self.max_tokens), self.end)
        slot = bisect_right(self.forbidden_starts, start) - 1
        if slot >= 0 and self.forbidden_starts[slot] == start and limit < self.forbidden_ends[slot]:
            # A protected block that fits starts here: its end is always a valid cut.
            limit = self.forbidden_ends[slot]
        while True:
            end = self.best_end(start, limit) if limit > start else None
            if end is None:
                # Nothing fits: the budget is smaller than the first character's tokens.
                end = start + 1
                return Piece(start, end, self.count(start, end))
            count = self.count(start, end)
            if count <= self.max_tokens:
                return Piece(start, end, count)
            limit = end - 1

    def overlap_start(self, piece: Piece) -> int:
        """Where the next piece starts: up to ``overlap_tokens`` before the end of ``piece``, at a boundary.

        A line start or a sentence start in the overlap window wins, the one that keeps the most overlap
        within its budget, so that the next piece begins cleanly; only when the window holds neither does
        the overlap start at the earliest word start in it (no overlap rather than half a word). The
        window is sized with the range's tokenization, which can differ from the slice's own count by a
        token at its edges; only the pieces themselves are held to the exact limit."""
        if self.overlap_tokens <= 0:
            return piece.end_char
        earliest = self.tokens.char_before_tokens(piece.end_char, self.overlap_tokens)
        low = max(earliest, piece.start_char + 1)
        high = piece.end_char - 1
        for levels in _OVERLAP_START_LEVELS:
            chosen: int | None = None
            for level in levels:
                first = self._first_overlap_start(level, low, high, piece.end_char)
                if first is not None and (chosen is None or first < chosen):
                    chosen = first
            if chosen is not None:
                return chosen
        return piece.end_char

    def _first_overlap_start(self, level: BoundaryLevel, low: int, high: int, end: int) -> int | None:
        """The earliest allowed boundary of ``level`` in [low, high] whose overlap up to ``end`` is within
        ``overlap_tokens``."""
        estimate = self.tokens.estimate
        return next(
            (
                position
                for position in self.candidates(level, low, high)
                if estimate(position, end) <= self.overlap_tokens and self.allowed(position)
            ),
            None,
        )

    def split(self) -> list[Piece]:
        pieces: list[Piece] = []
        start = self.start
        while start < self.end:
            piece = self.piece_from(start)
            if pieces and piece.end_char <= pieces[-1].end_char:
                # The overlap left no room to go further (e.g. a protected block follows): drop the overlap.
                start = pieces[-1].end_char
                piece = self.piece_from(start)
            pieces.append(piece)
            if piece.end_char >= self.end:
                break
            start = self.overlap_start(piece)
        return pieces


def split_at_boundaries(
    text: str,
    index: TextIndex,
    start: int,
    end: int,
    blocks: Sequence[Block],
    counter: TokenCounter,
    max_tokens: int,
    overlap_tokens: int,
    offsets: TokenOffsets | None = None,
) -> list[Piece]:
    """Split ``text[start:end]`` into pieces of at most ``max_tokens`` tokens cut at the best boundaries,
    consecutive pieces sharing up to ``overlap_tokens`` tokens. The pieces cover the range without gaps.

    ``blocks`` are the blocks that lie inside the range; ``offsets``, token offsets of a range that holds
    this one (the whole document's, say) when the caller has them already."""
    if start >= end:
        return [Piece(start, end, 0)]
    if offsets is None or not offsets.start <= start <= end <= offsets.end:
        offsets = TokenOffsets(text, start, end, counter)
    return _RangeSplitter(_SplitRequest(text, index, start, end, blocks, offsets, max_tokens, overlap_tokens)).split()


def first_piece_of_range(
    document: MarkdownDocument,
    start: int,
    end: int,
    counter: TokenCounter,
    max_tokens: int,
    offsets: TokenOffsets | None = None,
) -> Piece:
    """The first piece :func:`split_document_range` cuts ``document.text[start:end]`` into, with any overlap
    (which only moves where later pieces start), found without cutting the rest of the range."""
    if start >= end:
        return Piece(start, end, 0)
    if offsets is None or not offsets.start <= start <= end <= offsets.end:
        offsets = TokenOffsets(document.text, start, end, counter)
    blocks = document.blocks_within(start, end)
    request = _SplitRequest(document.text, document.index, start, end, blocks, offsets, max_tokens, 0)
    return _RangeSplitter(request).piece_from(start)


def split_document_range(
    document: MarkdownDocument,
    start: int,
    end: int,
    counter: TokenCounter,
    max_tokens: int,
    overlap_tokens: int = 0,
    offsets: TokenOffsets | None = None,
) -> list[Piece]:
    """:func:`split_at_boundaries` over ``document.text[start:end]`` with the document's own blocks."""
    return split_at_boundaries(
        document.text,
        document.index,
        start,
        end,
        document.blocks_within(start, end),
        counter,
        max_tokens,
        overlap_tokens,
        offsets,
    )


def split_token_windows(
    text: str,
    start: int,
    end: int,
    counter: TokenCounter,
    max_tokens: int,
    overlap_tokens: int,
    offsets: TokenOffsets | None = None,
) -> list[Piece]:
    """mdvdb's sliding window: ``max_tokens`` token windows advancing by ``max_tokens - overlap_tokens``.

    A window edge inside a multi-byte character moves back to that character's start, and a window whose
    verbatim text re-encodes to more than ``max_tokens`` tokens is shortened token by token until it fits;
    a window never starts after the previous one ended, so the windows cover the range without gaps.
    """
    if start >= end:
        return [Piece(start, end, 0)]
    if offsets is None or not offsets.start <= start <= end <= offsets.end:
        offsets = TokenOffsets(text, start, end, counter)
    aligned = offsets.aligned_end_chars  # ascending character offsets of char-aligned token ends
    all_ends = offsets.token_end_chars
    # The range's tokens: those ending after start, up to the one that ends at or after end.
    token_ends = all_ends[bisect_right(all_ends, start) : bisect_left(all_ends, end) + 1]
    token_total = len(token_ends)
    stride = max_tokens - overlap_tokens

    def aligned_at_or_before(position: int) -> int:
        slot = bisect_right(aligned, position) - 1
        return min(max(aligned[slot], start), end) if slot >= 0 else start

    pieces: list[Piece] = []
    first_token = 0
    previous_end = start
    while previous_end < end:
        if first_token == 0:
            window_start = start
        else:
            window_start = min(aligned_at_or_before(token_ends[min(first_token, token_total) - 1]), previous_end)
            window_start = max(window_start, pieces[-1].start_char)  # starts never go back
        last_token = first_token + max_tokens
        window_end = end if last_token >= token_total else aligned_at_or_before(token_ends[last_token - 1])
        if window_end <= previous_end:
            window_end = min(_next_aligned(aligned, previous_end, end), end)
        window_end, count = _shrink_to_fit(
            offsets, aligned_at_or_before, window_start, window_end, previous_end, max_tokens
        )
        if count > max_tokens and window_start < previous_end:
            # Even the shortest step forward is over the limit with this much overlap: drop the overlap.
            window_start = previous_end
            window_end, count = _shrink_to_fit(
                offsets, aligned_at_or_before, window_start, window_end, previous_end, max_tokens
            )
        pieces.append(Piece(window_start, window_end, count))
        previous_end = window_end
        first_token += stride
    return pieces


def _shrink_to_fit(
    offsets, aligned_at_or_before, window_start: int, window_end: int, previous_end: int, max_tokens: int
):
    """Move ``window_end`` back token by token (never to ``previous_end`` or before) until the window fits;
    returns the end and the window's exact count, which is over ``max_tokens`` only if even one
    character past ``previous_end`` is."""
    floor = max(previous_end, window_start)
    count = offsets.count(window_start, window_end)
    while count > max_tokens and window_end > floor + 1:
        shorter = aligned_at_or_before(window_end - 1)
        window_end = shorter if shorter > floor else floor + 1
        count = offsets.count(window_start, window_end)
    return window_end, count


def _next_aligned(aligned: list[int], position: int, end: int) -> int:
    slot = bisect_right(aligned, position)
    return aligned[slot] if slot < len(aligned) else end
