"""The token budget of one chunk, and the estimate-then-count rule that holds it exactly."""

from __future__ import annotations

from collections.abc import Sequence

from chunkline.token_offsets import TokenOffsets

__all__ = ["Capacity", "last_unit_within"]


class Capacity:
    """The token budget of one chunk, held exactly.

    A slice's count estimated from the document's token offsets is off by a few tokens at its edges
    (:attr:`SLACK` at the most): a range clearly under or over the budget is decided by the estimate, one
    near it by its exact count."""

    SLACK = 8
    """How far a range's own tokenization can be off from a slice's exact count, in tokens."""

    __slots__ = ("offsets", "max_tokens")

    def __init__(self, offsets: TokenOffsets, max_tokens: int):
        self.offsets = offsets
        self.max_tokens = max_tokens

    LOOSE_SLACK = 64
    """The slack of offsets whose estimates carry no bound (a Hugging Face tokenizer's): a range is
    never taken as fitting on its estimate, and only one this far over is rejected on it."""

    def may_fit(self, estimate: int) -> bool:
        """Whether a range of ``estimate`` estimated tokens can fit at all."""
        slack = self.SLACK if self.offsets.exact_estimates else self.LOOSE_SLACK
        return estimate <= self.max_tokens + slack

    def surely_fits(self, estimate: int) -> bool:
        """Whether a range of ``estimate`` estimated tokens fits without an exact count."""
        return self.offsets.exact_estimates and estimate <= self.max_tokens - self.SLACK

    def within(self, start: int, end: int) -> bool:
        """Whether ``text[start:end]``, counted exactly, is within the budget."""
        return self.offsets.count(start, end) <= self.max_tokens

    def fits(self, start: int, end: int) -> bool:
        """Whether ``text[start:end]`` is within the budget (counted exactly near it)."""
        estimate = self.offsets.estimate(start, end)
        if not self.may_fit(estimate):
            return False
        return self.surely_fits(estimate) or self.within(start, end)

    def last_fitting(self, units: Sequence[tuple[int, int]], first: int, start: int) -> tuple[int, int]:
        """(last unit, exact count) of the longest run of ``units`` from ``first`` that fits when the chunk
        begins at ``start``; ``(first, count)`` with a count over the budget when even ``units[first]``
        does not fit."""
        offsets, max_tokens = self.offsets, self.max_tokens
        last = last_unit_within(offsets, units, first, start, max_tokens)
        count = offsets.count(start, units[last][1])
        while count > max_tokens and last > first:
            last -= 1
            count = offsets.count(start, units[last][1])
        if count > max_tokens:
            return last, count
        # The estimate can be off at the edges: try the units just past it exactly.
        while last + 1 < len(units):
            end = units[last + 1][1]
            if not self.may_fit(offsets.estimate(start, end)):
                break
            next_count = offsets.count(start, end)
            if next_count > max_tokens:
                break
            last, count = last + 1, next_count
        return last, count


def last_unit_within(
    offsets: TokenOffsets, units: Sequence[tuple[int, int]], first: int, start: int, max_tokens: int
) -> int:
    """The last unit index whose end keeps the estimated count from ``start`` within ``max_tokens``
    (``first`` at least): a binary search, as the estimate grows with the end."""
    low, high = first, len(units) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if offsets.estimate(start, units[middle][1]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low
