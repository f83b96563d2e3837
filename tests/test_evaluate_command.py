"""``chunkline evaluate``: the sample corpus end to end, a case computed by hand, and its mistakes."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chunkline import ChunkConfig, chunk_markdown
from chunkline.pipelines import cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = ROOT / "sample_corpus"
SAMPLE_QUESTIONS = Path(__file__).parent / "fixtures" / "evaluation" / "sample_corpus_questions.jsonl"


def _run(capsys, *arguments: str) -> tuple[int, str, str]:
    status = cli.main(["evaluate", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _sample_texts() -> dict[str, str]:
    """doc id -> text of every sample corpus file, decoded as ``chunkline run`` decodes (UTF-8, no newline
    translation: one file has CRLF line ends)."""
    return {
        path.relative_to(SAMPLE_CORPUS).as_posix(): path.read_bytes().decode("utf-8")
        for path in sorted(SAMPLE_CORPUS.rglob("*.md"))
    }


def test_the_sample_questions_slice_out_their_stated_text():
    texts = _sample_texts()
    rows = [json.loads(line) for line in SAMPLE_QUESTIONS.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 12
    for row in rows:
        for reference in row["references"]:
            text = texts[reference["doc_id"]]
            assert text[reference["start_char"] : reference["end_char"]] == reference["content"]


def test_sample_corpus_with_both_retrievers(capsys, tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text("chunking:\n  max_tokens: 128\n", encoding="utf-8")
    report = tmp_path / "report.html"
    status, out, err = _run(
        capsys,
        str(SAMPLE_CORPUS),
        "--questions",
        str(SAMPLE_QUESTIONS),
        "--config",
        f"defaults={ROOT / 'configs' / 'default.yaml'}",
        "--config",
        str(small),
        "--set",
        "overlap_tokens=0",
        "--format",
        "json",
        "--report",
        str(report),
    )
    assert status == 0, err
    result = json.loads(out)
    assert (result["questions"], result["documents"], result["budget_tokens"]) == (12, 12, 1000)
    assert result["embedder"].startswith("wordllama-l2_supercat-256")
    assert [(row["config"], row["retriever"]) for row in result["results"]] == [
        ("defaults", "embedding"),
        ("defaults", "bm25"),
        ("small", "embedding"),
        ("small", "bm25"),
    ]
    texts = _sample_texts()
    for name, max_tokens in (("defaults", 512), ("small", 128)):
        config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=0)  # --set applies to every config
        assert result["configs"][name] == config.to_dict()
        chunks = [chunk for doc_id, text in texts.items() for chunk in chunk_markdown(text, config, doc_id=doc_id)]
        rows = [row for row in result["results"] if row["config"] == name]
        for row in rows:
            assert row["chunks"] == len(chunks)
            assert row["mean_chunk_tokens"] == pytest.approx(sum(c.token_count for c in chunks) / len(chunks), abs=0.01)
            for key in ("recall_percent", "precision_percent", "iou_percent", "hit_rate_percent"):
                assert 0 <= row[key] <= 100
            assert row["iou_percent"] <= min(row["recall_percent"], row["precision_percent"]) + 1e-9
            assert 0 < row["retrieved_tokens_per_question"] <= 1000
            # The questions were written for these documents: a working retriever finds most passages, where a
            # random pick of 1000 of the corpus's ~39,000 tokens would cover about 3% of them.
            assert row["recall_percent"] > 50
            assert row["hit_rate_percent"] > 50
    page = report.read_text(encoding="utf-8")
    embedded = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page).group(1))
    assert embedded["results"] == result["results"]
    assert page.count("data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page
    assert "HTML report" in err and "chunking 12 documents" in err


def test_table_output_names_every_config_and_retriever(capsys):
    status, out, err = _run(capsys, str(SAMPLE_CORPUS), "--questions", str(SAMPLE_QUESTIONS), "--retriever", "bm25")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("12 questions over 12 documents; up to 1,000 retrieved tokens per question")
    assert lines[2].split() == [
        "config",
        "retriever",
        "recall",
        "%",
        "precision",
        "%",
        "IoU",
        "%",
        "hit",
        "rate",
        "%",
        "chunks",
        "mean",
        "tokens",
        "median",
        "tokens",
        "retrieved",
        "tokens/q",
    ]
    assert [line.split()[:2] for line in lines[3:]] == [["default", "bm25"]]


# A corpus small enough to score by hand. With the default config (headings) each section is one chunk:
#
#   a.md = "# Tides\n\nHigh water comes twice a day.\n\n# Gauge\n\nThe gauge is zeroed against chart datum.\n"
#          a#0 = [0, 40)   "# Tides\n" (8) + "\n" (1) + "High water comes twice a day.\n" (30) + "\n" (1)
#          a#1 = [40, 90)  "# Gauge\n" (8) + "\n" (1) + "The gauge is zeroed against chart datum.\n" (41)
#   b.md = "# Office\n\nThe office opens at seven.\n"
#          b#0 = [0, 37)   "# Office\n" (9) + "\n" (1) + "The office opens at seven.\n" (27)
#
# One chunk per section, indexed by its text as is (min_tokens 0, embed_context none: HAND_CONFIG); their
# cl100k_base tokens: a#0 11, a#1 12, b#0 9.
# The budget is the three chunks' tokens minus one (31): every question gets its two best chunks whole and the
# third cut to the tokens left: a#0 31 - 12 - 9 = 10 of its 11 tokens -> a.md[0, floor(40 * 10 / 11) = 36);
# a#1 31 - 11 - 9 = 11 of its 12 tokens -> a.md[40, 40 + floor(50 * 11 / 12) = 85).
# BM25 rankings (words of two letters or more, lowercase; "a" is no word):
#   Q1 "When is the gauge zeroed against chart datum?": a#1 holds six of its words, b#0 only "the", a#0 none
#      -> a#1, b#0, a#0 cut. Reference a.md[62, 88) "zeroed against chart datum" (26 characters), inside a#1.
#      covered 26, retrieved 50 + 37 + 36 = 123: recall 26/26, precision 26/123, IoU 26/(123 + 26 - 26).
#   Q2 "How often does high water come, and when does the office open?": a#0 holds "high" and "water" (each in
#      one chunk only), b#0 "the" and "office" (twice), a#1 only "the" (in two chunks, and a#1 is the longest)
#      -> a#0, b#0, a#1 cut. References a.md[9, 38) "High water comes twice a day." (29) and b.md[10, 36)
#      "The office opens at seven." (26): 55 characters, all covered; retrieved 40 + 37 + 45 = 122: recall 1,
#      precision 55/122, IoU 55/122.
#   Q3 "How often does the water come up?": a#0 "water" (one chunk), b#0 and a#1 "the" once each, b#0 the
#      shorter -> a#0, b#0, a#1 cut. Reference a.md[9, 38) (29): recall 1, precision 29/122, IoU 29/122.
#   Q4 "When is the gauge zeroed?": a#1, then b#0 ("the"), then a#0 cut. Reference a.md[9, 88), from "High
#      water" to "chart datum" (79 characters), across a#0 and a#1: covered a.md[40, 88) = 48 and, of the cut
#      a#0, a.md[9, 36) = 27: 75; retrieved 123: recall 75/79, precision 75/123, IoU 75/(123 + 79 - 75) = 75/127.
TINY_A = "# Tides\n\nHigh water comes twice a day.\n\n# Gauge\n\nThe gauge is zeroed against chart datum.\n"
TINY_B = "# Office\n\nThe office opens at seven.\n"
TINY_QUESTIONS = [
    ("When is the gauge zeroed against chart datum?", [("a.md", 62, 88)]),
    ("How often does high water come, and when does the office open?", [("a.md", 9, 38), ("b.md", 10, 36)]),
    ("How often does the water come up?", [("a.md", 9, 38)]),
    ("When is the gauge zeroed?", [("a.md", 9, 88)]),
]
HAND_SETTINGS = ("min_tokens=0", "embed_context=none")
HAND_CONFIG = ChunkConfig(min_tokens=0, embed_context="none")
HAND_RECALL = (1 + 1 + 1 + 75 / 79) / 4
HAND_PRECISION = (26 / 123 + 55 / 122 + 29 / 122 + 75 / 123) / 4
HAND_IOU = (26 / 123 + 55 / 122 + 29 / 122 + 75 / 127) / 4


def _tiny_case(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_bytes(TINY_A.encode("utf-8"))
    (corpus / "b.md").write_bytes(TINY_B.encode("utf-8"))
    questions = tmp_path / "questions.jsonl"
    lines = [
        json.dumps(
            {
                "question": question,
                "references": [{"doc_id": d, "start_char": s, "end_char": e} for d, s, e in references],
            }
        )
        for question, references in TINY_QUESTIONS
    ]
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return corpus, questions


def test_figures_equal_a_hand_computation(capsys, tmp_path):
    chunks = chunk_markdown(TINY_A, HAND_CONFIG, doc_id="a.md") + chunk_markdown(TINY_B, HAND_CONFIG, doc_id="b.md")
    assert [(c.doc_id, c.start_char, c.end_char) for c in chunks] == [
        ("a.md", 0, 40),
        ("a.md", 40, 90),
        ("b.md", 0, 37),
    ]
    assert TINY_A[62:88] == "zeroed against chart datum" and TINY_A[9:38] == "High water comes twice a day."
    assert TINY_B[10:36] == "The office opens at seven."
    budget = sum(chunk.token_count for chunk in chunks) - 1
    corpus, questions = _tiny_case(tmp_path)
    status, out, err = _run(
        capsys,
        str(corpus),
        "--questions",
        str(questions),
        "--retriever",
        "bm25",
        "--budget-tokens",
        str(budget),
        "--format",
        "json",
        *(argument for setting in HAND_SETTINGS for argument in ("--set", setting)),
    )
    assert status == 0, err
    (row,) = json.loads(out)["results"]
    assert row["recall_percent"] == pytest.approx(100 * HAND_RECALL, abs=1e-4)
    assert row["precision_percent"] == pytest.approx(100 * HAND_PRECISION, abs=1e-4)
    assert row["iou_percent"] == pytest.approx(100 * HAND_IOU, abs=1e-4)
    assert row["hit_rate_percent"] == 100
    assert row["chunks"] == 3
    # Two whole chunks and the one cut at the budget; every question is handed exactly the budget.
    assert row["retrieved_chunks_per_question"] == 3
    assert row["retrieved_tokens_per_question"] == budget
    counts = [chunk.token_count for chunk in chunks]
    assert counts == [11, 12, 9]
    assert row["median_chunk_tokens"] == sorted(counts)[1]


def test_the_evaluation_api_gives_the_same_figures_per_question(tmp_path):
    from chunkline.evaluation.corpus import load_input_config, read_corpus
    from chunkline.evaluation.evaluate import evaluate_configs
    from chunkline.evaluation.questions import load_questions

    corpus_path, questions_path = _tiny_case(tmp_path)
    corpus = read_corpus(load_input_config([str(corpus_path)], environ={}))
    questions = load_questions(str(questions_path))
    budget = sum(chunk.token_count for text in (TINY_A, TINY_B) for chunk in chunk_markdown(text, HAND_CONFIG)) - 1
    result = evaluate_configs(corpus, questions, {"hand": HAND_CONFIG}, budget_tokens=budget, retrievers=["bm25"])
    scores = result.results[0].per_question
    assert [score.recall for score in scores] == pytest.approx([1, 1, 1, 75 / 79])
    assert [score.precision for score in scores] == pytest.approx([26 / 123, 55 / 122, 29 / 122, 75 / 123])
    assert [score.iou for score in scores] == pytest.approx([26 / 123, 55 / 122, 29 / 122, 75 / 127])


class _SectionEmbedder:
    """An embedder that ranks the tiny case's sections against the question in the order Tides, Office, Gauge:
    the reverse of BM25's Gauge, Office, Tides."""

    name = "sections"
    _VECTORS = {"# Tides": (1.0, 0.0), "# Office": (0.6, 0.8), "# Gauge": (0.0, 1.0)}

    def embed(self, texts):
        import numpy as np

        return np.array(
            [next((v for k, v in self._VECTORS.items() if t.startswith(k)), (1.0, 0.0)) for t in texts],
            dtype=np.float32,
        )


def test_the_hybrid_fuses_the_two_rankings_of_each_question(tmp_path):
    """Q4 "When is the gauge zeroed?": BM25 ranks a#1, b#0, a#0; the stand-in embedder a#0, b#0, a#1. Fused
    (1/(60 + rank) summed): a#0 and a#1 score 1/61 + 1/63 = 0.032266, b#0 2/62 = 0.032258; a#0 and a#1 tie and
    keep the texts' order. So a#0 (11 tokens) and a#1 (12) whole, b#0 cut to 31 - 23 = 8 of its 9 tokens:
    b.md[0, floor(37 * 8 / 9) = 32). Reference a.md[9, 88): all 79 characters covered, 40 + 50 + 32 = 122
    retrieved: recall 1, precision 79/122, IoU 79/122."""
    from chunkline.evaluation.corpus import load_input_config, read_corpus
    from chunkline.evaluation.evaluate import evaluate_configs
    from chunkline.evaluation.questions import load_questions

    corpus_path, questions_path = _tiny_case(tmp_path)
    corpus = read_corpus(load_input_config([str(corpus_path)], environ={}))
    questions = load_questions(str(questions_path))[3:]
    result = evaluate_configs(
        corpus,
        questions,
        {"hand": HAND_CONFIG},
        budget_tokens=31,
        retrievers=["bm25", "embedding", "hybrid"],
        embedder=_SectionEmbedder(),
    )
    assert [row.retriever for row in result.results] == ["bm25", "embedding", "hybrid"]
    bm25, embedding, hybrid = (row.per_question[0] for row in result.results)
    assert bm25.recall == pytest.approx(75 / 79)  # as in the hand computation above
    # Embedding: a#0, b#0 whole, a#1 cut to 11 of 12 tokens: a.md[40, 85). Covered 31 + 45, retrieved 122.
    assert (embedding.recall, embedding.precision) == pytest.approx((76 / 79, 76 / 122))
    assert (hybrid.recall, hybrid.precision, hybrid.iou) == pytest.approx((1, 79 / 122, 79 / 122))
    assert result.results[2].retrieved_tokens_per_question == 31
    assert result.embedder == "sections"


def test_the_command_runs_the_three_retrievers(capsys, tmp_path):
    corpus, questions = _tiny_case(tmp_path)
    status, out, err = _run(capsys, str(corpus), "--questions", str(questions), "--retriever", "all")
    assert status == 0, err
    rows = [line.split()[:2] for line in out.splitlines()[3:]]
    assert rows == [["default", "embedding"], ["default", "bm25"], ["default", "hybrid"]]
    status, out, err = _run(
        capsys, str(corpus), "--questions", str(questions), "--retriever", "hybrid", "--format", "json"
    )
    assert status == 0, err
    result = json.loads(out)
    assert [row["retriever"] for row in result["results"]] == ["hybrid"]
    assert result["embedder"].startswith("wordllama")


# --------------------------------------------------------------------------------------------------
# Mistakes: one line on stderr, exit status 2
# --------------------------------------------------------------------------------------------------


def _one_line_error(status: int, err: str) -> str:
    assert status == 2
    lines = [line for line in err.splitlines() if line.startswith("chunkline: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _write_questions(tmp_path: Path, references: list[dict]) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"question": "Where is the gauge?", "references": references}) + "\n", encoding="utf-8")
    return path


def test_a_reference_to_a_document_the_corpus_lacks(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    questions = _write_questions(tmp_path, [{"doc_id": "c.md", "start_char": 0, "end_char": 5}])
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions))[::2])
    assert "question 1 ('Where is the gauge?') refers to c.md" in message
    assert "not a document of the corpus (2 documents)" in message


def test_a_near_miss_document_name_is_suggested(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    questions = _write_questions(tmp_path, [{"doc_id": "corpus/a.md", "start_char": 0, "end_char": 5}])
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions))[::2])
    assert "refers to corpus/a.md" in message and "did you mean a.md?" in message


def test_a_reference_past_the_end_of_its_document(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    questions = _write_questions(tmp_path, [{"doc_id": "b.md", "start_char": 30, "end_char": 38}])
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions))[::2])
    assert "question 1" in message and "30..38 ends past the end of b.md (37 characters)" in message


def test_a_reference_to_a_document_that_could_not_be_read(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    (corpus / "bad.md").write_bytes(b"caf\xe9\n")
    questions = _write_questions(tmp_path, [{"doc_id": "bad.md", "start_char": 0, "end_char": 2}])
    status, _, err = _run(capsys, str(corpus), "--questions", str(questions))
    message = _one_line_error(status, err)
    assert "refers to bad.md, which was not read: not valid UTF-8 at byte 3" in message
    assert "chunkline: bad.md: left out: not valid UTF-8" in err


def test_a_bad_questions_file(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    questions = tmp_path / "questions.csv"
    questions.write_text('question,references,corpus_id\nWhere?,"[{""start_index"": 4}]",a\n', encoding="utf-8")
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions))[::2])
    assert f"questions file {questions}, row 1, reference 1: no end_index" in message
    missing = tmp_path / "absent.jsonl"
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(missing))[::2])
    assert f"questions file {missing}: no such file" in message


def test_a_missing_corpus_folder(capsys, tmp_path):
    _, questions = _tiny_case(tmp_path)
    message = _one_line_error(*_run(capsys, str(tmp_path / "nowhere"), "--questions", str(questions))[::2])
    assert "corpus input" in message and "nowhere does not exist" in message


def test_bad_options(capsys, tmp_path):
    corpus, questions = _tiny_case(tmp_path)
    status, _, err = _run(capsys, str(corpus), "--questions", str(questions), "--budget-tokens", "0")
    assert status == 2 and "expected a whole number >= 1" in err
    config = tmp_path / "one.yaml"
    config.write_text("chunking:\n  max_tokens: 64\n", encoding="utf-8")
    message = _one_line_error(
        *_run(capsys, str(corpus), "--questions", str(questions), "--config", str(config), "--config", str(config))[::2]
    )
    assert "a second config named 'one'" in message
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions), "--set", "max_tokens=-3")[::2])
    assert "max_tokens" in message
    status, _, err = _run(capsys, str(corpus), "--questions", str(questions), "--retriever", "dense")
    assert status == 2 and "invalid choice: 'dense'" in err


def test_without_the_evaluate_extra_the_error_is_the_pip_command(capsys, tmp_path, monkeypatch):
    from chunkline.evaluation.retrieval import load_wordllama_embedder

    corpus, questions = _tiny_case(tmp_path)
    monkeypatch.setitem(sys.modules, "bm25s", None)
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions), "--retriever", "bm25")[::2])
    assert message.endswith("pip install 'chunkline[evaluate]'")
    monkeypatch.setitem(sys.modules, "wordllama", None)
    load_wordllama_embedder.cache_clear()
    try:
        message = _one_line_error(
            *_run(capsys, str(corpus), "--questions", str(questions), "--retriever", "embedding")[::2]
        )
    finally:
        load_wordllama_embedder.cache_clear()
    assert message.endswith("pip install 'chunkline[evaluate]'")


def test_a_corpus_without_markdown(capsys, tmp_path):
    _, questions = _tiny_case(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not markdown\n", encoding="utf-8")
    message = _one_line_error(*_run(capsys, str(empty), "--questions", str(questions))[::2])
    assert f"corpus input {empty} matches no file (names ending in .md, .markdown)" in message


def test_the_same_corpus_and_questions_give_the_same_output(capsys, tmp_path):
    corpus, questions = _tiny_case(tmp_path)
    first = _run(capsys, str(corpus), "--questions", str(questions), "--format", "json")
    second = _run(capsys, str(corpus), "--questions", str(questions), "--format", "json")
    assert first[0] == second[0] == 0
    assert first[1] == second[1]
    assert [row["retriever"] for row in json.loads(first[1])["results"]] == ["embedding", "bm25"]


def test_a_long_passage_in_a_chroma_csv_is_read(capsys, tmp_path):
    """Python's csv reads fields of up to 128 KB by default; a reference's content may be a whole document."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    passage = "The tide gauge is zeroed against chart datum at slack water. " * 3_000  # 183,000 characters
    (corpus / "gauge.md").write_text(passage, encoding="utf-8")
    questions = tmp_path / "questions_df.csv"
    with questions.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        reference = {"content": passage, "start_index": 0, "end_index": len(passage)}
        writer.writerow(["How is the gauge zeroed?", json.dumps([reference]), "gauge"])
    default_limit = csv.field_size_limit(131_072)
    try:
        status, out, err = _run(
            capsys, str(corpus), "--questions", str(questions), "--retriever", "bm25", "--format", "json"
        )
    finally:
        csv.field_size_limit(default_limit)
    assert status == 0, err
    assert json.loads(out)["questions"] == 1


@pytest.mark.timeout(60)
def test_a_fifo_as_the_questions_file_is_refused_at_once(capsys, tmp_path):
    corpus, _ = _tiny_case(tmp_path)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(fifo))[::2])
    assert message == f"chunkline: error: questions file {fifo}: not a regular file"


@pytest.mark.parametrize(
    "row, problem",
    [
        ({"question": "Where? " * 600}, "row 1: the question is 4,200 characters, over the 4,000 a question can have"),
        ('{"question": "q", "references": ' + "[" * 100_000 + "]" * 100_000 + "}", "row 1: the row is JSON nested"),
        ('{"question": "q", "references": [{"start_char": 1' + "0" * 5_000 + "}]}", "row 1: the row holds a number"),
    ],
)
def test_question_file_rows_python_cannot_take_are_named_with_the_question_file_errors_exit(
    capsys, tmp_path, row, problem
):
    corpus, _ = _tiny_case(tmp_path)
    questions = tmp_path / "hostile.jsonl"
    if isinstance(row, dict):
        row = json.dumps({**row, "references": [{"doc_id": "a.md", "start_char": 0, "end_char": 5}]})
    questions.write_text(row + "\n", encoding="utf-8")
    message = _one_line_error(*_run(capsys, str(corpus), "--questions", str(questions))[::2])
    assert f"questions file {questions}, {problem}" in message


def _peak_rss_mb(tmp_path: Path, *arguments: str) -> tuple[int, float, str]:
    """Exit status, peak resident memory (MB) and stderr of ``chunkline evaluate`` in a process of its own."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the process that started this one (the
    # whole test session), while VmHWM belongs to this program's own memory.
    script = (
        "import sys\n"
        "from chunkline.pipelines.cli import main\n"
        "status = main(['evaluate', *sys.argv[1:]])\n"
        "peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
        "print('peak_rss_kb', peak, file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    peak = re.search(r"peak_rss_kb (\d+)", done.stderr)
    assert peak, done.stderr
    return done.returncode, int(peak.group(1)) / 1024, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_19_mb_question_is_refused_without_the_memory_it_would_take_to_embed(tmp_path):
    """Embedded, a 19 MB question took 6.6 GB: it is refused with the model loaded, near its baseline."""
    corpus, _ = _tiny_case(tmp_path)
    questions = tmp_path / "huge.jsonl"
    reference = [{"doc_id": "a.md", "start_char": 0, "end_char": 5}]
    questions.write_text(json.dumps({"question": "tide " * 3_800_000, "references": reference}) + "\n")
    status, peak_mb, err = _peak_rss_mb(tmp_path, str(corpus), "--questions", str(questions))
    assert status == 2, err
    assert "row 1: the question is 19,000,000 characters" in err
    assert peak_mb < 700, f"peak {peak_mb:.0f} MB"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_questions_at_the_length_limit_in_rare_characters_embed_in_bounded_memory(tmp_path):
    """64 questions of 4,000 characters that each take several tokens: padded into one batch they took
    2.4 GB; the embedder's batches are bounded in characters."""
    corpus, _ = _tiny_case(tmp_path)
    questions = tmp_path / "rare.jsonl"
    reference = [{"doc_id": "a.md", "start_char": 0, "end_char": 5}]
    rows = [
        {"question": "".join(chr(0x1F300 + (number * 7 + i) % 0x700) for i in range(4_000)), "references": reference}
        for number in range(64)
    ]
    questions.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    status, peak_mb, err = _peak_rss_mb(
        tmp_path, str(corpus), "--questions", str(questions), "--retriever", "embedding", "--format", "json"
    )
    assert status == 0, err
    assert peak_mb < 800, f"peak {peak_mb:.0f} MB"
