"""Questions files: Chroma's questions_df.csv as it is, JSON Lines, and one clear error per bad row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunkline.evaluation.questions import (
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
