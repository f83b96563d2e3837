"""The retrieval benchmark's own machinery: the markdown question rule, and placing other chunkers' chunks
at exact character ranges of their documents.

The fixture is an RFC-shaped document written for these tests (``fixtures/bench_retrieval``); nothing here
reads the benchmark's data. A peer chunker's case is skipped only when that package (the ``bench`` extra)
is not installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import chunkline
from chunkline.evaluation.retrieval import evaluation_text
from chunkline.tokenizers import get_token_counter

REPOSITORY = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "bench_retrieval" / "0042-tide-gauge-calibration.md"
DOC_ID = "rust-rfcs/0042-tide-gauge-calibration.md"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("bench_retrieval", REPOSITORY / "benchmarks" / "bench_retrieval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = load_benchmark()
count_tokens = get_token_counter("cl100k_base").count


@pytest.fixture(scope="module")
def text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def question_of(text: str, doc_id: str = DOC_ID):
    return bench.markdown_question(bench.Document(doc_id, text), count_tokens)


def between(text: str, first_words: str, last_words: str) -> str:
    start = text.index(first_words)
    return text[start : text.index(last_words, start) + len(last_words)]


# ------------------------------------------------------------------------------------ the markdown rule


def test_question_is_the_summary_and_reference_the_design_opening(text):
    question, reason = question_of(text)
    assert reason == "question"
    assert question.doc_id == DOC_ID
    assert question.question == between(text, "Let a harbour's tide gauges", "adjust them by hand.")
    # The design section runs to the next heading at its level; its sub-section is part of it.
    assert question.start_char == text.index("A gauge with calibration enabled")
    assert question.end_char == len(text[: text.index("## Drawbacks")].rstrip())
    reference = text[question.start_char : question.end_char]
    assert "### Reporting" in reference and "## Motivation" not in reference
    assert question.question not in reference
    assert bench.REFERENCE_MIN_CHARS <= len(reference) <= bench.REFERENCE_MAX_CHARS


def test_reference_is_whole_blocks_within_the_character_cap(text):
    extra = [
        f"Paragraph {number} of the explanation walks through night {number} of a calibration log, when the "
        "wind stayed low, the pressure held, and the gauge recorded one more difference against the table.\n\n"
        for number in range(1, 13)
    ]
    longer = text.replace("## Drawbacks", "".join(extra) + "## Drawbacks")
    question, _ = question_of(longer)
    reference = longer[question.start_char : question.end_char]
    assert question.start_char == longer.index("A gauge with calibration enabled")
    assert len(reference) <= bench.REFERENCE_MAX_CHARS
    assert reference.endswith("against the table.")  # a paragraph's end, never inside one
    following = longer[question.end_char :].lstrip()
    assert following.startswith("Paragraph ")
    next_block_end = (
        question.end_char + longer[question.end_char :].index("against the table.") + len("against the table.")
    )
    assert next_block_end - question.start_char > bench.REFERENCE_MAX_CHARS


def test_reference_starts_after_a_leading_sub_heading(text):
    variant = text.replace("## Guide-level explanation\n\n", "## Guide-level explanation\n\n### Calm nights\n\n")
    question, _ = question_of(variant)
    assert question.start_char == variant.index("A gauge with calibration enabled")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda text: text.replace("## Summary", "## Abstract"), "no Summary heading"),
        (lambda text: text.replace("## Guide-level explanation", "## Appendix"), "no design section"),
        # A "## Summary" line inside a fence is code, not a heading.
        (lambda text: text.replace("## Summary\n", "```\n## Summary\n```\n"), "no Summary heading"),
        # The motivation cut down to one paragraph: the design opening is too close to the summary.
        (
            lambda text: text[: text.index("Every gauge in the harbour")] + text[text.index("## Guide-level") :],
            f"design opening under {bench.MIN_GAP_TOKENS} tokens after the Summary",
        ),
    ],
    ids=["no-summary", "no-design-section", "summary-in-a-fence", "summary-too-close"],
)
def test_documents_that_give_no_question(text, change, reason):
    question, got = question_of(change(text))
    assert question is None
    assert got == reason


def test_offsets_are_exact_in_the_text_as_decoded_with_crlf_and_a_byte_order_mark(text):
    plain, _ = question_of(text)
    windows = "\ufeff" + text.replace("\n", "\r\n")
    question, _ = question_of(windows)
    assert windows[question.start_char : question.end_char] == text[plain.start_char : plain.end_char].replace(
        "\n", "\r\n"
    )
    assert question.question == plain.question.replace("\n", "\r\n")


def test_sampling_keeps_the_smallest_doc_id_hashes_in_doc_id_order(text):
    documents = [bench.Document(f"rust-rfcs/{number:04d}-copy.md", text) for number in range(6)]
    documents.append(bench.Document("rust-rfcs/9999-no-summary.md", text.replace("## Summary", "## Abstract")))
    kept, counts = bench.build_markdown_questions(documents, 3, count_tokens)
    by_hash = sorted((d.doc_id for d in documents[:6]), key=lambda doc_id: hashlib.sha256(doc_id.encode()).hexdigest())
    assert [question.doc_id for question in kept] == sorted(by_hash[:3])
    assert counts["qualifying"] == 6 and counts["kept"] == 3 and counts["no Summary heading"] == 1
    again, _ = bench.build_markdown_questions(list(reversed(documents)), 3, count_tokens)
    assert again == kept


# ------------------------------------------------------------------------------------ placing chunks


def test_place_chunks_takes_matching_offsets_and_searches_for_the_rest():
    text = "alpha beta gamma. alpha beta gamma. delta"
    second = text.index("alpha", 1)
    placed, placement = bench.place_chunks(
        "doc.md",
        text,
        [
            (0, "alpha beta gamma."),  # right
            (None, "alpha beta gamma."),  # no offset: the first occurrence after the previous chunk's start
            (3, "delta"),  # wrong offset: searched for
            (0, "missing"),  # nowhere in the text
        ],
    )
    assert [(chunk.start_char, chunk.end_char) for chunk in placed] == [(0, 17), (second, second + 17), (36, 41)]
    assert all(text[chunk.start_char : chunk.end_char] == chunk.budget_text for chunk in placed)
    assert (placement.by_own_offset, placement.by_search, placement.not_located) == (1, 2, 1)
    assert placement.examples == ["doc.md: 'missing'"]


def test_place_chunks_moves_a_claim_on_another_repeat_to_the_one_that_follows_on():
    text = "one two. one two. one two. three"
    # The second claim jumps over a repeat to a later one, the third points back at the first one.
    chunks = [(0, "one two."), (18, "one two."), (0, "one two."), (None, "three")]
    placed, placement = bench.place_chunks("doc.md", text, chunks)
    assert [chunk.start_char for chunk in placed] == [0, 9, 18, 27]
    assert placement.at_other_repeat == 2 and placement.by_search == 1
    assert bench.uncovered_characters(text, placed) == 0


def test_place_chunks_keeps_a_claim_that_follows_on_even_when_its_text_occurs_earlier():
    # A fence opener cut off on its own: its text occurs inside the previous chunk too, but the claim
    # continues right after that chunk, so it is the chunk's place.
    text = "Use ```rust for code.\n```rust\nfn main() {}\n```\n"
    chunks = [(0, "Use ```rust for code."), (22, "```rust"), (30, "fn main() {}\n```")]
    placed, placement = bench.place_chunks("doc.md", text, chunks)
    assert [chunk.start_char for chunk in placed] == [0, 22, 30]
    assert placement.by_own_offset == 3


def peer_text(text: str) -> str:
    """The fixture, a repeated paragraph (so a chunk's text occurs twice) and characters outside ASCII (so
    character and byte offsets differ)."""
    repeated = "The gauge writes one line to its log every night.\n\n"
    return (
        "Mesure de la marée à l'écluse — 潮位計 🌊 naïve café.\n\n"
        + repeated
        + text
        + "\n"
        + repeated * 3
        + "Fin 🌊.\n"
    )


PEERS = {
    "semantic-text-splitter": ("semantic_text_splitter", lambda: bench.semantic_systems(64, 8)),
    "langchain": ("langchain_text_splitters", lambda: bench.langchain_systems(64, 8)),
    "chonkie": ("chonkie", lambda: bench.chonkie_systems(64)),
}


@pytest.mark.parametrize("family", sorted(PEERS))
@pytest.mark.slow
def test_peer_chunks_are_placed_at_exact_ranges_covering_the_text(family, text):
    package, make = PEERS[family]
    pytest.importorskip(package)
    bench.register_offline_encoding()
    document = bench.Document(DOC_ID, peer_text(text))
    systems = make()
    assert systems
    for system in systems:
        placed, placement = system.chunk(document)
        assert placement.not_located == 0, (system.name, placement.examples)
        assert len(placed) > 10
        starts = [chunk.start_char for chunk in placed]
        assert starts == sorted(set(starts)), system.name
        for chunk in placed:
            assert document.text[chunk.start_char : chunk.end_char] == chunk.budget_text == chunk.index_text
        covered = bytearray(len(document.text))
        for chunk in placed:
            covered[chunk.start_char : chunk.end_char] = b"\x01" * (chunk.end_char - chunk.start_char)
        uncovered = [i for i, character in enumerate(document.text) if not covered[i] and not character.isspace()]
        assert uncovered == [], (system.name, document.text[uncovered[0] : uncovered[0] + 40])


def test_chunkline_rows_use_the_chunks_own_ranges_and_evaluation_text(text):
    config = chunkline.ChunkConfig(max_tokens=128, overlap_tokens=16)
    system = bench.chunkline_system("chunkline", config)
    placed, placement = system.chunk(bench.Document(DOC_ID, text))
    chunks = chunkline.chunk_markdown(text, config, doc_id=DOC_ID)
    assert [(c.start_char, c.end_char) for c in placed] == [(c.start_char, c.end_char) for c in chunks]
    assert [c.index_text for c in placed] == [evaluation_text(c) for c in chunks]
    assert [c.budget_text for c in placed] == [c.text for c in chunks]
    assert placement.by_own_offset == len(chunks)


# ------------------------------------------------------------------------------------------ the harness


def test_variants_expand_to_rows():
    assert bench.expand_variants(["min_tokens=32/64", "max_tokens=256;overlap_tokens=0"]) == [
        ["min_tokens=32"],
        ["min_tokens=64"],
        ["max_tokens=256", "overlap_tokens=0"],
    ]


def small_corpus(tmp_path: Path, text: str) -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "rust-rfcs").mkdir(parents=True)
    (corpus / "rust-rfcs" / "0042-tide-gauge-calibration.md").write_text(text, encoding="utf-8")
    (corpus / "rust-rfcs" / "0043-no-summary.md").write_text(text.replace("## Summary", "## Abstract"), "utf-8")
    (corpus / "guide.md").write_text("# Guide\n\nThe gauges are read at slack water.\n", encoding="utf-8")
    return corpus


@pytest.mark.slow
def test_a_run_on_a_small_markdown_corpus(tmp_path, text, capsys):
    corpus = small_corpus(tmp_path, text)
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--retrievers", "bm25", "--budgets", "300,600"]
    arguments += ["--max-tokens", "128,256", "--systems", "window", "--chunkline-variants", "min_tokens=0/64"]
    assert bench.main([*arguments, "--bootstrap-resamples", "50", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["overlap_tokens"] == {"128": 12, "256": 25}
    assert report["settings"]["bootstrap"]["resamples"] == 50
    markdown = report["sets"]["markdown"]
    assert markdown["documents"] == 3 and markdown["questions"] == 1
    assert markdown["rule"]["qualifying"] == 1 and markdown["rule"]["no Summary heading"] == 2
    assert set(markdown["sizes"]) == {"128", "256"}
    for size, figures in markdown["sizes"].items():
        # The default and the variant rows are run at every size, whatever --systems selects.
        assert set(figures["results"]) == {"chunkline", "chunkline min_tokens=0", "chunkline min_tokens=64", "window"}
        assert report["systems"][size]["window"].count(f'"max_tokens":{size}') == 1
        default = figures["results"]["chunkline"]
        assert "difference_to_default" in default and default["difference_to_default"] == {}
        assert figures["default_small_chunks"]["of"] == default["chunks"]
        for name, result in figures["results"].items():
            assert result["chunks"] > 0 and result["placement"]["not_located"] == 0, name
            for budget in ("300", "600"):
                scores = result["scores"]["bm25"][budget]["all"]
                assert all(0.0 <= scores[metric] <= 1.0 for metric in ("recall", "precision", "iou", "hit")), name
                if name != "chunkline":
                    for metric in ("recall", "iou"):
                        interval = result["difference_to_default"]["bm25"][budget]["all"][metric]
                        expected = scores[metric] - default["scores"]["bm25"][budget]["all"][metric]
                        assert interval["mean"] == pytest.approx(expected)
                        assert interval["low"] <= interval["mean"] <= interval["high"]  # one question: all equal
        best = figures["best"]["bm25"]["300"]["all"]["recall"]
        top = max(result["scores"]["bm25"]["300"]["all"]["recall"] for result in figures["results"].values())
        assert best and all(figures["results"][name]["scores"]["bm25"]["300"]["all"]["recall"] == top for name in best)
    # One verdict row per size x budget x retriever x metric.
    assert len(report["verdict"]) == 2 * 2 * 1 * 2
    row = report["verdict"][0]
    assert row["set"] == "markdown" and not row["held_out"]
    # The only other system is the windows; the best chunkline variant stands beside the verdict.
    assert row["best_other"] == "window"
    assert row["gap"] == pytest.approx(row["default"] - row["best_other_figure"])
    assert row["best_alternative"] in {"chunkline min_tokens=0", "chunkline min_tokens=64"}
    expected = "first" if row["gap"] >= 0 else ("within 0.5" if row["gap"] >= -0.005 else "behind by")
    assert row["verdict"].startswith(expected)


@pytest.mark.slow
@pytest.mark.parametrize("output", ["text", "markdown"])
def test_the_tables_name_every_row_size_and_budget(tmp_path, text, capsys, output):
    corpus = small_corpus(tmp_path, text)
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--retrievers", "bm25", "--budgets", "300,600"]
    arguments += ["--max-tokens", "128,256", "--bootstrap-resamples", "20"]
    assert bench.main([*arguments, "--systems", "chunkline*,window", "--format", output]) == 0
    printed = capsys.readouterr().out
    assert "markdown rule: 3 files, 1 give a question" in printed
    assert "overlap 0.09766 of the size (12 at 128, 25 at 256)" in printed
    assert "chunkline's chunks under 32 tokens: max_tokens 128: " in printed
    for size in (128, 256):
        for budget in (300, 600):
            assert f"markdown: 1 questions, max_tokens {size}, budget {budget} tokens" in printed
            assert f"markdown, max_tokens {size}, budget {budget}: each system minus chunkline" in printed
    assert "verdict: chunkline against the best other system" in printed
    rows = [line for line in printed.splitlines() if line.lstrip("| ").startswith(("chunkline", "window"))]
    names = {"chunkline", "window", *(f"chunkline {name}" for name in bench.CHUNKLINE_STRATEGIES)}
    for name in names:
        # A score row per size and budget (and a difference row for every system but the default).
        count = sum(1 for row in rows if row.lstrip("| ").split("  ")[0].split(" |")[0].strip() == name)
        assert count >= 4, name


def test_chunkline_rows_run_at_each_size_with_the_same_overlap():
    args = bench.parse_args(["--max-tokens", "256,512", "--chunkline-variants", "min_tokens=64", "--systems", "x"])
    assert (bench.overlap_tokens_for(512), bench.overlap_tokens_for(256)) == (50, 25)
    for size, overlap in ((256, 25), (512, 50)):
        systems, _ = bench.build_systems(args, size)
        settings = {system.name: system.settings for system in systems}
        # The default and the variants are run whatever --systems selects.
        assert list(settings) == ["chunkline", "chunkline min_tokens=64"]
        assert (
            f'"max_tokens":{size}' in settings["chunkline"] and f'"overlap_tokens":{overlap}' in settings["chunkline"]
        )
        assert f'"max_tokens":{size}' in settings["chunkline min_tokens=64"]


PEER_ROWS = (
    "semantic-text-splitter markdown",
    "semantic-text-splitter text",
    "langchain recursive",
    "langchain markdown",
    "chonkie recursive",
)


@pytest.mark.slow
def test_every_system_runs_at_each_size_with_the_same_overlap():
    args = bench.parse_args(["--max-tokens", "256,512", "--chunkline-variants", "min_tokens=64"])
    for size, overlap in ((256, 25), (512, 50)):
        systems, _ = bench.build_systems(args, size)
        settings = {system.name: system.settings for system in systems}
        expected = [
            "chunkline",
            "chunkline min_tokens=64",
            *(f"chunkline {name}" for name in bench.CHUNKLINE_STRATEGIES),
        ]
        for family, package in (
            ("semantic-text-splitter", "semantic_text_splitter"),
            ("langchain", "langchain_text_splitters"),
            ("chonkie", "chonkie"),
        ):
            if importlib.util.find_spec(package) is not None:
                expected += [name for name in PEER_ROWS if name.startswith(family)]
        assert list(settings) == [*expected, "window"]
        assert (
            f'"max_tokens":{size}' in settings["chunkline"] and f'"overlap_tokens":{overlap}' in settings["chunkline"]
        )
        assert f'"max_tokens":{size}' in settings["chunkline min_tokens=64"]
        assert f'"max_tokens":{size}' in settings["window"] and '"overlap_tokens":0' in settings["window"]
        for name, setting in settings.items():
            if name.startswith("langchain"):
                assert f"chunk_size={size}, chunk_overlap={overlap}" in setting
            if name.startswith("semantic-text-splitter"):
                assert f"{size}, overlap={overlap}" in setting
            if name.startswith("chonkie"):
                assert f"chunk_size={size}" in setting


def test_retrieve_cuts_the_chunk_that_crosses_the_budget():
    from chunkline.evaluation.metrics import RetrievedRange

    ranges = [RetrievedRange("a.md", 0, 100), RetrievedRange("a.md", 100, 180), RetrievedRange("b.md", 0, 30)]
    # Ranked 2, 0, 1 with 6, 40 and 20 tokens; budget 50: 2 and 0 whole (46), then 1 cut to 4 of 20 tokens:
    # floor(80 * 4 / 20) = 16 characters.
    retrieved = bench.retrieve([2, 0, 1], [40, 20, 6], 50, ranges)
    assert retrieved == [
        RetrievedRange("b.md", 0, 30),
        RetrievedRange("a.md", 0, 100),
        RetrievedRange("a.md", 100, 116),
    ]


# ---------------------------------------------------------------------------------- paired bootstrap


def test_the_paired_bootstrap_is_deterministic_and_paired():
    weights = bench.bootstrap_weights(40, 500, seed=7)
    assert weights.shape == (500, 40) and (weights.sum(axis=1) == 40).all()
    assert (weights == bench.bootstrap_weights(40, 500, seed=7)).all()
    rng = np.random.default_rng(3)
    default = rng.random(40)
    # The same per-question scores: no difference at all. A constant shift: exactly that shift.
    assert bench.difference_interval(default, default, weights) == bench.Interval(0.0, 0.0, 0.0)
    shifted = bench.difference_interval(default + 0.05, default, weights)
    assert (shifted.low, shifted.mean, shifted.high) == pytest.approx((0.05, 0.05, 0.05))
    # Noise around a small gain: the interval holds the mean and widens with the noise.
    small = bench.difference_interval(default + 0.01 + rng.normal(0, 0.02, 40), default, weights)
    large = bench.difference_interval(default + 0.01 + rng.normal(0, 0.2, 40), default, weights)
    assert small.low < small.mean < small.high and large.low < large.mean < large.high
    assert large.high - large.low > small.high - small.low
    assert bench.negated(small) == bench.Interval(-small.mean, -small.high, -small.low)


def hand_table(means: dict[str, float], set_name: str = "hand") -> object:
    figures = {name: {"bm25": {"recall": value, "iou": value / 10}} for name, value in means.items()}
    differences = {
        name: {
            "bm25": {
                metric: bench.Interval(
                    figures[name]["bm25"][metric] - figures["chunkline"]["bm25"][metric],
                    figures[name]["bm25"][metric] - figures["chunkline"]["bm25"][metric] - 0.01,
                    figures[name]["bm25"][metric] - figures["chunkline"]["bm25"][metric] + 0.01,
                )
                for metric in ("recall", "iou")
            }
        }
        for name in means
        if name != "chunkline"
    }
    return bench.Table(set_name, "all", 10, 512, 1024, figures, differences, {})


def test_the_verdict_judges_the_default_against_other_systems_and_shows_the_best_chunkline_alternative():
    tables = [
        hand_table({"chunkline": 0.500, "chunkline blocks": 0.520, "langchain recursive": 0.503, "window": 0.40}),
        hand_table({"chunkline": 0.600, "chunkline blocks": 0.590, "window": 0.620}, "behind"),
        hand_table({"chunkline": 0.600, "chunkline blocks": 0.590, "chonkie recursive": 0.560}, "kept out"),
        hand_table({"chunkline": 0.600, "chunkline blocks": 0.590}, "alone"),
    ]
    held_out = {"hand": False, "behind": False, "kept out": True, "alone": False}
    rows = bench.verdict_rows([tables[2], tables[0], tables[1], tables[3]], held_out, ["bm25"])
    assert [(row.set_name, row.metric) for row in rows] == [
        ("hand", "recall"),
        ("hand", "iou"),
        ("behind", "recall"),
        ("behind", "iou"),
        ("kept out", "recall"),
        ("kept out", "iou"),
    ]
    # A chunkline row ahead of the default is shown, not judged: the default is behind langchain by 0.3.
    recall = rows[0]
    assert (recall.best_other, recall.best_alternative) == ("langchain recursive", "chunkline blocks")
    assert (recall.best_other_figure, recall.best_alternative_figure) == (0.503, 0.520)
    assert recall.gap == pytest.approx(-0.003) and recall.verdict == "within 0.5"
    assert (recall.gap_interval.low, recall.gap_interval.high) == pytest.approx((-0.013, 0.007))
    assert rows[1].gap == pytest.approx(-0.0003) and rows[1].verdict == "within 0.5"
    assert (rows[2].best_other, rows[2].verdict, rows[2].best_alternative) == (
        "window",
        "behind by 2.0",
        "chunkline blocks",
    )
    assert rows[4].held_out and (rows[4].best_other, rows[4].verdict) == ("chonkie recursive", "first")
    header, body = bench.verdict_table(rows)
    assert header[6] == "best other system" and header[-2] == "best chunkline alternative"
    assert body[4][0] == "kept out (held out)"
    assert body[0][6:8] == ["langchain recursive", "50.3"] and body[0][-3:] == [
        "within 0.5",
        "chunkline blocks",
        "52.0",
    ]


# ---------------------------------------------------------------------------------- pluggable question sets

TIDE_TABLE = """# Tide tables

The harbour publishes its tide tables every December for the following year.

## Reading a table

Each row gives the date, the time of high water and its height above chart datum, in metres.
Heights below datum are printed with a minus sign.

## Spring tides

Spring tides come two days after a full or new moon, when the range between high and low water is
at its largest; neap tides come in between.
"""


def tiny_set(held_out: bool):
    """A set built from the one hand-written document in its source folder: two questions, each answered by
    one sentence of it."""
    from benchmarks.question_sets import BuiltSet
    from chunkline.evaluation.questions import Question, ReferenceSpan

    def build(source: Path, count_tokens) -> BuiltSet:
        text = (source / "tides.md").read_text(encoding="utf-8")
        answers = {
            "How are heights below chart datum printed?": "Heights below datum are printed with a minus sign.",
            "When do spring tides come?": "Spring tides come two days after a full or new moon",
        }
        questions = [
            Question(question, (ReferenceSpan("tides.md", text.index(answer), text.index(answer) + len(answer)),))
            for question, answer in answers.items()
        ]
        notes = [f"one document, {count_tokens(text)} tokens"]
        return BuiltSet([("tides.md", text)], questions, {"files": 1, "questions": 2}, notes, held_out)

    return build


def test_a_registered_set_is_built_from_its_source_and_reported(tmp_path, capsys, monkeypatch):
    import benchmarks.question_sets as question_sets

    source = tmp_path / "tides"
    source.mkdir()
    (source / "tides.md").write_text(TIDE_TABLE, encoding="utf-8")
    monkeypatch.setitem(question_sets.SETS, "tides", tiny_set(held_out=False))
    monkeypatch.setitem(question_sets.SETS, "tides-held", tiny_set(held_out=True))
    arguments = ["--sets", "tides-held,tides", "--source", f"tides={source}", "--source", f"tides-held={source}"]
    arguments += ["--retrievers", "bm25", "--budgets", "64", "--max-tokens", "64", "--systems", "window"]
    arguments += ["--bootstrap-resamples", "20"]
    assert bench.main([*arguments, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["sets"]) == ["tides", "tides-held"]  # the held-out set last, whatever the order asked
    tides = report["sets"]["tides"]
    assert (tides["documents"], tides["questions"], tides["held_out"]) == (1, 2, False)
    assert tides["rule"] == {"files": 1, "questions": 2}
    assert tides["notes"][0].startswith("one document, ")
    # What the answers ask of a chunker: two one-sentence spans, no heading inside either.
    assert tides["notes"][-1].startswith("references: 2 spans of ")
    assert tides["notes"][-1].endswith(", 0% over 64; 0% with a heading inside")
    assert report["sets"]["tides-held"]["held_out"] is True
    assert report["settings"]["sources"] == {"tides": str(source), "tides-held": str(source)}
    assert set(tides["sizes"]["64"]["results"]) == {"chunkline", "window"}
    # Two 64-token windows; each question's rare words are in the window that holds its answer, and the budget is
    # one whole window.
    assert tides["sizes"]["64"]["results"]["window"]["scores"]["bm25"]["64"]["all"]["hit"] == 1.0
    assert [row["held_out"] for row in report["verdict"]] == [False, False, True, True]

    assert bench.main([*arguments, "--format", "text"]) == 0
    printed = capsys.readouterr().out
    held = printed.index("=== held out: tides-held")
    assert printed.index("=== tides ===") < held < printed.index("=== verdict")
    assert "tides rule: files: 1, questions: 2" in printed
    assert "tides-held (held out)" in printed[printed.index("=== verdict") :]
    count = re.search(
        r"chunkline is first in (\d) of 4 cells, within 0.5 point in (\d), behind in (\d); "
        r"behind by more than 0.5 point across its whole 95% interval in (\d)",
        printed[printed.index("=== verdict") :],
    )
    assert count and sum(int(number) for number in count.groups()[:3]) == 4


def test_a_registered_set_needs_its_source(tmp_path, monkeypatch, capsys):
    import benchmarks.question_sets as question_sets

    monkeypatch.setitem(question_sets.SETS, "tides", tiny_set(held_out=False))
    with pytest.raises(SystemExit):
        bench.main(["--sets", "tides"])
    assert "the tides set needs its folder: pass it with --source tides=DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--source", f"lighthouses={tmp_path}"])
    assert "no set 'lighthouses'" in capsys.readouterr().err


def test_a_chunkline_setting_that_is_refused_stops_the_run(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "guide.md").write_text("# Guide\n\nThe gauges are read at slack water.\n", encoding="utf-8")
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--retrievers", "bm25", "--set", "max_tokenz=64"]
    with pytest.raises(SystemExit, match="max_tokenz"):
        bench.main(arguments)


@pytest.mark.slow
def test_small_to_big_rows_score_as_chunkline_evaluate_expand_does(tmp_path, text):
    """The benchmark's ``chunkline (expand section:N)`` rows give each question the figures that
    ``evaluate_configs(..., expansions=[N])`` gives it: the same rule, on the same chunks and rankings."""
    from chunkline.evaluation.corpus import load_input_config, read_corpus
    from chunkline.evaluation.evaluate import evaluate_configs

    corpus = small_corpus(tmp_path, text)
    question_set = bench.load_markdown_set(corpus, 10, None, count_tokens)
    config = bench.chunkline_config(["max_tokens=64", "overlap_tokens=6"])
    sizes = [0, 256, 512]
    judging = bench.Judging(("bm25",), (600,), count_tokens, None)
    rows = bench.expanded_results(question_set, 64, config, sizes, judging, None)
    assert [row.name for row in rows] == [f"chunkline (expand section:{size})" for size in sizes]
    evaluated = evaluate_configs(
        read_corpus(load_input_config([str(corpus)], environ={})),
        question_set.questions,
        {"default": config},
        budget_tokens=600,
        retrievers=["bm25"],
        expansions=sizes,
    )
    for row, result in zip(rows, evaluated.results[1:]):
        assert result.expand == row.name.removeprefix("chunkline (expand ").removesuffix(")")
        expected = [(score.recall, score.iou, score.precision, float(score.hit)) for score in result.per_question]
        assert np.allclose(row.per_question["bm25"][600], np.array(expected))
    # 64-token chunks reach part of the design opening; its section of at most 512 tokens holds all of it.
    recalls = [row.per_question["bm25"][600][0, 0] for row in rows]
    assert 0 < recalls[0] < 1 and recalls[2] == 1


def verdict_row(set_name: str, gap: float, low: float, high: float) -> bench.VerdictRow:
    interval = bench.Interval(gap, low, high)
    return bench.VerdictRow(
        set_name, False, 256, 1024, "bm25", "recall", 0.5, "chonkie recursive", 0.5 - gap, gap, interval, None, None
    )


def test_the_verdict_summary_names_only_the_cells_behind_across_their_whole_interval():
    rows = [
        verdict_row("ahead", 0.010, -0.020, 0.040),
        verdict_row("close", -0.004, -0.030, 0.020),
        verdict_row("noise", -0.054, -0.101, 0.008),  # behind, but the interval reaches past zero
        verdict_row("edge", -0.030, -0.060, -0.004),  # behind, the interval's upper end within 0.5 point
        verdict_row("keps", -0.066, -0.112, -0.023),  # behind across the whole interval
    ]
    assert [row.clearly_behind for row in rows] == [False, False, False, False, True]
    lines = bench.verdict_summary(rows, markdown=False)
    assert lines[0] == (
        "chunkline is first in 1 of 5 cells, within 0.5 point in 1, behind in 3; "
        "behind by more than 0.5 point across its whole 95% interval in 1:"
    )
    cell = "keps, max_tokens 256, budget 1024, bm25 recall: 50.0 against chonkie recursive 56.6, gap [-11.2, -2.3]"
    assert lines[1:] == ["  " + cell]
    # As markdown, the cells are a list, apart from the line above it.
    assert bench.verdict_summary(rows, markdown=True)[1:] == ["", "- " + cell]
    assert bench.verdict_summary(rows[:2], markdown=True)[-1].endswith("across its whole 95% interval in 0")
    # An interval that ends below the gap itself does not make a cell within 0.5 point clearly behind.
    skewed = verdict_row("skewed", -0.004, -0.030, -0.006)
    assert not skewed.behind and not skewed.clearly_behind
    assert rows[-1].to_json()["clearly_behind"] is True


def test_the_reference_line_gives_the_spans_sizes_and_how_many_cross_a_heading():
    from chunkline.evaluation.questions import Question, ReferenceSpan

    text = TIDE_TABLE
    crossing = (text.index("Heights below"), text.index("new moon") + len("new moon"))  # over "## Spring tides"
    inside = (text.index("Each row"), text.index("in metres.") + len("in metres."))
    sentence = (text.index("Heights below"), text.index("minus sign.") + len("minus sign."))
    # A span that starts at a heading has none inside; neither has one whose end is where a heading starts.
    from_heading = (text.index("## Reading"), text.index("in metres.") + len("in metres."))
    to_heading = (text.index("Heights below"), text.index("## Spring tides"))
    questions = [
        Question("How are heights printed, and when do spring tides come?", (ReferenceSpan("tides.md", *crossing),)),
        Question("What does a row give?", (ReferenceSpan("tides.md", *inside),)),
        Question("How are heights below datum printed?", (ReferenceSpan("tides.md", *sentence),)),
    ]
    question_set = bench.QuestionSet("tides", [bench.Document("tides.md", text)], questions, {"all": [0, 1, 2]})
    edges = [
        Question("What is in a table?", (ReferenceSpan("tides.md", *from_heading),)),
        Question("What is below datum?", (ReferenceSpan("tides.md", *to_heading),)),
    ]
    edge_set = bench.QuestionSet("edges", [bench.Document("tides.md", text)], edges, {"all": [0, 1]})
    assert bench.reference_line(edge_set, lambda passage: 1, [256]).endswith("; 0% with a heading inside")
    # A "# " line in a fenced code block is not a heading (a CommonMark parse, not a pattern).
    fenced = "# Tides\n\nRead the table:\n\n```sh\n# print the heights\ntides --port brest\n```\n\nThen plot it.\n"
    span = (fenced.index("Read"), fenced.index("plot it.") + len("plot it."))
    fenced_set = bench.QuestionSet(
        "fenced", [bench.Document("f.md", fenced)], [Question("How?", (ReferenceSpan("f.md", *span),))], {"all": [0]}
    )
    assert bench.reference_line(fenced_set, lambda passage: 1, [256]).endswith("; 0% with a heading inside")

    def words(passage: str) -> int:
        return len(passage.split())

    sizes = sorted(words(text[start:end]) for start, end in (crossing, inside, sentence))
    assert sizes == [9, 18, 23]  # quartiles (inclusive) 13.5, 18, 20.5
    line = bench.reference_line(question_set, words, [20, 512])
    assert line == (
        "references: 3 spans of 18 tokens (median; middle half 14-21), 33% over 20, 0% over 512; "
        "33% with a heading inside"
    )
    empty = bench.QuestionSet("none", [bench.Document("tides.md", text)], [], {"all": []})
    assert bench.reference_line(empty, words, [256]) == "references: none"
