"""No fragments: chunks smaller than ``min_tokens`` packed with their neighbours (``chunking.min_tokens``).

A strategy that declares ``merges_fragments`` in the registry gets this pass after it, on its chunk spans,
when ``chunking.min_tokens`` is above 0. Unset, ``min_tokens`` is half of ``max_tokens``
(:data:`chunkline.config.DEFAULT_MIN_TOKENS_DIVISOR`): small sections in a row are packed until their chunk
holds at least half the budget, which is what the retrieval benchmark measured best (one chunk per small
section left a long design document's chunks at a third of the budget, and plain token windows found its
passages far more often); a section of half the budget or more stays a chunk of its own, starting at its
heading.

1. **Forward.** A span under ``min_tokens`` tokens absorbs the spans after it, in document order, while the
   merged range fits the chunk's token budget (counted exactly) and the strategy's own size target
   (:attr:`chunkline.registry.Strategy.size_target`: ``scored``'s ``max_chars``, ``blocks``' soft
   ``max_bytes``), and stops as soon as it reaches ``min_tokens``: sections of a normal size stay chunks
   of their own.
2. **Headings travel with their text.** A span that holds nothing but heading lines, front matter and
   whitespace (a lone ``## Performance``, a parent heading right before its first subsection, a document's
   front matter) always joins what follows. When the merge would be over the budget, the joined range is
   cut again at its best boundaries (:func:`chunkline.splitting.split_at_boundaries`), so that the heading
   starts the first piece; the pieces keep the overlap the pieces they replace had. If even that cannot put
   text after the heading (a block that fits only alone follows it), the spans stay as they were.
3. **A small piece of a cut keeps to its section.** A span under ``min_tokens`` that is a later piece of a
   section cut at the budget (its small last piece, mostly) joins the piece before it when that fits, and
   otherwise stays as it is: it never joins the next section.
4. **Backward.** A span still under ``min_tokens`` (or still only headings) joins the span before it when
   that fits: the last section of a document, or a small section before one too big to join.

Never merged: across a gap between spans (a strategy that leaves text out), or into a span that is itself
over the budget (a strategy's soft-limit unit), which is never cut either. A merged span's
``heading_path`` is never less specific than the text it holds (:meth:`_FragmentMerger.merged_path`): the
deepest path of the spans with text when those paths lie on one line of descent (headings joining the text
under them, a parent's opening with its first subsection), else the path of the span with the most tokens;
its ``token_count`` is the merged text's exact count, and it is ``is_sub_split`` when one of the spans it
holds was. Spans that merge with nothing are returned unchanged.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from chunkline.record import ChunkSpan
from chunkline.structure import Section, section_paths

if TYPE_CHECKING:
    from chunkline.context import ChunkContext
    from chunkline.registry import SizeTarget

__all__ = ["merge_fragments"]

_NON_SPACE = re.compile(r"\S")

_CONTENT = 0
"""A range with text other than headings and front matter."""
_HEADINGS = 1
"""A range of heading lines only (front matter and whitespace allowed)."""
_FRONT_MATTER = 2
"""A range of front matter only (whitespace allowed)."""
_BLANK = 3
"""A range of whitespace only."""


@dataclass(slots=True)
class _Run:
    """A span being built: its range, exact count and the spans of the strategy it holds."""

    start: int
    end: int
    token_count: int
    is_sub_split: bool
    parts: list[ChunkSpan]
    original: ChunkSpan | None = None
    """The strategy's span, while nothing has been merged into it."""
    kind: int | None = None
    """What the range holds (``_CONTENT`` ... ``_BLANK``), once looked at."""


class _Cuts:
    """Which of ``spans`` were cut from one range: the pieces of a cut follow each other, each going further
    than the one before, overlapping it or starting where it ends (but not at a section's start, where the
    pieces of another section begin)."""

    def __init__(self, spans: Sequence[ChunkSpan], section_starts: frozenset[int]):
        self.spans = spans
        total = len(spans)
        goes_on = [False] * total  # goes_on[i]: spans[i] is the next piece of the cut spans[i - 1] is part of
        self.overlaps_before = [0] * (total + 1)
        """``overlaps_before[i]``: how many of ``spans[1:i]`` go on from the span before them overlapping it."""
        for number in range(1, total):
            piece, previous = spans[number], spans[number - 1]
            overlapping = False
            if piece.is_sub_split and piece.start_char >= previous.start_char and piece.end_char > previous.end_char:
                overlapping = piece.start_char < previous.end_char
                goes_on[number] = overlapping or piece.start_char not in section_starts
            self.overlaps_before[number + 1] = self.overlaps_before[number] + overlapping
        self.end_of = [total] * total
        """``end_of[i]``: the number of the first span after ``spans[i]`` that is not a piece of its cut."""
        for number in range(total - 2, -1, -1):
            self.end_of[number] = self.end_of[number + 1] if goes_on[number + 1] else number + 1


def _combined_kind(first: int | None, second: int | None) -> int | None:
    """The kind of two adjoining or overlapping ranges together: text wins, then headings, front matter."""
    if first is None or second is None:
        return _CONTENT if _CONTENT in (first, second) else None
    if _CONTENT in (first, second):
        return _CONTENT
    if _HEADINGS in (first, second):
        return _HEADINGS
    return _FRONT_MATTER if _FRONT_MATTER in (first, second) else _BLANK


def merge_fragments(
    context: ChunkContext,
    spans: Sequence[ChunkSpan],
    min_tokens: int,
    sections: Sequence[Section] | None = None,
    size_target: SizeTarget | None = None,
) -> list[ChunkSpan]:
    """``spans`` with every span under ``min_tokens`` tokens (and every span of headings or front matter
    only) packed with its neighbours, within ``context``'s token budget; see the module's description.

    ``sections`` are the sections a span without a heading path takes its path from (the document's
    markdown sections by default); ``size_target``, the strategy's own size target, which spans packed
    together keep too, except headings and front matter joining the text after them."""
    if min_tokens <= 0 or len(spans) <= 1:
        return list(spans)
    return _FragmentMerger(context, sections, min_tokens, size_target).merge(spans)


class _FragmentMerger:
    def __init__(
        self,
        context: ChunkContext,
        sections: Sequence[Section] | None,
        min_tokens: int,
        size_target: SizeTarget | None,
    ):
        document = context.document
        self.context = context
        self.text = context.text
        self.offsets = context.offsets
        self.capacity = context.capacity
        self.min_tokens = min_tokens
        self.size_target = size_target
        self.sections = document.sections if sections is None else tuple(sections)
        self.section_starts = [section.start_char for section in self.sections]
        self.heading_starts = [heading.start_char for heading in document.headings]
        self.heading_ends = [heading.end_char for heading in document.headings]
        front_matter = document.front_matter
        self.front_matter_end = front_matter.end_char if front_matter is not None else 0
        self._cuts: _Cuts | None = None

    # -- what a range holds ----------------------------------------------------------------------

    def kind(self, run: _Run) -> int:
        """What ``run`` holds: content, headings only, front matter only, or whitespace."""
        if run.kind is None:
            run.kind = self._kind(run.start, run.end)
        return run.kind

    def _kind(self, start: int, end: int) -> int:
        text, heading_starts, heading_ends = self.text, self.heading_starts, self.heading_ends
        headings = front_matter = False
        position = start
        while True:
            match = _NON_SPACE.search(text, position, end)
            if match is None:
                break
            position = match.start()
            if position < self.front_matter_end:
                position, front_matter = self.front_matter_end, True
                continue
            slot = bisect_right(heading_starts, position) - 1
            if slot < 0 or position >= heading_ends[slot]:
                return _CONTENT
            position, headings = heading_ends[slot], True
        if headings:
            return _HEADINGS
        return _FRONT_MATTER if front_matter else _BLANK

    def must_join(self, run: _Run) -> bool:
        """Whether ``run`` may not be a chunk on its own while something can join it."""
        return run.token_count < self.min_tokens or self.kind(run) != _CONTENT

    @cached_property
    def paths(self) -> list[tuple[str, ...]]:
        return section_paths(self.sections)

    @cached_property
    def section_start_set(self) -> frozenset[int]:
        return frozenset(self.section_starts)

    def path_of(self, span: ChunkSpan) -> tuple[str, ...]:
        if span.heading_path is not None:
            return tuple(span.heading_path)
        slot = max(bisect_right(self.section_starts, span.start_char) - 1, 0)
        return self.paths[slot] if self.paths else ()

    def merged_path(self, parts: Sequence[ChunkSpan]) -> tuple[str, ...]:
        """The heading path of a span that holds ``parts``, never less specific than the text it holds:
        the deepest path when the parts' paths lie on one line of descent (a parent's heading or short
        opening with its first subsection), else the path of the part with the most tokens (the first of
        those). Headings-only and front-matter parts count only when no part holds text: they head the text
        after them, whose path is theirs or extends it."""
        held = [part for part in parts if self._kind(part.start_char, part.end_char) == _CONTENT]
        if not held:
            held = [part for part in parts if self._kind(part.start_char, part.end_char) == _HEADINGS] or list(parts)
        paths = [self.path_of(part) for part in held]
        deepest = max(paths, key=len)
        if all(deepest[: len(path)] == path for path in paths):
            return deepest
        sizes = [self.count_of(part) for part in held]
        return paths[sizes.index(max(sizes))]

    # -- counting ---------------------------------------------------------------------------------

    def count_of(self, span: ChunkSpan) -> int:
        if span.token_count is not None:
            return span.token_count
        return self.offsets.count(span.start_char, span.end_char)

    def fitting_count(self, run: _Run, start: int, end: int) -> int | None:
        """The exact count of ``text[start:end]``, which puts ``run`` with a neighbour, when it is within the
        budget and the strategy's own size target (which a soft target lets headings or front matter
        joining their neighbour pass), else ``None``."""
        size_target = self.size_target
        if size_target is not None and not size_target(self.context, start, end, self.kind(run) != _CONTENT):
            return None
        capacity = self.capacity
        if not capacity.may_fit(self.offsets.estimate(start, end)):
            return None
        count = self.offsets.count(start, end)
        return count if count <= capacity.max_tokens else None

    # -- runs ---------------------------------------------------------------------------------------

    def run_of(self, span: ChunkSpan) -> _Run:
        return _Run(span.start_char, span.end_char, self.count_of(span), span.is_sub_split, [span], span)

    @staticmethod
    def can_extend(run: _Run, span_start: int, span_end: int) -> bool:
        """Whether a range starting at ``span_start`` continues ``run`` without a gap and goes further."""
        return run.start <= span_start <= run.end and span_end > run.end

    def joined(self, first: _Run, second: _Run, count: int) -> _Run:
        # The kind is settled here, from the two runs' own (each looked at once), not left for a later look
        # over the joined range: a run that grows one heading at a time would be rescanned at every step.
        if _CONTENT in (first.kind, second.kind):
            kind = _CONTENT
        else:
            kind = _combined_kind(self.kind(first), self.kind(second))
        return _Run(
            first.start,
            second.end,
            count,
            first.is_sub_split or second.is_sub_split,
            [*first.parts, *second.parts],
            kind=kind,
        )

    def span_of(self, run: _Run) -> ChunkSpan:
        if run.original is not None:
            return run.original
        return ChunkSpan(run.start, run.end, self.merged_path(run.parts), run.is_sub_split, run.token_count)

    # -- the pass ---------------------------------------------------------------------------------

    def merge(self, spans: Sequence[ChunkSpan]) -> list[ChunkSpan]:
        forward = self.forward(spans)
        backward: list[_Run] = []
        for run in forward:
            if backward and self.must_join(run):
                previous = backward[-1]
                if self.can_extend(previous, run.start, run.end) and previous.token_count <= self.capacity.max_tokens:
                    count = self.fitting_count(run, previous.start, run.end)
                    if count is not None:
                        backward[-1] = self.joined(previous, run, count)
                        continue
            backward.append(run)
        return [self.span_of(run) for run in backward]

    def forward(self, spans: Sequence[ChunkSpan]) -> list[_Run]:
        """Each span under ``min_tokens`` (or of headings only) with the spans after it that fit."""
        runs: list[_Run] = []
        number = 0
        total = len(spans)
        while number < total:
            run = self.run_of(spans[number])
            number += 1
            if runs and self.must_join(run) and self.continues_a_cut(spans, number - 1) and self.kind(run) == _CONTENT:
                # A small piece of a cut section joins the piece before it when that fits, never the next
                # section: its text is that section's.
                previous = runs[-1]
                if self.can_extend(previous, run.start, run.end):
                    count = self.fitting_count(run, previous.start, run.end)
                    if count is not None:
                        runs[-1] = self.joined(previous, run, count)
                        continue
                runs.append(run)
                continue
            while number < total and self.must_join(run):
                following = spans[number]
                if not self.can_extend(run, following.start_char, following.end_char):
                    break
                count = self.fitting_count(run, run.start, following.end_char)
                if count is not None:
                    run = self.joined(run, self.run_of(following), count)
                    number += 1
                    continue
                if self.kind(run) == _CONTENT:
                    break
                pieces, after = self.resplit(run, spans, number)
                if not pieces:
                    break
                runs.extend(pieces[:-1])
                run, number = pieces[-1], after
            runs.append(run)
        return runs

    def continues_a_cut(self, spans: Sequence[ChunkSpan], number: int) -> bool:
        """Whether ``spans[number]`` is a later piece of the cut ``spans[number - 1]`` is a piece of."""
        return number > 0 and spans[number].is_sub_split and self.cuts_of(spans).end_of[number - 1] > number

    def cuts_of(self, spans: Sequence[ChunkSpan]) -> _Cuts:
        """The cuts of ``spans``, found once for the pass (each front-matter or heading piece asks)."""
        if self._cuts is None or self._cuts.spans is not spans:
            self._cuts = _Cuts(spans, self.section_start_set)
        return self._cuts

    def resplit(self, run: _Run, spans: Sequence[ChunkSpan], number: int) -> tuple[list[_Run], int]:
        """``run`` (headings or front matter only) joined with the spans from ``spans[number]`` that were
        cut from one range, cut again so that the heading starts the first piece: (pieces, number of the
        first span not in them); no pieces when that puts nothing after the heading."""
        following = spans[number]
        if not following.is_sub_split:
            if self.count_of(following) > self.capacity.max_tokens:
                return [], number  # a unit the strategy keeps whole over the budget: never cut
            after = number + 1
            overlapping = False
        else:
            cuts = self.cuts_of(spans)
            after = cuts.end_of[number]
            overlapping = cuts.overlaps_before[after] > cuts.overlaps_before[number + 1]
        end = spans[after - 1].end_char
        if self.context.first_split_end(run.start, end) <= run.end:
            # The run's own range is already as much as a first piece holds: nothing joins it. Asked before
            # the whole range is cut again, since each piece of a long cut of front matter or of a heading
            # alone asks it in turn (cutting the rest each time would cost the square of the range).
            return [], number
        replaced = list(spans[number:after])
        overlap_tokens = self.context.overlap_tokens if overlapping else 0
        cut = self.context.split(run.start, end, None, overlap_tokens)
        size_target = self.size_target
        if size_target is not None and not all(
            size_target(self.context, piece.start_char, piece.end_char, True) for piece in cut
        ):
            return [], number  # pieces the strategy's own size does not allow
        if after < len(spans):
            # Pieces that start after the next span does lie in it whole (it overlaps the range): the next
            # span already holds them.
            cut = [piece for piece in cut if piece.start_char <= spans[after].start_char]
        parts = [*run.parts, *replaced]
        pieces = []
        for piece in cut:
            held = [part for part in parts if part.start_char < piece.end_char and part.end_char > piece.start_char]
            pieces.append(_Run(piece.start_char, piece.end_char, piece.token_count, True, held or parts))
        return pieces, after
