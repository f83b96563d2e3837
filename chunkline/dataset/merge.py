"""Merging a shard's rows and diffing them with the previous snapshot's, as plain functions over Arrow tables.

Rows go to a shard picked by a stable hash of their ``doc_id`` (:func:`shard_of`). A shard's rows are sorted
by their table's key with the copies a retried bundle spilled dropped (:func:`sorted_unique`); compared with
the previous snapshot's they give the shard's ``changes/`` tables (:func:`chunk_changes`,
:func:`documents_changes`). An incremental run's plan for a shard (:class:`ShardPlan`, written by
:mod:`chunkline.dataset.rebuild` to :func:`~chunkline.dataset.layout.keep_plan_path`) names the documents whose rows carry over.
No Beam here: the sink (:mod:`chunkline.transforms.write`) calls these from its DoFns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from chunkline.dataset.layout import keep_plan_path
from chunkline.dataset.storage import read_file_bytes
from chunkline.schemas import EMBEDDING_CHANGED_FIELD, TABLE_SCHEMAS

__all__ = [
    "PreviousSnapshot",
    "ShardPlan",
    "chunk_changes",
    "documents_changes",
    "embedding_changed",
    "read_shard_plan",
    "same_rows",
    "shard_of",
    "sorted_unique",
    "with_modified_times",
]


@dataclass(frozen=True)
class PreviousSnapshot:
    """The published snapshot a run compares itself with (and, incrementally, carries rows over from)."""

    root_url: str
    """The output URL; ``parts`` are relative to it."""
    parts: dict[str, tuple[str, ...]]
    """Table -> its part files, as the previous manifest names them."""
    shards: int
    """The previous run's ``output.shards``: with the same count, shard N's rows are in part N alone."""
    snapshot: str = ""
    """The previous snapshot's id."""


def shard_of(doc_id: str, shards: int) -> int:
    """The shard of a document: a stable hash of its ``doc_id`` (the same on every machine and run)."""
    digest = hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass
class ShardPlan:
    """What an incremental run carries over in one shard (read from ``keep-<shard>.json``)."""

    modified_times: dict[str, int | None] = field(default_factory=dict)
    """doc_id -> its file's modification time now (microseconds since the epoch), for every carried document."""
    rows_untouched: bool = False
    """No document of the shard was added, changed or deleted: chunks and errors parts can be copied."""
    documents_untouched: bool = False
    """...and no carried document's modification time moved: the documents part can be copied too."""


def read_shard_plan(fs, staging_root: str, shard: int, secrets: tuple[str, ...] = ()) -> ShardPlan:
    """The plan an incremental run wrote for one shard (see :func:`chunkline.dataset.rebuild.write_shard_plans`)."""
    data = json.loads(read_file_bytes(fs, keep_plan_path(staging_root, shard), secrets=secrets))
    return ShardPlan(data["modified_times"], data["rows_untouched"], data["documents_untouched"])


def with_modified_times(documents: pa.Table, modified_times: dict[str, int | None]) -> pa.Table:
    """``documents`` with each row's ``modified_time`` set to its file's current one."""
    column = documents.schema.get_field_index("modified_time")
    values = [modified_times.get(doc_id) for doc_id in documents.column("doc_id").to_pylist()]
    return documents.set_column(
        column, documents.schema.field(column), pa.array(values, pa.int64()).cast(documents.schema.field(column).type)
    )


def chunk_changes(previous: pa.Table, final: pa.Table, carried_ids: pa.Array) -> tuple[pa.Table, pa.Table]:
    """A shard's ``changes/upserts`` and ``changes/deletes``: the chunk rows that are new or differ from the
    previous snapshot's, each with ``embedding_changed`` (see :func:`embedding_changed`), and the previous
    chunks that are gone (carried documents are neither)."""
    old_chunks = previous.filter(pc.invert(pc.is_in(previous.column("doc_id"), carried_ids)))
    new_chunks = final.filter(pc.invert(pc.is_in(final.column("doc_id"), carried_ids))) if len(carried_ids) else final
    if old_chunks.num_rows:
        position_in_old = pc.index_in(new_chunks.column("chunk_id"), value_set=old_chunks.column("chunk_id"))
        differs = pc.invert(same_rows(new_chunks, old_chunks, position_in_old))
        upserts = new_chunks.filter(differs)
        changed = embedding_changed(upserts, old_chunks, pc.filter(position_in_old, differs))
    else:
        upserts = new_chunks  # every chunk is new: no copy of the shard's rows
        changed = pa.array([True] * upserts.num_rows, pa.bool_())
    deletes = old_chunks.select(["doc_id", "chunk_id", "chunk_uuid"]).filter(
        pc.invert(pc.is_in(old_chunks.column("chunk_id"), value_set=new_chunks.column("chunk_id")))
    )
    deletes_schema, deletes_key = TABLE_SCHEMAS["changes/deletes"]
    # Upserts are a filter of the sorted, de-duplicated chunks: in key order already, with the chunks' columns
    # (whatever they are), then embedding_changed.
    upserts = upserts.append_column(EMBEDDING_CHANGED_FIELD, changed)
    return (
        upserts.replace_schema_metadata(TABLE_SCHEMAS["changes/upserts"][0].metadata),
        sorted_unique(deletes.cast(deletes_schema), deletes_key),
    )


def embedding_changed(new: pa.Table, old: pa.Table, position_in_old: pa.Array) -> pa.Array:
    """For each row of ``new``: True unless ``old`` holds a row with its ``chunk_id`` (at ``position_in_old``)
    whose ``embed_text`` is equal, which is what an embedding model sees.

    The match is by ``chunk_id`` (``<doc_id>#<chunk_index>``, and ``chunk_uuid`` is derived from it): the
    point a store keeps under that id holds the vector of the old row's ``embed_text``. Positions, line
    numbers and the front matter inside ``text`` (never in ``embed_text``) may move without making it stale."""
    matched = pc.is_valid(position_in_old)
    if new.num_rows == 0 or not pc.any(matched).as_py():
        return pa.array([True] * new.num_rows, pa.bool_())
    previous_embed_text = old.column("embed_text").take(pc.fill_null(position_in_old, 0))
    same = pc.and_(matched, pc.fill_null(pc.equal(new.column("embed_text"), previous_embed_text), False))
    return pc.invert(same).combine_chunks()


def same_rows(new: pa.Table, old: pa.Table, position_in_old: pa.Array) -> pa.Array:
    """For each row of ``new``: True if ``old`` holds a row with its ``chunk_id`` (at ``position_in_old``)
    whose every column is equal."""
    matched = pc.is_valid(position_in_old)
    if new.num_rows == 0 or not pc.any(matched).as_py():
        return pa.array([False] * new.num_rows, pa.bool_())
    counterpart = old.take(pc.fill_null(position_in_old, 0))
    same = matched
    for name in new.column_names:
        left, right = new.column(name), counterpart.column(name)
        if pa.types.is_list(left.type):
            # Lists compare by length and by their items joined with a separator no heading holds.
            lengths_equal = pc.equal(pc.list_value_length(left), pc.list_value_length(right))
            same = pc.and_(same, pc.fill_null(lengths_equal, True))
            left, right = (pc.binary_join(column, "\x1f") for column in (left, right))
        equal = pc.equal(left, right)
        both_null = pc.and_(pc.is_null(left), pc.is_null(right))
        same = pc.and_(same, pc.or_(pc.fill_null(equal, False), both_null))
    return same


def _document_hashes(documents: pa.Table) -> dict[str, str | None]:
    """doc_id -> content sha256 of the document's own row (a doc_id held twice has one ``skipped`` row)."""
    hashes: dict[str, str | None] = {}
    for doc_id, status, digest in zip(
        documents.column("doc_id").to_pylist(),
        documents.column("status").to_pylist(),
        documents.column("content_sha256").to_pylist(),
    ):
        if doc_id not in hashes or status != "skipped":
            hashes[doc_id] = digest
    return hashes


def documents_changes(
    previous: pa.Table,
    final: pa.Table,
    upserted: dict[str, int],
    deleted: dict[str, int],
    reembedded: dict[str, int] | None = None,
) -> pa.Table:
    """A shard's ``changes/documents``: each doc_id of either table with its change and its counts of chunk
    upserts, deletes and upserts to embed again (``reembedded``; by default none)."""
    reembedded = reembedded or {}
    before, after = _document_hashes(previous), _document_hashes(final)
    rows = []
    for doc_id in sorted(set(before) | set(after)):
        if doc_id not in before:
            change = "added"
        elif doc_id not in after:
            change = "deleted"
        elif before[doc_id] != after[doc_id] or before[doc_id] is None or upserted.get(doc_id) or deleted.get(doc_id):
            change = "changed"
        else:
            change = "unchanged"
        rows.append(
            {
                "doc_id": doc_id,
                "change": change,
                "content_sha256": after.get(doc_id),
                "previous_content_sha256": before.get(doc_id),
                "chunks_upserted": upserted.get(doc_id, 0),
                "chunks_deleted": deleted.get(doc_id, 0),
                "chunks_reembedded": reembedded.get(doc_id, 0),
            }
        )
    return pa.Table.from_pylist(rows, schema=TABLE_SCHEMAS["changes/documents"][0])


def sorted_unique(table: pa.Table, key_columns: tuple[str, ...]) -> pa.Table:
    """Rows sorted by ``key_columns`` with repeated keys dropped.

    Keys are unique per row in every table, so a repeated key is a row that a retried bundle spilled
    twice; the copies are equal, and keeping the first is deterministic."""
    table = table.sort_by([(name, "ascending") for name in key_columns])
    if table.num_rows < 2:
        return table
    same_as_previous = None
    for name in key_columns:
        column = table.column(name)
        equal = pc.fill_null(pc.equal(column.slice(1), column.slice(0, table.num_rows - 1)), False)
        same_as_previous = equal if same_as_previous is None else pc.and_(same_as_previous, equal)
    keep = pa.concat_arrays([pa.array([True]), pc.invert(same_as_previous).combine_chunks()])
    return table if pc.all(keep).as_py() else table.filter(keep)
