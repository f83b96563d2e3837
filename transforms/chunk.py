"""``ChunkMarkdown`` and ``ChunkDocuments``: decode each file and chunk it with the configured strategy.

:class:`ChunkMarkdown` is the public transform: its :class:`ChunkMarkdownResult` gives the ``chunks``,
``documents`` and ``errors`` rows as schema'd PCollections (row types from
:mod:`chunkline.transforms.rows`). Underneath it, :class:`ChunkDocuments` does the work, and
its output has one element per document: the list of its ``(table, row)`` pairs, ``row`` a plain dict of
one of the dataset's tables: ``chunks``, ``documents`` (exactly one row per input document, whatever
became of it) and ``errors``. (One output rather than three tagged ones: the DaskRunner mixes up tagged
outputs. ``ChunkMarkdownResult`` picks each table from it in a step of its own, made only when asked
for, so the writer of ``chunkline run`` takes the per-document lists as they are.)

Bad input never raises: a binary file, invalid UTF-8 under ``encoding_errors: strict``, a file that was too
large or could not be read, front matter that is refused, a document the parser or the strategy fails on,
or rows that the tables cannot hold each become one ``errors`` row and a ``documents`` row with status
``error``, and the run goes on. Every step that looks at a document runs inside that
per-document handling. With promoted front-matter columns (``output.front_matter_columns``), a value that
does not fit its column's type is null there and one ``errors`` row (``FrontMatterTypeMismatch``) of a
document that is chunked all the same (see :mod:`chunkline.dataset.front_matter_columns`).

Decoding and the binary check are the dataset floor's (:mod:`chunkline.dataset.decoding`), shared with
``chunkline chunk``. The tokenizer is loaded once per worker in ``DoFn.setup()``, from a local file (never
the network). Each document is counted in the ``chunkline`` metrics (:mod:`chunkline.transforms.metrics`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import apache_beam as beam
import pyarrow as pa

from chunkline.config import ChunkConfig
from chunkline.dataset.decoding import BinaryFileError, decode_file
from chunkline.dataset.front_matter_columns import FRONT_MATTER_MISMATCH, front_matter_values
from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.settings import RunConfig
from chunkline.dataset.storage import scrub_secrets
from chunkline.engine import chunk_document
from chunkline.schemas import FrontMatterColumn, table_schemas
from chunkline.structure import parse_markdown
from chunkline.tokenizers import counter_for
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.metrics import count_document
from chunkline.transforms.rows import DocumentRow, ErrorRow, row_from_dict
from chunkline.transforms.rows import chunk_row_type as chunk_row_type_for

__all__ = ["CHUNKS", "DOCUMENTS", "ERRORS", "ChunkDocuments", "ChunkMarkdown", "ChunkMarkdownResult"]

CHUNKS, DOCUMENTS, ERRORS = "chunks", "documents", "errors"

logger = logging.getLogger("chunkline")


class _ChunkDocumentsFn(beam.DoFn):
    _PROGRESS_SECONDS = 10.0

    def __init__(
        self,
        config: ChunkConfig,
        encoding_errors: str,
        secrets: tuple[str, ...],
        front_matter_columns: tuple[FrontMatterColumn, ...] = (),
    ):
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = secrets
        self._front_matter_columns = front_matter_columns

    def setup(self) -> None:
        self._counter = counter_for(self._config)
        self._schemas = table_schemas(self._front_matter_columns)
        self._documents_done = 0
        self._bytes_done = 0
        self._last_report = time.monotonic()

    def process(self, source: SourceFile) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        # One element per document: a runner's cost per element is paid once, not once per chunk.
        yield self._rows(source)

    def _rows(self, source: SourceFile) -> list[tuple[str, dict[str, Any]]]:
        """The document's rows: its chunks and its ``documents`` row, or its error rows. Every step that
        looks at the document's bytes, text or front matter runs in here, so that whatever one document
        holds becomes its own error row and never an exception out of the DoFn (which would fail the run)."""
        if source.problem is not None:
            return _counted(list(self._problem_rows(source, source.problem)))
        data = source.data or b""
        document_row = self._document_row(source, data)
        try:
            rows = self._chunk_rows(source, data, document_row)
        except _Problem as problem:
            failure = FileProblem(problem.stage, problem.error_type, problem.message)
            # A fresh row: the failed one may hold half of an ok row's values; how it decoded still holds.
            failed_row = self._document_row(source, data)
            failed_row["encoding"] = document_row["encoding"]
            return _counted(list(self._problem_rows(source, failure, failed_row)))
        self._progress(len(data))
        count_document(document_row, [row["token_count"] for table, row in rows if table == CHUNKS])
        return rows

    def _chunk_rows(
        self, source: SourceFile, data: bytes, document_row: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The rows of a document that chunks; raises :class:`_Problem` for one that does not."""
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
        with _failures_as_problems("parse", "markdown could not be parsed"):
            document = parse_markdown(text)
        front_matter = document.front_matter
        if front_matter is not None and front_matter.error is not None:
            raise _Problem("parse", "InvalidFrontMatter", front_matter.error)
        # A strategy's failure on one document must not stop the run; nor must a row that cannot be built or
        # stored.
        with _failures_as_problems("chunk"):
            chunks = chunk_document(
                document,
                self._config,
                self._counter,
                doc_id=source.doc_id,
                source_uri=source.source_uri,
                replaced_bytes=replaced_bytes,
            )
        with _failures_as_problems("chunk", "its rows could not be built"):
            rows: list[tuple[str, dict[str, Any]]] = [(CHUNKS, chunk.to_dict()) for chunk in chunks]
            if self._front_matter_columns:
                rows += self._promote_front_matter(source, front_matter.data if front_matter else None, rows)
            document_row.update(
                status="ok",
                chunk_count=len(chunks),
                token_count=sum(chunk.token_count for chunk in chunks),
                title=document.title,
                front_matter=(
                    json.dumps(front_matter.data, sort_keys=True, ensure_ascii=False, allow_nan=False)
                    if front_matter is not None
                    else None
                ),
            )
            rows.append((DOCUMENTS, document_row))
        _check_rows_fit_schemas(rows, self._schemas)
        return rows

    def _promote_front_matter(
        self, source: SourceFile, data: dict[str, Any] | None, rows: list[tuple[str, dict[str, Any]]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Add the promoted front-matter columns to the chunk ``rows``; returns an errors row for each value
        that does not fit its column's type (the column is null, the document is still chunked)."""
        values, mismatches = front_matter_values(data, self._front_matter_columns)
        for _, row in rows:
            row.update(values)
        return [
            (
                ERRORS,
                {
                    "doc_id": source.doc_id,
                    "source_uri": source.source_uri,
                    "stage": "parse",
                    "error_type": FRONT_MATTER_MISMATCH,
                    "message": message,
                },
            )
            for message in mismatches
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


def _counted(rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """``rows`` of a document that did not chunk, its ``documents`` row (if it has one) counted."""
    for table, row in rows:
        if table == DOCUMENTS:
            count_document(row, [])
    return rows


class _Problem(Exception):
    def __init__(self, stage: str, error_type: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.error_type = error_type
        self.message = message


@contextmanager
def _failures_as_problems(stage: str, what_failed: str | None = None) -> Iterator[None]:
    """Any exception in the block becomes a :class:`_Problem` of ``stage``: the error's type, and its
    message on one line, after ``what_failed`` when given (a strategy's errors speak for themselves)."""
    try:
        yield
    except _Problem:
        raise
    except Exception as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        message = f"{what_failed}: {detail}" if what_failed else detail
        raise _Problem(stage, type(error).__name__, message) from None


def _check_rows_fit_schemas(
    rows: list[tuple[str, dict[str, Any]]], schemas: dict[str, tuple[pa.Schema, tuple[str, ...]]]
) -> None:
    """Convert the document's rows to Arrow as the writer will (``schemas``: the run's
    :func:`~chunkline.schemas.table_schemas`), so that a value its table cannot hold is this document's
    error row here rather than a failed write of a whole shard later."""
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for table, row in rows:
        by_table[table].append(row)
    for table, table_rows in by_table.items():
        try:
            pa.Table.from_pylist(table_rows, schema=schemas[table][0])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
            detail = " ".join(str(error).split()) or type(error).__name__
            raise _Problem(
                "chunk", "RowDoesNotFitSchema", f"a {table} row of this document cannot be stored: {detail}"
            ) from None


class ChunkDocuments(beam.PTransform):
    """Chunk each :class:`~chunkline.dataset.inputs.SourceFile` into the list of its ``(table, row)`` pairs for ``chunks``,
    ``documents`` and ``errors``."""

    def __init__(
        self,
        config: ChunkConfig,
        encoding_errors: str = "strict",
        secrets: tuple[str, ...] = (),
        *,
        front_matter_columns: tuple[FrontMatterColumn, ...] = (),
    ):
        super().__init__()
        if encoding_errors not in ("strict", "replace"):
            raise ValueError(f"encoding_errors must be 'strict' or 'replace', got {encoding_errors!r}")
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = tuple(secrets)
        self._front_matter_columns = tuple(front_matter_columns)

    def expand(self, sources: beam.PCollection[SourceFile]) -> beam.PCollection[list[tuple[str, dict[str, Any]]]]:
        return sources | "Chunk" >> beam.ParDo(self._fn())

    def chunk_in_process(self, sources: Iterable[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The same chunking without a runner (see :mod:`chunkline.transforms.in_process`)."""
        return apply_in_process(self._fn(), sources)

    def _fn(self) -> _ChunkDocumentsFn:
        return _ChunkDocumentsFn(self._config, self._encoding_errors, self._secrets, self._front_matter_columns)


def _picked(table: str, row_type: type) -> Callable[[list[tuple[str, dict[str, Any]]]], Iterator[Any]]:
    """A function yielding a document's rows of ``table`` as ``row_type`` rows."""

    def rows_of(document_rows: list[tuple[str, dict[str, Any]]]) -> Iterator[Any]:
        for row_table, row in document_rows:
            if row_table == table:
                yield row_from_dict(row_type, row)

    return rows_of


class ChunkMarkdownResult:
    """What :class:`ChunkMarkdown` outputs: ``chunks``, ``documents`` and ``errors``, three schema'd
    PCollections (also ``result["chunks"]`` and so on), and ``per_document``, the one PCollection they are
    picked from (one list of ``(table, row dict)`` pairs per document).

    Each table's PCollection is made the first time it is asked for, so a pipeline that only writes the
    dataset does not convert every chunk to a row and back. Pass the result to
    :class:`~chunkline.transforms.WriteChunkDataset`; after your own step on the chunks, pass
    ``result.with_chunks(your_chunks)``."""

    def __init__(self, per_document: beam.PCollection, row_types: dict[str, type], label: str):
        self.per_document = per_document
        self.pipeline = per_document.pipeline
        self.row_types = dict(row_types)
        self._label = label
        # Shared with the results with_chunks makes, so that each table is picked once.
        self._tables: dict[str, beam.PCollection] = {}
        self._replaced_chunks: beam.PCollection | None = None

    def __or__(self, transform: beam.PTransform) -> Any:
        # Only a writer of the whole result takes it; any other step goes on one of its PCollections.
        if getattr(transform, "takes_chunk_markdown_result", False):
            return transform.__ror__(self)
        raise TypeError(
            "apply your step to result.chunks, result.documents or result.errors; only WriteChunkDataset takes "
            "ChunkMarkdown's whole result"
        )

    @property
    def chunk_row_type(self) -> type:
        """The row type of ``chunks``: :data:`~chunkline.transforms.ChunkRow`, or with a config's promoted
        front-matter columns (``output.front_matter_columns``) a type that also has them as fields. Declare
        it as the output type of a step of yours that passes chunks on."""
        return self.row_types[CHUNKS]

    @property
    def chunks_replaced(self) -> bool:
        """True when :meth:`with_chunks` gave the chunks (the writer then writes those)."""
        return self._replaced_chunks is not None

    def __getitem__(self, table: str) -> beam.PCollection:
        if table not in self.row_types:
            raise KeyError(f"no output {table!r}; the outputs are {', '.join(self.row_types)}")
        if table == CHUNKS and self._replaced_chunks is not None:
            return self._replaced_chunks
        if table not in self._tables:
            row_type = self.row_types[table]
            self._tables[table] = self.per_document | f"{self._label}.{table}" >> beam.FlatMap(
                _picked(table, row_type)
            ).with_output_types(row_type)
        return self._tables[table]

    @property
    def chunks(self) -> beam.PCollection:
        """One row per chunk, of the chunk row type (:data:`~chunkline.transforms.ChunkRow` by default)."""
        return self[CHUNKS]

    @property
    def documents(self) -> beam.PCollection:
        """One :data:`~chunkline.transforms.DocumentRow` per input document, status ok, error or skipped."""
        return self[DOCUMENTS]

    @property
    def errors(self) -> beam.PCollection:
        """One :data:`~chunkline.transforms.ErrorRow` per problem: the documents that did not chunk."""
        return self[ERRORS]

    def with_chunks(self, chunks: beam.PCollection) -> ChunkMarkdownResult:
        """The same result with ``chunks`` (rows of the chunk row type, e.g. after a step of your own) in
        place of the chunker's: what :class:`~chunkline.transforms.WriteChunkDataset` then writes."""
        if chunks.pipeline is not self.pipeline:
            raise ValueError("with_chunks needs chunks of the same pipeline")
        replaced = ChunkMarkdownResult(self.per_document, self.row_types, self._label)
        replaced._tables = self._tables
        replaced._replaced_chunks = chunks
        return replaced


class ChunkMarkdown(beam.PTransform):
    """Chunk every :class:`~chunkline.dataset.inputs.SourceFile` of :class:`~chunkline.transforms.ReadMarkdown`
    with one config: a :class:`~chunkline.dataset.settings.RunConfig` (its ``chunking`` section, and its
    ``input.encoding_errors`` and storage credentials, kept out of messages) or a
    :class:`~chunkline.ChunkConfig` (strict UTF-8).

    The output is a :class:`ChunkMarkdownResult`: ``.chunks`` (schema'd rows, so ``beam.Select``,
    ``to_dataframe`` and Beam's writers work on them), ``.documents`` and ``.errors``. ``chunk_row_type``
    is the row type of the chunks (by default :data:`~chunkline.transforms.ChunkRow`; see
    :func:`~chunkline.transforms.row_type_for` for a chunks schema with more columns)."""

    def __init__(self, config: RunConfig | ChunkConfig, *, chunk_row_type: type | None = None):
        super().__init__()
        if isinstance(config, RunConfig):
            chunking, encoding_errors, secrets = config.chunking, config.input.encoding_errors, tuple(config.secrets())
            front_matter_columns = config.output.promoted_front_matter
        elif isinstance(config, ChunkConfig):
            chunking, encoding_errors, secrets, front_matter_columns = config, "strict", (), ()
        else:
            raise TypeError(f"ChunkMarkdown takes a RunConfig or a ChunkConfig, got {type(config).__name__}")
        self._documents = ChunkDocuments(chunking, encoding_errors, secrets, front_matter_columns=front_matter_columns)
        # The chunks table's schema decides the row type (promoted front-matter columns become fields).
        chunks_schema = table_schemas(front_matter_columns)[CHUNKS][0]
        self._row_types = {
            CHUNKS: chunk_row_type or chunk_row_type_for(chunks_schema),
            DOCUMENTS: DocumentRow,
            ERRORS: ErrorRow,
        }

    def expand(self, sources: beam.PCollection[SourceFile]) -> ChunkMarkdownResult:
        per_document = sources | "ChunkDocuments" >> self._documents
        return ChunkMarkdownResult(per_document, self._row_types, self.label)

    def chunk_in_process(self, sources: Iterable[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The per-document row lists without a runner (see :mod:`chunkline.transforms.in_process`)."""
        return self._documents.chunk_in_process(sources)
