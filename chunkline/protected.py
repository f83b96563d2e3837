"""Protected blocks (fenced or indented code, tables, list items, HTML blocks) that fit within the token
budget, as ranges no cut may fall strictly inside."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from chunkline.capacity import Capacity
from chunkline.structure import PROTECTED_KINDS, MarkdownDocument
from chunkline.token_offsets import TokenOffsets

__all__ = ["after_blank_lines", "fitting_protected_ranges", "keep_ranges_whole", "merge_ranges"]

_LINE_BREAK = r"(?:\r\n|\r(?!\n)|\n)"  # \r\n is one break, never \r then \n
# Blank lines from a line start on.
_BLANK_LINES_AT = re.compile(rf"(?:[^\S\r\n]*{_LINE_BREAK})*")


def after_blank_lines(text: str, line_start: int, end: int | None = None) -> int:
    """The start of the first non-blank line at or after ``line_start`` (the unit boundary for the end of
    a block, whose blank lines after it join it), looking no further than ``end``."""
    return _BLANK_LINES_AT.match(text, line_start, len(text) if end is None else end).end()


def fitting_protected_ranges(
    document: MarkdownDocument,
    offsets: TokenOffsets,
    max_tokens: int,
    kinds: Iterable[str] = PROTECTED_KINDS,
) -> list[tuple[int, int]]:
    """Merged ranges of the blocks of ``kinds`` that fit within ``max_tokens``, ascending and disjoint.

    A block's range runs on over the blank lines after it, so that its end is a unit boundary -- unless
    that no longer fits while the block's content (its text without trailing whitespace) still does: then
    the range ends with the content."""
    text = document.text
    wanted = frozenset(kinds)
    capacity = Capacity(offsets, max_tokens)
    ranges: list[tuple[int, int]] = []
    for block in document.blocks:
        start = block.start_char
        if block.kind not in wanted or block.end_char - start < 2:
            continue
        if not capacity.may_fit(offsets.estimate(start, block.end_char)):
            continue
        end = after_blank_lines(text, block.end_char)
        if capacity.surely_fits(offsets.estimate(start, end)) or capacity.within(start, end):
            ranges.append((start, end))
            continue
        content_end = start + len(text[start : block.end_char].rstrip())
        if content_end > start and capacity.within(start, content_end):
            ranges.append((start, content_end))
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
