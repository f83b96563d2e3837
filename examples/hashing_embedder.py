"""A deterministic local text embedding for the loader examples: no model, no download, no network.

Each text becomes a bag of features (its lowercase words, and the character trigrams of each word) hashed
into ``dimension`` buckets with BLAKE2b, then L2-normalised. Python's own ``hash()`` is salted per process,
so it would give different vectors in every run; BLAKE2b gives the same vector on every machine.

It is a lexical embedding, good enough to check that a loader stores the right vector under the right id,
and the loaders' tests use it (``--embedder hashing``, ``embedder=HashingEmbedder()``). For retrieval the
loaders use a real model by default (see ``embedders.py``).

    from hashing_embedder import embed
    vectors = embed(["How do I calibrate a tide gauge?"])   # float32 array of shape (1, 384)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np

DIMENSION = 384

_WORD = re.compile(r"\w+")


def features(text: str) -> list[str]:
    """The lowercase words of ``text`` and the character trigrams of each (``#`` marks a word's edges)."""
    words = _WORD.findall(text.lower())
    trigrams = [f"#{word}#"[start : start + 3] for word in words for start in range(len(word))]
    return [f"w:{word}" for word in words] + [f"t:{trigram}" for trigram in trigrams]


def _bucket_and_sign(feature: str, dimension: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    # The sign bit makes colliding features cancel out on average instead of piling up.
    return (digest >> 1) % dimension, (1.0 if digest & 1 else -1.0)


def embed(texts: Iterable[str], dimension: int = DIMENSION) -> np.ndarray:
    """One L2-normalised float32 vector per text, shape ``(len(texts), dimension)``; an empty text gives zeros."""
    texts = list(texts)
    vectors = np.zeros((len(texts), dimension), dtype=np.float32)
    for row, text in enumerate(texts):
        for feature in features(text):
            bucket, sign = _bucket_and_sign(feature, dimension)
            vectors[row, bucket] += sign
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class HashingEmbedder:
    """:func:`embed` as an embedder object for the loaders (``name`` and ``embed``)."""

    name = f"hashing-blake2b-{DIMENSION}"

    def embed(self, texts: Iterable[str]) -> np.ndarray:
        return embed(texts)


if __name__ == "__main__":
    import sys

    query = " ".join(sys.argv[1:]) or "How do I calibrate a tide gauge?"
    vector = embed([query])[0]
    print(f"{query!r}: {vector.shape[0]} dimensions, norm {np.linalg.norm(vector):.3f}, first values {vector[:5]}")
