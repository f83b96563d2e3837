"""Questions with reference spans: what a retrieval should find, as document + character ranges.

Two formats are read, told apart by the file's suffix (``.csv``; ``.jsonl``, ``.ndjson`` or ``.json``) or,
for any other name, by its first character (``{`` starts JSON Lines):

- Chroma's ``questions_df.csv`` as it is: columns ``question``, ``references`` (a JSON list of
  ``{"content", "start_index", "end_index"}``) and ``corpus_id``; the document is ``<corpus_id>.md``.
- JSON Lines, one question per line::

      {"question": "...", "references": [{"doc_id": "guide/setup.md", "start_char": 120, "end_char": 310}]}

A reference's range is half-open, in characters of the document as ``chunkline run`` decodes it, and its
``doc_id`` the one ``chunkline run`` gives the file (its POSIX path relative to the corpus folder). A
reference may carry its ``content``; its length must then be the range's. A bad row is one
:class:`QuestionsFileError` naming the file, the row and what is wrong with it.

Bounds: the file is a regular file of at most :data:`MAX_QUESTIONS_FILE_BYTES` (a FIFO or a device is
refused before it is opened). A question has at most :data:`MAX_QUESTION_CHARS` characters (the embedder's
memory grows with the longest question) and no half of a surrogate pair (a lone ``\\ud800`` escape); a doc
id or ``corpus_id`` at most :data:`MAX_DOC_ID_CHARS`. A JSON Lines row ends at a line feed only (a carriage
return before it is dropped; U+2028 or U+0085 inside a string is text). A key or a CSV column that appears
twice is refused, as are JSON nested deeper than Python's parser goes and numbers of more digits than Python
converts. A CSV field is read up to Python's ``csv.field_size_limit()`` (131,072 characters unless the
program raised it; ``chunkline evaluate`` raises it to :data:`MAX_CSV_FIELD_CHARS`, so that a long passage
in ``references`` is read).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_CSV_FIELD_CHARS",
    "MAX_DOC_ID_CHARS",
    "MAX_QUESTION_CHARS",
    "MAX_QUESTIONS_FILE_BYTES",
    "ReferenceSpan",
    "Question",
    "QuestionsFileError",
    "load_questions",
    "parse_questions",
]

#: The largest questions file read (a file of 300 questions with their passages is about 150 kB).
MAX_QUESTIONS_FILE_BYTES = 256 * 2**20

#: The longest question, in characters (about 1,000 words): longer text is a passage, not a question, and
#: the embedder holds one 1 KB vector per token of the longest question of a batch.
MAX_QUESTION_CHARS = 4_000

#: The longest doc id (or CSV ``corpus_id``), in characters: a path no file system holds is longer.
MAX_DOC_ID_CHARS = 4_096

#: The CSV field limit ``chunkline evaluate`` reads with: a reference's ``content`` may be a whole document
#: (``chunkline run`` reads files of up to 50 MB by default), escaped as JSON inside the field.
MAX_CSV_FIELD_CHARS = 64 * 2**20


@dataclass(frozen=True, slots=True)
class ReferenceSpan:
    """One passage that answers a question."""

    doc_id: str
    """The doc id ``chunkline run`` gives the file (POSIX path relative to the corpus root)."""
    start_char: int
    """Offset of the passage's first character in the decoded document."""
    end_char: int
    """Offset just past the passage's last character (half-open)."""


@dataclass(frozen=True, slots=True)
class Question:
    """A question and the passages that answer it."""

    question: str
    references: tuple[ReferenceSpan, ...]


class QuestionsFileError(ValueError):
    """A questions file that cannot be read, or one of its rows that is not a valid question."""


def load_questions(path: str, *, storage_options: dict | None = None) -> list[Question]:
    """The questions of the file at ``path`` (a local path or any fsspec URL), in file order."""
    from chunkline.tokenizers import read_regular_file

    try:
        data = read_regular_file(path, MAX_QUESTIONS_FILE_BYTES, "a questions file", storage_options)
    except ValueError as error:
        problem = str(error)
        raise QuestionsFileError(
            f"questions file {path}: {'a folder, not a file' if problem == 'a folder' else problem}"
        ) from None
    except (OSError, ImportError) as error:  # ImportError: the fsspec package of the URL's protocol is missing
        why = getattr(error, "strerror", None) or error
        raise QuestionsFileError(f"questions file {path}: cannot be read ({why})") from None
    except Exception as error:  # a storage's own error (no credentials, a refused request), in one line
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise QuestionsFileError(
            f"questions file {path}: cannot be read ({type(error).__name__}: {first_line})"
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise QuestionsFileError(f"questions file {path}: not UTF-8 (byte {error.start})") from None
    return parse_questions(text, path)


def parse_questions(text: str, name: str) -> list[Question]:
    """The questions in ``text``, the contents of the file ``name`` (whose suffix picks the format)."""
    lower = name.lower()
    if lower.endswith(".csv"):
        rows = _csv_questions(text, name)
    elif lower.endswith((".jsonl", ".ndjson", ".json")) or text.lstrip().startswith("{"):
        rows = _jsonl_questions(text, name)
    else:
        rows = _csv_questions(text, name)
    questions = list(rows)
    if not questions:
        raise QuestionsFileError(f"questions file {name}: no questions in it")
    return questions


class _RepeatedKeyError(Exception):
    def __init__(self, key: str):
        self.key = key


def _object_without_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: set[str] = set()
        raise _RepeatedKeyError(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return record


def _json_value(text: str, where: str, what: str, not_json: str) -> Any:
    """``text`` parsed as JSON, or one :class:`QuestionsFileError` saying why it cannot be (``what`` names
    the text: "references", "the row"; ``not_json`` says what a syntax error means)."""
    try:
        return json.loads(text, object_pairs_hook=_object_without_repeated_keys)
    except json.JSONDecodeError as error:
        raise QuestionsFileError(f"{where}: {not_json} ({error.msg} at character {error.pos})") from None
    except _RepeatedKeyError as error:
        raise QuestionsFileError(f"{where}: {what} has the key {error.key!r} twice") from None
    except RecursionError:
        raise QuestionsFileError(f"{where}: {what} is JSON nested deeper than Python's parser reads") from None
    except ValueError:  # an integer Python will not convert (sys.get_int_max_str_digits)
        raise QuestionsFileError(
            f"{where}: {what} holds a number of more than {sys.get_int_max_str_digits():,} digits"
        ) from None


def _csv_error(error: csv.Error, where: str) -> QuestionsFileError:
    if "field limit" in str(error):
        return QuestionsFileError(
            f"{where}: a field over {csv.field_size_limit():,} characters, the most Python's csv reader takes "
            "(csv.field_size_limit)"
        )
    return QuestionsFileError(f"{where}: not CSV ({error})")


def _csv_rows(reader: csv.DictReader, name: str) -> Iterator[tuple[int, dict]]:
    """(row number, row) of ``reader``; a row csv cannot read is one :class:`QuestionsFileError`."""
    row_number = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise _csv_error(error, f"questions file {name}, row {row_number + 1}") from None
        row_number += 1
        yield row_number, row


def _csv_questions(text: str, name: str) -> Iterator[Question]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        columns = reader.fieldnames or []
    except csv.Error as error:
        raise _csv_error(error, f"questions file {name}, header") from None
    missing = [column for column in ("question", "references", "corpus_id") if column not in columns]
    if missing:
        raise QuestionsFileError(
            f"questions file {name}: no column {', '.join(missing)} (a questions CSV has the columns question, "
            f"references and corpus_id; this one has {', '.join(columns) or 'none'})"
        )
    repeated = [column for column in ("question", "references", "corpus_id") if columns.count(column) > 1]
    if repeated:
        raise QuestionsFileError(
            f"questions file {name}: the column {repeated[0]} appears {columns.count(repeated[0])} times in the "
            "header; keep one"
        )
    for row_number, row in _csv_rows(reader, name):
        where = f"questions file {name}, row {row_number}"
        if None in row or any(value is None for value in row.values()):
            raise QuestionsFileError(f"{where}: {len(columns)} columns expected, found a different number")
        corpus_id = row["corpus_id"].strip()
        if not corpus_id:
            raise QuestionsFileError(f"{where}: corpus_id is empty")
        _check_doc_id_length(corpus_id, where, "corpus_id")
        question = _question_text(row["question"], where)
        references = _json_value(row["references"], where, "references", "references is not JSON")
        yield Question(
            question,
            _references(references, where, doc_id=f"{corpus_id}.md", start_key="start_index", end_key="end_index"),
        )


def _jsonl_questions(text: str, name: str) -> Iterator[Question]:
    # Only \n ends a row: str.splitlines would also split at U+2028, U+0085 and the other Unicode line
    # breaks, which JSON allows raw inside a string.
    for line_number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"questions file {name}, row {line_number}"
        record = _json_value(line, where, "the row", "not a JSON object")
        if not isinstance(record, dict):
            raise QuestionsFileError(
                f"{where}: not a JSON object but {_kind(record)} (a JSON questions file holds one object per line, "
                "JSON Lines)"
            )
        unknown = sorted(set(record) - {"question", "references"})
        if unknown:
            raise QuestionsFileError(f"{where}: unknown key {unknown[0]!r} (a row has question and references)")
        if "references" not in record:
            raise QuestionsFileError(f"{where}: no references")
        yield Question(
            _question_text(record.get("question"), where),
            _references(record["references"], where, doc_id=None, start_key="start_char", end_key="end_char"),
        )


def _question_text(value: Any, where: str) -> str:
    if value is not None and not isinstance(value, str):
        raise QuestionsFileError(f"{where}: the question is {_kind(value)}, not text")
    if not value or not value.strip():
        raise QuestionsFileError(f"{where}: the question is empty")
    if len(value) > MAX_QUESTION_CHARS:
        raise QuestionsFileError(
            f"{where}: the question is {len(value):,} characters, over the {MAX_QUESTION_CHARS:,} a question can have"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:  # a lone JSON \ud800 escape: no character, and no tokenizer takes it
        raise QuestionsFileError(
            f"{where}: the question holds {value[error.start]!r} at character {error.start}, half of a surrogate "
            "pair, which is not text"
        ) from None
    return value


def _references(
    value: Any, where: str, *, doc_id: str | None, start_key: str, end_key: str
) -> tuple[ReferenceSpan, ...]:
    """The reference spans of one row: ``doc_id`` is the CSV row's document, or None when each reference
    names its own (JSON Lines)."""
    if not isinstance(value, list):
        raise QuestionsFileError(f"{where}: references is {_kind(value)}, not a list")
    if not value:
        raise QuestionsFileError(f"{where}: references is empty (every question needs at least one passage)")
    spans = []
    for number, reference in enumerate(value, start=1):
        at = f"{where}, reference {number}"
        if not isinstance(reference, dict):
            raise QuestionsFileError(f"{at}: {_kind(reference)}, not an object")
        document = doc_id
        if document is None:
            document = reference.get("doc_id")
            if not isinstance(document, str) or not document:
                raise QuestionsFileError(f"{at}: no doc_id")
            _check_doc_id_length(document, at, "doc_id")
        start, end = reference.get(start_key), reference.get(end_key)
        for key, offset in ((start_key, start), (end_key, end)):
            if offset is None:
                raise QuestionsFileError(f"{at}: no {key}")
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise QuestionsFileError(f"{at}: {key} is {_kind(offset)}, not a whole number")
        if not 0 <= start < end:
            raise QuestionsFileError(f"{at}: {start_key} {start} and {end_key} {end} are not a range 0 <= start < end")
        content = reference.get("content")
        if content is not None and (not isinstance(content, str) or len(content) != end - start):
            length = f"{len(content)} characters" if isinstance(content, str) else _kind(content)
            raise QuestionsFileError(f"{at}: content is {length}, but the range {start}..{end} has {end - start}")
        spans.append(ReferenceSpan(document, start, end))
    return tuple(spans)


def _check_doc_id_length(doc_id: str, where: str, key: str) -> None:
    if len(doc_id) > MAX_DOC_ID_CHARS:
        raise QuestionsFileError(
            f"{where}: {key} is {len(doc_id):,} characters, longer than any path ({MAX_DOC_ID_CHARS:,})"
        )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )
