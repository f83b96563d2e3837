"""Measuring what a chunking config does to retrieval, on a user's own questions. No Beam here.

- :mod:`chunkline.evaluation.questions`: questions with reference spans (document + character range),
  read from Chroma's ``questions_df.csv`` or from JSON Lines.
- :mod:`chunkline.evaluation.metrics`: recall, precision and IoU over character ranges, per question.
- :mod:`chunkline.evaluation.retrieval`: an offline embedding model (wordllama's static embeddings, shipped in
  its wheel), BM25 (``bm25s``) and their hybrid (reciprocal rank fusion) over chunks, and the retrieved-token
  budget.
- :mod:`chunkline.evaluation.corpus`: the corpus, read as ``chunkline run`` reads it.
- :mod:`chunkline.evaluation.evaluate`: :func:`evaluate_configs`, every config with every retriever.

The embedder and BM25 need the ``evaluate`` extra (``pip install -e '.[evaluate]'`` in chunkline's folder);
the questions and the metrics need nothing beyond chunkline itself. The names below load on first use.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it
_EXPORTS = {
    "Question": "chunkline.evaluation.questions",
    "QuestionsFileError": "chunkline.evaluation.questions",
    "ReferenceSpan": "chunkline.evaluation.questions",
    "load_questions": "chunkline.evaluation.questions",
    "QuestionScores": "chunkline.evaluation.metrics",
    "RetrievedRange": "chunkline.evaluation.metrics",
    "score_question": "chunkline.evaluation.metrics",
    "Bm25Index": "chunkline.evaluation.retrieval",
    "BudgetShare": "chunkline.evaluation.retrieval",
    "Embedder": "chunkline.evaluation.retrieval",
    "EmbeddingIndex": "chunkline.evaluation.retrieval",
    "EvaluationExtraMissingError": "chunkline.evaluation.retrieval",
    "HybridIndex": "chunkline.evaluation.retrieval",
    "reciprocal_rank_fusion": "chunkline.evaluation.retrieval",
    "budget_token_counter": "chunkline.evaluation.retrieval",
    "evaluation_text": "chunkline.evaluation.retrieval",
    "load_wordllama_embedder": "chunkline.evaluation.retrieval",
    "take_within_budget": "chunkline.evaluation.retrieval",
    "Corpus": "chunkline.evaluation.corpus",
    "CorpusError": "chunkline.evaluation.corpus",
    "load_input_config": "chunkline.evaluation.corpus",
    "read_corpus": "chunkline.evaluation.corpus",
    "EvaluationError": "chunkline.evaluation.evaluate",
    "EvaluationResult": "chunkline.evaluation.evaluate",
    "SystemResult": "chunkline.evaluation.evaluate",
    "evaluate_configs": "chunkline.evaluation.evaluate",
    "load_named_configs": "chunkline.evaluation.evaluate",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chunkline.evaluation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(_EXPORTS)
