"""Load a chunkline dataset into an embedded LanceDB table, and search it.

    python examples/load_lancedb.py out/sample lancedb-data "calibrate the tide gauge"

The chunks are read through the dataset's manifest (``read_dataset``), so a rebuild in progress is never
loaded. Every column of ``chunks`` is stored, plus a ``vector`` column, and rows are upserted on
``chunk_uuid`` (``merge_insert``): loading the same dataset again leaves the table as it was, and loading a
rebuilt dataset overwrites the chunks it rebuilt. Chunks that are gone from the dataset are not removed;
the ``changes/deletes`` table of a rebuilt dataset lists their ``chunk_uuid``.

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

from chunkline.pipelines.publish import read_dataset
from hashing_embedder import embed


def load(dataset_url: str, target: str, table_name: str = "chunks") -> int:
    """Upsert the chunks of the dataset at ``dataset_url`` into table ``table_name`` of the LanceDB database at
    ``target`` (a folder); returns the number of rows in the table afterwards."""
    chunks = read_dataset(dataset_url, "chunks")
    vectors = embed(chunks.column("text").to_pylist())
    vector_column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), vectors.shape[1])
    rows = chunks.append_column("vector", vector_column)
    table = lancedb.connect(target).create_table(table_name, schema=rows.schema, exist_ok=True)
    table.merge_insert("chunk_uuid").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    return table.count_rows()


def search(target: str, query: str, k: int = 5, table_name: str = "chunks") -> list[dict[str, Any]]:
    """The ``k`` chunks nearest to ``query``, nearest first (each row without its vector, with ``_distance``)."""
    table = lancedb.connect(target).open_table(table_name)
    # The vectors are L2-normalised, so the cosine distance ranks as the model means.
    hits = table.search(embed([query])[0]).distance_type("cosine").limit(k).to_list()
    return [{name: value for name, value in hit.items() if name != "vector"} for hit in hits]


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python load_lancedb.py DATASET_URL LANCEDB_FOLDER [QUERY]")
    dataset_url, folder = sys.argv[1], sys.argv[2]
    print(f"{load(dataset_url, folder)} chunks in {folder}")
    for hit in search(folder, " ".join(sys.argv[3:]) or "getting started", k=3):
        where = f"{hit['doc_id']}:{hit['start_line']}-{hit['end_line']}"
        print(f"{hit['_distance']:.3f}  {where}  {' > '.join(hit['heading_path'])}")
