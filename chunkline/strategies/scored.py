"""``scored``: QMD's smart chunking — scored break points, a distance-decayed choice of cut, exact limits.

How a cut is chosen
-------------------
1. **Break points.** Every line start is a place a chunk may end; each gets the score of what begins there,
   and a position that is several things keeps its highest score:

   =======================================  ==========================
   heading h1 … h6                          100, 90, 80, 70, 60, 50
   code fence (its opening line)            40
   thematic break                           30
   first line after one or more blank lines 20
   list item                                10
   any other line start                     1
   =======================================  ==========================

   A cut *at* a break point puts the heading, fence or list item at the start of the next chunk. Headings,
   fences, thematic breaks and list items come from the CommonMark parse, not from patterns: a ``#`` line
   inside code is no heading, setext headings are, and ``~~~`` or longer fences are fences. Headings are
   the document-level ones (those that start sections); a heading inside a quote or list item is content.

2. **Protection.** No break point lies strictly inside a fenced or indented code block, table, list item,
   HTML block or front matter *that fits in one chunk* — its content, trailing blank lines left out, is
   within ``max_chars`` characters in character mode or ``max_tokens`` tokens in token mode — so such a
   block always lands whole in one chunk (PRODUCT invariant 3). A block too big for any chunk keeps the
   line starts inside it, so it is at least cut between lines.

3. **Choice** (QMD's ``findBestCutoff``, :func:`best_cutoff`). For a target end position, every break point
   in the ``window_chars`` before the target (and after the chunk's start) is rated
   ``score * (1 - (distance / window_chars) ** 2 * decay)``, ``distance = target - position``; the best
   rating wins (the earlier position on a tie). The quadratic decay lets a strong boundary a little before
   the target beat a weak one right at it: an h2 at 85% of the window (rating 44.5) beats a blank line at
   95% (7.4), and equally an h2 15% before the target (88.6) beats a blank line 5% before it (20.0).
   When the window holds no break point: a target inside a protected block that starts after the chunk's
   start cuts before that block; otherwise the cut falls at the last word start in the window, or before
   the window when one word fills it (QMD cuts at the target itself; a word start is never worse), and at
   the target only when one word fills the whole chunk.
   (Token mode hands that last case to the boundary splitter, which also cuts between words.)

Two modes
---------
``mode: chars`` (the default, QMD's ``chunkDocument``): chunks of at most ``max_chars`` characters, the target
being ``max_chars`` after the chunk's start. PRODUCT invariant 2 still holds: a chunk over
``chunking.max_tokens`` is split by :func:`chunkline.splitting.split_at_boundaries` into pieces marked
``is_sub_split`` that overlap by ``chunking.overlap_tokens``. (With the defaults, 3600 characters are ~900
tokens: raise ``max_tokens`` to about 1024 to keep character-mode chunks whole.)

``mode: tokens`` (QMD's ``chunkDocumentByTokens``, made exact): the budget is ``chunking.max_tokens`` with
``chunking.overlap_tokens`` of overlap. QMD estimates 3 characters per token and re-splits what overshoots;
here the target is read off one encoding of the document (the character where ``max_tokens`` tokens after
the start end), the best scored cut in the window before it is taken, its exact token count is checked,
and the next best break point before it is tried until one fits, so no chunk is ever over the limit. To
match QMD's defaults set ``chunking.max_tokens: 900`` and ``chunking.overlap_tokens: 135``.

Overlap
-------
The next chunk starts ``overlap_chars`` characters (token mode: ``overlap_tokens`` tokens) before the
previous cut, moved forward to the first start of a non-blank line in the first half of that overlap, or
failing that to the first word start before the cut: a chunk never begins mid-word (without a word start
in reach there is no overlap), and a start that would fall inside a protected block moves past it. As in QMD, a chunk never starts at or before the start of the
chunk emitted before it (it then starts at the cut, without overlap), and every chunk ends further into
the document than the one before it: when the overlap leaves no room to go further (a protected block
follows the cut), the chunk starts at the cut. Sub-split pieces that lie wholly in the overlap are dropped.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from chunkline.capacity import Capacity
from chunkline.context import ChunkContext
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.settings import check_whole_number
from chunkline.structure import PROTECTED_KINDS, Block, BlockKind, MarkdownDocument

__all__ = [
    "BLANK_LINE_SCORE",
    "FENCE_SCORE",
    "HEADING_SCORES",
    "LIST_ITEM_SCORE",
    "NEWLINE_SCORE",
    "THEMATIC_BREAK_SCORE",
    "ScoredParams",
    "best_cutoff",
    "chunk_scored",
    "decayed_score",
    "scan_break_points",
]

#: Score of a break point before a heading, by level (QMD's BREAK_PATTERNS).
HEADING_SCORES = {1: 100, 2: 90, 3: 80, 4: 70, 5: 60, 6: 50}
FENCE_SCORE = 40
THEMATIC_BREAK_SCORE = 30
BLANK_LINE_SCORE = 20
LIST_ITEM_SCORE = 10
NEWLINE_SCORE = 1

#: Blocks that are never cut when they fit in one chunk (front matter too: it is one unit of metadata).
_PROTECTED = PROTECTED_KINDS | {BlockKind.FRONT_MATTER}

# One or more blank (whitespace-only) lines after a line break, or at the very start of the text; the break
# point is at the end of the run, the start of the next line with text. Starting each match at a literal
# line break keeps the scan fast (a look-behind at every character is five times slower).
_BLANK_RUN = re.compile(r"(?:\r\n|\r|\n)(?:[ \t]*(?:\r\n|\r|\n))+")
_LEADING_BLANK_RUN = re.compile(r"(?:[ \t]*(?:\r\n|\r|\n))+")
# A word start: a non-whitespace character right after whitespace.
_WORD_START = re.compile(r"(?<=\s)(?=\S)")
# Characters before a limit that the first backward look for a word start covers.
_WORD_WINDOW_CHARS = 64


@dataclass(frozen=True)
class ScoredParams:
    """Parameters of the ``scored`` strategy (QMD's defaults)."""

    mode: Literal["chars", "tokens"] = "chars"
    """``chars``: chunks of up to ``max_chars`` characters (QMD's default); ``tokens``: up to
    ``chunking.max_tokens`` tokens with ``chunking.overlap_tokens`` of overlap (QMD's token mode)."""
    max_chars: int = 3600
    """Largest chunk, in characters (character mode)."""
    overlap_chars: int = 540
    """Characters a chunk repeats from the end of the previous one (character mode)."""
    window_chars: int = 800
    """How far before the target end, in characters, break points are considered."""
    decay: float = 0.7
    """How much a break point at the far edge of the window loses: its score times ``1 - decay``."""

    def __post_init__(self) -> None:
        if self.mode not in ("chars", "tokens"):
            raise ValueError(f"mode must be 'chars' or 'tokens', got {self.mode!r}")
        for name in ("max_chars", "window_chars"):
            check_whole_number(getattr(self, name), name, minimum=1)
        if isinstance(self.overlap_chars, bool) or not isinstance(self.overlap_chars, int):
            raise ValueError(f"overlap_chars must be a whole number, got {self.overlap_chars!r}")
        if not 0 <= self.overlap_chars < self.max_chars:
            raise ValueError(
                f"overlap_chars must be >= 0 and less than max_chars ({self.max_chars}), got {self.overlap_chars}"
            )
        if self.window_chars > self.max_chars:
            raise ValueError(
                f"window_chars ({self.window_chars}) must not be greater than max_chars ({self.max_chars})"
            )
        if isinstance(self.decay, bool) or not isinstance(self.decay, (int, float)) or not 0 <= self.decay <= 1:
            raise ValueError(f"decay must be a number from 0 to 1, got {self.decay!r}")


# --------------------------------------------------------------------------------------------------
# Choosing a cut
# --------------------------------------------------------------------------------------------------


def decayed_score(score: float, distance_chars: int, window_chars: int, decay: float) -> float:
    """QMD's rating of a break point ``distance_chars`` before the target:
    ``score * (1 - (distance_chars / window_chars) ** 2 * decay)``."""
    normalized = distance_chars / window_chars
    return score * (1.0 - normalized * normalized * decay)


def best_cutoff(
    positions: Sequence[int],
    scores: Sequence[float],
    target_char: int,
    window_chars: int,
    decay: float = 0.7,
    *,
    after_char: int = -1,
    before_char: int | None = None,
) -> int | None:
    """QMD's ``findBestCutoff``: the break point with the best :func:`decayed_score` for ``target_char``.

    ``positions`` (ascending) and ``scores`` are the break points. Candidates lie in
    ``[target_char - window_chars, target_char]``, after ``after_char`` (the chunk's start) and, when given,
    before ``before_char`` (a cut already found too long); distances are always measured from
    ``target_char``. Returns ``None`` when no break point is a candidate; on equal ratings the earlier wins.
    """
    low = max(target_char - window_chars, after_char + 1)
    high = target_char if before_char is None else min(target_char, before_char - 1)
    if high < low:
        return None
    best_position: int | None = None
    best_rating = float("-inf")
    for slot in range(bisect_left(positions, low), bisect_right(positions, high)):
        position = positions[slot]
        rating = decayed_score(scores[slot], target_char - position, window_chars, decay)
        if rating > best_rating:
            best_rating = rating
            best_position = position
    return best_position


def _blank_run_ends(text: str) -> list[int]:
    """Where each run of blank lines ends (the start of the next line)."""
    ends = [match.end() for match in _BLANK_RUN.finditer(text)]
    leading = _LEADING_BLANK_RUN.match(text)
    if leading:
        ends.append(leading.end())
    return ends


def scan_break_points(
    document: MarkdownDocument,
    protected: tuple[Sequence[int], Sequence[int]] = ((), ()),
    blocks: Sequence[Block] | None = None,
) -> tuple[list[int], list[int]]:
    """The document's break points as (ascending positions, scores), the highest score per position.

    ``protected`` are merged (starts, ends) of ranges strictly inside which no break point is kept;
    ``blocks`` defaults to ``document.blocks``. Position 0 and the end of the text are never break points.
    """
    text = document.text
    length = len(text)
    blocks = document.blocks if blocks is None else blocks
    parts_positions: list[np.ndarray] = []
    parts_scores: list[np.ndarray] = []

    def add(positions: Sequence[int], score: int | Sequence[int]) -> None:
        array = np.asarray(positions, dtype=np.int64)
        parts_positions.append(array)
        parts_scores.append(np.broadcast_to(np.asarray(score, dtype=np.int64), array.shape))

    add(document.index.line_starts, NEWLINE_SCORE)
    add(_blank_run_ends(text), BLANK_LINE_SCORE)
    headings = document.headings
    add([heading.start_char for heading in headings], [HEADING_SCORES[heading.heading_level] for heading in headings])
    by_kind: dict[str, list[int]] = {BlockKind.FENCE: [], BlockKind.THEMATIC_BREAK: [], BlockKind.LIST_ITEM: []}
    for block in blocks:
        found = by_kind.get(block.kind)
        if found is not None:
            found.append(block.start_char)
    add(by_kind[BlockKind.FENCE], FENCE_SCORE)
    add(by_kind[BlockKind.THEMATIC_BREAK], THEMATIC_BREAK_SCORE)
    add(by_kind[BlockKind.LIST_ITEM], LIST_ITEM_SCORE)

    positions = np.concatenate(parts_positions)
    scores = np.concatenate(parts_scores)
    # Sort by position, highest score first within a position, and keep the first of each position.
    order = np.lexsort((-scores, positions))
    positions, scores = positions[order], scores[order]
    first = np.ones(len(positions), dtype=bool)
    first[1:] = positions[1:] != positions[:-1]
    keep = first & (positions > 0) & (positions < length)
    starts, ends = (np.asarray(bound, dtype=np.int64) for bound in protected)
    if len(starts):
        slot = np.searchsorted(starts, positions, side="left") - 1
        inside = (slot >= 0) & (positions < ends[np.maximum(slot, 0)])
        keep &= ~inside
    return positions[keep].tolist(), scores[keep].tolist()


# --------------------------------------------------------------------------------------------------
# The chunker
# --------------------------------------------------------------------------------------------------


class _ScoredChunker:
    """One document's break points, protected blocks and token offsets, and the chunking loop over them."""

    def __init__(self, context: ChunkContext):
        self.context = context
        self.params: ScoredParams = context.params
        self.document = context.document
        self.text = context.text
        self.length = len(self.text)
        self.max_tokens = context.max_tokens
        self.overlap_tokens = context.overlap_tokens
        self.by_tokens = self.params.mode == "tokens"
        self.offsets = context.offsets
        self.blocks = self.document.blocks
        self.protected_starts, self.protected_ends = self._protected_ranges()
        self.positions, self.scores = scan_break_points(
            self.document, (self.protected_starts, self.protected_ends), self.blocks
        )

    # -- structure -------------------------------------------------------------------------------

    def _fits(self, start: int, end: int) -> bool:
        """Whether ``text[start:end]`` fits in one chunk of this mode."""
        if not self.by_tokens:
            return end - start <= self.params.max_chars
        return self.context.capacity.fits(start, end)

    def _protected_ranges(self) -> tuple[list[int], list[int]]:
        """(starts, content ends) of the protected blocks whose content (trailing whitespace excluded) fits
        in one chunk; outermost blocks only, so the ranges are disjoint and ascending."""
        text = self.text
        starts: list[int] = []
        ends: list[int] = []
        for block in self.blocks:  # document order: a block's start is never before the previous one's
            if block.kind not in _PROTECTED or (starts and block.start_char < ends[-1]):
                continue  # not protected, or nested in a block already kept whole
            content_end = block.start_char + len(text[block.start_char : block.end_char].rstrip())
            if content_end - block.start_char >= 2 and self._fits(block.start_char, content_end):
                starts.append(block.start_char)
                ends.append(content_end)
        return starts, ends

    def _protected_around(self, position: int) -> tuple[int, int] | None:
        """The protected range that holds ``position`` strictly inside, if any."""
        slot = bisect_left(self.protected_starts, position) - 1
        if slot >= 0 and position < self.protected_ends[slot]:
            return self.protected_starts[slot], self.protected_ends[slot]
        return None

    def _last_word_start(self, low: int, high: int) -> int | None:
        """The last word start in ``[low, high]``, or ``None``.

        Looked for backwards from ``high`` in windows that widen fourfold: in text made of one-character
        words (``> > > ...``) a scan of the whole window would find hundreds of starts to keep one."""
        low = max(low, 1)
        top = min(high + 1, self.length)  # exclusive
        distance = _WORD_WINDOW_CHARS
        while top > low:
            bottom = max(low, top - distance)
            found = None
            for match in _WORD_START.finditer(self.text, bottom, top):
                found = match.start()
            if found is not None:
                return found
            top = bottom
            distance *= 4
        return None

    def _first_line_with_text(self, low: int, high: int) -> int | None:
        """The first start of a non-blank line in ``[low, high]``, or ``None``."""
        line_starts = self.document.index.line_starts
        text = self.text
        for slot in range(bisect_left(line_starts, low), len(line_starts)):
            position = line_starts[slot]
            if position > high or position >= self.length:
                return None
            if not text[position].isspace():
                return position
        return None

    def _first_word_start(self, low: int, high: int) -> int | None:
        """The first word start in ``[low, high]``, or ``None``."""
        match = _WORD_START.search(self.text, max(low, 1), min(high + 1, self.length))
        return match.start() if match else None

    # -- cuts ------------------------------------------------------------------------------------

    def _best_cutoff(self, start: int, target: int, before: int | None = None) -> int | None:
        params = self.params
        return best_cutoff(
            self.positions,
            self.scores,
            target,
            params.window_chars,
            params.decay,
            after_char=start,
            before_char=before,
        )

    def _fallback_cut(self, start: int, target: int) -> int:
        """Where to cut when the window holds no break point: before a protected block that holds the
        target, else at the last word start (in the window if there is one), else at the target."""
        around = self._protected_around(target)
        if around is not None and around[0] > start:
            return around[0]
        word = self._last_word_start(max(start + 1, target - self.params.window_chars), target)
        if word is None:  # one long word fills the window: look further back, to the chunk's start
            word = self._last_word_start(start + 1, target)
        if word is None:
            return target
        around = self._protected_around(word)
        if around is not None:
            return around[0] if around[0] > start else target
        return word

    def _cut_by_chars(self, start: int) -> tuple[int, int]:
        """(cut, exact token count) of the character-mode chunk starting at ``start``."""
        target = start + self.params.max_chars
        if target >= self.length:
            cut = self.length
        else:
            cut = self._best_cutoff(start, target)
            if cut is None:
                cut = self._fallback_cut(start, target)
        return cut, self.offsets.count(start, cut)

    def _cut_by_tokens(self, start: int) -> tuple[int, int]:
        """(cut, exact token count) of the token-mode chunk starting at ``start``: the best scored cut
        before the token target, stepping back to the next best one until the exact count fits."""
        offsets = self.offsets
        max_tokens = self.max_tokens
        if self.context.capacity.may_fit(offsets.estimate(start, self.length)):
            count = offsets.count(start, self.length)
            if count <= max_tokens:
                return self.length, count
        target = min(max(offsets.char_after_tokens(start, max_tokens), start + 1), self.length)
        before: int | None = None
        while True:
            cut = self._best_cutoff(start, target, before)
            if cut is None:
                break
            count = offsets.count(start, cut)
            if count <= max_tokens:
                return cut, count
            before = cut  # everything from here on is at least as long: look only before it
        around = self._protected_around(target)
        if around is not None and around[0] > start:
            count = offsets.count(start, around[0])
            if count <= max_tokens:
                return around[0], count
        return self._split_first_piece(start, target)

    def _split_first_piece(self, start: int, target: int) -> tuple[int, int]:
        """The first piece the boundary splitter makes from ``start``: it always fits the limit."""
        reach_tokens = 2 * self.max_tokens + Capacity.SLACK
        end = max(min(self.offsets.char_after_tokens(start, reach_tokens), self.length), target)
        piece = self.context.split(start, end)[0]
        return piece.end_char, piece.token_count

    def _cut_after(self, start: int) -> tuple[int, int]:
        """(cut, exact token count) of the chunk starting at ``start``, in this mode."""
        return self._cut_by_tokens(start) if self.by_tokens else self._cut_by_chars(start)

    # -- overlap and the loop --------------------------------------------------------------------

    def _overlap_start(self, cut: int) -> int:
        """Where the chunk after ``cut`` starts: the overlap before the cut, snapped forward to a line
        start in its first half or else to a word start, never inside a word or a protected block."""
        if self.by_tokens:
            if self.overlap_tokens <= 0:
                return cut
            raw = self.offsets.char_before_tokens(cut, self.overlap_tokens)
        else:
            raw = cut - self.params.overlap_chars
        raw = max(raw, 0)
        if raw >= cut:
            return cut
        reach = raw + (cut - raw) // 2
        position = self._first_line_with_text(raw, reach)
        if position is None:
            word = self._first_word_start(raw, cut - 1)
            position = cut if word is None else word
        around = self._protected_around(position)
        if around is not None:
            after = self._first_line_with_text(around[1], cut - 1)
            position = cut if after is None else after
        return position

    def _spans(self, start: int, cut: int, count: int, covered: int) -> list[ChunkSpan]:
        """The chunk ``[start, cut)``, sub-split at the best boundaries when over ``max_tokens``; pieces that
        end within the text already ``covered`` by earlier chunks (all overlap) are left out."""
        if count <= self.max_tokens:
            return [ChunkSpan(start, cut, None, False, count)]
        return [span for span in self.context.split(start, cut, None, self.overlap_tokens) if span.end_char > covered]

    def chunk(self) -> list[ChunkSpan]:
        """The document's chunk spans, in order."""
        spans: list[ChunkSpan] = []
        start = covered = 0
        while True:
            cut, count = self._cut_after(start)
            if cut <= covered:
                # The overlap left no room to go further (a protected block follows): drop the overlap.
                start = covered
                cut, count = self._cut_after(start)
            spans.extend(self._spans(start, cut, count, covered))
            covered = cut
            if cut >= self.length:
                if self.by_tokens and self.overlap_tokens:
                    self.context.check_overlap_tokens(spans)
                return spans
            start = self._overlap_start(cut)
            if start <= spans[-1].start_char:
                start = cut


def within_max_chars(context: ChunkContext, start_char: int, end_char: int, joins_heading: bool = False) -> bool:
    """Whether ``[start_char, end_char)`` keeps character mode's ``max_chars`` (always, in token mode): a
    limit every chunk keeps, a heading joining its text included."""
    params: ScoredParams = context.params
    return params.mode == "tokens" or end_char - start_char <= params.max_chars


@register_strategy("scored", ScoredParams, merges_fragments=True, size_target=within_max_chars)
def chunk_scored(context: ChunkContext) -> list[ChunkSpan]:
    """QMD smart chunking: cuts at the best-scored break point before max_chars or max_tokens.

    Break points score headings > fences > rules > blank lines > list items > lines, with quadratic decay
    over the distance to the target; ``mode: tokens`` keeps the token limit exactly."""
    return _ScoredChunker(context).chunk()
