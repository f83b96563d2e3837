"""Packing units (sentences, paragraphs, lines, sections, ...) into chunks within a token budget.

Strategies that split a document into units of their own hand the units to :func:`pack_units`: consecutive
units are gathered while the chunk stays within ``max_tokens``; the next chunk repeats the last
``overlap_units`` units of the previous one (LocalVectorDB's overlap, counted in the method's own unit)
and always adds at least one new unit. A single unit over the budget is split on its own at the best
boundaries (see :mod:`chunkline.splitting`), so the token limit always holds.

Units must partition the document: each starts where the previous one ends, the first at 0 and the last
ends at the end of the text (leading or trailing whitespace belongs to a neighbouring unit).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chunkline.record import ChunkSpan

if TYPE_CHECKING:
    from chunkline.context import ChunkContext

__all__ = ["pack_units", "units_from_cuts"]

logger = logging.getLogger(__name__)


def units_from_cuts(cuts: Sequence[int], length: int) -> list[tuple[int, int]]:
    """Units ``[(0, c1), (c1, c2), ..., (ck, length)]`` from ascending cut positions (duplicates, 0 and
    ``length`` are ignored)."""
    points = sorted({cut for cut in cuts if 0 < cut < length})
    bounds = [0, *points, length]
    return [(bounds[number], bounds[number + 1]) for number in range(len(bounds) - 1)] or [(0, length)]


def pack_units(
    context: ChunkContext,
    units: Sequence[tuple[int, int]],
    overlap_units: int = 0,
    *,
    unit_name: str = "units",
) -> list[ChunkSpan]:
    """Chunk spans of consecutive ``units`` within ``max_tokens``, overlapping by ``overlap_units`` units."""
    capacity = context.capacity
    spans: list[ChunkSpan] = []
    first = 0
    previous_last = -1  # index of the last unit already emitted
    repeated_units = emitted_units = 0
    while first < len(units):
        start = units[first][0]
        last, count = capacity.last_fitting(units, first, start)
        if last <= previous_last and first <= previous_last:
            # The repeated units leave no room for a new one: repeat fewer, down to none.
            first += max(1, (previous_last + 1 - first) // 2)
            continue
        if count > capacity.max_tokens:
            # One unit alone is over the budget: split it at its own best boundaries.
            spans.extend(context.split(*units[first]))
            last = first
        else:
            spans.append(ChunkSpan(start, units[last][1], None, False, count))
        emitted_units += last - first + 1
        repeated_units += max(0, previous_last - first + 1)
        previous_last = last
        if last + 1 >= len(units):
            break
        # The next chunk repeats up to overlap_units units, but always moves past this chunk's first unit.
        first = max(last + 1 - overlap_units, first + 1)
    implausible = overlap_units and emitted_units and repeated_units * 2 > emitted_units
    if implausible and (unit_name, overlap_units) not in _warned:
        _warned.add((unit_name, overlap_units))  # once per process, not once per document
        logger.warning(
            "overlap of %d %s re-emits %.0f%% of the units in every chunk: overlap is counted in %s, not "
            "tokens; a value of 1-3 is typical",
            overlap_units,
            unit_name,
            100 * repeated_units / emitted_units,
            unit_name,
        )
    return spans


_warned: set[tuple[str, int]] = set()
