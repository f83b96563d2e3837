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

The file is also read in byte ranges (:func:`read_listing_range`), as a text source is: each range gives
the documents whose lines start in it, so ranges that tile the file give every document once, and a
distributed runner can spread the reading of a long listing over its workers, each holding one range.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone

from fsspec.core import url_to_fs

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.layout import listing_path
from chunkline.dataset.listed_files import ListedDocuments, python_columns
from chunkline.dataset.storage import read_file_bytes, storage_call, storage_url, write_file_atomically

__all__ = [
    "RANGE_BYTES",
    "largest_first",
    "listing_size_bytes",
    "read_listing",
    "read_listing_range",
    "write_listing",
]

ListedDocument = tuple[str, list[SourceFile]]
"""One ``(doc_id, matched files)`` pair, one line of the file."""
Listing = list[ListedDocument]
"""``(doc_id, matched files)`` pairs, as the driver's listing gives them."""

RANGE_BYTES = 4 * 1024 * 1024
"""The bytes of the listing read as one range. A listed document takes about 400 bytes, so a range holds
about 10,000 documents: a listing of up to that many is read in one piece, in its order (see
:func:`largest_first`), and one of a million documents in about a hundred pieces, each small enough for
any worker to hold."""

_TAIL_READ_BYTES = 64 * 1024
"""How much more is read at a time to reach the end of a range's last line."""


def largest_first(matched: list[tuple[str, list[SourceFile]]]) -> list[tuple[str, list[SourceFile]]]:
    """The listed documents, largest first (then by doc_id). The FnApiRunner deals a stage's elements out to
    its worker processes in turn, each worker one share; dealt in this order, the shares' bytes differ by
    less than the largest file, so the workers finish their reads and chunking together. Unknown sizes go
    last. (The output does not depend on it: the merges sort every row.)

    A listing read in several ranges (:data:`RANGE_BYTES`) reaches the workers as a few such runs, each
    largest first and each holding only documents no larger than the smallest of the run before it in the
    file, so the shares still differ by little more than the largest file."""

    def size(pair: tuple[str, list[SourceFile]]) -> int:
        files = pair[1]
        return -1 if not files or files[0].size_bytes is None else files[0].size_bytes

    return sorted(matched, key=lambda pair: (-size(pair), pair[0]))


def write_listing(
    staging_url: str,
    matched: ListedDocuments | Sequence[tuple[str, list[SourceFile]]],
    storage_options: dict | None = None,
    secrets: tuple[str, ...] = (),
) -> str:
    """Stage ``matched`` in the run's staging area ``staging_url``, :func:`largest_first`; returns the file's
    URL (for :func:`read_listing`). The order is found with Arrow and the lines are written a batch at a
    time: a listing of millions of documents is never held as Python values or as one string."""
    fs, root = url_to_fs(staging_url, **(storage_options or {}))
    path = listing_path(root)
    documents = ListedDocuments.of_pairs(matched)
    order = documents.largest_first_order()

    def pieces() -> Iterator[bytes]:
        for lengths, rows in documents.row_batches(order):
            yield _listing_lines(lengths, python_columns(rows))

    write_file_atomically(fs, path, pieces, secrets=secrets)
    return listing_path(staging_url)


def _listing_lines(lengths: list[int], columns: dict[str, list]) -> bytes:
    """The lines of pairs of ``lengths`` files each, whose rows' values are ``columns``: each file's fields as
    JSON values, as :func:`_source_file` reads them (a listed file has no bytes yet; ``modified_time`` in
    microseconds since the epoch)."""
    problems = [
        None if stage is None else [stage, error_type, message, skipped]
        for stage, error_type, message, skipped in zip(
            columns["problem_stage"],
            columns["problem_error_type"],
            columns["problem_message"],
            columns["problem_skipped"],
        )
    ]
    fields = [
        {
            "doc_id": doc_id,
            "source_uri": source_uri,
            "input_index": input_index,
            "path": path,
            "size_bytes": size_bytes,
            "modified_time": modified_time,
            "problem": problem,
            "mtime_ns": mtime_ns,
            "etag": etag,
            "version": version,
        }
        for doc_id, source_uri, input_index, path, size_bytes, modified_time, problem, mtime_ns, etag, version in zip(
            columns["doc_id"],
            columns["source_uri"],
            columns["input_index"],
            columns["path"],
            columns["size_bytes"],
            columns["modified_time"],
            problems,
            columns["mtime_ns"],
            columns["etag"],
            columns["version"],
        )
    ]
    lines = []
    offset = 0
    for length in lengths:
        files = fields[offset : offset + length]
        lines.append(json.dumps([files[0]["doc_id"], files], ensure_ascii=False) + "\n")
        offset += length
    return "".join(lines).encode("utf-8", "surrogatepass")


def read_listing(url: str, storage_options: dict | None = None, secrets: tuple[str, ...] = ()) -> Listing:
    """The listing :func:`write_listing` staged at ``url``, in the order it was written."""
    fs, path = url_to_fs(url, **(storage_options or {}))
    data = read_file_bytes(fs, path, secrets=secrets)
    return [document for _, document in _listed_documents(data, 0, len(data))]


def listing_size_bytes(url: str, storage_options: dict | None = None, secrets: tuple[str, ...] = ()) -> int:
    """The size in bytes of the listing staged at ``url``: the extent of its ranges."""
    fs, path = url_to_fs(url, **(storage_options or {}))
    return storage_call(lambda: int(fs.size(path)), storage_url(fs, path), "read the size of", secrets)


def read_listing_range(
    url: str,
    start_byte: int,
    stop_byte: int,
    storage_options: dict | None = None,
    secrets: tuple[str, ...] = (),
) -> Iterator[tuple[int, ListedDocument]]:
    """The documents of the listing at ``url`` whose lines start in ``[start_byte, stop_byte)``, in the
    file's order, each with the byte offset its line starts at.

    As in a text source: a range that starts inside a line begins at the next line, and a line that starts
    in the range is read whole, past ``stop_byte`` if it runs on; so ranges that tile the file give every
    document exactly once. Only the range (and the end of its last line) is read."""
    fs, path = url_to_fs(url, **(storage_options or {}))
    first_byte, data = storage_call(
        lambda: _lines_starting_in(fs, path, start_byte, stop_byte), storage_url(fs, path), "read", secrets
    )
    return _listed_documents(data, first_byte, stop_byte)


def _lines_starting_in(fs, path: str, start_byte: int, stop_byte: int) -> tuple[int, bytes]:
    """The bytes of the whole lines that start in ``[start_byte, stop_byte)``, and the offset of the first
    (no bytes when no line starts there)."""
    if stop_byte <= start_byte:
        return start_byte, b""
    # From one byte before the range: a newline there means the range starts a line.
    begin = max(start_byte - 1, 0)
    with fs.open(path, "rb") as handle:
        handle.seek(begin)
        parts: list[bytes] = []
        held = 0
        while held < stop_byte - begin:
            part = handle.read(stop_byte - begin - held)
            if not part:
                break
            parts.append(part)
            held += len(part)
        data = b"".join(parts)
        skip = 0
        if start_byte > 0:
            skip = data.find(b"\n") + 1
            if skip == 0 or begin + skip >= stop_byte:
                return stop_byte, b""
        if held == stop_byte - begin and not data.endswith(b"\n"):
            # The last line starts in the range and runs past it: read on to its end.
            while True:
                part = handle.read(_TAIL_READ_BYTES)
                if not part:
                    break
                newline = part.find(b"\n")
                if newline >= 0:
                    parts.append(part[: newline + 1])
                    break
                parts.append(part)
            data = b"".join(parts)
    return begin + skip, data[skip:]


def _listed_documents(data: bytes, first_byte: int, stop_byte: int) -> Iterator[tuple[int, ListedDocument]]:
    """The documents of the lines in ``data`` (read from offset ``first_byte``) that start before
    ``stop_byte``, each with its line's offset. Lines end at a newline byte only: JSON escapes a newline
    inside a string, while other characters that ``str.splitlines`` breaks at (U+2028, U+0085) may stand
    unescaped in a doc_id."""
    line_start = 0
    while line_start < len(data) and first_byte + line_start < stop_byte:
        line_end = data.find(b"\n", line_start)
        if line_end < 0:
            line_end = len(data)
        yield first_byte + line_start, _listed_document(data[line_start:line_end])
        line_start = line_end + 1


def _listed_document(line: bytes) -> ListedDocument:
    """One line of the file: JSON, read as data only."""
    doc_id, files = json.loads(line.decode("utf-8", "surrogatepass"))
    return doc_id, [_source_file(fields) for fields in files]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
