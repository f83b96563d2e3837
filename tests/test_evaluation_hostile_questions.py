"""Hostile questions files: every supported format (CSV, JSON Lines under .jsonl, .ndjson and .json, and a
file whose name says nothing, told apart by its contents) with hostile rows and hostile file kinds.

Each file is either read correctly (the questions listed) or refused in one :class:`QuestionsFileError`
line naming the file (and the row where there is one); ``chunkline evaluate`` on it exits 0 or 2 with that
one line, never a traceback, never a hang (every test has a timeout).
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from chunkline.evaluation.questions import MAX_QUESTION_CHARS, QuestionsFileError, load_questions
from chunkline.pipelines import cli

CORPUS_TEXT = "# Tides\n\nHigh water comes twice a day.\n"
REFERENCE = {"doc_id": "a.md", "start_char": 0, "end_char": 7}
CSV_REFERENCES = json.dumps([{"content": "# Tides", "start_index": 0, "end_index": 7}])
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json", "")  # "" : no suffix, told by its first character
CSV_SUFFIXES = (".csv", "")


def _jsonl(*questions: object, separator: str = "\n", reference: object = None) -> bytes:
    rows = [
        json.dumps({"question": question, "references": [reference or REFERENCE]}, ensure_ascii=False)
        for question in questions
    ]
    return (separator.join(rows) + separator).encode("utf-8")


def _csv(*questions: str, header: tuple[str, ...] = ("question", "references", "corpus_id")) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for question in questions:
        writer.writerow([question, CSV_REFERENCES, "a"] + ["x"] * (len(header) - 3))
    return out.getvalue().encode("utf-8")


def _row_text(row: str) -> bytes:
    return (json.dumps({"question": "Tides?", "references": [REFERENCE]}) + "\n" + row + "\n").encode("utf-8")


DEEP = "[" * 100_000 + "]" * 100_000
LONG_DIGITS = "1" + "0" * 5_000
LONG_QUESTION = "Where? " * 700  # 4,900 characters
LONG_PASSAGE = "High water comes twice a day. " * 10_000  # 300,000 characters: over csv's default field limit
PASSAGE = "High water comes twice a day. " * 700  # 21,000 characters

#: JSON Lines files: name -> (bytes, the questions read, or the error's text after "row N: " / the name).
JSON_CASES: dict[str, tuple[Callable[[], bytes], list[str] | str]] = {
    "crlf_row_ends": (lambda: _jsonl("Tides?", "Gauge?", separator="\r\n"), ["Tides?", "Gauge?"]),
    "u2028_u2029_u0085_inside_a_question": (
        lambda: _jsonl("Tides\u2028now?", "Gauge\u2029now?", "Office\x85now?"),
        ["Tides\u2028now?", "Gauge\u2029now?", "Office\x85now?"],
    ),
    "a_row_of_vertical_tab_form_feed_and_file_separator": (
        lambda: _jsonl("Tides?") + b"\x0b\x0c\x1c\n" + _jsonl("Gauge?"),
        ["Tides?", "Gauge?"],
    ),
    "bare_cr_row_ends": (lambda: _jsonl("Tides?", "Gauge?", separator="\r"), "row 1: not a JSON object (Extra data"),
    "byte_order_mark_first": (lambda: b"\xef\xbb\xbf" + _jsonl("Tides?"), ["Tides?"]),
    "byte_order_mark_on_row_2": (lambda: _jsonl("Tides?") + b"\xef\xbb\xbf" + _jsonl("Gauge?"), "row 2: "),
    "question_at_the_length_limit": (
        lambda: _jsonl("x" * MAX_QUESTION_CHARS, "Tides?"),
        ["x" * MAX_QUESTION_CHARS, "Tides?"],
    ),
    "question_over_the_length_limit": (lambda: _jsonl("Tides?", LONG_QUESTION), "row 2: the question is 4,900"),
    "question_of_5_mb": (lambda: _jsonl("tide " * 1_000_000), "row 1: the question is 5,000,000 characters"),
    "passage_of_21_000_characters": (
        lambda: _jsonl("Tides?", reference={**REFERENCE, "end_char": len(PASSAGE), "content": PASSAGE}),
        ["Tides?"],
    ),
    "doc_id_of_300_000_characters": (
        lambda: _jsonl("Tides?", reference={**REFERENCE, "doc_id": "a" * 300_000 + ".md"}),
        "row 1, reference 1: doc_id is 300,003 characters, longer than any path (4,096)",
    ),
    "references_nested_100_000_deep": (
        lambda: _row_text('{"question": "q", "references": ' + DEEP + "}"),
        "row 2: the row is JSON nested deeper",
    ),
    "row_nested_100_000_deep": (lambda: _row_text(DEEP), "row 2: the row is JSON nested deeper"),
    "offset_of_5_000_digits": (
        lambda: _row_text(
            '{"question": "q", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": ' + LONG_DIGITS + "}]}"
        ),
        "row 2: the row holds a number of more than 4,300 digits",
    ),
    "offset_1e999_and_nan": (
        lambda: _row_text(
            '{"question": "q", "references": [{"doc_id": "a.md", "start_char": NaN, "end_char": 1e999}]}'
        ),
        "row 2, reference 1: start_char is a number, not a whole number",
    ),
    "question_key_twice": (
        lambda: _row_text('{"question": "q", "question": "r", "references": []}'),
        "row 2: the row has the key 'question' twice",
    ),
    "end_char_twice_in_a_reference": (
        lambda: _row_text(
            '{"question": "q", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1, "end_char": 9}]}'
        ),
        "row 2: the row has the key 'end_char' twice",
    ),
    "lone_surrogate_escape_in_the_question": (
        lambda: _row_text(
            '{"question": "tide \\ud800 gauge", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}'
        ),
        "row 2: the question holds '\\ud800' at character 5",
    ),
    "nul_bytes_inside_a_question": (lambda: _jsonl("Tides\x00?"), ["Tides\x00?"]),
    "empty_file": (lambda: b"", "no questions in it"),
    "only_blank_lines": (lambda: b"\n \r\n\t\n", "no questions in it"),
    "only_a_byte_order_mark": (lambda: b"\xef\xbb\xbf", "no questions in it"),
    "png_bytes": (lambda: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 (byte 0)"),
    "latin_1_question": (lambda: _jsonl("Caf\u00e9?").replace("é".encode(), b"\xe9"), "not UTF-8 (byte 17)"),
    "utf_16_with_its_byte_order_mark": (lambda: _jsonl("Tides?").decode().encode("utf-16"), "not UTF-8 (byte 0)"),
    "a_json_array_not_lines": (
        lambda: b'[{"question": "q"}]\n',
        "row 1: not a JSON object but a list (a JSON questions file holds one object per line",
    ),
}

#: CSV files, in the same form.
CSV_CASES: dict[str, tuple[Callable[[], bytes], list[str] | str]] = {
    "crlf_rows": (lambda: _csv("Tides?", "Gauge?"), ["Tides?", "Gauge?"]),
    "lf_rows_and_u2028_inside_a_field": (
        lambda: _csv("Tides\u2028now?", "Gauge\x85now?").replace(b"\r\n", b"\n"),
        ["Tides\u2028now?", "Gauge\x85now?"],
    ),
    "newline_inside_a_quoted_question": (lambda: _csv("Tides\nnow?"), ["Tides\nnow?"]),
    "byte_order_mark_first": (lambda: b"\xef\xbb\xbf" + _csv("Tides?"), ["Tides?"]),
    "question_column_twice": (
        lambda: _csv("Tides?", header=("question", "references", "corpus_id", "question")),
        "the column question appears 2 times in the header",
    ),
    "an_unused_column_twice": (
        lambda: _csv("Tides?", header=("question", "references", "corpus_id", "notes", "notes")),
        ["Tides?"],
    ),
    "question_over_the_length_limit": (lambda: _csv("Tides?", LONG_QUESTION), "row 2: the question is 4,900"),
    "field_of_300_000_characters": (lambda: _csv("Tides?", LONG_PASSAGE), "row 2: "),
    "corpus_id_of_100_000_characters": (
        lambda: _csv("Tides?").replace(b",a\r\n", b"," + b"a" * 100_000 + b"\r\n"),
        "row 1: corpus_id is 100,000 characters, longer than any path (4,096)",
    ),
    "references_nested_60_000_deep": (
        lambda: _csv("Tides?").replace(
            CSV_REFERENCES.replace('"', '""').encode(), ("[" * 60_000 + "]" * 60_000).encode()
        ),
        "row 1: references is JSON nested deeper",
    ),
    "offset_of_5_000_digits": (
        lambda: _csv("Tides?").replace(b"7}", LONG_DIGITS.encode() + b"}"),
        "row 1: references holds a number of more than 4,300 digits",
    ),
    "a_row_with_a_missing_field": (lambda: _csv("Tides?") + b"Gauge?\r\n", "row 2: 3 columns expected"),
    "unclosed_quote": (lambda: _csv("Tides?") + b'"Gauge?,[],a\r\n', "row 2: "),
    "nul_bytes_in_a_field": (lambda: _csv("Tides\x00?"), ["Tides\x00?"]),
    "empty_file": (lambda: b"", "no column question, references, corpus_id"),
    "header_only": (lambda: _csv(), "no questions in it"),
    "png_bytes": (lambda: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 (byte 0)"),
    "latin_1_question": (lambda: _csv("Caf\u00e9?").replace("é".encode(), b"\xe9"), "not UTF-8"),
}


def _cases() -> list[tuple[str, str, Callable[[], bytes], list[str] | str]]:
    cases = []
    for suffixes, table in ((JSON_SUFFIXES, JSON_CASES), (CSV_SUFFIXES, CSV_CASES)):
        for name, (contents, expected) in table.items():
            for suffix in suffixes:
                # A file without a suffix is JSON Lines when it starts with "{"; the rest are read as CSV.
                if suffix == "" and table is JSON_CASES and not contents().lstrip(b"\xef\xbb\xbf \n").startswith(b"{"):
                    continue
                cases.append(
                    (
                        f"{'json' if table is JSON_CASES else 'csv'}_{name}{suffix or '_no_suffix'}",
                        suffix,
                        contents,
                        expected,
                    )
                )
    return cases


CASES = _cases()


def _assert_one_line_naming(message: str, path: Path, expected: str) -> None:
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"questions file {path}"), message
    assert expected in message, message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("label, suffix, contents, expected", CASES, ids=[case[0] for case in CASES])
@pytest.mark.slow
def test_a_hostile_questions_file_is_read_or_refused_in_one_line(tmp_path, label, suffix, contents, expected):
    path = tmp_path / f"questions{suffix}"
    path.write_bytes(contents())
    if isinstance(expected, list):
        assert [question.question for question in load_questions(str(path))] == expected
        return
    with pytest.raises(QuestionsFileError) as raised:
        load_questions(str(path))
    _assert_one_line_naming(str(raised.value), path, expected)


def _special_files(tmp_path: Path) -> dict[str, tuple[Path | str, str]]:
    """Paths that are no regular file (or no file at all), and what their refusal says."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    link_to_fifo = tmp_path / "link_to_fifo.csv"
    link_to_fifo.symlink_to(fifo)
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "gone.jsonl")
    listening = socket.socket(socket.AF_UNIX)
    socket_path = tmp_path / "socket.jsonl"
    listening.bind(str(socket_path))
    listening.close()
    return {
        "fifo": (fifo, "not a regular file"),
        "folder": (folder, "a folder, not a file"),
        "link_to_a_fifo": (link_to_fifo, "not a regular file"),
        "dangling_link": (dangling, "no such file"),
        "unix_socket": (socket_path, "not a regular file"),
        "dev_zero": (Path("/dev/zero"), "not a regular file"),
        "dev_null": (Path("/dev/null"), "not a regular file"),
        "dev_urandom": (Path("/dev/urandom"), "not a regular file"),
        "absent": (tmp_path / "absent.csv", "no such file"),
        "fifo_as_a_file_url": (f"file://{fifo}", "not a regular file (other)"),
        "folder_as_a_file_url": (f"file://{folder}", "a folder, not a file"),
    }


SPECIAL = [
    "fifo",
    "folder",
    "link_to_a_fifo",
    "dangling_link",
    "unix_socket",
    "dev_zero",
    "dev_null",
    "dev_urandom",
    "absent",
    "fifo_as_a_file_url",
    "folder_as_a_file_url",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", SPECIAL)
def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path, kind):
    path, expected = _special_files(tmp_path)[kind]
    with pytest.raises(QuestionsFileError) as raised:
        load_questions(str(path))
    assert str(raised.value) == f"questions file {path}: {expected}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "a.md").write_text(CORPUS_TEXT + PASSAGE, encoding="utf-8")
    return folder


def _evaluate(capsys, corpus: Path, questions: Path) -> tuple[int, str, str]:
    status = cli.main(["evaluate", str(corpus), "--questions", str(questions), "--format", "json"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_refused(status: int, err: str, path: Path, expected: str) -> None:
    assert status == 2, err
    errors = [line for line in err.splitlines() if line.startswith("chunkline: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    _assert_one_line_naming(errors[0].removeprefix("chunkline: error: "), path, expected)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("label, suffix, contents, expected", CASES, ids=[case[0] for case in CASES])
@pytest.mark.slow
def test_chunkline_evaluate_on_a_hostile_questions_file_exits_0_or_2(
    capsys, tmp_path, corpus, label, suffix, contents, expected
):
    path = tmp_path / f"questions{suffix}"
    path.write_bytes(contents())
    status, out, err = _evaluate(capsys, corpus, path)
    if isinstance(expected, list):
        assert status == 0, err
        assert json.loads(out)["questions"] == len(expected)
    else:
        _assert_refused(status, err, path, expected)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", SPECIAL)
def test_chunkline_evaluate_refuses_what_is_not_a_regular_file(capsys, tmp_path, corpus, kind):
    path, expected = _special_files(tmp_path)[kind]
    _assert_refused(*_evaluate(capsys, corpus, path)[::2], path, expected)
