"""Load a chunkline dataset into Qdrant, and search it.

    python examples/load_qdrant.py out/sample qdrant-data "calibrate the tide gauge"

The chunks are read through the dataset's manifest (``read_dataset``), so a rebuild in progress is never
loaded. Each chunk is one point: its id is ``chunk_uuid`` (Qdrant ids must be integers or UUIDs), its
payload the fields a retriever shows or filters on. ``upsert`` overwrites a point with the same id, so
loading the same dataset again leaves the collection as it was. Chunks that are gone from the dataset are
not removed; the ``changes/deletes`` table of a rebuilt dataset lists their ``chunk_uuid``.

``target`` is a folder (Qdrant's local mode: no server) or a ``QdrantClient`` you made, such as
``QdrantClient(":memory:")`` or ``QdrantClient(url="http://localhost:6333")`` for a server. Swap ``embed``
for your model; its dimension fixes the vector size when the collection is created.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hashing_embedder sits next to this file

from chunkline.pipelines.publish import read_dataset
from hashing_embedder import embed

PAYLOAD_COLUMNS = ["doc_id", "chunk_id", "heading_path", "start_line", "end_line", "start_char", "end_char", "text"]


def _client(target: str | QdrantClient) -> QdrantClient:
    return target if isinstance(target, QdrantClient) else QdrantClient(path=str(target))


def load(dataset_url: str, target: str | QdrantClient, collection: str = "chunks", batch_size: int = 256) -> int:
    """Upsert the chunks of the dataset at ``dataset_url`` into ``collection`` at ``target``; returns the number of
    points in the collection afterwards."""
    chunks = read_dataset(dataset_url, "chunks", columns=["chunk_uuid", *PAYLOAD_COLUMNS]).to_pylist()
    vectors = embed(chunk["text"] for chunk in chunks)
    client = _client(target)
    try:
        if not client.collection_exists(collection):
            client.create_collection(
                collection, vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
            )
        for start in range(0, len(chunks), batch_size):
            points = [
                models.PointStruct(
                    id=chunk["chunk_uuid"],
                    vector=vector.tolist(),
                    payload={name: chunk[name] for name in PAYLOAD_COLUMNS},
                )
                for chunk, vector in zip(chunks[start : start + batch_size], vectors[start : start + batch_size])
            ]
            client.upsert(collection, points=points, wait=True)
        return client.count(collection, exact=True).count
    finally:
        if client is not target:  # local mode locks its folder until the client is closed
            client.close()


def search(target: str | QdrantClient, query: str, k: int = 5, collection: str = "chunks") -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first: each point's payload with its ``id`` and ``score``."""
    client = _client(target)
    try:
        hits = client.query_points(collection, query=embed([query])[0].tolist(), limit=k, with_payload=True).points
        return [{"id": hit.id, "score": hit.score, **hit.payload} for hit in hits]
    finally:
        if client is not target:
            client.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python load_qdrant.py DATASET_URL QDRANT_FOLDER [QUERY]")
    dataset_url, folder = sys.argv[1], sys.argv[2]
    print(f"{load(dataset_url, folder)} chunks in {folder}")
    for hit in search(folder, " ".join(sys.argv[3:]) or "getting started", k=3):
        where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
        print(f"{hit['score']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
