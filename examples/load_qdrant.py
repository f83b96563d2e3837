"""Load a chunkline dataset into Qdrant, keep it in step with the dataset, and search it.

    python examples/load_qdrant.py out/sample qdrant-data "calibrate the tide gauge"
    python examples/load_qdrant.py out/sample qdrant-data "calibrate the tide gauge" --embedder hashing

Each chunk is one point: its id is ``chunk_uuid`` (Qdrant ids must be integers or UUIDs), its payload the
fields a retriever shows or filters on. The dataset is a series of snapshots (one per ``chunkline run``);
three functions keep a collection in step with it:

- ``load`` writes one snapshot in full (the latest by default): every chunk is embedded and upserted and
  points that are not in the snapshot are deleted, so the collection holds exactly that snapshot.
- ``apply_changes`` applies one snapshot's delta, relative to the snapshot before it: the points whose id
  is in ``changes/deletes`` are deleted, then the rows of ``changes/upserts`` are written. Only those whose
  ``embedding_changed`` is true are embedded and upserted; the others (a front-matter edit moves every
  offset of a document, not its ``embed_text``) get their payload overwritten and keep their vector.
  Unchanged chunks are neither embedded nor written again; applying a delta twice changes nothing.
- ``sync`` brings a collection up to the latest snapshot: the deltas of every snapshot after the one it
  holds, oldest first, when each was built from the one before it; otherwise (an empty collection,
  snapshots it needs already removed by ``output.keep``, a snapshot marked ``full_reload`` because chunkline
  found nothing trustworthy to compare it with, a delta that fails verification, or a collection embedded
  by another model) a full ``load``.

The snapshot a collection holds and the embedder that made its vectors are recorded in the collection's
metadata (``chunkline_snapshot``, ``chunkline_embedder``; Qdrant 1.16 or newer), written after the points: a
sync interrupted before it applies the same delta again next time, which is harmless.

``target`` is a folder (Qdrant's local mode: no server) or a ``QdrantClient`` you made, such as
``QdrantClient(":memory:")`` or ``QdrantClient(url="http://localhost:6333")`` for a server. The embedder is
wordllama by default (see ``embedders.py``); pass ``embedder=`` your own model. Its dimension fixes the vector
size when the collection is created, and ``load`` makes a collection whose vectors came from another
embedder again from scratch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

sys.path.insert(0, str(Path(__file__).resolve().parent))  # embedders.py sits next to this file

from embedders import DEFAULT_EMBEDDER, EMBEDDER_NAMES, Embedder, dimension_of, load_embedder

from chunkline.dataset.publish import DamagedDatasetError, read_dataset, read_manifest, snapshots_after

PAYLOAD_COLUMNS = ["doc_id", "chunk_id", "heading_path", "start_line", "end_line", "start_char", "end_char", "text"]
COLUMNS = ["chunk_uuid", "embed_text", *PAYLOAD_COLUMNS]
SYNC_KEY = "chunkline_snapshot"
EMBEDDER_KEY = "chunkline_embedder"


def _client(target: str | QdrantClient) -> QdrantClient:
    return target if isinstance(target, QdrantClient) else QdrantClient(path=str(target))


def _close(client: QdrantClient, target: str | QdrantClient) -> None:
    if client is not target:  # local mode locks its folder until the client is closed
        client.close()


def _payload(chunk: dict[str, Any]) -> dict[str, Any]:
    return {name: chunk[name] for name in PAYLOAD_COLUMNS}


def _create_if_missing(client: QdrantClient, collection: str, embedder: Embedder) -> None:
    if not client.collection_exists(collection):
        vectors_config = models.VectorParams(size=dimension_of(embedder), distance=models.Distance.COSINE)
        client.create_collection(collection, vectors_config=vectors_config)


def _upsert(
    client: QdrantClient, collection: str, chunks: list[dict[str, Any]], batch_size: int, embedder: Embedder
) -> None:
    _create_if_missing(client, collection, embedder)
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        points = [
            models.PointStruct(id=chunk["chunk_uuid"], vector=vector.tolist(), payload=_payload(chunk))
            # The vector is of embed_text (context line and text), the payload keeps the verbatim text.
            for chunk, vector in zip(batch, embedder.embed([chunk["embed_text"] for chunk in batch]))
        ]
        client.upsert(collection, points=points, wait=True)


def _overwrite_payloads(client: QdrantClient, collection: str, chunks: list[dict[str, Any]], batch_size: int) -> None:
    """Each chunk's point gets the chunk's payload, replacing the whole old one; its vector is left alone."""
    for start in range(0, len(chunks), batch_size):
        operations = [
            models.OverwritePayloadOperation(
                overwrite_payload=models.SetPayload(payload=_payload(chunk), points=[chunk["chunk_uuid"]])
            )
            for chunk in chunks[start : start + batch_size]
        ]
        client.batch_update_points(collection, update_operations=operations, wait=True)


def _existing_ids(client: QdrantClient, collection: str, ids: list[str], batch_size: int) -> set[str]:
    if not ids or not client.collection_exists(collection):
        return set()
    found: set[str] = set()
    for start in range(0, len(ids), batch_size):
        records = client.retrieve(collection, ids[start : start + batch_size], with_payload=False, with_vectors=False)
        found.update(str(record.id) for record in records)
    return found


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


def _record_sync(client: QdrantClient, collection: str, snapshot: str, embedder: Embedder) -> None:
    client.update_collection(collection, metadata={SYNC_KEY: snapshot, EMBEDDER_KEY: embedder.name})


def _sync_metadata(client: QdrantClient, collection: str) -> dict[str, Any]:
    if not client.collection_exists(collection):
        return {}
    return client.get_collection(collection).config.metadata or {}


def synced_snapshot(target: str | QdrantClient, collection: str = "chunks") -> str | None:
    """The snapshot the collection was last synced to (None if it was never loaded)."""
    client = _client(target)
    try:
        return _sync_metadata(client, collection).get(SYNC_KEY)
    finally:
        _close(client, target)


def synced_embedder(target: str | QdrantClient, collection: str = "chunks") -> str | None:
    """The name of the embedder that made the collection's vectors (None if never loaded, or by an older loader)."""
    client = _client(target)
    try:
        return _sync_metadata(client, collection).get(EMBEDDER_KEY)
    finally:
        _close(client, target)


def load(
    dataset_url: str,
    target: str | QdrantClient,
    collection: str = "chunks",
    batch_size: int = 256,
    *,
    snapshot: str | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Make ``collection`` at ``target`` hold exactly the chunks of ``snapshot`` (default: the latest) of the
    dataset at ``dataset_url``, every one embedded; returns its number of points."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    chunks = read_dataset(dataset_url, "chunks", columns=COLUMNS, snapshot=snapshot).to_pylist()
    client = _client(target)
    try:
        if (
            client.collection_exists(collection)
            and _sync_metadata(client, collection).get(EMBEDDER_KEY) != embedder.name
        ):
            client.delete_collection(collection)  # vectors of another model (or an unknown one): start again
        _upsert(client, collection, chunks, batch_size, embedder)
        _delete(client, collection, sorted(_point_ids(client, collection) - {chunk["chunk_uuid"] for chunk in chunks}))
        _record_sync(client, collection, snapshot, embedder)
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
    embedder: Embedder | None = None,
) -> int:
    """Apply the delta of ``snapshot`` (default: the latest) to a collection that holds the snapshot before
    it: delete by ``chunk_uuid``, then upsert by ``chunk_uuid``, embedding only the rows whose
    ``embedding_changed`` is true (or that the collection lacks). Returns the number of points afterwards."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    deletes = read_dataset(dataset_url, "changes/deletes", snapshot=snapshot).column("chunk_uuid").to_pylist()
    columns = [*COLUMNS, "embedding_changed"]
    upserts = read_dataset(dataset_url, "changes/upserts", columns=columns, snapshot=snapshot).to_pylist()
    client = _client(target)
    try:
        if client.collection_exists(collection):
            _delete(client, collection, deletes)
        # A row whose embed_text is what it was keeps its vector, if the collection has the point.
        unchanged = [chunk["chunk_uuid"] for chunk in upserts if not chunk["embedding_changed"]]
        stored = _existing_ids(client, collection, unchanged, batch_size)
        _upsert(
            client, collection, [chunk for chunk in upserts if chunk["chunk_uuid"] not in stored], batch_size, embedder
        )
        _overwrite_payloads(
            client, collection, [chunk for chunk in upserts if chunk["chunk_uuid"] in stored], batch_size
        )
        _record_sync(client, collection, snapshot, embedder)
        return client.count(collection, exact=True).count
    finally:
        _close(client, target)


def sync(
    dataset_url: str, target: str | QdrantClient, collection: str = "chunks", *, embedder: Embedder | None = None
) -> tuple[str, list[str]]:
    """Bring the collection up to the dataset's latest snapshot. Returns ``("changes", snapshots)`` with the
    snapshots whose deltas were applied (none if it was up to date), or ``("load", [snapshot])``."""
    embedder = embedder or load_embedder()
    client = _client(target)
    try:
        metadata = _sync_metadata(client, collection)
        same_model = metadata.get(EMBEDDER_KEY) == embedder.name
        chain = snapshots_after(dataset_url, metadata.get(SYNC_KEY)) if same_model else None
        try:
            for snapshot in chain or []:
                apply_changes(dataset_url, client, snapshot=snapshot, collection=collection, embedder=embedder)
        except DamagedDatasetError:  # a delta that does not verify: the load below makes the collection exact
            chain = None
        if chain is None:
            latest = read_manifest(dataset_url)["snapshot"]
            load(dataset_url, client, collection, snapshot=latest, embedder=embedder)
            return "load", [latest]
        return "changes", chain
    finally:
        _close(client, target)


def search(
    target: str | QdrantClient,
    query: str,
    k: int = 5,
    collection: str = "chunks",
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first: each point's payload with its ``id`` and ``score``.
    ``embedder`` must be the one the collection was loaded with."""
    embedder = embedder or load_embedder()
    client = _client(target)
    try:
        vector = embedder.embed([query])[0].tolist()
        hits = client.query_points(collection, query=vector, limit=k, with_payload=True).points
        return [{"id": hit.id, "score": hit.score, **hit.payload} for hit in hits]
    finally:
        _close(client, target)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Sync a Qdrant collection (local mode) to a chunkline dataset's latest snapshot, then search it."
    )
    parser.add_argument("dataset_url")
    parser.add_argument("folder", help="the folder of Qdrant's local mode")
    parser.add_argument("query", nargs="*", help="words to search for (default: getting started)")
    parser.add_argument("--embedder", choices=EMBEDDER_NAMES, default=DEFAULT_EMBEDDER)
    args = parser.parse_args()
    model = load_embedder(args.embedder)
    client = QdrantClient(path=args.folder)
    try:
        how, snapshots = sync(args.dataset_url, client, embedder=model)
        count = client.count("chunks", exact=True).count
        print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} chunks in {args.folder}")
        for hit in search(client, " ".join(args.query) or "getting started", k=3, embedder=model):
            where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
            print(f"{hit['score']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
    finally:
        client.close()
