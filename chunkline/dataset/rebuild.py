"""Listing the inputs and planning a rebuild: which documents need the chunker, which rows carry over.

The driver lists every input once (:func:`list_inputs`), before the pipeline starts; the plan judges that
listing and the pipeline reads exactly the files it names, in full runs as in incremental ones. An input
whose root is missing or cannot be listed, or that matches no file, raises :class:`PublishRefusedError`:
the run publishes nothing rather than a snapshot without that input's documents.

A run on an output that already holds a published snapshot compares the listing with that snapshot:

1. If there is no snapshot, ``run.reindex`` is set, or anything that decides the rows differs from the
   snapshot's (the chunking config and tokenizer, chunkline's ``CHUNKING_VERSION``, the schema version,
   decoding and size settings, the shard count and Parquet settings, the promoted front-matter columns),
   the run is a **full** rebuild: every
   document goes through the chunker. Its ``changes/`` tables still compare it with the previous snapshot.
2. Otherwise the inputs are listed and every document that was ``ok`` in the snapshot, still comes from the
   same ``source_uri`` and has unchanged bytes is **carried over**: its rows are copied from the snapshot's
   parts, never chunked again. Unchanged means: its listed size and change tokens (modification time in
   nanoseconds, ETag, version: :func:`~chunkline.dataset.inputs.change_tokens`) equal those its row
   recorded, at least one token given, and the file is not read; or, when they differ or are missing (a
   row written before they were recorded, a store that gives none) or ``run.verify_content`` is set, its
   bytes are read and hashed here (by a pool of threads) and the content SHA-256 is the same. The others
   (edited, new, unreadable before, in error before, or sharing a doc_id with another file) are chunked;
   documents gone from the input are dropped. The plan is computed with Arrow over the listing's columns and
   the previous ``documents`` table (:data:`PLANNED_COLUMNS`), not with Python values per document.

A folder below an input that could not be listed is an error row, not a folder whose documents are gone:
the documents the snapshot holds from it are carried over as they were (the run stays incremental however
many documents changed), and a full rebuild, which carries nothing over, raises
:class:`PublishRefusedError` instead of deleting them.

The result is row for row what a full rebuild of the new corpus writes: carried rows are the rows the
chunker would make again, and only the listed metadata of ``documents`` (``modified_time``,
``source_mtime_ns``, ``source_etag``, ``source_version``) is refreshed from the listing. For each shard
the plan is written to ``keep-<shard>.arrow`` under the run's staging prefix, where the sink's merge reads
it (see :func:`chunkline.dataset.merge.read_shard_plan`). When most documents changed, the run is simply a full one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.dataset import inputs
from chunkline.dataset.arrow_columns import bool_array, empty_table, int64_array, numpy_values, string_array
from chunkline.dataset.inputs import UNLISTED_FOLDER, SourceFile
from chunkline.dataset.layout import keep_plan_path
from chunkline.dataset.listed_files import (
    HELD_FILES_SCHEMA,
    ListedDocuments,
    held_columns,
    listed_files_table,
    source_files_of,
    take_rows,
)
from chunkline.dataset.merge import (
    CARRIED_SCHEMA,
    LISTED_METADATA_COLUMNS,
    PreviousSnapshot,
    ShardPlan,
    shard_of,
    shard_plan_bytes,
)
from chunkline.dataset.publish import DamagedDatasetError, manifest_problem, read_dataset
from chunkline.dataset.settings import InputConfig, RunConfig
from chunkline.dataset.storage import (
    PART_ENCODING,
    StorageError,
    fresh_filesystem,
    scrub_secrets,
    with_storage_retries,
    write_file_atomically,
)
from chunkline.engine import CHUNKING_VERSION
from chunkline.schemas import SCHEMA_VERSION

__all__ = [
    "CARRIED_SCHEMA",
    "PLANNED_COLUMNS",
    "InputListing",
    "PublishRefusedError",
    "RebuildPlan",
    "list_input_or_refuse",
    "list_inputs",
    "plan_rebuild",
    "rebuild_fingerprint",
    "refuse_full_rebuild_over_unlisted",
    "write_shard_plans",
]

logger = logging.getLogger("chunkline")

#: Above this share of documents to chunk, an incremental run would save little: it runs as a full one.
_INCREMENTAL_MAX_SHARE = 0.5
_HASHING_THREADS = 16


class PublishRefusedError(RuntimeError):
    """The run published nothing, on purpose: its input could not be listed or matched no file, or the
    snapshot it would publish would lose documents it cannot vouch for. The message is one line that names
    the input, folder or setting, and the way out; ``chunkline run`` prints it and exits with status 1."""


@dataclass
class InputListing:
    """What the driver found in the inputs: the one listing that both the plan and the pipeline use."""

    documents: ListedDocuments = field(default_factory=ListedDocuments.empty)
    """Every listed (doc_id, files) pair, sorted by doc_id, each doc_id's files in input order (several
    when inputs share a doc_id): Arrow rows, one per file
    (:data:`~chunkline.dataset.listed_files.HELD_FILES_SCHEMA`), files that will be error rows (a name
    out of the root, a link out of it) included; folder error rows left out."""
    unlisted: list[SourceFile] = field(default_factory=list)
    """One error row per folder below an input that could not be listed (``problem.error_type`` is
    ``UnlistableFolder``; its ``source_uri`` is the folder's URL)."""

    @classmethod
    def of(cls, sources: Iterable[SourceFile]) -> InputListing:
        """The listing of ``sources`` as :func:`~chunkline.dataset.inputs.match_input` gives them, in
        input order (folder error rows among them)."""
        unlisted: list[SourceFile] = []

        def files() -> Iterator[SourceFile]:
            for source in sources:
                if _is_unlisted_folder(source):
                    unlisted.append(source)
                else:
                    yield source

        return cls(ListedDocuments.by_doc_id(listed_files_table(files())), unlisted)

    @property
    def files(self) -> pa.Table:
        """Every listed file, one row each, in the order listed, as the driver holds them
        (:data:`~chunkline.dataset.listed_files.HELD_FILES_SCHEMA`; see
        :func:`~chunkline.dataset.listed_files.plain_rows`)."""
        return self.documents.files

    def doc_ids(self) -> pa.Array:
        """Every listed doc_id once, sorted (folder error rows left out)."""
        return self.documents.doc_ids()

    def groups(self) -> ListedDocuments:
        """Every (doc_id, files) pair to read, folder error rows included, sorted by doc_id."""
        if not self.unlisted:
            return self.documents
        documents = self.documents
        rank = np.empty(documents.files.num_rows, dtype=np.int64)
        order = np.arange(documents.files.num_rows) if documents.rows is None else documents.rows
        rank[order] = np.arange(len(order), dtype=np.int64)
        return ListedDocuments.by_doc_id(documents.files, self.unlisted, rank=rank)


def list_inputs(config: RunConfig) -> InputListing:
    """List every input once, before the pipeline starts (a transient storage error is retried).

    The files come into Arrow rows a batch at a time as they are listed, in the order each input's walk
    finds them, and are put in order by an index, not copied: the driver never holds a Python object per
    file of the corpus, nor its listing twice.

    Raises :class:`PublishRefusedError` for an input whose root is missing or cannot be listed, and for
    one that matches no file: publishing what the other inputs hold would delete every document of it."""
    secrets = tuple(config.secrets())
    tables = []
    unlisted: list[SourceFile] = []
    for index, url in enumerate(config.input.paths):
        files, folders = _refusing_unlistable(
            url,
            config.input,
            secrets,
            lambda url=url, index=index: _listed_in_walk_order(url, index, config.input),
        )
        if not files.num_rows and not folders:
            raise PublishRefusedError(_no_match_message(url, config.input, secrets))
        tables.append(files)
        unlisted += sorted(folders, key=lambda folder: folder.doc_id)  # as match_input orders them
    files = pa.concat_tables(tables) if tables else empty_table(HELD_FILES_SCHEMA)
    # By doc_id, then in input order: inputs in turn, each sorted by path, as match_input yields them.
    return InputListing(ListedDocuments.by_doc_id(files, then_by=("input_index", "path")), unlisted)


def _listed_in_walk_order(url: str, input_index: int, config: InputConfig) -> tuple[pa.Table, list[SourceFile]]:
    """(every file of one input as Arrow rows, its folders that could not be listed), the rows in the order
    the walk found them: a batch of files at a time, never a Python object per file of the input."""
    unlisted: list[SourceFile] = []

    def files() -> Iterator[SourceFile]:
        for source in inputs.match_input(url, input_index, config, ordered=False):
            if _is_unlisted_folder(source):
                unlisted.append(source)
            else:
                yield source

    return listed_files_table(files()), unlisted


def list_input_or_refuse(url: str, input_index: int, config: InputConfig, secrets: tuple[str, ...]) -> list[SourceFile]:
    """Every file of one input (:func:`~chunkline.dataset.inputs.match_input`, listed whole with storage
    retries), folders below it that could not be listed included as their error rows.

    Raises :class:`PublishRefusedError`, one line naming the input, when its root is missing or cannot be
    listed, or when it matches no file: ``chunkline run`` and the pipelines of chunkline's transforms
    judge every input by this one function."""
    found = _refusing_unlistable(url, config, secrets, lambda: list(inputs.match_input(url, input_index, config)))
    if not found:
        raise PublishRefusedError(_no_match_message(url, config, secrets))
    return found


_Listed = TypeVar("_Listed")


def _refusing_unlistable(
    url: str, config: InputConfig, secrets: tuple[str, ...], listing: Callable[[], _Listed]
) -> _Listed:
    """``listing()``'s listing of input ``url``, whole, with storage retries; :class:`PublishRefusedError`
    when the input's root is missing or cannot be listed."""
    try:
        # Listed whole before anything is used, so that a listing that fails midway is tried again from the
        # start (a transient error would otherwise cost every document of the input).
        return with_storage_retries(listing, url, "list", secrets=secrets)
    except FileNotFoundError as error:
        # match_input's own error names the input; another one (from the filesystem) is added to it.
        what = str(error) if str(error).startswith(f"input {url} ") else f"input {url} does not exist ({error})"
        raise PublishRefusedError(
            scrub_secrets(
                f"{what}; nothing was published. Check the path (a renamed folder, an unmounted disk, a "
                "mistyped bucket?) and run again",
                secrets,
            )
        ) from None
    except StorageError as error:
        raise PublishRefusedError(
            scrub_secrets(f"{error}; nothing was published. Run again once input {url} can be listed", secrets)
        ) from None
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise PublishRefusedError(
            scrub_secrets(
                f"cannot list input {url} ({type(error).__name__}: {first_line}); nothing was published. "
                "Check its permissions or storage_options and run again",
                secrets,
            )
        ) from None


def _is_unlisted_folder(source: SourceFile) -> bool:
    return source.problem is not None and source.problem.error_type == UNLISTED_FOLDER and not source.path


def _no_match_message(url: str, config: InputConfig, secrets: tuple[str, ...]) -> str:
    filters = []
    if config.include or config.exclude:
        filters.append("input.include/exclude")
    if not any(character in url for character in "*?["):
        filters.append("names ending in " + ", ".join(config.extensions))
    within = f" ({' and '.join(filters)})" if filters else ""
    return scrub_secrets(
        f"input {url} matches no file{within}; nothing was published (publishing would delete every document "
        "of it). Check the path or pattern and run again",
        secrets,
    )


def rebuild_fingerprint(config: RunConfig) -> str:
    """A digest of every setting that decides the rows or the part files: equal fingerprints mean a
    document's rows can be carried over from one snapshot to the next."""
    decisive = {
        "chunking": json.loads(config.chunking.fingerprint()),
        "chunking_version": CHUNKING_VERSION,
        "schema_version": SCHEMA_VERSION,
        "encoding_errors": config.input.encoding_errors,
        "max_file_bytes": config.input.max_file_bytes,
        "shards": config.output.shards,
        "row_group_rows": config.output.row_group_rows,
        "row_group_bytes": config.output.row_group_bytes,
        "compression": config.output.compression,
        "part_encoding": PART_ENCODING,
    }
    if config.output.promoted_front_matter:  # the chunk rows hold these columns (none: as before they existed)
        decisive["front_matter_columns"] = [
            [column.key, column.type, column.column] for column in config.output.promoted_front_matter
        ]
        decisive["front_matter_max_value_bytes"] = config.output.front_matter_max_value_bytes
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()


@dataclass
class RebuildPlan:
    """What a run chunks and what it carries over."""

    mode: str
    """``full`` or ``incremental``."""
    reason: str
    """Why the run is full, or a summary of the incremental plan, for the log and the manifest."""
    previous: PreviousSnapshot | None = None
    to_chunk: ListedDocuments | list[tuple[str, list[SourceFile]]] = field(default_factory=list)
    """(doc_id, matched files) of every document that goes through the chunker, sorted by doc_id: held as
    Arrow rows (:class:`~chunkline.dataset.listed_files.ListedDocuments`) when the driver listed them."""
    carried: pa.Table = field(default_factory=lambda: empty_table(CARRIED_SCHEMA))
    """Incremental runs: every document whose rows carry over (:data:`CARRIED_SCHEMA`: its doc_id and the
    metadata its ``documents`` row takes from this run's listing)."""
    touched_shards: set[int] = field(default_factory=set)
    """Shards where a document was added, changed or deleted."""
    moved_shards: set[int] = field(default_factory=set)
    """Shards where only a carried document's modification time moved."""
    listed: bool = False
    """True when the driver listed the inputs: ``to_chunk`` then holds every document to read, full runs
    too (False: the pipeline lists the inputs itself)."""
    documents_before: int | None = None
    """Documents (doc_ids) of the previous snapshot; None when there is none or it could not be read."""
    documents_deleted: int | None = None
    """Of those, how many the new snapshot will not hold."""
    kept_unlisted: int = 0
    """Documents carried over because the folder they were found in could not be listed."""
    documents_read_to_compare: int | None = None
    """Incremental runs: documents read and hashed to decide whether they changed (their listed size, time,
    ETag or version moved, or the previous snapshot recorded none, or ``run.verify_content``)."""

    @property
    def incremental(self) -> bool:
        return self.mode == "incremental"

    def read_list_staged(self) -> RebuildPlan:
        """This plan once its read list is staged for the pipeline: ``to_chunk`` keeps only its length (what
        the manifest records), so that a driver does not hold the rows while the pipeline runs."""
        return replace(self, to_chunk=_StagedReadList(len(self.to_chunk)))

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "documents_chunked": len(self.to_chunk) if self.incremental else None,
            "documents_carried_over": len(self.carried) if self.incremental else 0,
            "documents_read_to_compare": self.documents_read_to_compare if self.incremental else None,
            "previous_snapshot": self.previous.snapshot if self.previous else None,
        }


class _StagedReadList:
    """A read list staged and let go: its length only."""

    def __init__(self, documents: int):
        self._documents = documents

    def __len__(self) -> int:
        return self._documents

    def __iter__(self) -> Iterator[tuple[str, list[SourceFile]]]:
        raise RuntimeError("the plan's read list was staged and let go: read the staged listing")


def _previous_snapshot(manifest: dict[str, Any], output_url: str) -> PreviousSnapshot:
    """The snapshot ``manifest`` describes, as the sink reads it; a manifest naming any file outside its
    snapshot's table folders is refused, never followed."""
    problem = manifest_problem(manifest)
    if problem:
        raise DamagedDatasetError(f"the manifest of the snapshot to build on at {output_url} is damaged: {problem}")
    return PreviousSnapshot(
        root_url=output_url,
        parts={table: tuple(entry["files"]) for table, entry in manifest["tables"].items()},
        shards=int(manifest.get("config", {}).get("output", {}).get("shards", 0)) or 1,
        snapshot=manifest.get("snapshot") or manifest.get("run_id", ""),
    )


def plan_rebuild(
    config: RunConfig,
    previous_manifest: dict[str, Any] | None,
    previous_documents: pa.Table | None,
    listing: InputListing | None = None,
) -> RebuildPlan:
    """Decide how the run builds its snapshot from the previous one (see the module docstring).

    ``previous_documents`` is the previous snapshot's ``documents`` table (at least the
    :data:`PLANNED_COLUMNS`; one written before the metadata columns existed reads them as nulls), read by
    the caller through the manifest; ``listing`` the driver's listing of the inputs (listed here when not
    given). The plan is computed with Arrow over that table and the listing's columns.

    The documents that the previous snapshot holds under a folder that could not be listed now are carried
    over as they were; a full rebuild cannot do that, and raises :class:`PublishRefusedError` instead."""
    listing = list_inputs(config) if listing is None else listing
    previous_table = _planned_columns(previous_documents) if previous_documents is not None else None
    full_reason, previous = _full_rebuild_reason(config, previous_manifest, previous_documents)
    if full_reason is not None:
        _refuse_full_rebuild_over_unlisted(listing, previous_manifest, previous_table, full_reason)
        published = previous_table is not None and previous_manifest is not None
        return _full_plan(full_reason, previous, listing, previous_table.column("doc_id") if published else None)
    assert previous_table is not None and previous is not None
    listed, first_rows = _listed_table(listing)
    listed_ids = listed.column("doc_id").combine_chunks()
    # The position of each listed document's previous row (null: none, or a doc_id held twice), and that
    # row's size and metadata, aligned with the listing.
    position, before_ids = _previous_positions(previous_table, listed_ids)
    aligned = previous_table.select(["size_bytes", *_LISTED_COLUMNS]).take(position)
    candidate = _carry_candidates(config, listed, previous_table, position)
    same_listing = _all_same(listed, aligned, ("size_bytes", *_TOKEN_COLUMNS))
    has_token = _any_valid(listed, _TOKEN_COLUMNS)
    trusted = pc.and_(candidate, pc.and_(same_listing, has_token))
    if config.run.verify_content:
        trusted = bool_array([False] * len(trusted))
    to_hash = pc.and_(candidate, pc.invert(trusted))
    hashed_ids = listed.column("doc_id").filter(to_hash)
    unchanged_bytes = _unchanged_bytes(
        take_rows(listing.files, numpy_values(first_rows.filter(to_hash))),
        previous_table.column("content_sha256").take(position.filter(to_hash)),
        config,
    )
    carried_mask = pc.or_(trusted, pc.is_in(listed.column("doc_id"), value_set=unchanged_bytes))
    chunked = _rows_of(listing.documents, pc.invert(carried_mask))
    to_chunk = ListedDocuments.by_doc_id(take_rows(listing.files, chunked), listing.unlisted)
    kept = _kept_under_unlisted(listing, previous_table, listed_ids)
    total = len(listed_ids)
    # With documents kept for a folder that could not be listed, only this run can keep them: never full.
    if total and len(to_chunk) > _INCREMENTAL_MAX_SHARE * total and not len(kept):
        return _full_plan(
            f"{len(to_chunk)} of {total} documents need chunking", previous, listing, previous_table.column("doc_id")
        )
    carried_listed = listed if pc.all(carried_mask).as_py() else listed.filter(carried_mask)
    moved_ids = carried_listed.column("doc_id").filter(
        pc.invert(_all_same(listed, aligned, _LISTED_COLUMNS).filter(carried_mask))
    )
    carried = pa.concat_tables(
        [carried_listed.select(["doc_id", *_LISTED_COLUMNS]).cast(CARRIED_SCHEMA), kept.cast(CARRIED_SCHEMA)]
    )
    gone = pc.invert(pc.is_in(before_ids, value_set=listed_ids))
    if len(kept):
        gone = pc.and_(gone, pc.invert(pc.is_in(before_ids, value_set=kept.column("doc_id").combine_chunks())))
    deleted_ids = before_ids.filter(gone)
    touched = _shards(config, to_chunk.doc_ids().to_pylist())
    touched |= _shards(config, deleted_ids.to_pylist())
    # An error row with no document (a folder that could not be listed then) is made again or dropped.
    touched |= _shards(config, _documentless_errors(config, before_ids))
    moved = _shards(config, moved_ids.to_pylist())
    deleted = len(deleted_ids)
    reason = (
        f"{len(to_chunk)} of {total} documents to chunk, {carried.num_rows - len(kept)} carried over, {deleted} gone"
    )
    if len(kept):
        reason += f", {len(kept)} kept from {len(listing.unlisted)} folder(s) that could not be listed"
    plan = RebuildPlan("incremental", reason, previous, to_chunk, carried, touched, moved - touched, listed=True)
    plan.documents_before = len(before_ids)
    plan.documents_deleted = deleted
    plan.kept_unlisted = len(kept)
    plan.documents_read_to_compare = len(hashed_ids)
    return plan


#: The columns of the previous snapshot's documents table that a plan reads.
PLANNED_COLUMNS = (
    "doc_id",
    "source_uri",
    "status",
    "size_bytes",
    "content_sha256",
    *LISTED_METADATA_COLUMNS,
)
#: The listed change tokens: a file whose size and tokens are as the previous snapshot recorded them is
#: taken as unchanged without reading it (unless ``run.verify_content``).
_TOKEN_COLUMNS = ("source_mtime_ns", "source_etag", "source_version")
#: The documents columns a carried document takes from this run's listing (``modified_time`` in microseconds).
_LISTED_COLUMNS = LISTED_METADATA_COLUMNS
_LISTED_TYPES = {
    "modified_time": pa.int64(),
    "source_mtime_ns": pa.int64(),
    "source_etag": pa.string(),
    "source_version": pa.string(),
}
_FALSE = bool_array([False])[0]


def _planned_columns(documents: pa.Table) -> pa.Table:
    """The previous snapshot's documents as the plan reads them: the :data:`PLANNED_COLUMNS` (a column the
    table lacks is null), ``modified_time`` as microseconds since the epoch (int64)."""
    columns = []
    for name in PLANNED_COLUMNS:
        if name in documents.column_names:
            column = documents.column(name)
            if name == "modified_time":
                column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            columns.append(column)
        else:
            columns.append(pa.nulls(documents.num_rows, _LISTED_TYPES.get(name, pa.string())))
    return pa.table(columns, names=list(PLANNED_COLUMNS))


def _listed_table(listing: InputListing) -> tuple[pa.Table, pa.Array]:
    """(the listing, one row per listed doc_id, sorted: its first file's ``source_uri``, size and metadata,
    and ``sole`` (only one file holds the doc_id and it has no problem); the row of ``listing.files`` of
    each one's first file)."""
    documents = listing.documents
    first = documents.first_rows()
    names = ["doc_id", "source_uri", "size_bytes", "modified_time", "mtime_ns", "etag", "version", "problem_stage"]
    firsts = take_rows(listing.files.select(held_columns(names)), first)
    sole = pc.and_(
        pc.equal(_as_int64(np.diff(documents.starts)), int64_array([1])[0]), pc.is_null(firsts.column("problem_stage"))
    )
    table = pa.table(
        [
            firsts.column("doc_id").cast(pa.string()),
            firsts.column("source_uri").cast(pa.string()),
            firsts.column("size_bytes"),
            firsts.column("modified_time"),
            firsts.column("mtime_ns"),
            firsts.column("etag").cast(pa.string()),
            firsts.column("version").cast(pa.string()),
            sole,
        ],
        schema=_LISTED_SCHEMA,
    )
    return table.combine_chunks(), _as_int64(first)


def _rows_of(documents: ListedDocuments, chosen: pa.Array) -> np.ndarray:
    """The rows of ``documents.files`` of the pairs ``chosen`` (a mask over the pairs), in the pairs'
    order."""
    picked = np.flatnonzero(numpy_values(pc.fill_null(chosen, _FALSE)))
    lengths = np.diff(documents.starts)[picked]
    ends = np.cumsum(lengths)
    positions = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(
        documents.starts[picked] - (ends - lengths), lengths
    )
    return positions if documents.rows is None else documents.rows[positions]


def _as_int64(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


_BATCH_ROWS = 65_536
_LISTED_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source_uri", pa.string()),
        ("size_bytes", pa.int64()),
        ("modified_time", pa.int64()),
        ("source_mtime_ns", pa.int64()),
        ("source_etag", pa.string()),
        ("source_version", pa.string()),
        ("sole", pa.bool_()),
    ]
)


def _previous_positions(previous: pa.Table, doc_ids: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(the row of ``previous`` of each of ``doc_ids``, in their order: null where the previous snapshot
    has none, or has two (a duplicate across inputs, never carried over); the previous snapshot's doc_ids,
    each once)."""
    ids = previous.column("doc_id").combine_chunks()
    first = pc.index_in(ids, value_set=ids)
    rows = np.arange(len(ids), dtype=np.int32)
    is_first = pc.equal(first, pa.Array.from_buffers(pa.int32(), len(ids), [None, pa.py_buffer(rows)]))
    position = pc.index_in(doc_ids, value_set=ids)
    if pc.all(is_first).as_py() is not False:
        return position, ids
    held_twice = ids.filter(pc.invert(is_first))
    position = pc.if_else(pc.is_in(doc_ids, value_set=held_twice), pa.nulls(1, pa.int32())[0], position)
    return position, ids.filter(is_first)


def _carry_candidates(config: RunConfig, listed: pa.Table, previous: pa.Table, position: pa.Array) -> pa.Array:
    """Which listed documents may carry over if their bytes are unchanged: the file alone holds its doc_id,
    was ``ok`` in the previous snapshot (row ``position``) from the same ``source_uri`` with a content
    hash, and is within the size limit."""
    size = listed.column("size_bytes")
    limit = int64_array([config.input.max_file_bytes])[0]
    was_ok = pc.and_(
        pc.is_in(previous.column("status"), value_set=string_array(["ok"])),
        pc.greater(pc.binary_length(previous.column("content_sha256")), int64_array([0])[0].cast(pa.int32())),
    )
    conditions = [
        listed.column("sole"),
        was_ok.take(position),
        pc.equal(previous.column("source_uri").take(position), listed.column("source_uri")),
        pc.or_(pc.is_null(size), pc.less_equal(size, limit)),
    ]
    result = conditions[0]
    for condition in conditions[1:]:
        result = pc.and_(result, pc.fill_null(condition, _FALSE))
    return pc.fill_null(result, _FALSE)


def _all_same(left: pa.Table, right: pa.Table, names: tuple[str, ...]) -> pa.Array:
    """Row by row, whether ``left`` and ``right`` hold the same value in each of ``names`` (null = null)."""
    result = None
    for name in names:
        a, b = left.column(name), right.column(name)
        same = pc.or_(pc.fill_null(pc.equal(a, b), _FALSE), pc.and_(pc.is_null(a), pc.is_null(b)))
        result = same if result is None else pc.and_(result, same)
    return result


def _any_valid(table: pa.Table, names: tuple[str, ...]) -> pa.Array:
    result = None
    for name in names:
        valid = pc.is_valid(table.column(name))
        result = valid if result is None else pc.or_(result, valid)
    return result


def _unchanged_bytes(files: pa.Table, published: pa.Array, config: RunConfig) -> pa.Array:
    """The doc_ids of ``files`` (listed rows) whose bytes hash as ``published`` (their previous content
    SHA-256, in the same order)."""
    sources = source_files_of(files)
    digests = _content_digests(sources, config)
    return string_array(
        [
            source.doc_id
            for source, before in zip(sources, published.to_pylist())
            if digests.get(source.doc_id) == before
        ]
    )


def _shards(config: RunConfig, doc_ids: Any) -> set[int]:
    shards = config.output.shards
    return {shard_of(doc_id, shards) for doc_id in doc_ids}


def _full_plan(
    reason: str, previous: PreviousSnapshot | None, listing: InputListing, before: pa.ChunkedArray | None
) -> RebuildPlan:
    """A full rebuild of every listed document; ``before``: the previous snapshot's doc_ids, if known."""
    plan = RebuildPlan("full", reason, previous, to_chunk=listing.groups(), listed=True)
    if before is not None:
        before_ids = pc.unique(before.combine_chunks())
        listed_ids = listing.doc_ids()
        plan.documents_before = len(before_ids)
        plan.documents_deleted = len(before_ids) - (pc.sum(pc.is_in(before_ids, value_set=listed_ids)).as_py() or 0)
    return plan


def _full_rebuild_reason(
    config: RunConfig, previous_manifest: dict[str, Any] | None, previous_documents: pa.Table | None
) -> tuple[str | None, PreviousSnapshot | None]:
    """(why the run must be a full rebuild, or None if it can carry rows over; the snapshot to compare with)."""
    output_url = config.output.url or ""
    if previous_manifest is None:
        return "no published snapshot at the output yet", None
    compatible = previous_manifest.get("schema_version") == SCHEMA_VERSION
    previous = _previous_snapshot(previous_manifest, output_url) if compatible else None
    if previous is None:
        return f"the published snapshot has schema version {previous_manifest.get('schema_version')}", None
    if config.run.reindex:
        return "reindex requested", previous
    if previous_manifest.get("rebuild_fingerprint") != rebuild_fingerprint(config):
        return "the chunking, decoding or output settings differ from the published snapshot's", previous
    if previous_documents is None:
        return "the published documents table could not be read", previous
    return None, previous


def _documentless_errors(config: RunConfig, before_ids: pa.Array) -> list[str]:
    """doc_ids of the published snapshot's error rows that belong to no document (a folder that could not be
    listed): no carried document holds them, so their shard must be merged again, not copied."""
    errors = read_dataset(
        config.output.url or "", "errors", columns=["doc_id"], storage_options=config.output.storage_options
    ).column("doc_id")
    return errors.filter(pc.invert(pc.is_in(errors, value_set=before_ids))).to_pylist()


def _kept_under_unlisted(listing: InputListing, previous: pa.Table, listed_ids: pa.Array) -> pa.Table:
    """The previous snapshot's documents found below a folder that could not be listed now (and not found
    anywhere else this time): what a snapshot built from this listing alone would wrongly delete. One row
    per doc_id, with its previous row's listed metadata (:data:`_LISTED_COLUMNS`), which it keeps."""
    columns = ["doc_id", *_LISTED_COLUMNS]
    prefixes = [folder.source_uri.rstrip("/") + "/" for folder in listing.unlisted]
    if not prefixes:
        return previous.select(columns).slice(0, 0)
    source_uri = pc.fill_null(previous.column("source_uri"), string_array([""])[0])
    below = pc.starts_with(source_uri, prefixes[0])
    for prefix in prefixes[1:]:
        below = pc.or_(below, pc.starts_with(source_uri, prefix))
    below = pc.and_(below, pc.invert(pc.is_in(previous.column("doc_id"), value_set=listed_ids)))
    kept_ids = pc.unique(previous.column("doc_id").filter(below).combine_chunks())
    # Each doc_id's first row, as the previous snapshot holds it.
    return previous.select(columns).take(pc.index_in(kept_ids, value_set=previous.column("doc_id")))


def _refuse_full_rebuild_over_unlisted(
    listing: InputListing,
    previous_manifest: dict[str, Any] | None,
    previous: pa.Table | None,
    reason: str,
) -> None:
    """A full rebuild chunks everything again and carries nothing over: with a folder that could not be
    listed, it would lose the documents published from that folder, so it publishes nothing instead."""
    if not listing.unlisted or previous_manifest is None:
        return  # nothing was published from the folder: its error row is all there is to say
    kept = None
    if previous is not None:
        kept = len(_kept_under_unlisted(listing, previous, listing.doc_ids()))
        if not kept:
            return
    folder = listing.unlisted[0]
    lost = f"the {kept} document(s) published from it" if kept is not None else "the documents published from it"
    others = f" (and {len(listing.unlisted) - 1} more folder(s))" if len(listing.unlisted) > 1 else ""
    # The row's message reads "folder URL could not be listed (the error); the documents ...".
    detail = (
        folder.problem.message.partition(" could not be listed ")[2].partition("; the documents")[0]
        if folder.problem
        else ""
    )
    raise PublishRefusedError(
        f"folder {folder.source_uri}{others} could not be listed {detail}, and this run is a full rebuild ({reason}), "
        f"which cannot keep {lost}; nothing was published. Make the folder readable and run again, or move "
        "it out of the input to let its documents go"
    )


def refuse_full_rebuild_over_unlisted(
    unlisted: list[SourceFile],
    previous_manifest: dict[str, Any] | None,
    previous_documents: pa.Table | None,
    reason: str,
) -> None:
    """Raise :class:`PublishRefusedError` when a full rebuild (for ``reason``) would lose the documents
    ``previous_documents`` holds below a folder of ``unlisted`` (error rows of folders that could not be
    listed): the check :func:`plan_rebuild` makes, for a pipeline that listed its inputs itself."""
    previous = _planned_columns(previous_documents) if previous_documents is not None else None
    _refuse_full_rebuild_over_unlisted(InputListing(unlisted=list(unlisted)), previous_manifest, previous, reason)


def _content_digests(sources: list[SourceFile], config: RunConfig) -> dict[str, str | None]:
    """doc_id -> SHA-256 of the file's bytes now (None if it cannot be read: it is then chunked, and the
    pipeline reports why)."""
    filesystems = {
        index: fresh_filesystem(url, config.input.storage_options)[0] for index, url in enumerate(config.input.paths)
    }
    secrets = tuple(config.secrets())

    def digest(source: SourceFile) -> tuple[str, str | None]:
        fs = filesystems[source.input_index]

        def read() -> bytes:
            # A local file is opened as fsspec's LocalFileSystem opens it, without its file object around it.
            with open(source.path, "rb") if type(fs) is LocalFileSystem else fs.open(source.path, "rb") as handle:
                return handle.read()

        try:
            return source.doc_id, hashlib.sha256(
                with_storage_retries(read, source.source_uri, "read", secrets=secrets)
            ).hexdigest()
        except Exception:
            return source.doc_id, None

    local = all(isinstance(fs, LocalFileSystem) for fs in filesystems.values())
    if local or len(sources) < 64:
        # A local disk answers faster than threads hand work around; remote stores are waited on in parallel.
        return dict(map(digest, sources))
    with ThreadPoolExecutor(max_workers=_HASHING_THREADS) as pool:
        return dict(pool.map(digest, sources))


def write_shard_plans(plan: RebuildPlan, config: RunConfig, staging_url: str) -> None:
    """Write each shard's ``keep-<shard>.arrow`` (:func:`~chunkline.dataset.merge.shard_plan_bytes`): its
    carried documents with their metadata as listed now, and whether its previous parts can be copied as
    they are. The carried documents' shards are found a batch at a time; each plan is its shard's rows,
    taken with Arrow."""
    fs, root = url_to_fs(staging_url, **config.output.storage_options)
    shards = config.output.shards
    carried = plan.carried.cast(CARRIED_SCHEMA)
    shard_numbers = np.concatenate(
        [
            np.fromiter((shard_of(doc_id, shards) for doc_id in batch.column(0).to_pylist()), np.int64, len(batch))
            for batch in carried.select(["doc_id"]).to_batches(max_chunksize=_BATCH_ROWS)
        ]
        or [np.zeros(0, np.int64)]
    )
    for shard in range(shards):
        positions = np.flatnonzero(shard_numbers == shard).astype(np.int64)
        shard_plan = ShardPlan(
            carried.take(pa.Array.from_buffers(pa.int64(), len(positions), [None, pa.py_buffer(positions)])),
            rows_untouched=shard not in plan.touched_shards,
            documents_untouched=shard not in plan.touched_shards and shard not in plan.moved_shards,
        )
        write_file_atomically(
            fs, keep_plan_path(root, shard), shard_plan_bytes(shard_plan), secrets=tuple(config.secrets())
        )
