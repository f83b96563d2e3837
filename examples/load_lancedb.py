"""Load a chunkline dataset into an embedded LanceDB table, keep it in step with the dataset, and search it.

    python examples/load_lancedb.py out/sample lancedb-data "calibrate the tide gauge"

Every column of ``chunks`` is stored, plus a ``vector`` column, and rows are keyed by ``chunk_uuid``. The
dataset is a series of snapshots (one per ``chunkline run``); three functions keep a table in step with it:

- ``load`` writes one snapshot in full (the latest by default): every chunk is upserted (``merge_insert`` on
  ``chunk_uuid``) and rows that are not in the snapshot are deleted, so the table holds exactly that snapshot.
- ``apply_changes`` applies one snapshot's delta, relative to the snapshot before it: the rows whose
  ``chunk_uuid`` is in ``changes/deletes`` are deleted, then the rows of ``changes/upserts`` are embedded and
  upserted. Unchanged chunks are neither embedded nor written again; applying a delta twice changes nothing.
- ``sync`` brings a table up to the latest snapshot: the deltas of every snapshot after the one it holds,
  oldest first, when each was built from the one before it; otherwise (an empty table, snapshots it needs
  already removed by ``output.keep``, a snapshot marked ``full_reload`` because chunkline found nothing
  trustworthy to compare it with, or a delta that fails verification) a full ``load``.

The snapshot a table holds is recorded in the one-row table ``<table>_sync`` of the same database, written
after the rows: a sync interrupted before it applies the same delta again next time, which is harmless.

Embedded LanceDB is a folder on disk; nothing here needs a server or the network. Swap ``embed`` for your
model; its dimension fixes the ``vector`` column's width when the table is created.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hashing_embedder sits next to this file

from hashing_embedder import embed

from chunkline.dataset.publish import DamagedDatasetError, read_dataset, read_manifest, snapshots_after


def _with_vectors(chunks: pa.Table) -> pa.Table:
    vectors = embed(chunks.column("embed_text").to_pylist())  # what the model should see; `text` is stored
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), vectors.shape[1])
    return chunks.append_column("vector", column)


def _upsert(table, rows: pa.Table, *, delete_others: bool = False) -> None:
    merge = table.merge_insert("chunk_uuid").when_matched_update_all().when_not_matched_insert_all()
    if delete_others:
        merge = merge.when_not_matched_by_source_delete()
    merge.execute(rows)


def _open_or_create(db, table_name: str, schema: pa.Schema):
    try:
        return db.open_table(table_name)
    except ValueError:  # what open_table raises for a table that does not exist
        return db.create_table(table_name, schema=schema)


def synced_snapshot(target: str, table_name: str = "chunks") -> str | None:
    """The snapshot the table was last synced to (None if it was never loaded)."""
    db = lancedb.connect(target)
    try:
        db.open_table(table_name)
        return db.open_table(f"{table_name}_sync").to_arrow().column("snapshot")[0].as_py()
    except ValueError:  # a table that does not exist
        return None


def _record_sync(db, table_name: str, snapshot: str) -> None:
    db.create_table(f"{table_name}_sync", pa.table({"snapshot": [snapshot]}), mode="overwrite")


def load(dataset_url: str, target: str, table_name: str = "chunks", *, snapshot: str | None = None) -> int:
    """Make table ``table_name`` of the LanceDB database at ``target`` (a folder) hold exactly the chunks of
    ``snapshot`` (default: the latest) of the dataset at ``dataset_url``; returns its number of rows."""
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    rows = _with_vectors(read_dataset(dataset_url, "chunks", snapshot=snapshot))
    db = lancedb.connect(target)
    table = _open_or_create(db, table_name, rows.schema)
    _upsert(table, rows, delete_others=True)
    _record_sync(db, table_name, snapshot)
    return table.count_rows()


def apply_changes(dataset_url: str, target: str, *, snapshot: str | None = None, table_name: str = "chunks") -> int:
    """Apply the delta of ``snapshot`` (default: the latest) to a table that holds the snapshot before it:
    delete by ``chunk_uuid``, then upsert by ``chunk_uuid``. Returns the number of rows afterwards."""
    snapshot = snapshot or read_manifest(dataset_url)["snapshot"]
    deletes = read_dataset(dataset_url, "changes/deletes", snapshot=snapshot).column("chunk_uuid").to_pylist()
    upserts = _with_vectors(read_dataset(dataset_url, "changes/upserts", snapshot=snapshot))
    db = lancedb.connect(target)
    table = _open_or_create(db, table_name, upserts.schema)
    for start in range(0, len(deletes), 1000):
        # chunk_uuid values are UUIDs: nothing in them needs escaping in the predicate.
        table.delete("chunk_uuid IN ({})".format(", ".join(f"'{uuid}'" for uuid in deletes[start : start + 1000])))
    if upserts.num_rows:
        _upsert(table, upserts)
    _record_sync(db, table_name, snapshot)
    return table.count_rows()


def sync(dataset_url: str, target: str, table_name: str = "chunks") -> tuple[str, list[str]]:
    """Bring the table up to the dataset's latest snapshot. Returns ``("changes", snapshots)`` with the
    snapshots whose deltas were applied (none if it was up to date), or ``("load", [snapshot])``."""
    chain = snapshots_after(dataset_url, synced_snapshot(target, table_name))
    try:
        for snapshot in chain or []:
            apply_changes(dataset_url, target, snapshot=snapshot, table_name=table_name)
    except DamagedDatasetError:  # a delta that does not verify: the load below makes the table exact again
        chain = None
    if chain is None:
        latest = read_manifest(dataset_url)["snapshot"]
        load(dataset_url, target, table_name, snapshot=latest)
        return "load", [latest]
    return "changes", chain


def search(target: str, query: str, k: int = 5, table_name: str = "chunks") -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first (each row without its vector, with ``_distance``)."""
    table = lancedb.connect(target).open_table(table_name)
    # The vectors are L2-normalised, so the cosine distance ranks as the model means.
    hits = table.search(embed([query])[0]).distance_type("cosine").limit(k).to_list()
    return [{name: value for name, value in hit.items() if name != "vector"} for hit in hits]


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(
            "usage: python load_lancedb.py DATASET_URL LANCEDB_FOLDER [QUERY]\n"
            "syncs the table to the dataset's latest snapshot, then searches it"
        )
    dataset_url, folder = sys.argv[1], sys.argv[2]
    how, snapshots = sync(dataset_url, folder)
    count = lancedb.connect(folder).open_table("chunks").count_rows()
    print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} chunks in {folder}")
    for hit in search(folder, " ".join(sys.argv[3:]) or "getting started", k=3):
        where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
        print(f"{hit['_distance']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
