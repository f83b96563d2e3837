"""Ranking chunks for a question, and taking the best ones within a token budget.

Three retrievers, all offline:

- :class:`EmbeddingIndex` over an :class:`Embedder`; :func:`load_wordllama_embedder` gives the static
  embedding model whose weights and tokenizer the ``wordllama`` wheel ships (256 dimensions, token
  embeddings averaged), loaded without any download;
- :class:`Bm25Index`, the lexical baseline (``bm25s``: lowercase words of two characters or more, no stop
  words removed, no stemming);
- :class:`HybridIndex`, the two rankings fused by :func:`reciprocal_rank_fusion` (each text scores
  ``1 / (60 + rank)`` summed over the two).

A ranking holds every text, best first; ties keep the texts' order, so rankings are deterministic.
:func:`take_within_budget` then takes the best chunks while their tokens fit in a budget counted by
:func:`budget_token_counter` (cl100k_base, the same for every config compared) on the text a reader is
handed, the chunk's verbatim text; the chunk that crosses the budget counts only up to it, its character
range cut in the same proportion, so every config is handed exactly the budget. What a chunk is embedded
and indexed by is :func:`evaluation_text`.

The embedder and BM25 need the ``evaluate`` extra: without it they raise
:class:`EvaluationExtraMissingError`, whose message is the pip command.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from chunkline.record import Chunk

__all__ = [
    "EVALUATE_EXTRA_COMMAND",
    "Bm25Index",
    "BudgetShare",
    "Embedder",
    "EmbeddingIndex",
    "EvaluationExtraMissingError",
    "HybridIndex",
    "RRF_K",
    "WordLlamaEmbedder",
    "budget_token_counter",
    "evaluation_text",
    "load_wordllama_embedder",
    "reciprocal_rank_fusion",
    "take_within_budget",
]

EVALUATE_EXTRA_COMMAND = "pip install 'chunkline[evaluate]'"


class EvaluationExtraMissingError(ImportError):
    """A package of the ``evaluate`` extra (wordllama, bm25s) is not installed."""


def _import_extra(module: str, what: str) -> Any:
    root, own = logging.getLogger(), logging.getLogger(module)
    handlers, level, own_level = list(root.handlers), root.level, own.level
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise EvaluationExtraMissingError(
            f"{what} needs the {module} package ({error}): {EVALUATE_EXTRA_COMMAND}"
        ) from None
    finally:
        # wordllama configures the root logger (INFO, a stderr handler) when it is imported, and bm25s sets
        # its own logger to DEBUG: a library chunkline loads must not change how the program logs.
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        if own_level == logging.NOTSET and own.level != logging.NOTSET:
            own.setLevel(logging.WARNING)


def evaluation_text(chunk: Chunk) -> str:
    """What a chunk is embedded and indexed by: its ``embed_text``, as a loader would embed it."""
    return chunk.embed_text


class Embedder(Protocol):
    """An embedding model: texts in, one L2-normalised row per text out."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, each row of length 1 (or all zeros for a text with no tokens)."""


#: Texts embedded per call to the model at most; texts are sorted by length first, so a batch pads little.
_EMBED_BATCH = 64
#: Characters per call at most, counted as the batch's longest text times its texts: wordllama pads a batch
#: to its longest text and holds a 1 KB vector per token of it (up to 4 tokens a character for rare
#: characters), so this bounds the memory a batch takes to about 150 MB whatever the texts. The pooled
#: vectors are the same whatever the batch: padding adds zeros.
_EMBED_BATCH_CHARS = 16_384


def _batches(lengths: Sequence[int]) -> Iterator[list[int]]:
    """Indices of the texts, shortest first, in batches of at most :data:`_EMBED_BATCH` texts and
    :data:`_EMBED_BATCH_CHARS` padded characters (a longer text alone)."""
    batch: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) == _EMBED_BATCH or (len(batch) + 1) * lengths[index] > _EMBED_BATCH_CHARS):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


class WordLlamaEmbedder:
    """The static embedding model the ``wordllama`` wheel ships (``l2_supercat``, 256 dimensions)."""

    def __init__(self, model: Any, name: str):
        self._model = model
        self.name = name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        dim = self._model.embedding.shape[1]
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        for batch in _batches([len(text) for text in texts]):
            vectors[batch] = self._model.embed([texts[index] for index in batch], norm=False, batch_size=len(batch))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors


@functools.cache
def load_wordllama_embedder() -> WordLlamaEmbedder:
    """The wordllama model from the files of its installed wheel, with downloads disabled; loaded once per
    process.

    wordllama looks for a wheel's tokenizer under ``tokenizer/`` while the wheel ships it under
    ``tokenizers/``, which is where it looks inside a cache folder: the package's own folder is given as that
    cache folder, so both the weights and the tokenizer are read from the installed files."""
    wordllama = _import_extra("wordllama", "the embedding retriever")
    package = Path(wordllama.__file__).parent
    config = "l2_supercat"
    dim = 256
    try:
        model = wordllama.WordLlama.load(config, cache_dir=package, dim=dim, disable_download=True)
    except FileNotFoundError as error:
        raise EvaluationExtraMissingError(
            f"the wordllama package in {package} lacks its model files ({error}); reinstall it: "
            f"{EVALUATE_EXTRA_COMMAND}"
        ) from None
    version = getattr(wordllama, "__version__", "")
    return WordLlamaEmbedder(model, f"wordllama-{config}-{dim}" + (f" {version}" if version else ""))


def _ranking(scores: np.ndarray) -> np.ndarray:
    """Indices best first; equal scores keep the texts' order."""
    return np.argsort(-scores, kind="stable")


class EmbeddingIndex:
    """Texts embedded once; a query ranks them by cosine similarity."""

    def __init__(self, embedder: Embedder, texts: Sequence[str]):
        self.embedder = embedder
        self.vectors = embedder.embed(list(texts))

    def rank(self, query: str) -> np.ndarray:
        """Indices of the texts, best first (all of them)."""
        return _ranking(self.scores(query))

    def scores(self, query: str) -> np.ndarray:
        """The cosine similarity of each text to ``query``."""
        if not len(self.vectors):
            return np.zeros(0, dtype=np.float32)
        return self.vectors @ self.embedder.embed([query])[0]


class Bm25Index:
    """BM25 (``bm25s``, Lucene's variant, k1 1.5, b 0.75) over lowercase words, no stop words removed."""

    def __init__(self, texts: Sequence[str]):
        self._bm25s = _import_extra("bm25s", "the BM25 retriever")
        self.size = len(texts)
        self._index = None
        tokens = self._tokens(list(texts)) if self.size else []
        if any(tokens):  # texts without a single word all score 0
            self._index = self._bm25s.BM25()
            self._index.index(tokens, show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, lower=True, stopwords=None, return_ids=False, show_progress=False)

    def rank(self, query: str) -> np.ndarray:
        """Indices of the texts, best first (all of them)."""
        return _ranking(self.scores(query))

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of each text for ``query`` (0 for texts sharing no word with it)."""
        if self._index is None:
            return np.zeros(self.size, dtype=np.float32)
        words = self._tokens([query])[0]
        known = self._index.get_tokens_ids(words)
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._index.get_scores_from_ids(known), dtype=np.float32)


RRF_K = 60
"""The constant of reciprocal rank fusion (:func:`reciprocal_rank_fusion`)."""


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> np.ndarray:
    """One ranking from several rankings of the same items: each item scores ``sum(1 / (k + rank))`` over
    the rankings, its rank 1 for the best; best score first.

    ``k`` 60 is the constant of the method's paper (Cormack, Clarke and Büttcher, "Reciprocal Rank Fusion
    outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009), chosen there on other
    collections and the value search engines ship as their default: it is not tuned on the questions it is
    measured with, which would fit it to them. A large ``k`` flattens the weights of the top ranks, so an item
    that both rankings put near the top beats one that a single ranking puts first and the other far down;
    the scores need no common scale, which a cosine similarity and a BM25 score do not share.

    Ties (an item 3rd and 5th against one 5th and 3rd) keep the texts' order, as every ranking here does, so
    the fused ranking is deterministic. Every ranking must hold every item once (as
    :meth:`EmbeddingIndex.rank` and :meth:`Bm25Index.rank` do)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if not rankings:
        raise ValueError("reciprocal rank fusion needs at least one ranking")
    orders = [np.asarray(ranking, dtype=np.int64) for ranking in rankings]
    size = len(orders[0])
    scores = np.zeros(size, dtype=np.float64)
    for order in orders:
        if len(order) != size or not np.array_equal(np.sort(order), np.arange(size)):
            raise ValueError("every ranking must hold every item exactly once")
        ranks = np.empty(size, dtype=np.int64)
        ranks[order] = np.arange(1, size + 1)
        scores += 1.0 / (k + ranks)
    return _ranking(scores)


class HybridIndex:
    """BM25 and the embedding model over the same texts, their rankings fused by
    :func:`reciprocal_rank_fusion` (k :data:`RRF_K`)."""

    def __init__(self, embedder: Embedder, texts: Sequence[str]):
        texts = list(texts)
        self.bm25 = Bm25Index(texts)
        self.embedding = EmbeddingIndex(embedder, texts)

    def rank(self, query: str) -> np.ndarray:
        """Indices of the texts, best first (all of them)."""
        return reciprocal_rank_fusion([self.bm25.rank(query), self.embedding.rank(query)])


@dataclass(frozen=True, slots=True)
class BudgetShare:
    """One chunk taken within a token budget, and how much of it counts."""

    index: int
    """The chunk's index into the token counts the budget was taken from."""
    tokens: int
    """Its tokens that count against the budget: all of them, or for the chunk that crosses the budget only
    those that still fit."""
    chunk_tokens: int
    """All of its tokens."""

    @property
    def truncated(self) -> bool:
        """Only part of the chunk fits."""
        return self.tokens < self.chunk_tokens

    def char_range(self, start_char: int, end_char: int) -> tuple[int, int]:
        """The part of the chunk's character range ``[start_char, end_char)`` retrieved: all of it, or for a
        truncated chunk the same share of its characters as of its tokens, from its start:
        ``start_char + floor((end_char - start_char) * tokens / chunk_tokens)``."""
        if not self.truncated:
            return start_char, end_char
        return start_char, start_char + (end_char - start_char) * self.tokens // self.chunk_tokens


def take_within_budget(ranked: Sequence[int], token_counts: Sequence[int], budget_tokens: int) -> list[BudgetShare]:
    """The items of ``ranked`` (indices into ``token_counts``) retrieved within ``budget_tokens``, in rank
    order.

    The ranking is walked best first: whole items are taken while they fit in what is left of the budget;
    the item that crosses the budget counts only up to it (its :attr:`BudgetShare.tokens` are the tokens
    left, and :meth:`BudgetShare.char_range` truncates its characters in the same proportion); then the walk
    stops. So every system compared gets exactly the budget, unless its ranking runs out first: none gains
    by leaving part of the budget unspent, nor by a small chunk further down that happens to fit."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    counts = np.asarray(token_counts, dtype=np.int64)
    if (counts < 0).any():
        raise ValueError("token counts must be >= 0")
    taken: list[BudgetShare] = []
    left = budget_tokens
    for index in np.asarray(ranked, dtype=np.int64).tolist():
        if left == 0:
            break
        count = int(counts[index])
        tokens = min(count, left)
        taken.append(BudgetShare(index, tokens, count))
        left -= tokens
    return taken


def budget_token_counter() -> Callable[[str], int]:
    """Counts in cl100k_base (loaded offline, as chunkline's tokenizers load it): the retrieved-token budget
    is counted in one fixed tokenizer for every config compared."""
    from chunkline.tokenizers import get_token_counter

    return get_token_counter("cl100k_base").count
