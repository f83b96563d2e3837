"""Small-to-big retrieval with LanceDB: search the chunks, hand the reader the sections around them.

    python examples/small_to_big_lancedb.py out/sample lancedb-data "calibrate the tide gauge"
    python examples/small_to_big_lancedb.py out/sample lancedb-data "calibrate the tide gauge" --embedder hashing --max-section-tokens 1024

Small chunks match a question well; a reader answers better from the whole section they sit in. Two tables
of one LanceDB database hold a chunkline dataset for that:

- ``chunks``: every column of the dataset's ``chunks`` table and a ``vector`` of each chunk's ``embed_text``,
  kept in step with the dataset by ``load_lancedb.sync`` (next to this file);
- ``sections``: every column of the dataset's ``sections`` table, for the snapshot ``chunks`` holds; no
  vectors (sections are fetched by id, never searched). It holds no text: a section's text is the run of
  chunks over its span (chunks cover their document without a gap, so it is exact).

``search_sections`` embeds the query, takes the ``k`` nearest chunks, and for each, nearest first, returns
the largest section around it (its ``section_id`` or one of its ``parent_section_ids``) that holds the whole
chunk and has at most ``max_section_tokens`` tokens (``token_count``, in the dataset's tokenizer), else the
chunk itself. A section or chunk inside one already returned is left out; a section that holds results
returned before takes their place (at the first of them). ``chunkline evaluate --expand section:N``
measures this on your own questions, within a budget of retrieved tokens.

Nothing here needs a server or the network; the embedder is wordllama by default (``embedders.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import lancedb

sys.path.insert(0, str(Path(__file__).resolve().parent))  # load_lancedb.py and embedders.py sit next to this file

from embedders import DEFAULT_EMBEDDER, EMBEDDER_NAMES, Embedder, load_embedder
from load_lancedb import sync, synced_snapshot

from chunkline.dataset.publish import read_dataset

SECTIONS_TABLE = "sections"
#: The sections' own snapshot, recorded beside them as the chunks' is.
SECTIONS_SYNC_TABLE = "sections_sync"


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def load_sections(dataset_url: str, target: str) -> int:
    """Make the ``sections`` table hold the sections of the snapshot the ``chunks`` table holds (written
    again only when that snapshot changed); returns its number of rows."""
    db = lancedb.connect(target)
    snapshot = synced_snapshot(target)
    try:
        current = db.open_table(SECTIONS_SYNC_TABLE).to_arrow().to_pylist()[0]["snapshot"]
    except ValueError:  # never loaded
        current = None
    if current != snapshot:
        db.create_table(SECTIONS_TABLE, read_dataset(dataset_url, "sections", snapshot=snapshot), mode="overwrite")
        db.create_table(SECTIONS_SYNC_TABLE, [{"snapshot": snapshot}], mode="overwrite")
    return db.open_table(SECTIONS_TABLE).count_rows()


def _sections_by_id(db, section_ids: set[str]) -> dict[str, dict[str, Any]]:
    if not section_ids:
        return {}
    table = db.open_table(SECTIONS_TABLE)
    where = "section_id IN ({})".format(", ".join(map(_quoted, sorted(section_ids))))
    rows = table.search().where(where).limit(len(section_ids)).to_list()
    return {row["section_id"]: row for row in rows}


def span_text(db, doc_id: str, start_char: int, end_char: int) -> str:
    """``document[start_char:end_char]``, from the chunks over that span (they overlap, and leave no gap)."""
    where = f"doc_id = {_quoted(doc_id)} AND start_char < {end_char} AND end_char > {start_char}"
    table = db.open_table("chunks")
    rows = table.search().where(where).select(["start_char", "end_char", "text"]).limit(table.count_rows()).to_list()
    parts, covered = [], start_char
    for row in sorted(rows, key=lambda row: (row["start_char"], row["end_char"])):
        if row["end_char"] > covered:
            parts.append(row["text"][covered - row["start_char"] : end_char - row["start_char"]])
            covered = min(row["end_char"], end_char)
    return "".join(parts)


def _largest_section(hit: dict[str, Any], sections: dict[str, dict[str, Any]], max_tokens: int) -> dict | None:
    """The outermost of the hit's sections that holds the whole chunk within ``max_tokens``, else None."""
    for section_id in [*hit["parent_section_ids"], hit["section_id"]]:  # outermost first
        section = sections.get(section_id)
        if (
            section is not None
            and section["token_count"] <= max_tokens
            and section["start_char"] <= hit["start_char"]
            and hit["end_char"] <= section["end_char"]
        ):
            return section
    return None


def search_sections(
    target: str, query: str, k: int = 5, max_section_tokens: int = 512, *, embedder: Embedder | None = None
) -> list[dict[str, Any]]:
    """What a reader is handed for ``query``: for each of the ``k`` nearest chunks, nearest first, the
    largest section around it of at most ``max_section_tokens`` tokens, else the chunk, deduplicated: one
    inside a result already given adds its hit to it, and one that overlaps results already given (a chunk
    that packs the end of one section with the next) is joined with them into one range. Each result:
    ``doc_id``, ``section_id`` (None for a chunk or a joined range), ``heading_path``, ``start_char``,
    ``end_char``, ``start_line``, ``end_line``, ``token_count`` (None for a joined range), ``text`` and
    ``chunk_ids``, the hits it answers."""
    embedder = embedder or load_embedder()
    db = lancedb.connect(target)
    vector = embedder.embed([query])[0]
    hits = db.open_table("chunks").search(vector).distance_type("cosine").limit(k).to_list()
    sections = _sections_by_id(db, {sid for hit in hits for sid in [*hit["parent_section_ids"], hit["section_id"]]})
    results: list[dict[str, Any]] = []
    for hit in hits:
        unit = _largest_section(hit, sections, max_section_tokens) or hit
        doc_id, start, end = hit["doc_id"], unit["start_char"], unit["end_char"]
        same_doc = [result for result in results if result["doc_id"] == doc_id]
        holder = next((r for r in same_doc if r["start_char"] <= start and end <= r["end_char"]), None)
        if holder is not None:  # inside a result already returned
            holder["chunk_ids"].append(hit["chunk_id"])
            continue
        start_line, end_line = unit["start_line"], unit["end_line"]
        inside = [r for r in same_doc if r["start_char"] < end and start < r["end_char"]]
        joined = any(r["start_char"] < start or end < r["end_char"] for r in inside)
        for r in inside:  # results never overlap each other, so one pass joins every one the unit touches
            if r["start_char"] < start:
                start, start_line = r["start_char"], r["start_line"]
            if end < r["end_char"]:
                end, end_line = r["end_char"], r["end_line"]
        result = {
            "doc_id": doc_id,
            "section_id": unit.get("section_id") if unit is not hit and not joined else None,
            "heading_path": list(unit["heading_path"]),
            "start_char": start,
            "end_char": end,
            "start_line": start_line,
            "end_line": end_line,
            "token_count": None if joined else unit["token_count"],
            "text": unit["text"] if unit is hit and not joined else span_text(db, doc_id, start, end),
            "chunk_ids": [chunk_id for r in inside for chunk_id in r["chunk_ids"]] + [hit["chunk_id"]],
        }
        at = results.index(inside[0]) if inside else len(results)
        results = [r for r in results if r not in inside]
        results.insert(at, result)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Search a chunkline dataset's chunks in LanceDB; print sections.")
    parser.add_argument("dataset_url")
    parser.add_argument("folder", help="the LanceDB database folder")
    parser.add_argument("query", nargs="*", help="words to search for (default: getting started)")
    parser.add_argument("--embedder", choices=EMBEDDER_NAMES, default=DEFAULT_EMBEDDER)
    parser.add_argument("--max-section-tokens", type=int, default=512, metavar="N")
    parser.add_argument("-k", type=int, default=5, help="nearest chunks to expand (default 5)")
    args = parser.parse_args()
    model = load_embedder(args.embedder)
    how, snapshots = sync(args.dataset_url, args.folder, embedder=model)
    count = load_sections(args.dataset_url, args.folder)
    print(f"{how}: {', '.join(snapshots) or 'already up to date'}; {count} sections in {args.folder}")
    query = " ".join(args.query) or "getting started"
    for result in search_sections(args.folder, query, args.k, args.max_section_tokens, embedder=model):
        kind = result["section_id"] or "chunk"
        where = f"{result['doc_id']}:{result['start_line']}-{result['end_line']}"
        tokens = "joined" if result["token_count"] is None else f"{result['token_count']} tokens"
        print(f"{kind}  {where}  {tokens}  {' > '.join(result['heading_path'])}")
