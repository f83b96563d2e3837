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
import sys
from pathlib import Path

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


def test_a_run_on_a_small_markdown_corpus(tmp_path, text, capsys):
    corpus = small_corpus(tmp_path, text)
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--embedders", "bm25", "--budgets", "300,600"]
    arguments += ["--systems", "chunkline,window 200", "--chunkline-variants", "max_tokens=128/256", "--format", "json"]
    assert bench.main(arguments) == 0
    report = json.loads(capsys.readouterr().out)
    markdown = report["sets"]["markdown"]
    assert markdown["documents"] == 3 and markdown["questions"] == 1
    assert markdown["rule"]["qualifying"] == 1 and markdown["rule"]["no Summary heading"] == 2
    # Variant rows are run whatever --systems selects.
    assert set(markdown["results"]) == {
        "chunkline",
        "chunkline max_tokens=128",
        "chunkline max_tokens=256",
        "window 200",
    }
    for name, result in markdown["results"].items():
        assert result["chunks"] > 0 and result["placement"]["not_located"] == 0, name
        for budget in ("300", "600"):
            scores = result["scores"]["bm25"][budget]["all"]
            assert all(0.0 <= scores[metric] <= 1.0 for metric in ("recall", "precision", "iou", "hit")), name


@pytest.mark.parametrize("output", ["text", "markdown"])
def test_the_tables_name_every_row_and_budget(tmp_path, text, capsys, output):
    corpus = small_corpus(tmp_path, text)
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--embedders", "bm25", "--budgets", "300,600"]
    assert bench.main([*arguments, "--systems", "chunkline*,window 400", "--format", output]) == 0
    printed = capsys.readouterr().out
    assert "markdown rule: 3 files, 1 give a question" in printed
    for budget in (300, 600):
        assert f"markdown: 1 questions, budget {budget} tokens" in printed
    rows = [line for line in printed.splitlines() if line.lstrip("| ").startswith(("chunkline", "window"))]
    names = {"chunkline", "window 400", *(f"chunkline {name}" for name in bench.CHUNKLINE_STRATEGIES)}
    for name in names:
        assert sum(1 for row in rows if row.lstrip("| ").split("  ")[0].split(" |")[0].strip() == name) >= 2, name


def test_a_chunkline_setting_that_is_refused_stops_the_run(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "guide.md").write_text("# Guide\n\nThe gauges are read at slack water.\n", encoding="utf-8")
    arguments = ["--sets", "markdown", "--corpus", str(corpus), "--embedders", "bm25", "--set", "max_tokenz=64"]
    with pytest.raises(SystemExit, match="max_tokenz"):
        bench.main(arguments)
