"""The retrievers (wordllama offline, BM25), the token budget and what a chunk is indexed by."""

from __future__ import annotations

import socket
import sys
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline import chunk_markdown
from chunkline.evaluation import retrieval
from chunkline.evaluation.retrieval import (
    Bm25Index,
    EmbeddingIndex,
    EvaluationExtraMissingError,
    HybridIndex,
    budget_token_counter,
    evaluation_text,
    load_wordllama_embedder,
    reciprocal_rank_fusion,
    take_within_budget,
)

PASSAGES = [
    "The harbour cafeteria serves lunch from noon until two.",
    "To calibrate the tide gauge, zero its pressure sensor against the chart datum at slack water.",
    "Invoices for berth fees are sent at the end of each month.",
    "Pilots board incoming ships at the fairway buoy.",
]


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_wordllama_loads_offline_and_ranks_the_relevant_passage_first(no_network):
    load_wordllama_embedder.cache_clear()
    started = time.perf_counter()
    embedder = load_wordllama_embedder()
    load_seconds = time.perf_counter() - started
    assert load_wordllama_embedder() is embedder  # loaded once per process
    assert embedder.name.startswith("wordllama-l2_supercat-256")
    vectors = embedder.embed(PASSAGES + [""])
    assert vectors.shape == (5, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:4], axis=1), 1.0, atol=1e-5)
    assert not vectors[4].any()  # a text without tokens has no direction
    index = EmbeddingIndex(embedder, PASSAGES)
    assert index.rank("How do I calibrate the tide gauge?")[0] == 1
    assert index.rank("Where does the pilot get on board?")[0] == 3
    assert sorted(index.rank("lunch")) == [0, 1, 2, 3]
    assert load_seconds < 10, f"loading the embedding model took {load_seconds:.1f} s"


def test_embedding_does_not_depend_on_the_batch_it_is_in():
    embedder = load_wordllama_embedder()
    many = [f"passage {number} about {PASSAGES[number % 4]}" for number in range(150)]
    together = embedder.embed(many)
    alone = np.stack([embedder.embed([text])[0] for text in many[:5]])
    np.testing.assert_allclose(together[:5], alone, atol=1e-6)


def test_the_embedder_pads_no_batch_past_its_character_bound(monkeypatch):
    """Long texts go in small batches (wordllama's memory grows with a batch's texts times its longest), and
    their vectors are the same as in any other batch."""
    embedder = load_wordllama_embedder()
    model = embedder._model
    padded_chars = []

    def recording_embed(texts, **options):
        padded_chars.append(len(texts) * max(map(len, texts)))
        return type(model).embed(model, texts, **options)

    short = [f"passage {number} about {PASSAGES[number % 4]}" for number in range(100)]
    long = [("tide gauge " * 400)[: 3_000 + number] for number in range(20)]
    monkeypatch.setattr(model, "embed", recording_embed)
    together = embedder.embed(short + long)
    assert max(padded_chars) <= retrieval._EMBED_BATCH_CHARS
    monkeypatch.undo()
    alone = np.stack([embedder.embed([text])[0] for text in short[:3] + long[:3]])
    np.testing.assert_array_equal(together[[0, 1, 2, 100, 101, 102]], alone)


def test_bm25_ranks_by_shared_words_lowercase_without_stop_words_removed():
    index = Bm25Index(PASSAGES)
    assert index.rank("TIDE gauge")[0] == 1
    assert index.rank("fairway buoy pilots")[0] == 3
    # Stop words are kept: "the" (in every passage) and "of" (in passage 2 only) score.
    assert (index.scores("the") > 0).all()
    assert index.scores("of")[2] > 0 and (index.scores("of")[[0, 1, 3]] == 0).all()
    # No word in common: every passage scores 0 and the ranking is the passages' order.
    assert index.rank("zeppelin").tolist() == [0, 1, 2, 3]
    assert Bm25Index([]).rank("tide").tolist() == []
    assert Bm25Index(["", "..."]).rank("tide").tolist() == [0, 1]


def test_rankings_break_ties_by_position():
    index = Bm25Index(["tide gauge", "harbour", "tide gauge"])
    assert index.rank("tide").tolist() == [0, 2, 1]


def test_reciprocal_rank_fusion_prefers_what_both_rankings_put_high():
    # Scores 1/(60 + rank): item 1 is 2nd in both (2/62 = 0.03226), items 0 and 2 are 1st in one and 3rd in
    # the other (1/61 + 1/63 = 0.03227, a little more); 0 and 2 tie and keep the texts' order.
    assert reciprocal_rank_fusion([[0, 1, 2], [2, 1, 0]]).tolist() == [0, 2, 1]
    # Item 3 is 1st for BM25 and last of ten for the embedder (1/61 + 1/70 = 0.03068): behind 0 (3rd and 1st,
    # 0.03227), 5 (2nd and 3rd, 0.03200), 1 (4th and 2nd, 0.03175) and 2 (5th and 4th, 0.03101).
    lexical = [3, 5, 0, 1, 2, 4, 6, 7, 8, 9]
    dense = [0, 1, 5, 2, 4, 6, 7, 8, 9, 3]
    assert reciprocal_rank_fusion([lexical, dense]).tolist()[:5] == [0, 5, 1, 2, 3]
    # With k 0 the first places weigh far more: 3's first place (1 + 1/10) beats 5's 1/2 + 1/3.
    assert reciprocal_rank_fusion([lexical, dense], k=0).tolist()[:3] == [0, 3, 5]
    assert reciprocal_rank_fusion([[], []]).tolist() == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[0, 1], [1, 1]])
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([[0, 1], [0, 1, 2]])
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([])


@given(size=st.integers(1, 40), seeds=st.tuples(st.integers(0, 2**16), st.integers(0, 2**16)))
def test_reciprocal_rank_fusion_is_a_deterministic_consensus(size, seeds):
    first, second = (np.random.default_rng(seed).permutation(size).tolist() for seed in seeds)
    fused = reciprocal_rank_fusion([first, second]).tolist()
    assert sorted(fused) == list(range(size))
    assert fused == reciprocal_rank_fusion([second, first]).tolist()  # the order of the rankings is no tie-break
    assert reciprocal_rank_fusion([first, first]).tolist() == first
    position = {item: rank for rank, item in enumerate(fused)}
    first_rank = {item: rank for rank, item in enumerate(first)}
    second_rank = {item: rank for rank, item in enumerate(second)}
    for a in range(size):
        for b in range(size):
            if first_rank[a] < first_rank[b] and second_rank[a] < second_rank[b]:
                assert position[a] < position[b]  # ahead in both: ahead when fused
            if first_rank[a] + second_rank[a] == first_rank[b] + second_rank[b] and (
                {first_rank[a], second_rank[a]} == {first_rank[b], second_rank[b]}
            ):
                assert (position[a] < position[b]) == (a < b)  # mirrored ranks tie: the texts' order


def test_the_hybrid_index_fuses_bm25_and_the_embedding_ranking():
    embedder = load_wordllama_embedder()
    index = HybridIndex(embedder, PASSAGES)
    query = "how do I calibrate the tide gauge"
    expected = reciprocal_rank_fusion([Bm25Index(PASSAGES).rank(query), EmbeddingIndex(embedder, PASSAGES).rank(query)])
    assert index.rank(query).tolist() == expected.tolist()
    assert index.rank(query)[0] == 1


def _shares(taken):
    return [(share.index, share.tokens) for share in taken]


def test_take_within_budget_takes_whole_chunks_then_cuts_the_one_that_crosses_the_budget():
    # counts by item: 0 -> 8, 1 -> 5, 2 -> 2, 3 -> 1. Budget 10: 0 whole (8, 2 left), then 1 crosses the
    # budget and counts 2 of its 5 tokens; the walk stops there (2 and 3 would have fitted: not taken).
    assert _shares(take_within_budget([0, 1, 2, 3], [8, 5, 2, 1], 10)) == [(0, 8), (1, 2)]
    # Exactly the budget in whole chunks: nothing cut, nothing more taken.
    assert _shares(take_within_budget([0, 2], [8, 5, 2, 1], 10)) == [(0, 8), (2, 2)]
    # The ranking runs out before the budget does.
    assert _shares(take_within_budget([3, 2], [8, 5, 2, 1], 10)) == [(3, 1), (2, 2)]
    # The best chunk alone is over the budget: only its first share.
    assert _shares(take_within_budget([1, 0], [7, 9], 6)) == [(1, 6)]
    assert take_within_budget([1, 0], [0, 3], 0) == []
    assert take_within_budget([], [], 100) == []
    with pytest.raises(ValueError):
        take_within_budget([0], [1], -1)
    with pytest.raises(ValueError):
        take_within_budget([0], [-1], 5)


def test_the_cut_chunk_keeps_the_share_of_its_characters_that_its_tokens_fit():
    (whole, cut) = take_within_budget([0, 1], [8, 5], 10)
    assert not whole.truncated and whole.char_range(100, 140) == (100, 140)
    # 2 of 5 tokens fit: floor(37 * 2 / 5) = 14 of its 37 characters, from its start.
    assert cut.truncated and (cut.tokens, cut.chunk_tokens) == (2, 5)
    assert cut.char_range(200, 237) == (200, 214)


@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    budget=st.integers(0, 120),
    seed=st.integers(0, 2**16),
    lengths=st.lists(st.integers(0, 400), min_size=30, max_size=30),
)
def test_take_within_budget_hands_every_system_exactly_the_budget(counts, budget, seed, lengths):
    ranked = np.random.default_rng(seed).permutation(len(counts)).tolist()
    taken = take_within_budget(ranked, counts, budget)
    total = sum(share.tokens for share in taken)
    assert total <= budget
    if sum(counts) >= budget:
        assert total == budget
    else:
        assert [share.index for share in taken] == ranked  # the ranking ran out: all of it, whole
    # Taken in rank order, a prefix of the ranking; only the last may be cut, and it is cut to what was left.
    assert [share.index for share in taken] == ranked[: len(taken)]
    assert all(share.chunk_tokens == counts[share.index] for share in taken)
    assert all(not share.truncated for share in taken[:-1])
    if taken and taken[-1].truncated:
        assert 0 < taken[-1].tokens < taken[-1].chunk_tokens
        assert taken[-1].tokens == budget - sum(share.tokens for share in taken[:-1])
    # The retrieved range lies within the chunk's, from its start, in proportion to its tokens.
    start = 0
    for share in taken:
        end = start + lengths[share.index]
        low, high = share.char_range(start, end)
        assert start == low <= high <= end
        if share.truncated:
            assert high - low == (end - start) * share.tokens // share.chunk_tokens
        else:
            assert (low, high) == (start, end)
        start = end + 1


def test_budget_is_counted_in_cl100k_base():
    count = budget_token_counter()
    assert count("hello world") == 2
    assert count("") == 0


def test_a_chunk_is_indexed_by_its_embed_text_with_its_heading_context():
    chunks = chunk_markdown("---\ntitle: Harbour\n---\n## Tides\n\nThey rise twice a day.\n")
    (chunk,) = [chunk for chunk in chunks if "rise" in chunk.text]
    assert evaluation_text(chunk) == chunk.embed_text
    assert evaluation_text(chunk).startswith("Harbour > Tides\n\n")
    assert "title:" not in evaluation_text(chunk)


def test_without_the_evaluate_extra_the_error_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    monkeypatch.setitem(sys.modules, "wordllama", None)
    load_wordllama_embedder.cache_clear()
    try:
        with pytest.raises(EvaluationExtraMissingError, match=r"pip install 'chunkline\[evaluate\]'"):
            Bm25Index(["tide"])
        with pytest.raises(EvaluationExtraMissingError, match=r"pip install 'chunkline\[evaluate\]'"):
            load_wordllama_embedder()
    finally:
        load_wordllama_embedder.cache_clear()
    assert retrieval.EVALUATE_EXTRA_COMMAND == "pip install 'chunkline[evaluate]'"
