"""Load a chunkline dataset into an embedded LanceDB table, keep it in step with the dataset, and search it.

    python examples/load_lancedb.py out/sample lancedb-data "calibrate the tide gauge"
    python examples/load_lancedb.py out/sample lancedb-data "calibrate the tide gauge" --embedder hashing

Every column of ``chunks`` is stored, plus a ``vector`` column, and rows are keyed by ``chunk_uuid``. The
dataset is a series of snapshots (one per ``chunkline run``); three functions keep a table in step with it:

- ``load`` writes one snapshot in full (the latest by default): every chunk is embedded and upserted
  (``merge_insert`` on ``chunk_uuid``) and rows that are not in the snapshot are deleted, so the table holds
  exactly that snapshot.
- ``apply_changes`` applies one snapshot's delta, relative to the snapshot before it: the rows whose
  ``chunk_uuid`` is in ``changes/deletes`` are deleted, then the rows of ``changes/upserts`` are written.
  Only those whose ``embedding_changed`` is true are embedded; the others (a front-matter edit moves every
  offset of a document, not its ``embed_text``) have their columns rewritten and keep their stored vector.
  Unchanged chunks are neither embedded nor written again; applying a delta twice changes nothing.
- ``sync`` brings a table up to the latest snapshot: the deltas of every snapshot after the one it holds,
  oldest first, when each was built from the one before it; otherwise (an empty table, snapshots it needs
  already removed by ``output.keep``, a snapshot marked ``full_reload`` because chunkline found nothing
  trustworthy to compare it with, a delta that fails verification, or a table embedded by another model)
  a full ``load``.

The snapshot a table holds and the embedder that made its vectors are recorded in the one-row table
``<table>_sync`` of the same database, written after the rows: a sync interrupted before it applies the same
delta again next time, which is harmless.

Embedded LanceDB is a folder on disk; nothing here needs a server or the network. The embedder is wordllama
by default (see ``embedders.py``); pass ``embedder=`` your own model. A table whose vectors came from another
embedder is made again from scratch by ``load``, since its vectors' width and meaning differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))  # embedders.py sits next to this file

from embedders import DEFAULT_EMBEDDER, EMBEDDER_NAMES, Embedder, dimension_of, load_embedder

from chunkline.dataset.publish import DamagedDatasetError, read_dataset, read_manifest, snapshots_after

#: Ids per ``IN (...)`` predicate.
_IDS_PER_QUERY = 1000


def _with_vectors(chunks: pa.Table, embedder: Embedder) -> pa.Table:
    vectors = embedder.embed(chunks.column("embed_text").to_pylist())  # what the model should see; `text` is stored
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), dimension_of(embedder))
    return chunks.append_column("vector", column)


def _id_predicate(ids: list[str]) -> str:
    # chunk_uuid values are UUIDs: nothing in them needs escaping in the predicate.
    return "chunk_uuid IN ({})".format(", ".join(f"'{uuid}'" for uuid in ids))


def _stored_ids(table, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), _IDS_PER_QUERY):
        batch = ids[start : start + _IDS_PER_QUERY]
        rows = table.search().where(_id_predicate(batch)).select(["chunk_uuid"]).limit(len(batch)).to_arrow()
        found.update(rows.column("chunk_uuid").to_pylist())
    return found


def _upsert(table, rows: pa.Table, *, delete_others: bool = False) -> None:
    merge = table.merge_insert("chunk_uuid").when_matched_update_all().when_not_matched_insert_all()
    if delete_others:
        merge = merge.when_not_matched_by_source_delete()
    merge.execute(rows)


def _open_or_create(db, table_name: str, chunks_schema: pa.Schema, embedder: Embedder):
    try:
        return db.open_table(table_name)
    except ValueError:  # what open_table raises for a table that does not exist
        vector = pa.field("vector", pa.list_(pa.float32(), dimension_of(embedder)))
        return db.create_table(table_name, schema=chunks_schema.append(vector))


def _sync_record(target: str, table_name: str) -> dict[str, Any] | None:
    db = lancedb.connect(target)
    try:
        db.open_table(table_name)
        return db.open_table(f"{table_name}_sync").to_arrow().to_pylist()[0]
    except ValueError:  # a table that does not exist
        return None


def synced_snapshot(target: str, table_name: str = "chunks") -> str | None:
    """The snapshot the table was last synced to (None if it was never loaded)."""
    return (_sync_record(target, table_name) or {}).get("snapshot")


def synced_embedder(target: str, table_name: str = "chunks") -> str | None:
    """The name of the embedder that made the table's vectors (None if never loaded, or by an older loader)."""
    return (_sync_record(target, table_name) or {}).get("embedder")


def _record_sync(db, table_name: str, snapshot: str, embedder: Embedder) -> None:
    record = pa.table({"snapshot": [snapshot], "embedder": [embedder.name]})
    db.create_table(f"{table_name}_sync", record, mode="overwrite")


def load(
    dataset_url: str,
    target: str,
    table_name: str = "chunks",
    *,
    snapshot: str | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Make table ``table_name`` of the LanceDB database at ``target`` (a folder) hold exactly the chunks of
    ``snapshot`` (default: the latest) of the dataset at ``dataset_url``, every one embedded; returns its
    number of rows."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    chunks = read_dataset(dataset_url, "chunks", snapshot=snapshot)
    rows = _with_vectors(chunks, embedder)
    db = lancedb.connect(target)
    if synced_embedder(target, table_name) != embedder.name:
        db.drop_table(table_name, ignore_missing=True)  # vectors of another model (or an unknown one): start again
    table = _open_or_create(db, table_name, chunks.schema, embedder)
    _upsert(table, rows, delete_others=True)
    _record_sync(db, table_name, snapshot, embedder)
    return table.count_rows()


def apply_changes(
    dataset_url: str,
    target: str,
    *,
    snapshot: str | None = None,
    table_name: str = "chunks",
    embedder: Embedder | None = None,
) -> int:
    """Apply the delta of ``snapshot`` (default: the latest) to a table that holds the snapshot before it:
    delete by ``chunk_uuid``, then upsert by ``chunk_uuid``, embedding only the rows whose
    ``embedding_changed`` is true (or that the table lacks). Returns the number of rows afterwards."""
    embedder = embedder or load_embedder()
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    deletes = read_dataset(dataset_url, "changes/deletes", snapshot=snapshot).column("chunk_uuid").to_pylist()
    upserts = read_dataset(dataset_url, "changes/upserts", snapshot=snapshot)
    changed = upserts.column("embedding_changed").to_pylist()
    upserts = upserts.drop_columns(["embedding_changed"])
    db = lancedb.connect(target)
    table = _open_or_create(db, table_name, upserts.schema, embedder)
    for start in range(0, len(deletes), _IDS_PER_QUERY):
        table.delete(_id_predicate(deletes[start : start + _IDS_PER_QUERY]))
    # A row whose embed_text is what it was keeps its vector, if the table has it; every other row is embedded.
    uuids = upserts.column("chunk_uuid").to_pylist()
    stored = _stored_ids(table, [uuid for uuid, embed in zip(uuids, changed) if not embed])
    keep_vector = pa.array([uuid in stored for uuid in uuids], pa.bool_())
    to_embed = upserts.filter(pc.invert(keep_vector))
    if to_embed.num_rows:
        _upsert(table, _with_vectors(to_embed, embedder))
    if stored:
        # A merge of every column but the vector: the stored vector stays as it is.
        table.merge_insert("chunk_uuid").when_matched_update_all().execute(upserts.filter(keep_vector))
    _record_sync(db, table_name, snapshot, embedder)
    return table.count_rows()


def sync(
    dataset_url: str, target: str, table_name: str = "chunks", *, embedder: Embedder | None = None
) -> tuple[str, list[str]]:
    """Bring the table up to the dataset's latest snapshot. Returns ``("changes", snapshots)`` with the
    snapshots whose deltas were applied (none if it was up to date), or ``("load", [snapshot])``."""
    embedder = embedder or load_embedder()
    same_model = synced_embedder(target, table_name) == embedder.name
    chain = snapshots_after(dataset_url, synced_snapshot(target, table_name)) if same_model else None
    try:
        for snapshot in chain or []:
            apply_changes(dataset_url, target, snapshot=snapshot, table_name=table_name, embedder=embedder)
    except DamagedDatasetError:  # a delta that does not verify: the load below makes the table exact again
        chain = None
    if chain is None:
        latest = read_manifest(dataset_url)["snapshot"]
        load(dataset_url, target, table_name, snapshot=latest, embedder=embedder)
        return "load", [latest]
    return "changes", chain


def search(
    target: str, query: str, k: int = 5, table_name: str = "chunks", *, embedder: Embedder | None = None
) -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first (each row without its vector, with ``_distance``).
    ``embedder`` must be the one the table was loaded with."""
    embedder = embedder or load_embedder()
    table = lancedb.connect(target).open_table(table_name)
    # The vectors are L2-normalised, so the cosine distance ranks as the model means.
    hits = table.search(embedder.embed([query])[0]).distance_type("cosine").limit(k).to_list()
    return [{name: value for name, value in hit.items() if name != "vector"} for hit in hits]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Sync a LanceDB table to a chunkline dataset's latest snapshot, then search it."
    )
    parser.add_argument("dataset_url")
    parser.add_argument("folder", help="the LanceDB database folder")
    parser.add_argument("query", nargs="*", help="words to search for (default: getting started)")
    parser.add_argument("--embedder", choices=EMBEDDER_NAMES, default=DEFAULT_EMBEDDER)
    args = parser.parse_args()
    model = load_embedder(args.embedder)
    how, snapshots = sync(args.dataset_url, args.folder, embedder=model)
    count = lancedb.connect(args.folder).open_table("chunks").count_rows()
    print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} chunks in {args.folder}")
    for hit in search(args.folder, " ".join(args.query) or "getting started", k=3, embedder=model):
        where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
        print(f"{hit['_distance']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
