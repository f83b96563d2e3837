"""Measuring what a chunking config does to retrieval, on a user's own questions. No Beam here.

- :mod:`chunkline.evaluation.questions`: questions with reference spans (document + character range),
  read from Chroma's ``questions_df.csv`` or from JSON Lines.
- :mod:`chunkline.evaluation.metrics`: recall, precision and IoU over character ranges, per question.
- :mod:`chunkline.evaluation.retrieval`: an offline embedding model (wordllama's static embeddings, shipped in
  its wheel) and BM25 (``bm25s``) over chunks, and the retrieved-token budget.

The embedder and BM25 need the ``evaluate`` extra (``pip install 'chunkline[evaluate]'``); the questions
and the metrics need nothing beyond chunkline itself.
"""
