"""One document's rows, without Beam: decode a file, chunk it, and build its ``chunks``, ``sections``,
``documents`` and ``errors`` rows.

:class:`DocumentChunker` is the work of :class:`~chunkline.transforms.chunk.ChunkDocuments` (that module
tells what becomes of bad input: every problem is the document's own error row, never an exception). It has
a runner's lifecycle: the Beam DoFn subclasses it and counts each document in the pipeline's metrics, and a
run too small to start a runner for calls it directly (:func:`chunkline.dataset.bundle.run_bundle`), so both
build exactly the same rows. The tokenizer is loaded in ``setup()``, once per worker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from chunkline.config import ChunkConfig
from chunkline.dataset.bundle import BundleStep
from chunkline.dataset.decoding import BinaryFileError, decode_file
from chunkline.dataset.front_matter_columns import front_matter_values
from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.storage import scrub_secrets
from chunkline.encode_ahead import parse_encoding_ahead
from chunkline.engine import chunk_document_with_section_rows
from chunkline.schemas import SECTION_COLUMNS, FrontMatterColumn, table_schemas
from chunkline.tokenizers import counter_for, is_rust_panic

__all__ = ["CHUNKS", "DOCUMENTS", "ERRORS", "SECTIONS", "ConvertedRows", "DocumentChunker", "DocumentRows"]

CHUNKS, DOCUMENTS, ERRORS, SECTIONS = "chunks", "documents", "errors", "sections"

DocumentRows = list[tuple[str, dict[str, Any]]]
"""One document's rows: ``(table, row)`` pairs, ``row`` a plain dict of that table's columns."""


class ConvertedRows(list):
    """A chunked document's rows, or a batch of documents' rows (``(table, row dict)`` pairs, as
    :data:`DocumentRows`), with ``arrays``: the same rows already converted to Arrow, one struct array of the
    table's columns per table, its rows in the order of that table's pairs. The chunker converts every
    document it chunks (a value its table cannot hold is the document's error row), and the spill writes
    those arrays as they are instead of converting the rows a second time."""

    def __init__(self, rows: DocumentRows, arrays: dict[str, pa.StructArray]):
        super().__init__(rows)
        self.arrays = arrays


logger = logging.getLogger("chunkline")

_FRONT_MATTER_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, allow_nan=False)
"""Writes a document's front matter into its ``documents`` row: what ``json.dumps`` with these options does,
with the encoder built once rather than once per document."""


class DocumentChunker(BundleStep):
    """Decodes and chunks each :class:`~chunkline.dataset.inputs.SourceFile` into one list of its rows."""

    _PROGRESS_SECONDS = 10.0

    def __init__(
        self,
        config: ChunkConfig,
        encoding_errors: str,
        secrets: tuple[str, ...],
        front_matter_columns: tuple[FrontMatterColumn, ...] = (),
        *,
        encode_ahead: bool = False,
        process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    ):
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = secrets
        self._front_matter_columns = front_matter_columns
        self._encode_ahead = encode_ahead
        """Encode a large document's tokens on a second thread while it is parsed
        (:mod:`chunkline.encode_ahead`): for a run in one process on a machine with a core to spare."""
        self._process_hooks = process_hooks
        """What the program that owns the process does around the steps (:mod:`chunkline.dataset.process_hooks`)."""

    def setup(self) -> None:
        self._process_hooks.worker_setup()
        self._counter = counter_for(self._config)
        self._row_types = {
            table: pa.struct(list(schema)) for table, (schema, _) in table_schemas(self._front_matter_columns).items()
        }
        self._documents_done = 0
        self._bytes_done = 0
        self._last_report = time.monotonic()

    def process(self, source: SourceFile | list[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        # One element per document: a runner's cost per element is paid once, not once per chunk. A list of
        # documents (a batch) is chunked into one element for all of them (see rows_of_batch).
        if isinstance(source, list):
            yield from self.rows_of_batch(source)
            return
        yield self._rows(source)

    def _rows(self, source: SourceFile) -> list[tuple[str, dict[str, Any]]]:
        """The document's rows: its chunks and its ``documents`` row, or its error rows. Every step that
        looks at the document's bytes, text or front matter runs in here, so that whatever one document
        holds becomes its own error row and never an exception out of the DoFn (which would fail the run)."""
        return self._converted_alone(self._chunked(source))

    def rows_of_batch(self, sources: list[SourceFile]) -> list[DocumentRows]:
        """The rows of several documents, as one element: each document is chunked as :meth:`_rows` does,
        and the rows of all of them are converted to Arrow together (one conversion per table, rather than
        one per document and table). When some row cannot be stored, each document is converted on its own
        instead, and the documents whose rows do not fit are their own error rows, as one at a time; the
        elements are then one per document."""
        outcomes = [self._chunked(source) for source in sources]
        rows: DocumentRows = [
            pair
            for outcome in outcomes
            for pair in (outcome.rows if isinstance(outcome, _ChunkedDocument) else outcome)
        ]
        try:
            arrays = _rows_as_arrays(rows, self._row_types)
        except _Problem:
            return [self._converted_alone(outcome) for outcome in outcomes]
        for outcome in outcomes:
            if isinstance(outcome, _ChunkedDocument):
                self._count_chunked(outcome)
        return [ConvertedRows(rows, arrays)]

    def _converted_alone(self, outcome: _ChunkedDocument | DocumentRows) -> DocumentRows:
        if not isinstance(outcome, _ChunkedDocument):
            return outcome  # a document that did not chunk: its rows, counted already
        try:
            arrays = _rows_as_arrays(outcome.rows, self._row_types)
        except _Problem as problem:
            return self._failed(outcome, problem)
        self._count_chunked(outcome)
        return ConvertedRows(outcome.rows, arrays)

    def _chunked(self, source: SourceFile) -> _ChunkedDocument | DocumentRows:
        """The document chunked, its rows not yet converted; or the rows of a document that did not chunk
        (counted)."""
        if source.problem is not None:
            return self._counted(list(self._problem_rows(source, source.problem)))
        data = source.data or b""
        document_row = self._document_row(source, data)
        try:
            rows = self._chunk_rows(source, data, document_row)
        except _Problem as problem:
            return self._failed(_ChunkedDocument(source, data, document_row, []), problem)
        return _ChunkedDocument(source, data, document_row, rows)

    def _failed(self, outcome: _ChunkedDocument, problem: _Problem) -> DocumentRows:
        """The error rows of a document whose chunking or rows failed with ``problem`` (counted)."""
        failure = FileProblem(problem.stage, problem.error_type, problem.message)
        # A fresh row: the failed one may hold half of an ok row's values; how it decoded still holds.
        failed_row = self._document_row(outcome.source, outcome.data)
        failed_row["encoding"] = outcome.document_row["encoding"]
        return self._counted(list(self._problem_rows(outcome.source, failure, failed_row)))

    def _count_chunked(self, outcome: _ChunkedDocument) -> None:
        self._progress(len(outcome.data))
        self.count_document(
            outcome.document_row, [row["token_count"] for table, row in outcome.rows if table == CHUNKS]
        )

    def count_document(self, document_row: dict[str, Any], chunk_token_counts: list[int]) -> None:
        """Called with each document's ``documents`` row and its chunks' token counts (the Beam step counts
        them in the pipeline's metrics); nothing to do here."""

    def _counted(self, rows: DocumentRows) -> DocumentRows:
        """``rows`` of a document that did not chunk, its ``documents`` row (if it has one) counted."""
        for table, row in rows:
            if table == DOCUMENTS:
                self.count_document(row, [])
        return rows

    def _chunk_rows(
        self, source: SourceFile, data: bytes, document_row: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The rows of a document that chunks, not yet converted; raises :class:`_Problem` for one that does
        not."""
        with _failures_as_problems("decode", "the file could not be decoded"):
            try:
                text, encoding, replaced_bytes = decode_file(data, self._encoding_errors)
            except BinaryFileError as error:
                raise _Problem(
                    "decode", "BinaryFile", f"{error}; remove it from the input or leave it out with input.exclude"
                ) from None
            except UnicodeDecodeError as error:
                raise _Problem(
                    "decode",
                    "InvalidUtf8",
                    f"not valid UTF-8 at byte {error.start} ({error.reason}); fix the file or set "
                    "input.encoding_errors: replace to chunk it with U+FFFD in place of bad bytes",
                ) from None
        document_row["encoding"] = encoding
        with _failures_as_problems("parse", "markdown could not be parsed"), self._process_hooks.parsing(len(text)):
            document, offsets = parse_encoding_ahead(text, self._config.parser, self._counter, self._encode_ahead)
        front_matter = document.front_matter
        if front_matter is not None and front_matter.error is not None:
            raise _Problem("parse", "InvalidFrontMatter", front_matter.error)
        # A strategy's failure on one document must not stop the run; nor must a row that cannot be built or
        # stored.
        with _failures_as_problems("chunk"):
            chunks, section_rows = chunk_document_with_section_rows(
                document,
                self._config,
                self._counter,
                doc_id=source.doc_id,
                source_uri=source.source_uri,
                replaced_bytes=replaced_bytes,
                offsets=offsets,
            )
        with _failures_as_problems("chunk", "its rows could not be built"):
            rows: list[tuple[str, dict[str, Any]]] = [(CHUNKS, chunk.to_dict()) for chunk in chunks]
            if self._front_matter_columns:
                rows += self._promote_front_matter(source, front_matter.data if front_matter else None, rows)
            rows += [(SECTIONS, dict(zip(SECTION_COLUMNS, row))) for row in section_rows]
            document_row.update(
                status="ok",
                chunk_count=len(chunks),
                token_count=sum(chunk.token_count for chunk in chunks),
                title=document.title,
                front_matter=_FRONT_MATTER_JSON.encode(front_matter.data) if front_matter is not None else None,
            )
            rows.append((DOCUMENTS, document_row))
        return rows

    def _promote_front_matter(
        self, source: SourceFile, data: dict[str, Any] | None, rows: list[tuple[str, dict[str, Any]]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Add the promoted front-matter columns to the chunk ``rows``; returns an errors row for each value
        that does not fit its column's type or size (the column is null, the document is still chunked)."""
        values, problems = front_matter_values(data, self._front_matter_columns)
        for _, row in rows:
            row.update(values)
        return [
            (
                ERRORS,
                {
                    "doc_id": source.doc_id,
                    "source_uri": source.source_uri,
                    "stage": "parse",
                    "error_type": error_type,
                    "message": message,
                },
            )
            for error_type, message in problems
        ]

    def _progress(self, size: int) -> None:
        self._documents_done += 1
        self._bytes_done += size
        now = time.monotonic()
        if now - self._last_report >= self._PROGRESS_SECONDS:
            self._last_report = now
            logger.info(
                "chunkline: %d documents chunked so far by this worker (%.1f MB)",
                self._documents_done,
                self._bytes_done / 1e6,
            )

    @staticmethod
    def _document_row(source: SourceFile, data: bytes | None) -> dict[str, Any]:
        return {
            "doc_id": source.doc_id,
            "source_uri": source.source_uri,
            "status": "error",
            "size_bytes": source.size_bytes,
            "content_sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
            "modified_time": source.modified_time,
            "encoding": None,
            "chunk_count": 0,
            "token_count": 0,
            "title": None,
            "front_matter": None,
            "message": None,
            "source_mtime_ns": source.mtime_ns,
            "source_etag": source.etag,
            "source_version": source.version,
        }

    def _problem_rows(
        self, source: SourceFile, problem: FileProblem, document_row: dict[str, Any] | None = None
    ) -> Iterator[Any]:
        message = scrub_secrets(problem.message, self._secrets)
        row = document_row or self._document_row(source, source.data)
        row.update(status="skipped" if problem.skipped else "error", message=message)
        if problem.stage != "match" or source.path:
            yield DOCUMENTS, row
        if not problem.skipped:
            yield (
                ERRORS,
                {
                    "doc_id": source.doc_id,
                    "source_uri": source.source_uri,
                    "stage": problem.stage,
                    "error_type": problem.error_type,
                    "message": message,
                },
            )


def section_row(section: Any) -> dict[str, Any]:
    """The ``sections`` row of a :class:`~chunkline.record.SectionRecord`: its fields but ``text``."""
    row = {name: getattr(section, name) for name in SECTION_COLUMNS}
    row["heading_path"] = list(section.heading_path)
    return row


@dataclass
class _ChunkedDocument:
    """A document that chunked, before its rows are converted to Arrow."""

    source: SourceFile
    data: bytes
    document_row: dict[str, Any]
    rows: DocumentRows


class _Problem(Exception):
    def __init__(self, stage: str, error_type: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.error_type = error_type
        self.message = message


class _failures_as_problems:  # noqa: N801 (used as a context manager, as contextlib's are)
    """Any exception in the block becomes a :class:`_Problem` of ``stage``: the error's type, and its
    message on one line, after ``what_failed`` when given (a strategy's errors speak for themselves). So
    does a Rust extension's panic (a ``BaseException``); an interrupt or exit request is not caught.

    A class rather than a generator-based context manager: it is entered four times per document."""

    __slots__ = ("stage", "what_failed")

    def __init__(self, stage: str, what_failed: str | None = None):
        self.stage = stage
        self.what_failed = what_failed

    def __enter__(self) -> None:
        return None

    def __exit__(self, error_type: type[BaseException] | None, error: BaseException | None, traceback: Any) -> bool:
        if error is None or isinstance(error, _Problem):
            return False
        if not isinstance(error, Exception) and not is_rust_panic(error):
            return False
        detail = " ".join(str(error).split()) or type(error).__name__
        message = f"{self.what_failed}: {detail}" if self.what_failed else detail
        raise _Problem(self.stage, type(error).__name__, message) from None


def _rows_as_arrays(rows: DocumentRows, row_types: dict[str, pa.StructType]) -> dict[str, pa.StructArray]:
    """Documents' rows converted to Arrow as the writer stores them (``row_types``: each table's columns
    as a struct type, from the run's :func:`~chunkline.schemas.table_schemas`), one struct array per table;
    a value its table cannot hold is this document's error row here rather than a failed write of a whole
    shard later."""
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for table, row in rows:
        by_table[table].append(row)
    arrays = {}
    for table, table_rows in by_table.items():
        try:
            arrays[table] = pa.array(table_rows, type=row_types[table])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
            detail = " ".join(str(error).split()) or type(error).__name__
            raise _Problem(
                "chunk", "RowDoesNotFitSchema", f"a {table} row of this document cannot be stored: {detail}"
            ) from None
    return arrays
