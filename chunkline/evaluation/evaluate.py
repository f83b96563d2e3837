"""Comparing chunking configs by what retrieval finds with their chunks, on the user's own questions.

:func:`evaluate_configs` chunks the corpus with each config (in this process, with the engine), builds an
index over the chunks for each retriever (the embedding model, BM25, and their hybrid: the two rankings fused
by reciprocal rank fusion), and for every question takes the
best chunks of the ranking within the same budget of retrieved tokens for every config
(:func:`~chunkline.evaluation.retrieval.take_within_budget`, counted in cl100k_base on the chunks'
verbatim text): whole chunks while they fit, then the chunk that crosses the budget up to it, its character
range cut in the same proportion as its tokens. The retrieved character ranges are scored against the question's reference spans
(:func:`~chunkline.evaluation.metrics.score_question`); a config's figures are the means over the
questions. Every reference span must lie inside a document of the corpus (:func:`check_references`).
"""

from __future__ import annotations

import difflib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkline.config import ChunkConfig
from chunkline.engine import chunk_document, chunk_document_with_sections
from chunkline.evaluation.corpus import Corpus
from chunkline.evaluation.expansion import take_expanded_within_budget, unit_chains
from chunkline.evaluation.metrics import QuestionScores, RetrievedRange, score_question
from chunkline.evaluation.questions import Question
from chunkline.evaluation.retrieval import (
    Bm25Index,
    Embedder,
    EmbeddingIndex,
    budget_token_counter,
    evaluation_text,
    load_wordllama_embedder,
    reciprocal_rank_fusion,
    take_within_budget,
)
from chunkline.record import Chunk, SectionRecord
from chunkline.tokenizers import TokenizerFailedError, counter_for

__all__ = [
    "BUDGET_TOKENIZER",
    "DEFAULT_BUDGET_TOKENS",
    "DEFAULT_RETRIEVERS",
    "RETRIEVERS",
    "EvaluationError",
    "EvaluationResult",
    "SystemResult",
    "chunk_corpus",
    "check_references",
    "evaluate_configs",
]

RETRIEVERS = ("embedding", "bm25", "hybrid")
"""Every retriever :func:`evaluate_configs` takes: the embedding model, BM25, and their rankings fused
(:func:`~chunkline.evaluation.retrieval.reciprocal_rank_fusion`)."""
DEFAULT_RETRIEVERS = ("embedding", "bm25")
DEFAULT_BUDGET_TOKENS = 1000
BUDGET_TOKENIZER = "cl100k_base"


class EvaluationError(ValueError):
    """Questions that do not fit the corpus (a reference to an unknown document, or past a document's end)."""


@dataclass(frozen=True)
class SystemResult:
    """The figures of one config with one retriever."""

    config_name: str
    retriever: str
    recall: float
    """Mean over the questions, 0 to 1."""
    precision: float
    iou: float
    hit_rate: float
    """Share of questions with at least one reference character retrieved."""
    chunks: int
    mean_chunk_tokens: float
    """In cl100k_base, the budget's tokenizer, whatever the config counts in."""
    median_chunk_tokens: float
    retrieved_tokens_per_question: float
    """Mean cl100k_base tokens retrieved for a question: the budget, unless a ranking runs out first."""
    retrieved_chunks_per_question: float
    """Mean chunks retrieved for a question, the one cut at the budget included."""
    per_question: tuple[QuestionScores, ...] = field(repr=False, default=())
    expand: str | None = None
    """``section:N`` for small-to-big retrieval (:mod:`chunkline.evaluation.expansion`); ``None`` for chunks."""
    retrieved_sections_per_question: float = 0.0
    """Mean sections returned for a question (with ``expand``; ``retrieved_chunks_per_question`` then counts
    the chunks returned as themselves)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config_name,
            "retriever": self.retriever,
            "recall_percent": round(100 * self.recall, 4),
            "precision_percent": round(100 * self.precision, 4),
            "iou_percent": round(100 * self.iou, 4),
            "hit_rate_percent": round(100 * self.hit_rate, 4),
            "chunks": self.chunks,
            "mean_chunk_tokens": round(self.mean_chunk_tokens, 2),
            "median_chunk_tokens": self.median_chunk_tokens,
            "retrieved_tokens_per_question": round(self.retrieved_tokens_per_question, 2),
            "retrieved_chunks_per_question": round(self.retrieved_chunks_per_question, 2),
            "expand": self.expand,
            "retrieved_sections_per_question": round(self.retrieved_sections_per_question, 2),
        }


@dataclass(frozen=True)
class EvaluationResult:
    """Every config x retriever, in the order the configs and retrievers were given."""

    results: tuple[SystemResult, ...]
    configs: dict[str, ChunkConfig]
    questions: int
    documents: int
    budget_tokens: int
    embedder: str | None
    seconds: float
    """How long the evaluation took (not in :meth:`to_dict`, whose figures are the same on every run)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "documents": self.documents,
            "budget_tokens": self.budget_tokens,
            "budget_tokenizer": BUDGET_TOKENIZER,
            "embedder": self.embedder,
            "configs": {name: config.to_dict() for name, config in self.configs.items()},
            "results": [result.to_dict() for result in self.results],
        }


def _describe_question(number: int, question: Question) -> str:
    text = question.question if len(question.question) <= 60 else question.question[:57] + "..."
    return f"question {number} ({text!r})"


def _closest_doc_id(doc_id: str, known: list[str]) -> str | None:
    """The doc id ``doc_id`` was likely meant to be: one that is the same path below or above a folder
    (``corpus/a.md`` for ``a.md``, or the other way round), else the most similar."""
    nested = [other for other in known if doc_id.endswith("/" + other) or other.endswith("/" + doc_id)]
    if nested:
        return min(nested, key=lambda other: (abs(len(other) - len(doc_id)), other))
    close = difflib.get_close_matches(doc_id, known, n=1, cutoff=0.6)
    return close[0] if close else None


def check_references(questions: Sequence[Question], corpus: Corpus) -> None:
    """Raise :class:`EvaluationError` for the first reference span that is not inside a document of the
    corpus, naming the question (1-based, in file order) and the document."""
    for number, question in enumerate(questions, start=1):
        for reference in question.references:
            document = corpus.documents.get(reference.doc_id)
            if document is None:
                if reference.doc_id in corpus.left_out:
                    why = f"which was not read: {corpus.left_out[reference.doc_id]}"
                else:
                    hint = _closest_doc_id(reference.doc_id, list(corpus.documents))
                    hint = f"; did you mean {hint}?" if hint else ""
                    why = f"which is not a document of the corpus ({len(corpus.documents)} documents){hint}"
                raise EvaluationError(f"{_describe_question(number, question)} refers to {reference.doc_id}, {why}")
            if reference.end_char > len(document.text):
                raise EvaluationError(
                    f"{_describe_question(number, question)}: its reference {reference.start_char}..{reference.end_char} "
                    f"ends past the end of {reference.doc_id} ({len(document.text)} characters)"
                )


def chunk_corpus(corpus: Corpus, config: ChunkConfig) -> list[Chunk]:
    """The chunks of every document of the corpus, in doc id order, as ``chunkline run`` makes them."""
    counter = counter_for(config)
    chunks: list[Chunk] = []
    for document in corpus.documents.values():
        try:
            chunks.extend(
                chunk_document(
                    document.document,
                    config,
                    counter,
                    doc_id=document.doc_id,
                    source_uri=document.source_uri,
                    replaced_bytes=document.replaced_bytes,
                )
            )
        except TokenizerFailedError as error:
            # Configs are compared on the same documents: one that cannot chunk a document is not comparable.
            raise EvaluationError(
                f"{document.doc_id}: {error}; leave it out of the corpus or fix the tokenizer"
            ) from None
    return chunks


def chunk_corpus_with_sections(corpus: Corpus, config: ChunkConfig) -> tuple[list[Chunk], list[SectionRecord]]:
    """:func:`chunk_corpus`'s chunks (the same list) and every document's sections."""
    counter = counter_for(config)
    chunks: list[Chunk] = []
    sections: list[SectionRecord] = []
    for document in corpus.documents.values():
        try:
            chunked = chunk_document_with_sections(
                document.document,
                config,
                counter,
                doc_id=document.doc_id,
                source_uri=document.source_uri,
                replaced_bytes=document.replaced_bytes,
            )
        except TokenizerFailedError as error:
            raise EvaluationError(
                f"{document.doc_id}: {error}; leave it out of the corpus or fix the tokenizer"
            ) from None
        chunks.extend(chunked.chunks)
        sections.extend(chunked.sections)
    return chunks, sections


def _budget_counts(chunks: Sequence[Chunk], config: ChunkConfig) -> np.ndarray:
    """Each chunk's tokens in the budget's tokenizer: the exact counts the chunks carry when the config
    counts in it already."""
    if config.tokenizer == BUDGET_TOKENIZER and config.tokenizer_file is None:
        return np.fromiter((chunk.token_count for chunk in chunks), dtype=np.int64, count=len(chunks))
    count = budget_token_counter()
    return np.fromiter((count(chunk.text) for chunk in chunks), dtype=np.int64, count=len(chunks))


def _ranking(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="stable")


class _SmallToBig:
    """What ``section:N`` retrieval needs of one config's chunks: each chunk's units (the sections around
    it, then itself) with their budget tokens, and a counter of any part of a document."""

    def __init__(
        self,
        corpus: Corpus,
        chunks: Sequence[Chunk],
        sections: Sequence[SectionRecord],
        config: ChunkConfig,
        counts: np.ndarray,
    ):
        count = budget_token_counter()
        exact = config.tokenizer == BUDGET_TOKENIZER and config.tokenizer_file is None
        self._texts = {doc_id: document.text for doc_id, document in corpus.documents.items()}
        self._count = count
        self.chains = unit_chains(
            chunks,
            sections,
            counts.tolist(),
            (lambda section: section.token_count) if exact else (lambda section: count(section.text)),
        )

    def count_range(self, doc_id: str, start_char: int, end_char: int) -> int:
        return self._count(self._texts[doc_id][start_char:end_char])


def _expanded_result(
    name: str,
    retriever: str,
    max_section_tokens: int,
    rankings: Sequence[np.ndarray],
    questions: Sequence[Question],
    small_to_big: _SmallToBig,
    budget_tokens: int,
    counts: np.ndarray,
) -> SystemResult:
    """The figures of ``section:N`` retrieval over the chunk rankings of one config and retriever."""
    scores, retrieved_tokens, retrieved_chunks, retrieved_sections = [], [], [], []
    for question, ranking in zip(questions, rankings):
        taken = take_expanded_within_budget(
            ranking, small_to_big.chains, max_section_tokens, budget_tokens, small_to_big.count_range
        )
        retrieved = [RetrievedRange(share.doc_id, share.start_char, share.end_char) for share in taken]
        scores.append(score_question(retrieved, question.references))
        retrieved_tokens.append(sum(share.tokens for share in taken))
        sections = sum(share.section_id is not None for share in taken)
        retrieved_sections.append(sections)
        retrieved_chunks.append(len(taken) - sections)
    return _system_result(
        name,
        retriever,
        scores,
        counts,
        retrieved_tokens,
        retrieved_chunks,
        expand=f"section:{max_section_tokens}",
        retrieved_sections_per_question=statistics.fmean(retrieved_sections),
    )


def _system_result(
    name: str,
    retriever: str,
    scores: Sequence[QuestionScores],
    counts: np.ndarray,
    retrieved_tokens: Sequence[int],
    retrieved_chunks: Sequence[int],
    **expansion: Any,
) -> SystemResult:
    """The means over the questions of one config and retriever (``expansion``: the ``section:N`` mode's
    fields)."""
    return SystemResult(
        config_name=name,
        retriever=retriever,
        recall=statistics.fmean(score.recall for score in scores),
        precision=statistics.fmean(score.precision for score in scores),
        iou=statistics.fmean(score.iou for score in scores),
        hit_rate=sum(score.hit for score in scores) / len(scores),
        chunks=len(counts),
        mean_chunk_tokens=float(counts.mean()) if len(counts) else 0.0,
        median_chunk_tokens=float(np.median(counts)) if len(counts) else 0.0,
        retrieved_tokens_per_question=statistics.fmean(retrieved_tokens),
        retrieved_chunks_per_question=statistics.fmean(retrieved_chunks),
        per_question=tuple(scores),
        **expansion,
    )


class _Rankings:
    """Each question's ranking of one config's chunks by each retriever, computed once whichever retrievers
    ask for it (the hybrid fuses the two others)."""

    def __init__(
        self,
        chunk_texts: Sequence[str],
        questions: Sequence[str],
        *,
        embedder: Embedder | None,
        query_vectors: np.ndarray | None,
    ):
        self._chunk_texts = chunk_texts
        self._questions = questions
        self._embedder = embedder
        self._query_vectors = query_vectors
        self._computed: dict[str, list[np.ndarray]] = {}

    def of(self, retriever: str) -> list[np.ndarray]:
        if retriever not in self._computed:
            if retriever == "embedding":
                vectors = EmbeddingIndex(self._embedder, self._chunk_texts).vectors
                rankings = [_ranking(vectors @ query) for query in self._query_vectors]
            elif retriever == "bm25":
                index = Bm25Index(self._chunk_texts)
                rankings = [index.rank(text) for text in self._questions]
            else:
                pairs = zip(self.of("bm25"), self.of("embedding"))
                rankings = [reciprocal_rank_fusion(pair) for pair in pairs]
            self._computed[retriever] = rankings
        return self._computed[retriever]


def evaluate_configs(
    corpus: Corpus,
    questions: Sequence[Question],
    configs: dict[str, ChunkConfig],
    *,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    retrievers: Sequence[str] = DEFAULT_RETRIEVERS,
    embedder: Embedder | None = None,
    progress: Callable[[str], None] | None = None,
    expansions: Sequence[int] = (),
) -> EvaluationResult:
    """Chunk ``corpus`` with each named config, retrieve for each question with each retriever within
    ``budget_tokens``, and score; ``embedder`` defaults to wordllama's (:func:`load_wordllama_embedder`).

    ``retrievers`` names any of :data:`RETRIEVERS`: ``embedding``, ``bm25`` and ``hybrid`` (the two
    rankings fused by reciprocal rank fusion, k 60; each ranking is computed once per config and question,
    whichever retrievers use it).

    ``expansions`` adds, for each ``N`` in it, rows of small-to-big retrieval beside the chunks' own
    (``section:N``: each ranked chunk returned as the largest section around it of at most ``N`` tokens,
    within the same budget; :mod:`chunkline.evaluation.expansion`), from the same rankings."""
    started = time.perf_counter()
    if not questions:
        raise EvaluationError("no questions to evaluate")
    if not configs:
        raise EvaluationError("no config to evaluate")
    unknown = [name for name in retrievers if name not in RETRIEVERS]
    if unknown or not retrievers:
        raise EvaluationError(
            f"unknown retriever {unknown[0] if unknown else None!r}; retrievers: {', '.join(RETRIEVERS)}"
        )
    if budget_tokens < 1:
        raise EvaluationError(f"the token budget must be at least 1, got {budget_tokens}")
    if any(max_section_tokens < 0 for max_section_tokens in expansions):
        raise EvaluationError(f"section:N needs N >= 0, got {min(expansions)}")
    check_references(questions, corpus)
    say = progress or (lambda message: None)
    texts = [question.question for question in questions]
    query_vectors = None
    uses_embedding = "embedding" in retrievers or "hybrid" in retrievers
    if uses_embedding:
        embedder = embedder or load_wordllama_embedder()
        query_vectors = embedder.embed(texts)
    results = []
    for name, config in configs.items():
        say(f"{name}: chunking {len(corpus.documents)} documents ({config.strategy}, max_tokens {config.max_tokens})")
        small_to_big = None
        if expansions:
            chunks, sections = chunk_corpus_with_sections(corpus, config)
        else:
            chunks = chunk_corpus(corpus, config)
        counts = _budget_counts(chunks, config)
        if expansions:
            small_to_big = _SmallToBig(corpus, chunks, sections, config, counts)
        chunk_texts = [evaluation_text(chunk) for chunk in chunks]
        rankings_of = _Rankings(chunk_texts, texts, embedder=embedder, query_vectors=query_vectors)
        for retriever in retrievers:
            say(f"{name}: {len(chunks)} chunks; {retriever} retrieval for {len(questions)} questions")
            rankings = rankings_of.of(retriever)
            scores, retrieved_tokens, retrieved_chunks = [], [], []
            for question, ranking in zip(questions, rankings):
                taken = take_within_budget(ranking, counts, budget_tokens)
                retrieved = [
                    RetrievedRange(
                        chunks[share.index].doc_id,
                        *share.char_range(chunks[share.index].start_char, chunks[share.index].end_char),
                    )
                    for share in taken
                ]
                scores.append(score_question(retrieved, question.references))
                retrieved_tokens.append(sum(share.tokens for share in taken))
                retrieved_chunks.append(len(taken))
            results.append(_system_result(name, retriever, scores, counts, retrieved_tokens, retrieved_chunks))
            for max_section_tokens in expansions:
                say(f"{name}: {retriever} retrieval expanded to sections of up to {max_section_tokens} tokens")
                results.append(
                    _expanded_result(
                        name, retriever, max_section_tokens, rankings, questions, small_to_big, budget_tokens, counts
                    )
                )
    return EvaluationResult(
        results=tuple(results),
        configs=dict(configs),
        questions=len(questions),
        documents=len(corpus.documents),
        budget_tokens=budget_tokens,
        embedder=embedder.name if uses_embedding and embedder is not None else None,
        seconds=time.perf_counter() - started,
    )


def load_named_configs(specs: Sequence[str], overrides: Sequence[str] = ()) -> dict[str, ChunkConfig]:
    """The configs to compare, by name, from ``--config`` values: ``NAME=FILE`` or ``FILE`` (named by its
    stem); every ``--set`` override applies to each. No value: one config of the defaults, ``default``."""
    from pathlib import Path

    from chunkline.config import load_chunk_config
    from chunkline.settings import ConfigError

    if not specs:
        return {"default": load_chunk_config(None, overrides)}
    configs: dict[str, ChunkConfig] = {}
    for spec in specs:
        name, equals, path = spec.partition("=")
        if not equals or not name or "/" in name or Path(spec).exists():
            name, path = Path(spec).stem, spec
        if not path:
            raise ConfigError(f"--config {spec}: no file after {name}=")
        if name in configs:
            raise ConfigError(f"--config {spec}: a second config named {name!r}; name each one: --config NAME=FILE")
        configs[name] = load_chunk_config(path, overrides)
    return configs


def require_retrievers(retrievers: Sequence[str]) -> None:
    """Raise :class:`~chunkline.evaluation.retrieval.EvaluationExtraMissingError` now, before any work, when
    a retriever's package is not installed."""
    if "embedding" in retrievers or "hybrid" in retrievers:
        load_wordllama_embedder()
    if "bm25" in retrievers or "hybrid" in retrievers:
        Bm25Index([])


def format_table(result: EvaluationResult) -> str:
    """The figures as a plain-text table, one row per config and retriever."""
    columns = [
        ("config", "config", "{}"),
        ("retriever", "retriever", "{}"),
        ("recall_percent", "recall %", "{:.1f}"),
        ("precision_percent", "precision %", "{:.2f}"),
        ("iou_percent", "IoU %", "{:.2f}"),
        ("hit_rate_percent", "hit rate %", "{:.1f}"),
        ("chunks", "chunks", "{:,}"),
        ("mean_chunk_tokens", "mean tokens", "{:.1f}"),
        ("median_chunk_tokens", "median tokens", "{:.1f}"),
        ("retrieved_tokens_per_question", "retrieved tokens/q", "{:.1f}"),
    ]
    text_columns = 2  # config and retriever are left-aligned, the figures right-aligned
    if any(system.expand for system in result.results):
        # What each row returns: chunks, or with --expand section:N the sections around them.
        columns.insert(2, ("returns", "returns", "{}"))
        text_columns = 3
    dicts = [{**r.to_dict(), "returns": r.expand or "chunks"} for r in result.results]
    rows = [[pattern.format(row[key]) for key, _, pattern in columns] for row in dicts]
    headers = [label for _, label, _ in columns]
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i < text_columns else cell.rjust(widths[i]) for i, cell in enumerate(cells)
        ).rstrip()

    embedder = f", embedder {result.embedder}" if result.embedder else ""
    header = (
        f"{result.questions} questions over {result.documents} documents; up to {result.budget_tokens:,} "
        f"retrieved tokens per question ({BUDGET_TOKENIZER}){embedder}"
    )
    return "\n".join([header, "", line(headers), *(line(row) for row in rows)])
