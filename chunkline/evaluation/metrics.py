"""Retrieval scores over character ranges, exact because chunk offsets are.

The definitions are those of Chroma's chunking evaluation ("Evaluating Chunking Strategies for Retrieval",
Smith and Troynikov, 2024), per question:

- the reference characters are the union of the question's reference spans (a character two references
  share counts once), and *covered* the reference characters inside at least one retrieved range;
- recall = covered / reference characters;
- precision = covered / the sum of the retrieved ranges' lengths (ranges that overlap each other, such as
  chunks with overlap, are counted each time: retrieving the same text twice costs twice);
- IoU = covered / (sum of retrieved lengths + reference characters - covered);
- hit = at least one reference character covered.

With nothing retrieved every score is 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from chunkline.evaluation.questions import ReferenceSpan

__all__ = ["RetrievedRange", "QuestionScores", "score_question", "merge_ranges"]


@dataclass(frozen=True, slots=True)
class RetrievedRange:
    """The character range of one retrieved chunk (half-open, into its decoded document)."""

    doc_id: str
    start_char: int
    end_char: int


@dataclass(frozen=True, slots=True)
class QuestionScores:
    """The scores of one question's retrieval, each from 0 to 1."""

    recall: float
    """Reference characters covered by the union of the retrieved ranges / reference characters."""
    precision: float
    """Reference characters covered / sum of the retrieved ranges' lengths (overlaps counted each time)."""
    iou: float
    """Covered / (sum of retrieved lengths + reference characters - covered)."""
    hit: bool
    """At least one reference character covered."""


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open ranges as sorted, disjoint, non-touching ranges (empty ranges dropped)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(range_ for range_ in ranges if range_[1] > range_[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _intersection_length(first: Sequence[tuple[int, int]], second: Sequence[tuple[int, int]]) -> int:
    """Characters in both unions, each given as sorted disjoint ranges."""
    total = i = j = 0
    while i < len(first) and j < len(second):
        start = max(first[i][0], second[j][0])
        end = min(first[i][1], second[j][1])
        if end > start:
            total += end - start
        if first[i][1] <= second[j][1]:
            i += 1
        else:
            j += 1
    return total


def score_question(retrieved: Sequence[RetrievedRange], references: Sequence[ReferenceSpan]) -> QuestionScores:
    """Recall, precision, IoU and hit of the ``retrieved`` ranges against a question's ``references``."""
    reference_ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for reference in references:
        reference_ranges[reference.doc_id].append((reference.start_char, reference.end_char))
    reference_union = {doc_id: merge_ranges(ranges) for doc_id, ranges in reference_ranges.items()}
    reference_chars = sum(end - start for ranges in reference_union.values() for start, end in ranges)
    if reference_chars == 0:
        raise ValueError("a question needs at least one reference character to be scored")
    retrieved_ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    retrieved_chars = 0
    for item in retrieved:
        if item.end_char < item.start_char:
            raise ValueError(
                f"retrieved range {item.start_char}..{item.end_char} of {item.doc_id} ends before it starts"
            )
        retrieved_ranges[item.doc_id].append((item.start_char, item.end_char))
        retrieved_chars += item.end_char - item.start_char
    covered = sum(
        _intersection_length(merge_ranges(ranges), reference_union[doc_id])
        for doc_id, ranges in retrieved_ranges.items()
        if doc_id in reference_union
    )
    if retrieved_chars == 0:
        return QuestionScores(recall=0.0, precision=0.0, iou=0.0, hit=False)
    return QuestionScores(
        recall=covered / reference_chars,
        precision=covered / retrieved_chars,
        iou=covered / (retrieved_chars + reference_chars - covered),
        hit=covered > 0,
    )
