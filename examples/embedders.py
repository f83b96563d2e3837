"""The embedding models of the loader examples: a real offline model by default, a hashing stand-in for tests.

    from embedders import load_embedder
    embedder = load_embedder()                 # wordllama: 256 dimensions, weights shipped in its wheel
    embedder = load_embedder("hashing")        # hashing_embedder.py: 384 dimensions, no model at all
    vectors = embedder.embed(["How do I calibrate a tide gauge?"])   # float32, one L2-normalised row per text

An embedder is any object with a ``name`` (recorded with the store, so a store embedded by another model is
reloaded in full rather than mixed) and ``embed(texts) -> (len(texts), dimension) float32 array``. The
loaders take one as ``embedder=``; swap in your own model the same way, for example::

    class MiniLM:
        name = "all-MiniLM-L6-v2"
        def __init__(self):
            from sentence_transformers import SentenceTransformer
            self._model = SentenceTransformer(self.name)
        def embed(self, texts):
            return self._model.encode(list(texts), normalize_embeddings=True).astype("float32")

``wordllama`` is chunkline's own retrieval model (``chunkline evaluate`` ranks with it), loaded from its
installed wheel by :func:`chunkline.evaluation.retrieval.load_wordllama_embedder` with downloads disabled:
it never reaches the network. It needs ``pip install -e '.[evaluate]'`` in chunkline's folder (or ``wordllama`` alone).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hashing_embedder sits next to this file

from hashing_embedder import HashingEmbedder

__all__ = ["DEFAULT_EMBEDDER", "EMBEDDER_NAMES", "Embedder", "dimension_of", "load_embedder"]

EMBEDDER_NAMES = ("wordllama", "hashing")
DEFAULT_EMBEDDER = "wordllama"


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32, each row L2-normalised (all zeros for a text with no features)."""


def load_embedder(name: str = DEFAULT_EMBEDDER) -> Embedder:
    """The embedder called ``name``: ``wordllama`` (the default) or ``hashing``."""
    if name == "wordllama":
        from chunkline.evaluation.retrieval import load_wordllama_embedder

        return load_wordllama_embedder()
    if name == "hashing":
        return HashingEmbedder()
    raise ValueError(f"unknown embedder {name!r}; embedders: {', '.join(EMBEDDER_NAMES)}")


def dimension_of(embedder: Embedder) -> int:
    """The width of the embedder's vectors (embedding no text, so no model call)."""
    return int(embedder.embed([]).shape[1])
