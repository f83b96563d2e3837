"""``ChunkDocuments``: decode each file and chunk it with the configured strategy.

The output has one element per document: the list of its ``(table, row)`` pairs, ``row`` a plain dict of
one of the dataset's tables: ``chunks``, ``documents`` (exactly one row per input document, whatever
became of it) and ``errors``. (One output rather than three tagged ones: the DaskRunner mixes up tagged
outputs.) Bad input never raises: a binary file, invalid UTF-8 under ``encoding_errors: strict``, a file
that was too large or could not be read, front matter that is refused, a document the parser or the
strategy fails on, or rows that the tables cannot hold each become one ``errors`` row and a ``documents``
row with status ``error``, and the run goes on. Every step that looks at a document runs inside that
per-document handling.

The tokenizer is loaded once per worker in ``DoFn.setup()``, from a local file (never the network).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import apache_beam as beam
import pyarrow as pa

from chunkline.config import ChunkConfig
from chunkline.engine import chunk_document
from chunkline.schemas import TABLE_SCHEMAS
from chunkline.structure import parse_markdown
from chunkline.tokenizers import get_token_counter
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.read import FileProblem, SourceFile, scrub

__all__ = ["ChunkDocuments", "decode_markdown", "looks_binary", "CHUNKS", "DOCUMENTS", "ERRORS"]

CHUNKS, DOCUMENTS, ERRORS = "chunks", "documents", "errors"

logger = logging.getLogger("chunkline")

# Share of control characters (other than tab, line breaks and form feed) above which text is binary.
_BINARY_CONTROL_SHARE = 0.10
_BINARY_SAMPLE_BYTES = 8192
_TEXT_CONTROLS = {9, 10, 12, 13}
# Every byte except the suspicious control bytes: deleting these leaves only the control bytes to count.
_NOT_SUSPICIOUS = bytes(byte for byte in range(256) if byte >= 32 or byte in _TEXT_CONTROLS)


def looks_binary(data: bytes) -> bool:
    """True for bytes that are not text: NUL bytes in invalid UTF-8, or mostly control characters."""
    sample = data[:_BINARY_SAMPLE_BYTES]
    if not sample:
        return False
    controls = len(sample.translate(None, _NOT_SUSPICIOUS))
    if controls / len(sample) > _BINARY_CONTROL_SHARE:
        return True
    if b"\x00" in sample:
        try:
            sample.decode("utf-8")
        except UnicodeDecodeError as error:
            # A sample cut inside a character is not proof of anything; a bad byte earlier is.
            return error.start < len(sample) - 4
    return False


# Bytes that start a character in UTF-8 (every byte but the continuation bytes 0x80-0xBF): deleting them
# leaves the continuation bytes, so a valid stretch's length in characters is bytes minus those left.
_CHARACTER_STARTS = bytes(byte for byte in range(256) if byte & 0xC0 != 0x80)
_REPLACE_AND_RECORD = "chunkline.replace_and_record"
_replaced_spans = threading.local()


def _replace_and_record(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: what ``errors="replace"`` does (one U+FFFD per invalid sequence the decoder
    reports), recording each sequence's byte span for :func:`decode_markdown`."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _replaced_spans.spans.append((error.start, error.end))
    return "\ufffd", error.end


codecs.register_error(_REPLACE_AND_RECORD, _replace_and_record)


def decode_markdown(data: bytes, errors: str) -> tuple[str, str, list[tuple[int, int]]]:
    """(text, encoding label, replaced bytes) of a file's bytes.

    A byte order mark stays in the text, so offsets match the file. With ``errors="replace"`` each run of
    invalid bytes that the strict decoder reports as one error becomes one U+FFFD, and the third item lists
    ``(char_offset, byte_length)`` for each, so byte offsets can still point into the file. The bytes are
    decoded once, whatever the number of errors."""
    if errors == "strict":
        return data.decode("utf-8"), "utf-8", []
    _replaced_spans.spans = spans = []
    try:
        text = data.decode("utf-8", _REPLACE_AND_RECORD)
    finally:
        _replaced_spans.spans = []
    replaced: list[tuple[int, int]] = []
    char_offset = 0
    valid_start = 0
    for error_start, error_end in spans:
        valid = data[valid_start:error_start]
        char_offset += len(valid) - len(valid.translate(None, _CHARACTER_STARTS))
        replaced.append((char_offset, error_end - error_start))
        char_offset += 1
        valid_start = error_end
    return text, ("utf-8 (replaced)" if replaced else "utf-8"), replaced


class _ChunkDocumentsFn(beam.DoFn):
    _PROGRESS_SECONDS = 10.0

    def __init__(self, config: ChunkConfig, encoding_errors: str, secrets: tuple[str, ...]):
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = secrets

    def setup(self) -> None:
        self._counter = get_token_counter(self._config.tokenizer, self._config.tokenizer_file)
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
            return list(self._problem_rows(source, source.problem))
        data = source.data or b""
        document_row = self._document_row(source, data)
        try:
            rows = self._chunk_rows(source, data, document_row)
        except _Problem as problem:
            failure = FileProblem(problem.stage, problem.error_type, problem.message)
            # A fresh row: the failed one may hold half of an ok row's values; how it decoded still holds.
            failed_row = self._document_row(source, data)
            failed_row["encoding"] = document_row["encoding"]
            return list(self._problem_rows(source, failure, failed_row))
        self._progress(len(data))
        return rows

    def _chunk_rows(
        self, source: SourceFile, data: bytes, document_row: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The rows of a document that chunks; raises :class:`_Problem` for one that does not."""
        with _failures_as_problems("decode", "the file could not be decoded"):
            if looks_binary(data):
                raise _Problem(
                    "decode",
                    "BinaryFile",
                    "file is binary (control bytes or NUL bytes in invalid UTF-8), not markdown text; "
                    "remove it from the input or leave it out with input.exclude",
                )
            try:
                text, encoding, replaced_bytes = decode_markdown(data, self._encoding_errors)
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
        _check_rows_fit_schemas(rows)
        return rows

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
        message = scrub(problem.message, self._secrets)
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


def _check_rows_fit_schemas(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """Convert the document's rows to Arrow as the writer will, so that a value its table cannot hold is
    this document's error row here rather than a failed write of a whole shard later."""
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for table, row in rows:
        by_table[table].append(row)
    for table, table_rows in by_table.items():
        try:
            pa.Table.from_pylist(table_rows, schema=TABLE_SCHEMAS[table][0])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
            detail = " ".join(str(error).split()) or type(error).__name__
            raise _Problem(
                "chunk", "RowDoesNotFitSchema", f"a {table} row of this document cannot be stored: {detail}"
            ) from None


class ChunkDocuments(beam.PTransform):
    """Chunk each :class:`SourceFile` into the list of its ``(table, row)`` pairs for ``chunks``,
    ``documents`` and ``errors``."""

    def __init__(self, config: ChunkConfig, encoding_errors: str = "strict", secrets: tuple[str, ...] = ()):
        super().__init__()
        if encoding_errors not in ("strict", "replace"):
            raise ValueError(f"encoding_errors must be 'strict' or 'replace', got {encoding_errors!r}")
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = tuple(secrets)

    def expand(self, sources: beam.PCollection[SourceFile]) -> beam.PCollection[list[tuple[str, dict[str, Any]]]]:
        return sources | "Chunk" >> beam.ParDo(_ChunkDocumentsFn(self._config, self._encoding_errors, self._secrets))

    def chunk_in_process(self, sources: Iterable[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The same chunking without a runner (see :mod:`chunkline.transforms.in_process`)."""
        return apply_in_process(_ChunkDocumentsFn(self._config, self._encoding_errors, self._secrets), sources)
