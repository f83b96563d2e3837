"""Load a chunkline dataset into Chroma (a local persistent client), keep it in step with the dataset, and
search it.

    python examples/load_chroma.py out/sample chroma-data "calibrate the tide gauge"
    python examples/load_chroma.py out/sample chroma-data "calibrate the tide gauge" --embedder hashing

Each chunk is one record: its id is ``chunk_uuid``, its document the chunk's verbatim ``text``, its embedding
that of ``embed_text``, and its metadata the fields a retriever shows or filters on (``METADATA_COLUMNS``).
Chroma rejects an empty list as a metadata value, and a chunk before the first heading has an empty
``heading_path``: such a chunk has no ``heading_path`` key (it is written as None, which also removes the
list an earlier version of the chunk had, since Chroma merges metadata on upsert), and ``search`` gives it
back as ``[]``.

The dataset is a series of snapshots (one per ``chunkline run``); three functions keep a collection in step
with it, as in ``load_lancedb.py`` and ``load_qdrant.py``:

- ``load`` writes one snapshot in full (the latest by default): every chunk is embedded and upserted and
  records that are not in the snapshot are deleted.
- ``apply_changes`` applies one snapshot's delta: the records whose id is in ``changes/deletes`` are
  deleted, then the rows of ``changes/upserts`` are written. Only those whose ``embedding_changed`` is true
  are embedded; the others are upserted with the embedding the collection already holds for them, read back.
  (Chroma's ``update`` with documents and no embeddings would embed the documents with the collection's
  embedding function, so the loader always passes embeddings.)
- ``sync`` brings a collection up to the latest snapshot, by deltas when it can, else by a full ``load``.

The snapshot a collection holds and the embedder that made its vectors are in the collection's metadata
(``chunkline_snapshot``, ``chunkline_embedder``), written after the records.

Chroma never embeds anything itself here: collections are opened with ``embedding_function=None`` (its
default one would download a model) and every write and query passes embeddings. Anonymous telemetry is off.
``target`` is a folder (``chromadb.PersistentClient``) or a Chroma client you made. The embedder is wordllama
by default (see ``embedders.py``); pass ``embedder=`` your own model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import chromadb
from chromadb.config import Settings
from chromadb.errors import NotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # embedders.py sits next to this file

from embedders import DEFAULT_EMBEDDER, EMBEDDER_NAMES, Embedder, load_embedder

from chunkline.dataset.publish import DamagedDatasetError, read_dataset, read_manifest, snapshots_after

METADATA_COLUMNS = ["doc_id", "chunk_id", "heading_path", "start_line", "end_line", "start_char", "end_char"]
COLUMNS = ["chunk_uuid", "embed_text", "text", *METADATA_COLUMNS]
SYNC_KEY = "chunkline_snapshot"
EMBEDDER_KEY = "chunkline_embedder"


def client_for(folder: str | Path):
    """A persistent Chroma client on ``folder`` that sends no telemetry."""
    return chromadb.PersistentClient(path=str(folder), settings=Settings(anonymized_telemetry=False))


def _client(target):
    return client_for(target) if isinstance(target, (str, Path)) else target


def _collection(client, name: str, *, create: bool = False):
    """The collection, never with an embedding function (None if it does not exist and ``create`` is false)."""
    if create:
        return client.get_or_create_collection(
            name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
    try:
        return client.get_collection(name, embedding_function=None)
    except NotFoundError:
        return None


def _metadata(chunk: dict[str, Any]) -> dict[str, Any]:
    metadata = {name: chunk[name] for name in METADATA_COLUMNS}
    metadata["heading_path"] = chunk["heading_path"] or None  # Chroma refuses []; None drops the key
    return metadata


def _write(collection, chunks: list[dict[str, Any]], vectors, batch_size: int) -> None:
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        collection.upsert(
            ids=[chunk["chunk_uuid"] for chunk in batch],
            embeddings=[list(map(float, vector)) for vector in vectors[start : start + batch_size]],
            documents=[chunk["text"] for chunk in batch],
            metadatas=[_metadata(chunk) for chunk in batch],
        )


def _embed_and_write(collection, chunks: list[dict[str, Any]], batch_size: int, embedder: Embedder) -> None:
    for start in range(0, len(chunks), batch_size):
        batch = chunks[start : start + batch_size]
        _write(collection, batch, embedder.embed([chunk["embed_text"] for chunk in batch]), batch_size)


def _stored_embeddings(collection, ids: list[str], batch_size: int) -> dict[str, list[float]]:
    stored: dict[str, list[float]] = {}
    for start in range(0, len(ids), batch_size):
        found = collection.get(ids=ids[start : start + batch_size], include=["embeddings"])
        stored.update(zip(found["ids"], found["embeddings"]))
    return stored


def _all_ids(collection, batch_size: int = 1000) -> set[str]:
    ids: set[str] = set()
    while True:
        page = collection.get(include=[], limit=batch_size, offset=len(ids))["ids"]
        ids.update(page)
        if len(page) < batch_size:
            return ids


def _delete(collection, ids: list[str], batch_size: int) -> None:
    for start in range(0, len(ids), batch_size):
        collection.delete(ids=ids[start : start + batch_size])


def _record_sync(collection, snapshot: str, embedder: Embedder) -> None:
    collection.modify(metadata={SYNC_KEY: snapshot, EMBEDDER_KEY: embedder.name})


def _sync_metadata(client, name: str) -> dict[str, Any]:
    collection = _collection(client, name)
    return dict((collection.metadata or {}) if collection is not None else {})


def synced_snapshot(target, collection: str = "chunks") -> str | None:
    """The snapshot the collection was last synced to (None if it was never loaded)."""
    return _sync_metadata(_client(target), collection).get(SYNC_KEY)


def synced_embedder(target, collection: str = "chunks") -> str | None:
    """The name of the embedder that made the collection's vectors (None if it was never loaded)."""
    return _sync_metadata(_client(target), collection).get(EMBEDDER_KEY)


def load(
    dataset_url: str,
    target,
    collection: str = "chunks",
    batch_size: int = 256,
    *,
    snapshot: str | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Make ``collection`` at ``target`` hold exactly the chunks of ``snapshot`` (default: the latest) of the
    dataset at ``dataset_url``, every one embedded; returns its number of records."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    chunks = read_dataset(dataset_url, "chunks", columns=COLUMNS, snapshot=snapshot).to_pylist()
    client = _client(target)
    if _collection(client, collection) is not None and synced_embedder(client, collection) != embedder.name:
        client.delete_collection(collection)  # vectors of another model (or an unknown one): start again
    records = _collection(client, collection, create=True)
    _embed_and_write(records, chunks, batch_size, embedder)
    _delete(records, sorted(_all_ids(records) - {chunk["chunk_uuid"] for chunk in chunks}), batch_size)
    _record_sync(records, snapshot, embedder)
    return records.count()


def apply_changes(
    dataset_url: str,
    target,
    *,
    snapshot: str | None = None,
    collection: str = "chunks",
    batch_size: int = 256,
    embedder: Embedder | None = None,
) -> int:
    """Apply the delta of ``snapshot`` (default: the latest) to a collection that holds the snapshot before
    it: delete by ``chunk_uuid``, then upsert by ``chunk_uuid``, embedding only the rows whose
    ``embedding_changed`` is true (or that the collection lacks). Returns the number of records afterwards."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    deletes = read_dataset(dataset_url, "changes/deletes", snapshot=snapshot).column("chunk_uuid").to_pylist()
    columns = [*COLUMNS, "embedding_changed"]
    upserts = read_dataset(dataset_url, "changes/upserts", columns=columns, snapshot=snapshot).to_pylist()
    records = _collection(_client(target), collection, create=True)
    _delete(records, deletes, batch_size)
    # A row whose embed_text is what it was gets the embedding the collection holds for it, if it has one.
    unchanged = [chunk["chunk_uuid"] for chunk in upserts if not chunk["embedding_changed"]]
    stored = _stored_embeddings(records, unchanged, batch_size)
    _embed_and_write(records, [chunk for chunk in upserts if chunk["chunk_uuid"] not in stored], batch_size, embedder)
    kept = [chunk for chunk in upserts if chunk["chunk_uuid"] in stored]
    _write(records, kept, [stored[chunk["chunk_uuid"]] for chunk in kept], batch_size)
    _record_sync(records, snapshot, embedder)
    return records.count()


def sync(
    dataset_url: str, target, collection: str = "chunks", *, embedder: Embedder | None = None
) -> tuple[str, list[str]]:
    """Bring the collection up to the dataset's latest snapshot. Returns ``("changes", snapshots)`` with the
    snapshots whose deltas were applied (none if it was up to date), or ``("load", [snapshot])``."""
    embedder = embedder or load_embedder()
    client = _client(target)
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


def search(
    target, query: str, k: int = 5, collection: str = "chunks", *, embedder: Embedder | None = None
) -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first: each record's metadata with its ``id``, ``text``
    (the document) and cosine ``distance``. ``embedder`` must be the one the collection was loaded with."""
    embedder = embedder or load_embedder()
    records = _collection(_client(target), collection)
    vector = [float(value) for value in embedder.embed([query])[0]]
    found = records.query(query_embeddings=[vector], n_results=k, include=["metadatas", "documents", "distances"])
    hits = []
    for uuid, metadata, text, distance in zip(
        found["ids"][0], found["metadatas"][0], found["documents"][0], found["distances"][0]
    ):
        hits.append(
            {
                "id": uuid,
                "distance": distance,
                **metadata,
                "heading_path": metadata.get("heading_path") or [],
                "text": text,
            }
        )
    return hits


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Sync a Chroma collection (local persistent client) to a chunkline dataset's latest snapshot, then search it."
    )
    parser.add_argument("dataset_url")
    parser.add_argument("folder", help="the folder of Chroma's persistent client")
    parser.add_argument("query", nargs="*", help="words to search for (default: getting started)")
    parser.add_argument("--embedder", choices=EMBEDDER_NAMES, default=DEFAULT_EMBEDDER)
    args = parser.parse_args()
    model = load_embedder(args.embedder)
    client = client_for(args.folder)
    how, snapshots = sync(args.dataset_url, client, embedder=model)
    count = client.get_collection("chunks", embedding_function=None).count()
    print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} chunks in {args.folder}")
    for hit in search(client, " ".join(args.query) or "getting started", k=3, embedder=model):
        where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
        print(f"{hit['distance']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
