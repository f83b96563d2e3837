"""Load a chunkline dataset into Qdrant, keep it in step with the dataset, and search it.

    python examples/load_qdrant.py out/sample qdrant-data "calibrate the tide gauge"

Each chunk is one point: its id is ``chunk_uuid`` (Qdrant ids must be integers or UUIDs), its payload the
fields a retriever shows or filters on. The dataset is a series of snapshots (one per ``chunkline run``);
three functions keep a collection in step with it:

- ``load`` writes one snapshot in full (the latest by default): every chunk is upserted and points that are
  not in the snapshot are deleted, so the collection holds exactly that snapshot.
- ``apply_changes`` applies one snapshot's delta, relative to the snapshot before it: the points whose id
  is in ``changes/deletes`` are deleted, then the rows of ``changes/upserts`` are embedded and upserted.
  Unchanged chunks are neither embedded nor written again; applying a delta twice changes nothing.
- ``sync`` brings a collection up to the latest snapshot: the deltas of every snapshot after the one it
  holds, oldest first, when each was built from the one before it; otherwise (an empty collection,
  snapshots it needs already removed by ``output.keep``, a snapshot marked ``full_reload`` because chunkline
  found nothing trustworthy to compare it with, or a delta that fails verification) a full ``load``.

The snapshot a collection holds is recorded in the collection's metadata (``chunkline_snapshot``; Qdrant
1.16 or newer), written after the points: a sync interrupted before it applies the same delta again next
time, which is harmless.

``target`` is a folder (Qdrant's local mode: no server) or a ``QdrantClient`` you made, such as
``QdrantClient(":memory:")`` or ``QdrantClient(url="http://localhost:6333")`` for a server. Swap ``embed`` and
``DIMENSION`` for your model's; the dimension fixes the vector size when the collection is created.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hashing_embedder sits next to this file

from hashing_embedder import DIMENSION, embed

from chunkline.dataset.publish import DamagedDatasetError, read_dataset, read_manifest, snapshots_after

PAYLOAD_COLUMNS = ["doc_id", "chunk_id", "heading_path", "start_line", "end_line", "start_char", "end_char", "text"]
COLUMNS = ["chunk_uuid", "embed_text", *PAYLOAD_COLUMNS]
SYNC_KEY = "chunkline_snapshot"


def _client(target: str | QdrantClient) -> QdrantClient:
    return target if isinstance(target, QdrantClient) else QdrantClient(path=str(target))


def _close(client: QdrantClient, target: str | QdrantClient) -> None:
    if client is not target:  # local mode locks its folder until the client is closed
        client.close()


def _upsert(client: QdrantClient, collection: str, chunks: list[dict[str, Any]], batch_size: int) -> None:
    if not client.collection_exists(collection):
        vectors_config = models.VectorParams(size=DIMENSION, distance=models.Distance.COSINE)
        client.create_collection(collection, vectors_config=vectors_config)
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        points = [
            models.PointStruct(
                id=chunk["chunk_uuid"], vector=vector.tolist(), payload={name: chunk[name] for name in PAYLOAD_COLUMNS}
            )
            # The vector is of embed_text (context line and text), the payload keeps the verbatim text.
            for chunk, vector in zip(batch, embed(chunk["embed_text"] for chunk in batch))
        ]
        client.upsert(collection, points=points, wait=True)


def _delete(client: QdrantClient, collection: str, ids: list[str]) -> None:
    if ids:
        client.delete(collection, points_selector=models.PointIdsList(points=ids), wait=True)


def _point_ids(client: QdrantClient, collection: str) -> set[str]:
    ids, offset = set(), None
    while True:
        page, offset = client.scroll(collection, limit=1000, offset=offset, with_payload=False, with_vectors=False)
        ids.update(str(point.id) for point in page)
        if offset is None:
            return ids


def _record_sync(client: QdrantClient, collection: str, snapshot: str) -> None:
    client.update_collection(collection, metadata={SYNC_KEY: snapshot})


def synced_snapshot(target: str | QdrantClient, collection: str = "chunks") -> str | None:
    """The snapshot the collection was last synced to (None if it was never loaded)."""
    client = _client(target)
    try:
        if not client.collection_exists(collection):
            return None
        return (client.get_collection(collection).config.metadata or {}).get(SYNC_KEY)
    finally:
        _close(client, target)


def load(
    dataset_url: str,
    target: str | QdrantClient,
    collection: str = "chunks",
    batch_size: int = 256,
    *,
    snapshot: str | None = None,
) -> int:
    """Make ``collection`` at ``target`` hold exactly the chunks of ``snapshot`` (default: the latest) of the
    dataset at ``dataset_url``; returns its number of points."""
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    chunks = read_dataset(dataset_url, "chunks", columns=COLUMNS, snapshot=snapshot).to_pylist()
    client = _client(target)
    try:
        _upsert(client, collection, chunks, batch_size)
        _delete(client, collection, sorted(_point_ids(client, collection) - {chunk["chunk_uuid"] for chunk in chunks}))
        _record_sync(client, collection, snapshot)
        return client.count(collection, exact=True).count
    finally:
        _close(client, target)


def apply_changes(
    dataset_url: str,
    target: str | QdrantClient,
    *,
    snapshot: str | None = None,
    collection: str = "chunks",
    batch_size: int = 256,
) -> int:
    """Apply the delta of ``snapshot`` (default: the latest) to a collection that holds the snapshot before
    it: delete by ``chunk_uuid``, then upsert by ``chunk_uuid``. Returns the number of points afterwards."""
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    deletes = read_dataset(dataset_url, "changes/deletes", snapshot=snapshot).column("chunk_uuid").to_pylist()
    upserts = read_dataset(dataset_url, "changes/upserts", columns=COLUMNS, snapshot=snapshot).to_pylist()
    client = _client(target)
    try:
        if client.collection_exists(collection):
            _delete(client, collection, deletes)
        _upsert(client, collection, upserts, batch_size)
        _record_sync(client, collection, snapshot)
        return client.count(collection, exact=True).count
    finally:
        _close(client, target)


def sync(dataset_url: str, target: str | QdrantClient, collection: str = "chunks") -> tuple[str, list[str]]:
    """Bring the collection up to the dataset's latest snapshot. Returns ``("changes", snapshots)`` with the
    snapshots whose deltas were applied (none if it was up to date), or ``("load", [snapshot])``."""
    client = _client(target)
    try:
        chain = snapshots_after(dataset_url, synced_snapshot(client, collection))
        try:
            for snapshot in chain or []:
                apply_changes(dataset_url, client, snapshot=snapshot, collection=collection)
        except DamagedDatasetError:  # a delta that does not verify: the load below makes the collection exact
            chain = None
        if chain is None:
            latest = read_manifest(dataset_url)["snapshot"]
            load(dataset_url, client, collection, snapshot=latest)
            return "load", [latest]
        return "changes", chain
    finally:
        _close(client, target)


def search(target: str | QdrantClient, query: str, k: int = 5, collection: str = "chunks") -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first: each point's payload with its ``id`` and ``score``."""
    client = _client(target)
    try:
        hits = client.query_points(collection, query=embed([query])[0].tolist(), limit=k, with_payload=True).points
        return [{"id": hit.id, "score": hit.score, **hit.payload} for hit in hits]
    finally:
        _close(client, target)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(
            "usage: python load_qdrant.py DATASET_URL QDRANT_FOLDER [QUERY]\n"
            "syncs the collection to the dataset's latest snapshot, then searches it"
        )
    dataset_url, folder = sys.argv[1], sys.argv[2]
    client = QdrantClient(path=folder)
    try:
        how, snapshots = sync(dataset_url, client)
        count = client.count("chunks", exact=True).count
        print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} chunks in {folder}")
        for hit in search(client, " ".join(sys.argv[3:]) or "getting started", k=3):
            where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
            print(f"{hit['score']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
    finally:
        client.close()
