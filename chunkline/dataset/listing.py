"""The driver's listing of the documents a run reads, staged as a file beside the run's other staged files.

A run's pipeline reads the documents the driver listed (see :mod:`chunkline.pipelines.run`): handed to the
pipeline as values, that list would travel inside the job's graph, pickled and compressed for each copy of
the graph the runner makes (three on the FnApiRunner: 0.43 s of the driver's time for 3,805 documents,
before anything runs), and a distributed runner's job graph has a size limit (Dataflow's is 10 MB). Staged
as a file, only its URL travels; the first step of the pipeline reads it back in the order it was written.

The file is the run's own (it lives in the run's staging area, which publishing removes): JSON lines, one
document per line, each with its matched files' fields (:class:`~chunkline.dataset.inputs.SourceFile`,
modification times in microseconds since the epoch, and the store's change tokens). Never a pickle: the staging area is storage that
others may write to, and reading must not run anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from fsspec.core import url_to_fs

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.layout import listing_path
from chunkline.dataset.storage import read_file_bytes, write_file_atomically

__all__ = ["largest_first", "read_listing", "write_listing"]

Listing = list[tuple[str, list[SourceFile]]]
"""``(doc_id, matched files)`` pairs, as the driver's listing gives them."""


def largest_first(matched: list[tuple[str, list[SourceFile]]]) -> list[tuple[str, list[SourceFile]]]:
    """The listed documents, largest first (then by doc_id). The FnApiRunner deals a stage's elements out to
    its worker processes in turn, each worker one share; dealt in this order, the shares' bytes differ by
    less than the largest file, so the workers finish their reads and chunking together. Unknown sizes go
    last. (The output does not depend on it: the merges sort every row.)"""

    def size(pair: tuple[str, list[SourceFile]]) -> int:
        files = pair[1]
        return -1 if not files or files[0].size_bytes is None else files[0].size_bytes

    return sorted(matched, key=lambda pair: (-size(pair), pair[0]))


def write_listing(
    staging_url: str,
    matched: Sequence[tuple[str, list[SourceFile]]],
    storage_options: dict | None = None,
    secrets: tuple[str, ...] = (),
) -> str:
    """Stage ``matched`` in the run's staging area ``staging_url``, :func:`largest_first`; returns the file's
    URL (for :func:`read_listing`)."""
    fs, root = url_to_fs(staging_url, **(storage_options or {}))
    path = listing_path(root)
    lines = [
        json.dumps([doc_id, [_file_fields(source) for source in files]], ensure_ascii=False)
        for doc_id, files in largest_first(list(matched))
    ]
    data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
    write_file_atomically(fs, path, data, secrets=secrets)
    return listing_path(staging_url)


def read_listing(url: str, storage_options: dict | None = None, secrets: tuple[str, ...] = ()) -> Listing:
    """The listing :func:`write_listing` staged at ``url``, in the order it was written."""
    fs, path = url_to_fs(url, **(storage_options or {}))
    text = read_file_bytes(fs, path, secrets=secrets).decode("utf-8", "surrogatepass")
    listing: Listing = []
    for line in text.splitlines():
        doc_id, files = json.loads(line)
        listing.append((doc_id, [_source_file(fields) for fields in files]))
    return listing


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def _file_fields(source: SourceFile) -> dict:
    """A listed file's fields as JSON values (a listed file has no bytes yet)."""
    modified = source.modified_time
    problem = source.problem
    return {
        "doc_id": source.doc_id,
        "source_uri": source.source_uri,
        "input_index": source.input_index,
        "path": source.path,
        "size_bytes": source.size_bytes,
        "modified_time": None if modified is None else (modified - _EPOCH) // _MICROSECOND,
        "problem": None if problem is None else [problem.stage, problem.error_type, problem.message, problem.skipped],
        "mtime_ns": source.mtime_ns,
        "etag": source.etag,
        "version": source.version,
    }


def _source_file(fields: dict) -> SourceFile:
    modified = fields["modified_time"]
    problem = fields["problem"]
    return SourceFile(
        doc_id=fields["doc_id"],
        source_uri=fields["source_uri"],
        input_index=fields["input_index"],
        path=fields["path"],
        size_bytes=fields["size_bytes"],
        modified_time=None if modified is None else _EPOCH + timedelta(microseconds=modified),
        problem=None if problem is None else FileProblem(*problem),
        mtime_ns=fields.get("mtime_ns"),
        etag=fields.get("etag"),
        version=fields.get("version"),
    )
