"""Recall, precision and IoU over character ranges, against hand computations and a per-character count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline.evaluation.metrics import RetrievedRange, merge_ranges, score_question
from chunkline.evaluation.questions import ReferenceSpan


def test_overlapping_retrieved_chunks_count_twice_in_precision():
    # Reference a.md[10:30): 20 characters. Retrieved [0:20) and [15:40): their union [0:40) covers all 20,
    # but 20 + 25 = 45 characters were retrieved. recall 20/20, precision 20/45, IoU 20/(45 + 20 - 20).
    scores = score_question(
        [RetrievedRange("a.md", 0, 20), RetrievedRange("a.md", 15, 40)], [ReferenceSpan("a.md", 10, 30)]
    )
    assert scores.recall == 1.0
    assert scores.precision == pytest.approx(20 / 45)
    assert scores.iou == pytest.approx(20 / 45)
    assert scores.hit is True


def test_overlapping_references_are_unioned_first():
    # References [10:20) and [15:25) are [10:25): 15 characters. Retrieved [0:12) covers [10:12): 2.
    # recall 2/15, precision 2/12, IoU 2/(12 + 15 - 2) = 2/25.
    scores = score_question(
        [RetrievedRange("a.md", 0, 12)], [ReferenceSpan("a.md", 10, 20), ReferenceSpan("a.md", 15, 25)]
    )
    assert scores.recall == pytest.approx(2 / 15)
    assert scores.precision == pytest.approx(2 / 12)
    assert scores.iou == pytest.approx(2 / 25)
    assert scores.hit is True


def test_several_documents_only_the_same_document_covers():
    # References a.md[0:10) and b.md[100:110): 20 characters.
    # a.md[5:15) covers a.md[5:10): 5. b.md[0:10) has a.md's reference offsets but another document: 0.
    # b.md[105:120) covers b.md[105:110): 5. c.md[0:10): 0.
    # covered 10, retrieved 10 + 10 + 15 + 10 = 45: recall 10/20, precision 10/45, IoU 10/(45 + 20 - 10).
    scores = score_question(
        [
            RetrievedRange("a.md", 5, 15),
            RetrievedRange("b.md", 0, 10),
            RetrievedRange("b.md", 105, 120),
            RetrievedRange("c.md", 0, 10),
        ],
        [ReferenceSpan("a.md", 0, 10), ReferenceSpan("b.md", 100, 110)],
    )
    assert scores.recall == pytest.approx(0.5)
    assert scores.precision == pytest.approx(10 / 45)
    assert scores.iou == pytest.approx(10 / 55)


def test_the_same_chunk_twice_halves_precision_not_recall():
    scores = score_question([RetrievedRange("a.md", 0, 10)] * 2, [ReferenceSpan("a.md", 0, 10)])
    assert (scores.recall, scores.precision, scores.iou) == (1.0, 0.5, 0.5)


def test_touching_chunks_that_tile_the_reference_score_one():
    scores = score_question(
        [RetrievedRange("a.md", 5, 10), RetrievedRange("a.md", 0, 5)], [ReferenceSpan("a.md", 0, 10)]
    )
    assert (scores.recall, scores.precision, scores.iou, scores.hit) == (1.0, 1.0, 1.0, True)


def test_nothing_retrieved_or_nothing_covered_scores_zero():
    references = [ReferenceSpan("a.md", 0, 10)]
    assert score_question([], references) == score_question([RetrievedRange("a.md", 10, 30)], references)
    scores = score_question([], references)
    assert (scores.recall, scores.precision, scores.iou, scores.hit) == (0.0, 0.0, 0.0, False)
    assert score_question([RetrievedRange("a.md", 3, 3)], references).hit is False


def test_a_question_without_reference_characters_is_an_error():
    with pytest.raises(ValueError, match="reference character"):
        score_question([RetrievedRange("a.md", 0, 5)], [])


def test_merge_ranges():
    assert merge_ranges([(5, 8), (0, 3), (3, 4), (7, 12), (20, 20), (15, 16)]) == [(0, 4), (5, 12), (15, 16)]


_documents = st.sampled_from(["a.md", "b.md", "c.md"])
_range = st.tuples(_documents, st.integers(0, 60), st.integers(0, 30)).map(lambda t: (t[0], t[1], t[1] + t[2]))


@given(
    retrieved=st.lists(_range, max_size=8),
    references=st.lists(_range.filter(lambda r: r[2] > r[1]), min_size=1, max_size=4),
)
@pytest.mark.slow
def test_scores_equal_a_count_of_characters(retrieved, references):
    """Each score is what counting characters one by one gives."""
    reference_chars = {(doc, offset) for doc, start, end in references for offset in range(start, end)}
    retrieved_chars = {(doc, offset) for doc, start, end in retrieved for offset in range(start, end)}
    retrieved_total = sum(end - start for _, start, end in retrieved)
    covered = len(reference_chars & retrieved_chars)
    scores = score_question(
        [RetrievedRange(*item) for item in retrieved], [ReferenceSpan(*item) for item in references]
    )
    assert scores.recall == pytest.approx(covered / len(reference_chars) if retrieved_total else 0.0)
    assert scores.precision == pytest.approx(covered / retrieved_total if retrieved_total else 0.0)
    expected_iou = covered / (retrieved_total + len(reference_chars) - covered) if retrieved_total else 0.0
    assert scores.iou == pytest.approx(expected_iou)
    assert scores.hit is (covered > 0)
