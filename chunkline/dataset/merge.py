"""Merging a shard's rows and diffing them with the previous snapshot's, as plain functions over Arrow tables.

Rows go to a shard picked by a stable hash of their ``doc_id`` (:func:`shard_of`). A shard's rows are sorted
by their table's key with the copies a retried bundle spilled dropped (:func:`sorted_unique`); compared with
the previous snapshot's they give the shard's ``changes/`` tables (:func:`chunk_changes`,
:func:`documents_changes`). An incremental run's plan for a shard (:class:`ShardPlan`, written by
:mod:`chunkline.dataset.rebuild` to :func:`~chunkline.dataset.layout.keep_plan_path`) names the documents whose rows carry over.
No Beam here: the sink (:mod:`chunkline.transforms.write`) calls these from its DoFns.

**Bounded merge.** The ``chunks`` table of a shard is the one that grows with the corpus, and it is merged
without ever holding its spilled rows and their sorted copy at once: :func:`unique_order` sorts the key
columns alone (with each row's source and position) and drops repeated keys; :func:`sorted_unique_row_groups`
then gathers the rows of one output row group at a time from the sources (each read, taken from and let go
in turn, for one group of columns at a time) and :class:`PartWriter` encodes them as one row group of the
part and lets them go. The changes (:func:`chunk_upserts`) are computed for each row group as it passes,
the deletes from the new chunk ids (:func:`chunk_deletes`). What a merge holds at most is therefore one row
group of the output (``output.row_group_rows`` rows or ``output.row_group_bytes`` bytes of rows, whichever
comes first: see :mod:`chunkline.dataset.row_groups`), about a fifth more while a group of its columns is
put in key order, one spill file and the shard's key columns (copied out of each spill file as it is read,
so that they do not keep its bytes); the part is encoded into a temporary file, and read back only once
its rows are let go.
An incremental run also holds the shard's carried and previous rows (decoded from the previous part),
and a full rebuild over a previous snapshot the previous rows it compares with. The parts are byte for byte
those of :func:`sorted_unique` written whole with :func:`~chunkline.dataset.storage.parquet_bytes`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import ipc

from chunkline.dataset.arrow_columns import empty_table, string_array, zeros
from chunkline.dataset.layout import keep_plan_path
from chunkline.dataset.row_groups import RowGroupCuts, row_bytes, row_group_ends
from chunkline.dataset.storage import parquet_writer_options, read_file_bytes
from chunkline.schemas import EMBEDDING_CHANGED_FIELD, TABLE_SCHEMAS

__all__ = [
    "PartWriter",
    "PreviousSnapshot",
    "ShardPlan",
    "chunk_changes",
    "chunk_deletes",
    "chunk_upserts",
    "keyed_deletes",
    "keyed_upserts",
    "section_deletes",
    "section_upserts",
    "documents_changes",
    "embedding_changed",
    "not_carried",
    "read_shard_plan",
    "same_rows",
    "shard_of",
    "sorted_unique",
    "sorted_row_groups_and_sizes",
    "sorted_unique_row_groups",
    "unchanged_documents_changes",
    "unique_order",
    "with_listed_metadata",
    "CARRIED_SCHEMA",
    "carried_doc_ids",
    "shard_plan_bytes",
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
    """What an incremental run carries over in one shard (read from ``keep-<shard>.arrow``)."""

    carried: pa.Table = field(default_factory=lambda: empty_table(CARRIED_SCHEMA))
    """Every carried document of the shard, with its file's metadata as listed now (:data:`CARRIED_SCHEMA`)."""
    rows_untouched: bool = False
    """No document of the shard was added, changed or deleted: chunks and errors parts can be copied."""
    documents_untouched: bool = False
    """...and no carried document's listed metadata moved: the documents part can be copied too."""


#: The ``documents`` columns that a carried document takes from this run's listing, not from its old row.
LISTED_METADATA_COLUMNS = ("modified_time", "source_mtime_ns", "source_etag", "source_version")

#: A shard plan's rows: each carried document and the metadata of its file as listed now (``modified_time``
#: in microseconds since the epoch), which its ``documents`` row takes.
CARRIED_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("modified_time", pa.int64()),
        ("source_mtime_ns", pa.int64()),
        ("source_etag", pa.string()),
        ("source_version", pa.string()),
    ]
)


def shard_plan_bytes(plan: ShardPlan) -> bytes:
    """A shard plan as an Arrow IPC file: its carried rows, and its flags in the schema's metadata (never a
    pickle: the staging area is storage that others may write to, and reading must not run anything)."""
    flags = {"rows_untouched": plan.rows_untouched, "documents_untouched": plan.documents_untouched}
    table = plan.carried.cast(CARRIED_SCHEMA).replace_schema_metadata({"chunkline.shard_plan": json.dumps(flags)})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_shard_plan(fs, staging_root: str, shard: int, secrets: tuple[str, ...] = ()) -> ShardPlan:
    """The plan an incremental run wrote for one shard (see :func:`chunkline.dataset.rebuild.write_shard_plans`)."""
    data = read_file_bytes(fs, keep_plan_path(staging_root, shard), secrets=secrets)
    table = ipc.open_file(pa.BufferReader(data)).read_all()
    flags = json.loads(table.schema.metadata[b"chunkline.shard_plan"])
    return ShardPlan(table.replace_schema_metadata(None), flags["rows_untouched"], flags["documents_untouched"])


def with_listed_metadata(documents: pa.Table, carried: pa.Table) -> pa.Table:
    """``documents`` with each row's :data:`LISTED_METADATA_COLUMNS` set to its file's as listed now
    (``carried``, of :data:`CARRIED_SCHEMA`; a row whose doc_id it lacks gets nulls)."""
    position = pc.index_in(documents.column("doc_id"), value_set=carried.column("doc_id").combine_chunks())
    for name in LISTED_METADATA_COLUMNS:
        index = documents.schema.get_field_index(name)
        target = documents.schema.field(index)
        column = carried.column(name).take(position).cast(target.type)
        documents = documents.set_column(index, target, column)
    return documents


def carried_doc_ids(plan: ShardPlan | None) -> pa.Array:
    """The doc_ids a shard plan carries over, sorted (none without a plan)."""
    if plan is None:
        return pa.array([], pa.string())
    ids = plan.carried.column("doc_id").combine_chunks()
    return ids.take(pc.array_sort_indices(ids))


def chunk_changes(previous: pa.Table, final: pa.Table, carried_ids: pa.Array) -> tuple[pa.Table, pa.Table]:
    """A shard's ``changes/upserts`` and ``changes/deletes``: the chunk rows that are new or differ from the
    previous snapshot's, each with ``embedding_changed`` (see :func:`embedding_changed`), and the previous
    chunks that are gone (carried documents are neither)."""
    old_chunks = not_carried(previous, carried_ids)
    new_chunks = not_carried(final, carried_ids)
    upserts = chunk_upserts(old_chunks, new_chunks)
    return upserts, chunk_deletes(old_chunks, new_chunks.column("chunk_id"))


def not_carried(table: pa.Table, carried_ids: pa.Array) -> pa.Table:
    """The rows of ``table`` whose document is not among ``carried_ids`` (``table`` itself when none is)."""
    if not len(carried_ids) or not table.num_rows:
        return table
    carried = pc.is_in(table.column("doc_id"), value_set=carried_ids)
    return table.filter(pc.invert(carried)) if pc.any(carried).as_py() else table


def chunk_upserts(old_chunks: pa.Table, new_chunks: pa.Table) -> pa.Table:
    """The rows of ``new_chunks`` that are new or differ from their ``chunk_id``'s row in ``old_chunks``, in
    their order, with ``embedding_changed``. Row by row, so the upserts of a shard can be found one slice of
    its new rows at a time against all of its old ones."""
    return keyed_upserts(old_chunks, new_chunks, "chunk_id", "changes/upserts")


def section_upserts(old_sections: pa.Table, new_sections: pa.Table) -> pa.Table:
    """The rows of ``changes/section_upserts``: :func:`chunk_upserts` for the ``sections`` table, by
    ``section_id``."""
    return keyed_upserts(old_sections, new_sections, "section_id", "changes/section_upserts")


def keyed_upserts(old: pa.Table, new: pa.Table, id_column: str, upserts_table: str) -> pa.Table:
    """The rows of ``new`` that are new or differ from the row of ``old`` with their ``id_column``, in their
    order, with ``embedding_changed`` and the metadata of the table ``upserts_table``."""
    if old.num_rows:
        position_in_old = pc.index_in(new.column(id_column), value_set=old.column(id_column))
        differs = pc.invert(same_rows(new, old, position_in_old))
        if pc.all(differs).as_py():
            upserts = new  # every row differs: no copy of the rows
            changed = embedding_changed(upserts, old, position_in_old)
        else:
            upserts = new.filter(differs)
            changed = embedding_changed(upserts, old, pc.filter(position_in_old, differs))
    else:
        upserts = new  # every row is new: no copy of the shard's rows
        changed = pa.array([True] * upserts.num_rows, pa.bool_())
    # Upserts are a filter of the sorted, de-duplicated rows: in key order already, with the table's columns
    # (whatever they are), then embedding_changed.
    upserts_schema = TABLE_SCHEMAS[upserts_table][0]
    upserts = upserts.append_column(upserts_schema.field(EMBEDDING_CHANGED_FIELD.name), changed)
    return upserts.replace_schema_metadata(upserts_schema.metadata)


def chunk_deletes(old_chunks: pa.Table, new_chunk_ids: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The rows of ``changes/deletes``: the chunks of ``old_chunks`` whose ``chunk_id`` no new chunk has,
    sorted by the table's key."""
    return keyed_deletes(old_chunks, new_chunk_ids, ("doc_id", "chunk_id", "chunk_uuid"), "changes/deletes")


def section_deletes(old_sections: pa.Table, new_section_ids: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The rows of ``changes/section_deletes``: the sections of ``old_sections`` whose ``section_id`` no new
    section has, sorted by the table's key."""
    return keyed_deletes(
        old_sections, new_section_ids, ("doc_id", "section_id", "section_uuid"), "changes/section_deletes"
    )


def keyed_deletes(
    old: pa.Table, new_ids: pa.Array | pa.ChunkedArray, columns: tuple[str, str, str], deletes_table: str
) -> pa.Table:
    """The rows of the table ``deletes_table``: ``columns`` (doc_id, id, uuid) of the rows of ``old`` whose
    id none of ``new_ids`` is, sorted by the table's key."""
    deletes = old.select(list(columns))
    if isinstance(new_ids, pa.ChunkedArray):
        new_ids = new_ids.combine_chunks() if new_ids.num_chunks else pa.array([], pa.string())
    deletes = deletes.filter(pc.invert(pc.is_in(deletes.column(columns[1]), value_set=new_ids)))
    deletes_schema, deletes_key = TABLE_SCHEMAS[deletes_table]
    return sorted_unique(deletes.cast(deletes_schema), deletes_key)


def embedding_changed(new: pa.Table, old: pa.Table, position_in_old: pa.Array) -> pa.Array:
    """For each row of ``new``: True unless ``old`` holds a row with its ``chunk_id`` (at ``position_in_old``)
    whose ``embed_text`` is equal, which is what an embedding model sees.

    The match is by ``chunk_id`` (``<doc_id>#<chunk_index>``, and ``chunk_uuid`` is derived from it): the
    point a store keeps under that id holds the vector of the old row's ``embed_text``. Positions, line
    numbers and the front matter inside ``text`` (never in ``embed_text``) may move without making it stale."""
    matched = pc.is_valid(position_in_old)
    if new.num_rows == 0 or not pc.any(matched).as_py():
        return pa.array([True] * new.num_rows, pa.bool_())
    embed_text = new.column("embed_text")
    previous_embed_text = old.column("embed_text").take(pc.fill_null(position_in_old, 0))
    equal = pc.fill_null(pc.equal(embed_text, previous_embed_text), False)
    if embed_text.null_count or previous_embed_text.null_count:
        # A section with nothing to embed (null embed_text) before and after has no embedding to compute.
        equal = pc.or_(equal, pc.and_(pc.is_null(embed_text), pc.is_null(previous_embed_text)))
    same = pc.and_(matched, equal)
    return pc.invert(same).combine_chunks()


def same_rows(new: pa.Table, old: pa.Table, position_in_old: pa.Array) -> pa.Array:
    """For each row of ``new``: True if ``old`` holds a row with its id (at ``position_in_old``) whose every
    column is equal."""
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


def unchanged_documents_changes(documents: pa.Table) -> pa.Table:
    """``documents_changes(documents, documents, {}, {})``, the ``changes/documents`` of a shard where
    nothing changed, computed column by column: every doc_id ``unchanged`` (``changed`` where it has no
    content hash), its hash on both sides, no chunk counts. A table holding a doc_id twice (a ``skipped``
    row beside its own) goes through :func:`documents_changes`, which picks the row that speaks for it."""
    doc_ids = documents.column("doc_id")
    if pc.count_distinct(doc_ids).as_py() != documents.num_rows:
        return documents_changes(documents, documents, {}, {})
    ordered = documents.select(["doc_id", "content_sha256"]).take(pc.sort_indices(doc_ids))
    hashes = ordered.column("content_sha256")
    changed, unchanged = string_array(["changed", "unchanged"])  # Arrow scalars: no pandas import
    change = pc.if_else(pc.is_null(hashes), changed, unchanged)
    schema = TABLE_SCHEMAS["changes/documents"][0]
    no_chunks = zeros(ordered.num_rows, pa.int32())
    columns = {
        "doc_id": ordered.column("doc_id"),
        "change": change,
        "content_sha256": hashes,
        "previous_content_sha256": hashes,
        "chunks_upserted": no_chunks,
        "chunks_deleted": no_chunks,
        "chunks_reembedded": no_chunks,
    }
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema).combine_chunks()


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
    keep = _first_of_each_key(table, key_columns)
    return table if keep is None else table.filter(keep)


def _first_of_each_key(table: pa.Table, key_columns: tuple[str, ...]) -> pa.Array | None:
    """Of ``table``, sorted by ``key_columns``: a mask of the first row of each run of equal keys, or
    ``None`` when no key repeats."""
    if table.num_rows < 2:
        return None
    same_as_previous = None
    for name in key_columns:
        column = table.column(name)
        equal = pc.fill_null(pc.equal(column.slice(1), column.slice(0, table.num_rows - 1)), False)
        same_as_previous = equal if same_as_previous is None else pc.and_(same_as_previous, equal)
    keep = pa.concat_arrays([pa.array([True]), pc.invert(same_as_previous).combine_chunks()])
    return None if pc.all(keep).as_py() else keep


_SOURCE, _ROW = "__source", "__row"


def unique_order(key_tables: Sequence[pa.Table], key_columns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(source, row) of every row of :func:`sorted_unique` over the concatenation of ``key_tables`` (each
    holding a source's key columns): the index of the table it comes from and its position there.

    Only the keys are sorted. Ties are ordered by source, then row, which is the concatenation's order, so
    of repeated keys the one kept is the one :func:`sorted_unique` keeps."""
    tables = []
    for index, keys in enumerate(key_tables):
        rows = keys.num_rows
        tables.append(
            keys.select(list(key_columns))
            .append_column(_SOURCE, pa.array(np.full(rows, index, np.int32)))
            .append_column(_ROW, pa.array(np.arange(rows, dtype=np.int64)))
        )
    if not tables or not sum(table.num_rows for table in tables):
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    keys = pa.concat_tables(tables).sort_by([(name, "ascending") for name in (*key_columns, _SOURCE, _ROW)])
    keep = _first_of_each_key(keys, key_columns)
    if keep is not None:
        keys = keys.filter(keep)
    return (
        keys.column(_SOURCE).to_numpy().astype(np.int32, copy=False),
        keys.column(_ROW).to_numpy().astype(np.int64, copy=False),
    )


def sorted_unique_row_groups(
    sources: Sequence[Callable[[], pa.Table]],
    schema: pa.Schema,
    key_columns: tuple[str, ...],
    row_group_rows: int,
    row_group_bytes: int | None = None,
    group_bytes: int = 16_000_000,
    between_steps: Callable[[], None] | None = None,
) -> Iterator[pa.Table]:
    """The tables of :func:`sorted_row_groups_and_sizes`, without their rows' bytes."""
    for table, _ in sorted_row_groups_and_sizes(
        sources, schema, key_columns, row_group_rows, row_group_bytes, group_bytes, between_steps
    ):
        yield table


def sorted_row_groups_and_sizes(
    sources: Sequence[Callable[[], pa.Table]],
    schema: pa.Schema,
    key_columns: tuple[str, ...],
    row_group_rows: int,
    row_group_bytes: int | None = None,
    group_bytes: int = 16_000_000,
    between_steps: Callable[[], None] | None = None,
) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The rows of :func:`sorted_unique` over the concatenation of the ``sources``' tables (each a function
    that reads one source, of ``schema``, again when called), as consecutive tables with one chunk per
    column, one for each row group of the part they make: at most ``row_group_rows`` rows, ended at
    ``row_group_bytes`` bytes of rows (see :mod:`chunkline.dataset.row_groups`).

    Each source is read once for its keys, then, for each table yielded, once for each group of its
    columns (the largest first; groups of about ``group_bytes`` of a table's rows, at most 4 and at least one,
    so that a small shard is read twice only); only one source's table is held at a time, and only the
    rows taken from it stay. A table is built one group of columns at a time, so that putting a group's rows
    in key order holds that group twice, never the whole table.

    ``between_steps``, when given, is called once the sources are read for their keys and after each group
    of columns of a large row group (one of ``group_bytes`` or more) is gathered: where the program that owns
    the process may give what the step freed back to the system (``chunkline run`` does, see
    :mod:`chunkline.pipelines.process_tuning`).

    Each table comes with its rows' bytes (:func:`~chunkline.dataset.row_groups.row_bytes`, measured once
    on the sources; zeros without ``row_group_bytes``), which a :class:`PartWriter` takes instead of
    measuring the rows again."""
    key_tables, column_bytes, sizes = [], dict.fromkeys(schema.names, 0), []
    for read in sources:
        table = read()
        # A copy of the keys: the source's table may be a view of its whole file's bytes (an Arrow IPC spill
        # file read without copying), which the keys alone would otherwise keep until every source is read.
        key_tables.append(table.select(list(key_columns)).take(np.arange(table.num_rows)))
        for name in schema.names:
            column_bytes[name] += table.column(name).nbytes
        sizes.append(row_bytes(table) if row_group_bytes is not None else np.zeros(table.num_rows, np.int64))
        del table
    source_of, row_of = unique_order(key_tables, key_columns)
    del key_tables
    # The bytes of each row in the merged order, and where its row groups end.
    offsets = np.cumsum([0] + [len(source_sizes) for source_sizes in sizes])[:-1]
    ordered_sizes = np.concatenate([np.zeros(0, np.int64), *sizes])[offsets[source_of] + row_of] if sizes else sizes
    del sizes
    ordered_sizes = np.asarray(ordered_sizes, np.int64)
    ends = row_group_ends(ordered_sizes, row_group_rows, row_group_bytes)
    largest_rows = max(np.diff([0, *ends]), default=0)
    if row_group_bytes is not None and len(ends):
        group_totals = np.add.reduceat(ordered_sizes, [0, *ends[:-1]])
        share = float(group_totals.max()) / max(float(group_totals.sum()), 1.0)
    else:
        share = largest_rows / max(len(source_of), 1)
    table_bytes = sum(column_bytes.values()) * min(1.0, share)
    # Only a large row group's steps free enough to be worth a call between them.
    release = between_steps if between_steps is not None and table_bytes >= group_bytes else lambda: None
    release()  # the sources read for their keys
    groups = _column_groups(column_bytes, min(4, max(1, round(table_bytes / group_bytes))))
    for start, end in zip([0, *ends], ends):
        group_sources = source_of[start:end]
        group_rows = row_of[start:end]
        taken = [
            (read, _rows_taken(group_rows[where]), where)
            for index, read in enumerate(sources)
            if len(where := np.flatnonzero(group_sources == index))
        ]
        placed = np.concatenate([where for _, _, where in taken])
        in_order = np.array_equal(placed, np.arange(len(placed)))
        # Row i of the sources' rows, concatenated, goes to position placed[i].
        order = np.empty(len(placed), np.int64)
        order[placed] = np.arange(len(placed))
        order = pa.array(order)
        columns: dict[str, pa.Array] = {}
        for names in groups:
            pieces = [_taken(read().select(names), rows) for read, rows, _ in taken]
            for name in names:
                gathered = pa.concat_arrays([array for piece in pieces for array in piece.column(name).chunks])
                pieces = [piece.drop_columns([name]) for piece in pieces]
                columns[name] = gathered if in_order else gathered.take(order)
                del gathered
            del pieces
            release()  # this group's pieces, before the next group is gathered
        table = pa.Table.from_arrays([columns.pop(name) for name in schema.names], schema=schema)
        release()  # the pieces and the unordered columns, before the table is encoded
        yield table, ordered_sizes[start:end]
        del table


def _rows_taken(rows: np.ndarray) -> slice | pa.Array:
    """The rows a row group takes from a source (positions, ascending): a slice when they are consecutive,
    as a full rebuild's are (its spills hold the rows of consecutive documents), else their positions."""
    first = int(rows[0])
    if int(rows[-1]) - first == len(rows) - 1 and (len(rows) == 1 or bool((np.diff(rows) == 1).all())):
        return slice(first, first + len(rows))
    return pa.array(rows)


def _taken(table: pa.Table, rows: slice | pa.Array) -> pa.Table:
    """The ``rows`` (:func:`_rows_taken`) of ``table``: a slice is a view (the gathering that follows copies
    it once), positions a copy."""
    if isinstance(rows, slice):
        return table.slice(rows.start, rows.stop - rows.start)
    return table.take(rows)


def _column_groups(column_bytes: dict[str, int], groups: int) -> list[list[str]]:
    """The columns in about ``groups`` groups of similar size, the largest first."""
    total = sum(column_bytes.values())
    share = max(total / max(groups, 1), 1)
    result: list[list[str]] = []
    size = share
    for name in sorted(column_bytes, key=lambda name: -column_bytes[name]):
        if size >= share:
            result.append([])
            size = 0
        result[-1].append(name)
        size += column_bytes[name]
    return result


def _one_chunk(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.Array):
        return column
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()


def _single_chunks(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([_one_chunk(column) for column in table.columns], schema=schema)


_IN_MEMORY_PART_BYTES = 16_000_000
"""Rows (Arrow bytes) under which a part of one row group is encoded in memory rather than a temporary file."""


class PartWriter:
    """Writes a Parquet part from consecutive tables of rows, one row group (``row_group_rows`` rows, ended at
    ``row_group_bytes`` bytes of rows: see :mod:`chunkline.dataset.row_groups`) at a time, into a temporary
    file; :meth:`finish` returns the part's bytes.

    The bytes are those of :func:`~chunkline.dataset.storage.parquet_bytes` over the whole table (the same
    writer settings and row groups, and each row group handed to the writer as one chunk per column, which
    is how the whole sorted table is laid out). It holds at most one row group of rows before writing it: a
    row group is written as soon as its last row is given, and the rows given after it in the same table
    are copied, so that they do not keep that table's buffers."""

    def __init__(self, schema: pa.Schema, row_group_rows: int, compression: str, row_group_bytes: int | None = None):
        self._schema = schema
        self._cuts = RowGroupCuts(row_group_rows, row_group_bytes)
        self._measure = row_group_bytes is not None
        self._compression = compression
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._file = None
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0
        """Rows written so far."""

    def write(self, table: pa.Table, sizes: np.ndarray | None = None) -> None:
        """Add rows (of the writer's schema) after those written so far; ``sizes``, when given, are their
        bytes as :func:`~chunkline.dataset.row_groups.row_bytes` measures them (not measured again)."""
        if not table.num_rows:
            return
        if not self._measure:
            sizes = np.zeros(table.num_rows, np.int64)
        elif sizes is None:
            sizes = row_bytes(table)
        start = 0
        for end in self._cuts.ends(sizes):
            self._pending.append(table.slice(start, end - start))
            self._write_row_group()
            start = end
        if start < table.num_rows:
            rest = table.slice(start)
            # The rest of a table whose first rows were written: copied, to let go of the table's buffers.
            self._pending.append(_single_chunks(rest.take(np.arange(rest.num_rows)), self._schema) if start else rest)
            self._pending_rows += rest.num_rows

    def end_rows(self) -> None:
        """Write the rows still held as the last row group: after this the writer holds no rows."""
        if self._pending_rows:
            self._write_row_group(last=True)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> bytes:
        """The part's bytes (empty when no row was written); the writer is done."""
        self.end_rows()
        if self._file is None:
            return b""
        self._file.seek(0)
        data = self._file.read()
        self._file.close()
        self._writer = self._file = None
        return data

    def close(self) -> None:
        """Let the temporary file go without finishing (after an error)."""
        if self._file is not None:
            self._file.close()
        self._writer = self._file = None
        self._pending = []

    def _write_row_group(self, last: bool = False) -> None:
        """Write the held rows as one row group."""
        taken, self._pending, self._pending_rows = self._pending, [], 0
        group = taken[0] if len(taken) == 1 else pa.concat_tables(taken)
        del taken
        group = _single_chunks(group, self._schema)
        if self._writer is None:
            # A part of one small row group is encoded in memory (it is about the size of its rows,
            # compressed); any other goes to a temporary file, read back once every row is let go.
            small = last and self.rows == 0 and group.nbytes < _IN_MEMORY_PART_BYTES
            self._file = io.BytesIO() if small else tempfile.TemporaryFile(prefix="chunkline-part-")
            self._writer = pq.ParquetWriter(
                self._file, self._schema, compression=self._compression, **parquet_writer_options(self._schema)
            )
        self._writer.write_table(group, row_group_size=max(group.num_rows, 1))
        self.rows += group.num_rows
