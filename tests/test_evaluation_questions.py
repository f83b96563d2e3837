"""Questions files: Chroma's questions_df.csv as it is, JSON Lines, and one clear error per bad row."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from chunkline.evaluation.questions import (
    MAX_CSV_FIELD_CHARS,
    MAX_QUESTION_CHARS,
    Question,
    QuestionsFileError,
    ReferenceSpan,
    load_questions,
)

FIXTURES = Path(__file__).parent / "fixtures" / "evaluation"
CHROMA_CSV = FIXTURES / "chroma_questions.csv"


def test_chroma_csv_is_read_as_it_is():
    questions = load_questions(str(CHROMA_CSV))
    assert [question.question for question in questions] == [
        "How often does the tide come in?",
        "When do spring tides and neap tides happen?",
        "Which ships must take a pilot?",
    ]
    assert questions[0].references == (ReferenceSpan("tides.md", 0, 56), ReferenceSpan("tides.md", 57, 140))
    assert questions[2].references == (ReferenceSpan("harbour.md", 133, 181),)


def test_chroma_csv_offsets_slice_out_each_reference_content():
    """The fixture's offsets are exact: each range slices its ``content`` out of ``<corpus_id>.md``."""
    import csv

    with CHROMA_CSV.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    questions = load_questions(str(CHROMA_CSV))
    assert len(rows) == len(questions)
    for row, question in zip(rows, questions):
        contents = [reference["content"] for reference in json.loads(row["references"])]
        for content, span in zip(contents, question.references, strict=True):
            text = (FIXTURES / "chroma_corpus" / span.doc_id).read_text(encoding="utf-8")
            assert text[span.start_char : span.end_char] == content


def test_json_lines_with_references_in_several_documents(tmp_path):
    path = tmp_path / "questions.jsonl"
    rows = [
        {
            "question": "Where is the gauge zeroed?",
            "references": [
                {"doc_id": "guide/sensors.md", "start_char": 10, "end_char": 42},
                {"doc_id": "reference/glossary.md", "start_char": 0, "end_char": 5},
            ],
        },
        {"question": "Wer öffnet das Büro? 🌊", "references": [{"doc_id": "a b.md", "start_char": 3, "end_char": 4}]},
    ]
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n\n", encoding="utf-8")
    assert load_questions(str(path)) == [
        Question(
            "Where is the gauge zeroed?",
            (ReferenceSpan("guide/sensors.md", 10, 42), ReferenceSpan("reference/glossary.md", 0, 5)),
        ),
        Question("Wer öffnet das Büro? 🌊", (ReferenceSpan("a b.md", 3, 4),)),
    ]


def test_a_file_on_fsspec_storage_is_read(tmp_path):
    import fsspec

    with fsspec.open("memory://evaluation/questions.csv", "wb") as handle:
        handle.write(CHROMA_CSV.read_bytes())
    assert load_questions("memory://evaluation/questions.csv") == load_questions(str(CHROMA_CSV))


def test_format_is_told_by_contents_when_the_suffix_says_nothing(tmp_path):
    jsonl = tmp_path / "questions.txt"
    jsonl.write_text('{"question": "q", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}\n')
    csv_file = tmp_path / "questions_df"
    csv_file.write_bytes(CHROMA_CSV.read_bytes())
    assert load_questions(str(jsonl)) == [Question("q", (ReferenceSpan("a.md", 0, 1),))]
    assert len(load_questions(str(csv_file))) == 3


def _csv_row(references: object, question: str = "What?", corpus_id: str = "tides") -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["question", "references", "corpus_id"])
    writer.writerow([question, references if isinstance(references, str) else json.dumps(references), corpus_id])
    return out.getvalue()


@pytest.mark.parametrize(
    "contents, problem",
    [
        (_csv_row("[{not json"), "row 1: references is not JSON"),
        (_csv_row([]), "row 1: references is empty"),
        (_csv_row({"start_index": 0}), "row 1: references is an object, not a list"),
        (_csv_row([{"start_index": 5, "end_index": 5}]), "row 1, reference 1: start_index 5 and end_index 5"),
        (_csv_row([{"start_index": -1, "end_index": 5}]), "row 1, reference 1: start_index -1"),
        (_csv_row([{"start_index": "0", "end_index": 5}]), "start_index is text, not a whole number"),
        (_csv_row([{"start_index": 0, "end_index": 5.5}]), "end_index is a number, not a whole number"),
        (_csv_row([{"start_index": True, "end_index": 5}]), "start_index is a boolean"),
        (_csv_row([{"end_index": 5}]), "row 1, reference 1: no start_index"),
        (
            _csv_row([{"content": "Tides", "start_index": 0, "end_index": 6}]),
            "content is 5 characters, but the range 0..6 has 6",
        ),
        (_csv_row([{"start_index": 0, "end_index": 6}], question=" "), "row 1: the question is empty"),
        (_csv_row([{"start_index": 0, "end_index": 6}], corpus_id=""), "row 1: corpus_id is empty"),
        ("question,refs,corpus_id\nq,[],a\n", "no column references"),
        ("question,references,corpus_id\n", "no questions in it"),
    ],
)
def test_bad_csv_rows_are_one_error_naming_file_and_row(tmp_path, contents, problem):
    path = tmp_path / "questions.csv"
    path.write_text(contents, encoding="utf-8")
    with pytest.raises(QuestionsFileError) as raised:
        load_questions(str(path))
    message = str(raised.value)
    assert problem in message
    assert str(path) in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "line, problem",
    [
        ("[1, 2]", "row 2: not a JSON object but a list"),
        ('{"question": "q"', "row 2: not a JSON object (Expecting"),
        ('{"question": "q"}', "row 2: no references"),
        ('{"question": 3, "references": []}', "row 2: the question is a number, not text"),
        ('{"question": "q", "references": [{"start_char": 0, "end_char": 1}]}', "row 2, reference 1: no doc_id"),
        ('{"question": "q", "references": [{"doc_id": "a.md", "start_char": 4, "end_char": 1}]}', "start_char 4"),
        ('{"question": "q", "refs": []}', "row 2: unknown key 'refs'"),
    ],
)
def test_bad_json_lines_are_one_error_naming_file_and_row(tmp_path, line, problem):
    path = tmp_path / "questions.jsonl"
    good = '{"question": "q", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}'
    path.write_text(good + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(QuestionsFileError) as raised:
        load_questions(str(path))
    assert problem in str(raised.value)
    assert str(path) in str(raised.value)


def test_missing_folder_and_undecodable_files(tmp_path):
    with pytest.raises(QuestionsFileError, match="no such file"):
        load_questions(str(tmp_path / "absent.csv"))
    with pytest.raises(QuestionsFileError, match="a folder, not a file"):
        load_questions(str(tmp_path))
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("question,references,corpus_id\nCaf\xe9?,[],a\n".encode("latin-1"))
    with pytest.raises(QuestionsFileError, match="not UTF-8"):
        load_questions(str(latin1))


def test_a_byte_order_mark_before_the_header_is_not_part_of_it(tmp_path):
    path = tmp_path / "questions.csv"
    path.write_bytes(b"\xef\xbb\xbf" + CHROMA_CSV.read_bytes())
    assert load_questions(str(path)) == load_questions(str(CHROMA_CSV))


GOOD_ROW = '{"question": "q", "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}'


def _one_error(path: Path) -> str:
    with pytest.raises(QuestionsFileError) as raised:
        load_questions(str(path))
    message = str(raised.value)
    assert str(path) in message and "\n" not in message
    return message


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    """Opening a FIFO for reading waits for a writer: the read must not start at all."""
    fifo = tmp_path / "questions.jsonl"
    os.mkfifo(fifo)
    assert _one_error(fifo) == f"questions file {fifo}: not a regular file"


@pytest.mark.timeout(20)
def test_a_device_is_refused_before_it_is_read():
    assert _one_error(Path("/dev/zero")) == "questions file /dev/zero: not a regular file"


def test_a_question_at_the_length_limit_is_read_and_one_past_it_is_refused(tmp_path):
    at_limit = "Where? " + "x" * (MAX_QUESTION_CHARS - len("Where? "))
    path = tmp_path / "questions.jsonl"
    row = {"question": at_limit, "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}
    path.write_text(GOOD_ROW + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    assert load_questions(str(path))[1].question == at_limit
    row["question"] += "?"
    path.write_text(GOOD_ROW + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    assert f"row 2: the question is {MAX_QUESTION_CHARS + 1:,} characters, over the 4,000" in _one_error(path)
    csv_path = tmp_path / "questions.csv"
    csv_path.write_text(_csv_row([{"start_index": 0, "end_index": 6}], question=row["question"]), encoding="utf-8")
    assert "row 1: the question is 4,001 characters" in _one_error(csv_path)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_json_lines_row_holds_unicode_line_separators_inside_its_strings(tmp_path, separator):
    """Only \\n ends a row: U+2028, U+0085 and the other characters str.splitlines splits at are text."""
    path = tmp_path / "questions.jsonl"
    question = f"Where is{separator}the gauge?"
    row = {"question": question, "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 1}]}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\r\n" + GOOD_ROW + "\r\n", encoding="utf-8")
    assert [q.question for q in load_questions(str(path))] == [question, "q"]


def test_a_csv_field_over_pythons_field_limit_names_the_row(tmp_path):
    """The library leaves csv's process-wide limit as the program set it, and says which row is over it."""
    passage = "Tides rise and fall. " * 8_000  # 168,000 characters
    path = tmp_path / "questions.csv"
    path.write_text(
        _csv_row([{"start_index": 0, "end_index": 6}])
        + _csv_row([{"content": passage, "start_index": 0, "end_index": len(passage)}]).split("\r\n", 1)[1],
        encoding="utf-8",
    )
    limit = csv.field_size_limit(131_072)
    try:
        assert "row 2: a field over 131,072 characters, the most Python's csv reader takes" in _one_error(path)
        csv.field_size_limit(MAX_CSV_FIELD_CHARS)
        assert load_questions(str(path))[1].references == (ReferenceSpan("tides.md", 0, len(passage)),)
    finally:
        csv.field_size_limit(limit)


@pytest.mark.parametrize(
    "references, problem",
    [
        ("[" * 60_000 + "]" * 60_000, "references is JSON nested deeper than Python's parser reads"),
        ('[{"start_index": 0, "end_index": 1' + "0" * 5_000 + "}]", "references holds a number of more than 4,300"),
        ('[{"start_index": 0, "start_index": 1, "end_index": 5}]', "references has the key 'start_index' twice"),
    ],
)
def test_hostile_json_in_a_csv_references_field_names_the_row(tmp_path, references, problem):
    path = tmp_path / "questions.csv"
    path.write_text(
        _csv_row([{"start_index": 0, "end_index": 6}]) + f'Why?,"{references.replace(chr(34), 2 * chr(34))}",a\n'
    )
    assert f"questions file {path}, row 2: {problem}" in _one_error(path)


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"question": "q", "references": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than Python's"),
        ('{"question": "q", "references": [{"doc_id": "a.md", "start_char": 1' + "0" * 5_000 + "}]}", "4,300 digits"),
        ('{"question": "q", "question": "r", "references": []}', "the row has the key 'question' twice"),
    ],
)
def test_hostile_json_lines_rows_name_the_row(tmp_path, line, problem):
    path = tmp_path / "questions.jsonl"
    path.write_text(GOOD_ROW + "\n" + line + "\n", encoding="utf-8")
    message = _one_error(path)
    assert f"questions file {path}, row 2: " in message and problem in message


@pytest.mark.parametrize("column", ["question", "references", "corpus_id"])
def test_a_column_named_twice_in_the_header_is_refused(tmp_path, column):
    columns = ["question", "references", "corpus_id", column]
    path = tmp_path / "questions.csv"
    path.write_text(",".join(columns) + '\nWhy?,"[{""start_index"": 0, ""end_index"": 1}]",a,other\n')
    assert _one_error(path) == f"questions file {path}: the column {column} appears 2 times in the header; keep one"


def test_a_storage_that_refuses_or_a_protocol_fsspec_lacks_is_one_line_naming_the_file():
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class RefusingFileSystem(MemoryFileSystem):
        protocol = "refusing"

        def info(self, path, **kwargs):
            raise RuntimeError("403 Forbidden\n<Error><Code>AccessDenied</Code></Error>")

    fsspec.register_implementation("refusing", RefusingFileSystem, clobber=True)
    with pytest.raises(QuestionsFileError) as raised:
        load_questions("refusing://bucket/questions.jsonl")
    assert str(raised.value) == (
        "questions file refusing://bucket/questions.jsonl: cannot be read (RuntimeError: 403 Forbidden)"
    )
    with pytest.raises(QuestionsFileError, match=r"^questions file nosuch://x/q.csv: Protocol not known: nosuch$"):
        load_questions("nosuch://x/q.csv")
