"""Retrieval benchmark: chunkline's strategies and other chunkers, searched at the same token budget.

Usage::

    python benchmarks/bench_retrieval.py [--sets chroma,markdown] [--systems PATTERN,...]
                                         [--budgets 1024,2048] [--questions-limit N]
                                         [--set key=value ...] [--chunkline-variants key=v1/v2 ...]
                                         [--format text|markdown|json] [--markdown]
                                         [--embedders wordllama,bm25] [--chunk-tokens 512] [--overlap-tokens 50]
                                         [--markdown-questions 250] [--retrieval DIR] [--corpus DIR]

``--set`` takes what ``chunkline run --set`` takes (``min_tokens=64``; a strategy's parameter as
``chunking.headings.sub_split=window``) and applies to every chunkline row but the windows.

Every system chunks the same documents; its chunks are indexed by each embedder; for each question the
ranked chunks are taken best first while their text still fits in the retrieved-token budget; and the
retrieved chunks' character ranges are scored against the question's reference character ranges.
Everything is deterministic: same data, same packages, same figures.

Question sets (``--sets``)
--------------------------

``chroma``
    The folder given with ``--retrieval`` (the published figures: ``--retrieval ../shared/retrieval``):
    Chroma's chunking evaluation ("Evaluating Chunking Strategies for Retrieval", Smith and Troynikov, 2024), 297 questions with exact reference character
    ranges over three plain-text corpora (wikitexts, finance, chatlogs; no headings). As in Chroma's own
    evaluation, the three corpora are chunked into one index and every question searches all of it. The
    set is read with ``chunkline.evaluation.questions.load_questions`` (doc ids ``<corpus_id>.md``); a
    table is printed for all questions and one per corpus.
``markdown``
    Questions built from the ``--corpus`` folder by the rule below (the published figures: ``--corpus
    ../shared/corpus``, the Rust book and the Rust RFCs, real markdown written by others; the default is
    ``sample_corpus/``, which this repository ships); the searched corpus is every markdown file under that folder, with the doc
    id ``chunkline run`` gives it (its POSIX path relative to the folder: ``rust-rfcs/0001-private-fields.md``).

Both sets' documents are read as ``chunkline run`` reads them (``chunkline.evaluation.corpus.read_corpus``:
the same listing, doc ids and decoding), so reference offsets and chunk offsets index the same text.

The markdown rule
~~~~~~~~~~~~~~~~~

A Rust RFC opens with a ``Summary`` section, a paragraph in which its author states what the RFC
proposes, and sets the proposal out in a design section (``Detailed design`` in the older template,
``Guide-level explanation`` in the newer one). The question is the author's summary; the answer is the
opening of the design section, where the author first explains that proposal. Exactly:

1. Each file is parsed with markdown-it-py (CommonMark, with tables), and only its top-level blocks are
   read: headings (ATX and setext), paragraphs, lists, fences, tables, quotes. A block's character range
   runs from its first to past its last non-whitespace character, in the text as ``chunkline run`` decodes
   the file (UTF-8, a byte order mark kept, line breaks untouched).
2. The summary is the first heading whose text is ``Summary`` (any case). The question is the text of the
   blocks after it, up to the next heading of any level, from the first block's start to the last block's
   end, as written (markdown included); at most 1,500 characters.
3. The design section is the first heading after the summary, at the summary heading's level, whose text
   is one of ``Detailed design``, ``Guide-level explanation``, ``Proposal``, ``Design`` or ``Explanation``
   (any case); it runs to the next heading at that level or above, its sub-sections included. Its
   opening is the run of whole blocks from its first block that is not a heading, ending with the last
   block (not a heading) that keeps the range within 2,000 characters. The reference is that one range;
   it must hold at least 300 characters.
4. Between the summary's end and the reference's start lie at least 600 cl100k_base tokens of the
   author's text (the motivation, mostly): more than a 512-token chunk can span, so no chunk of the
   structure-aware systems holds both the question text and a reference character (the 800-token window
   can, and is the only row that may profit from it).
5. A file that lacks either part, or whose parts are out of those bounds, or whose question text occurs
   inside its reference, gives no question. Of the files that do, up to ``--markdown-questions`` (250) are
   kept: those whose doc id has the smallest sha256, listed in doc id order. The run prints how many files
   gave a question and why the others did not.

The question is never part of its reference: they are different sections, far apart. The summary stays
searchable: the documents are searched exactly as their authors wrote them (the references are ranges of
those very files), so for every system the chunk that holds the summary is a near-verbatim match to the
question that holds no reference character; every system pays for it from the same budget (a system that
keeps the summary in a small chunk of its own pays less), and what is measured is whether the rest of the
budget reaches the design text.

Why it is fair to every system: questions and references are fixed from the authors' text before any
system runs, and no system's chunks, boundaries, settings or output are read; the rule's only tools are a
CommonMark parse (markdown-it-py, which chunkline also parses with; the headings and block ends of a
CommonMark document are the same whoever parses it) and a token count of the text between the two parts.
The reference starts where the author started a section and ends at a block end the author wrote inside
it, and no system is told where. A system that follows markdown structure can see the section starts
(that is what the set measures, next to the plain-text Chroma set); a system that does not is scored on
the same ranges.

Systems (``--systems``: comma-separated names or shell patterns, e.g. ``'chunkline*,window*'``)
---------------------------------------------------------------------------------------------

Every structure-aware system makes chunks of at most 512 cl100k_base tokens (``--chunk-tokens``), and,
where it has a token overlap setting, 50 tokens of overlap (``--overlap-tokens``):

``chunkline``
    ``chunk_markdown(text, config, doc_id=...)`` with the default config (``headings``) and ``--set``;
    indexed by ``chunkline.evaluation.retrieval.evaluation_text(chunk)`` (what the embedding model is
    meant to see), retrieved as ``(doc_id, start_char, end_char)`` and budgeted by the chunk's text.
``chunkline sections|blocks|scored|sentences|paragraphs|tokens``
    The same with ``strategy`` set and each strategy's default parameters, except ``blocks.target=tokens``
    and ``scored.mode=tokens`` (so that they too pack to ``max_tokens`` instead of a byte or character
    size). ``sentences`` and ``paragraphs`` overlap by their own default of one unit; ``sections`` by none.
``chunkline KEY=VALUE ...``
    One row per ``--chunkline-variants`` argument: the default config, then ``--set``, then the variant's
    assignments (``min_tokens=64;embed_context=none`` is one variant; ``min_tokens=32/64/128`` is three).
    Variant rows are always run, whatever ``--systems`` selects.
``semantic-text-splitter markdown`` / ``semantic-text-splitter text``
    ``MarkdownSplitter`` / ``TextSplitter.from_tiktoken_model("gpt-3.5-turbo", 512, overlap=50)``
    (cl100k_base), its default ``trim``; offsets from ``chunk_indices`` (character offsets, checked).
``langchain recursive`` / ``langchain markdown``
    ``RecursiveCharacterTextSplitter`` / ``MarkdownTextSplitter.from_tiktoken_encoder("cl100k_base",
    chunk_size=512, chunk_overlap=50, add_start_index=True)``; offsets from ``start_index`` (checked).
``chonkie recursive``
    ``RecursiveChunker(tokenizer=<cl100k_base>, chunk_size=512)``, its default rules; it has no overlap
    setting. Offsets from ``start_index`` (checked).
``window 200`` / ``window 400`` / ``window 800``
    Plain token windows without overlap, Chroma's fixed-size baselines: chunkline's ``tokens`` strategy
    with ``max_tokens`` 200/400/800, ``overlap_tokens`` 0 and ``embed_context: none``, indexed by the verbatim
    text (no ``--set``).

The tokenizers load without a network (chunkline's offline ``cl100k_base``, registered with tiktoken so
that LangChain's ``from_tiktoken_encoder`` finds it; semantic-text-splitter's tiktoken-rs bundles its own).
A peer's chunk is placed in its document at the peer's own offset when ``text[start:start + len(chunk)]
== chunk`` and that offset follows on from the previous chunk (after its start, at or before its end plus
whitespace); otherwise at the first occurrence of the chunk's text after the previous chunk's start
(``place_chunks``). The run prints, per system, the chunks placed by search (an offset that is wrong or
missing), those moved from another repeat of their text (an offset that matches but skips over text), any
that cannot be placed (left out of the index), and the characters other than whitespace that no placed
chunk covers (0 for every system here once placed). Empty chunks are left out for every system. Peers'
chunks are indexed and budgeted by their text.

Retrieval and the metric
------------------------

Two embedders: wordllama's static embedding model (``load_wordllama_embedder``, offline) with cosine
similarity, and BM25 (bm25s). Budgets (``--budgets``, default 1024 and 2048 cl100k_base tokens, two and
four full 512-token chunks) count each chunk's verbatim text with ``budget_token_counter()``; chunks are
taken best first with ``take_within_budget``, as ``chunkline evaluate`` takes them: whole chunks while they
fit; the chunk that crosses the budget counts only up to it, its character range cut to the same share of
its characters as of its tokens (``start_char + floor(characters * tokens left / chunk tokens)``); then
the walk stops. Every system is handed exactly the budget (unless its ranking runs out), and is scored on
those ranges. Per question, as in Chroma's evaluation (``score_question``, over character ranges):
recall = reference characters covered / reference characters; precision = covered / characters retrieved
(overlapping chunks counted each time); IoU = covered / (retrieved + reference - covered); hit = at least
one reference character covered. Tables show the means over the questions, in percent.

Output: one table per question set (and per corpus of ``chroma``) and budget: rows are systems; columns
the chunk count, mean tokens per chunk, and recall / precision / IoU / hit rate for each embedder; then
the offset checks, and wall time per phase and per system. ``--format markdown`` (or ``--markdown``) prints
the tables as markdown for the README; ``--format json`` prints every figure as JSON. Progress goes to
stderr. ``--questions-limit N`` keeps the first N questions of each corpus, for quick runs.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.metadata
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tiktoken.registry
from markdown_it import MarkdownIt

import chunkline
from chunkline import ChunkConfig, ConfigError, load_chunk_config
from chunkline.tokenizers import load_encoding

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPOSITORY / "sample_corpus"
ENCODING_NAME = "cl100k_base"
SEMANTIC_MODEL = "gpt-3.5-turbo"  # tiktoken-rs maps it to cl100k_base
CHUNK_TOKENS = 512
OVERLAP_TOKENS = 50
WINDOW_TOKENS = (200, 400, 800)
BUDGETS_TOKENS = (1024, 2048)
MARKDOWN_QUESTIONS = 250
SETS = ("chroma", "markdown")
EMBEDDERS = ("wordllama", "bm25")
METRICS = ("recall", "precision", "iou", "hit")
METRIC_LABELS = {"recall": "recall", "precision": "prec", "iou": "IoU", "hit": "hit"}
EMBEDDER_LABELS = {"wordllama": "wl", "bm25": "bm25"}
CHUNKLINE_STRATEGIES = ("sections", "blocks", "scored", "sentences", "paragraphs", "tokens")
STRATEGY_SETTINGS = {"blocks": ("chunking.blocks.target=tokens",), "scored": ("chunking.scored.mode=tokens",)}
MAX_EXAMPLES = 5


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ documents


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    """POSIX path relative to the folder the set was read from, as ``chunkline run`` gives it."""
    text: str


def read_documents(folder: Path) -> tuple[list[Document], dict[str, str]]:
    """Every markdown document under ``folder`` as ``chunkline run`` reads it (its listing, doc ids and
    decoding, through ``chunkline.evaluation.corpus``), in doc id order, and the files it leaves out."""
    from chunkline.evaluation.corpus import CorpusError, load_input_config, read_corpus

    try:
        corpus = read_corpus(load_input_config([str(folder)], environ={}))
    except (CorpusError, ConfigError) as error:
        raise SystemExit(f"error: {error}") from None
    return [Document(doc_id, item.text) for doc_id, item in corpus.documents.items()], dict(corpus.left_out)


@dataclass
class QuestionSet:
    name: str
    documents: list[Document]
    questions: list[Any]
    """``chunkline.evaluation.questions.Question`` objects."""
    groups: dict[str, list[int]]
    """Named subsets of the questions (indices), each printed as a table of its own besides the whole."""
    notes: list[str] = field(default_factory=list)
    rule_counts: dict[str, int] | None = None


def limit_questions(questions: list[Any], limit: int | None) -> list[Any]:
    """The first ``limit`` questions of each corpus (the doc id of a question's first reference)."""
    if limit is None:
        return questions
    kept: list[Any] = []
    taken: dict[str, int] = {}
    for question in questions:
        corpus = question.references[0].doc_id if question.references else ""
        if taken.get(corpus, 0) < limit:
            taken[corpus] = taken.get(corpus, 0) + 1
            kept.append(question)
    return kept


def check_references(set_name: str, documents: Sequence[Document], questions: Sequence[Any]) -> None:
    lengths = {document.doc_id: len(document.text) for document in documents}
    for number, question in enumerate(questions, 1):
        for reference in question.references:
            length = lengths.get(reference.doc_id)
            if length is None:
                raise SystemExit(f"error: {set_name} question {number} refers to {reference.doc_id!r}, not in the set")
            if not 0 <= reference.start_char < reference.end_char <= length:
                raise SystemExit(
                    f"error: {set_name} question {number}: range {reference.start_char}:{reference.end_char} "
                    f"is outside {reference.doc_id} ({length} characters)"
                )


def load_chroma_set(folder: Path, limit: int | None) -> QuestionSet:
    from chunkline.evaluation.questions import load_questions

    documents, left_out = read_documents(folder / "corpora")
    questions = limit_questions(load_questions(str(folder / "questions.csv")), limit)
    check_references("chroma", documents, questions)
    groups: dict[str, list[int]] = {}
    for index, question in enumerate(questions):
        groups.setdefault(question.references[0].doc_id.removesuffix(".md"), []).append(index)
    notes = [f"left out (as chunkline run would): {doc_id}: {why}" for doc_id, why in left_out.items()]
    return QuestionSet("chroma", documents, questions, {"all": list(range(len(questions))), **groups}, notes)


# ---------------------------------------------------------------------------------- the markdown rule

SUMMARY_TITLE = "summary"
DESIGN_TITLES = ("detailed design", "guide-level explanation", "proposal", "design", "explanation")
QUESTION_MAX_CHARS = 1500
REFERENCE_MIN_CHARS = 300
REFERENCE_MAX_CHARS = 2000
MIN_GAP_TOKENS = 600
"""Tokens between the Summary's end and the reference's start: more than a 512-token chunk can span."""
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class TopBlock:
    """One top-level block of a markdown document: its kind, a heading's level and text, its range."""

    kind: str
    """markdown-it's token type without ``_open`` (``heading``, ``paragraph``, ``fence``, ``bullet_list``...)."""
    heading_level: int
    """1..6 for a heading, 0 for any other block."""
    heading_text: str
    start_char: int
    """The block's first non-whitespace character."""
    end_char: int
    """Past the block's last non-whitespace character."""


def line_starts(text: str) -> list[int]:
    """Character offset of each line's start, lines ending at ``\\n``, ``\\r\\n`` or ``\\r`` (as in CommonMark);
    one more entry, ``len(text)``, for the end."""
    return [0, *(match.end() for match in _LINE_BREAK.finditer(text)), len(text)]


def top_level_blocks(text: str) -> list[TopBlock]:
    """The document's top-level blocks, in order, by a CommonMark parse (markdown-it-py, tables on)."""
    parser = MarkdownIt("commonmark").enable("table")
    tokens = parser.parse(text)
    starts = line_starts(text)
    blocks: list[TopBlock] = []
    for index, token in enumerate(tokens):
        if token.level != 0 or token.nesting == -1 or token.map is None:
            continue
        first_line, end_line = token.map
        start = starts[min(first_line, len(starts) - 1)]
        end = starts[min(end_line, len(starts) - 1)]
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        kind = token.type.removesuffix("_open")
        if kind == "heading":
            blocks.append(TopBlock(kind, int(token.tag[1:]), tokens[index + 1].content.strip(), start, end))
        else:
            blocks.append(TopBlock(kind, 0, "", start, end))
    return blocks


def blocks_until_heading(blocks: Sequence[TopBlock], first: int) -> list[TopBlock]:
    run: list[TopBlock] = []
    for block in blocks[first:]:
        if block.heading_level:
            break
        run.append(block)
    return run


@dataclass(frozen=True, slots=True)
class MarkdownQuestion:
    doc_id: str
    question: str
    start_char: int
    end_char: int


def markdown_question(document: Document, count_tokens: Callable[[str], int]) -> tuple[MarkdownQuestion | None, str]:
    """The rule's question for one document, or ``None`` and the reason it gives none."""
    text = document.text
    blocks = top_level_blocks(text)
    summary = next(
        (index for index, block in enumerate(blocks) if block.heading_text.casefold() == SUMMARY_TITLE), None
    )
    if summary is None:
        return None, "no Summary heading"
    summary_level = blocks[summary].heading_level
    body = blocks_until_heading(blocks, summary + 1)
    if not body:
        return None, "empty Summary"
    question_end = body[-1].end_char
    question = text[body[0].start_char : question_end]
    if len(question) > QUESTION_MAX_CHARS:
        return None, f"Summary over {QUESTION_MAX_CHARS} characters"
    design = next(
        (
            index
            for index in range(summary + 1, len(blocks))
            if blocks[index].heading_level == summary_level and blocks[index].heading_text.casefold() in DESIGN_TITLES
        ),
        None,
    )
    if design is None:
        return None, "no design section"
    section: list[TopBlock] = []
    for block in blocks[design + 1 :]:
        if block.heading_level and block.heading_level <= summary_level:
            break
        if section or not block.heading_level:  # the opening starts at the first block that is not a heading
            section.append(block)
    kept = [block for block in section if block.end_char - section[0].start_char <= REFERENCE_MAX_CHARS]
    while kept and kept[-1].heading_level:
        kept.pop()
    if not kept:
        return None, f"design section empty or its first block over {REFERENCE_MAX_CHARS} characters"
    start, end = kept[0].start_char, kept[-1].end_char
    if end - start < REFERENCE_MIN_CHARS:
        return None, f"design opening under {REFERENCE_MIN_CHARS} characters"
    if question in text[start:end]:
        return None, "Summary text inside the reference"
    if count_tokens(text[question_end:start]) < MIN_GAP_TOKENS:
        return None, f"design opening under {MIN_GAP_TOKENS} tokens after the Summary"
    return MarkdownQuestion(document.doc_id, question, start, end), "question"


def build_markdown_questions(
    documents: Sequence[Document], count: int, count_tokens: Callable[[str], int]
) -> tuple[list[MarkdownQuestion], dict[str, int]]:
    """The rule over every document: up to ``count`` questions (smallest sha256 of doc id first, listed in
    doc id order) and how many documents gave a question or which reason not to."""
    found: list[MarkdownQuestion] = []
    reasons: dict[str, int] = {}
    for document in documents:
        question, reason = markdown_question(document, count_tokens)
        reasons[reason] = reasons.get(reason, 0) + 1
        if question is not None:
            found.append(question)
    found.sort(key=lambda question: hashlib.sha256(question.doc_id.encode("utf-8")).hexdigest())
    kept = sorted(found[:count], key=lambda question: question.doc_id)
    return kept, {"documents": len(documents), "qualifying": len(found), "kept": len(kept), **reasons}


def load_markdown_set(folder: Path, count: int, limit: int | None, count_tokens: Callable[[str], int]) -> QuestionSet:
    from chunkline.evaluation.questions import Question, ReferenceSpan

    documents, left_out = read_documents(folder)
    built, counts = build_markdown_questions(documents, count, count_tokens)
    questions = [
        Question(item.question, (ReferenceSpan(item.doc_id, item.start_char, item.end_char),)) for item in built
    ]
    if limit is not None:
        questions = questions[:limit]
    check_references("markdown", documents, questions)
    reference_chars = [span.end_char - span.start_char for question in questions for span in question.references]
    question_chars = [len(question.question) for question in questions]
    notes = [f"left out (as chunkline run would): {doc_id}: {why}" for doc_id, why in left_out.items()]
    if questions:
        notes.append(
            f"question characters median {statistics.median(question_chars):.0f}, "
            f"reference characters median {statistics.median(reference_chars):.0f} "
            f"(range {min(reference_chars)}..{max(reference_chars)})"
        )
    return QuestionSet("markdown", documents, questions, {"all": list(range(len(questions)))}, notes, counts)


# ------------------------------------------------------------------------------------------- systems


@dataclass(frozen=True, slots=True)
class PlacedChunk:
    """One chunk as a character range of its document and the text it is indexed by."""

    start_char: int
    end_char: int
    index_text: str
    """What the embedder and BM25 see."""
    budget_text: str
    """What the reader is handed, and the budget counts: the verbatim ``document[start_char:end_char]``."""


@dataclass
class Placement:
    """How a system's chunks of one set were placed in their documents."""

    chunks: int = 0
    by_own_offset: int = 0
    by_search: int = 0
    """Chunks whose claimed offset does not match the text (or that claim none), placed by search."""
    at_other_repeat: int = 0
    """Chunks whose claimed offset matches another repeat of the same text, placed at the first occurrence
    after the previous chunk's start."""
    not_located: int = 0
    empty: int = 0
    uncovered_chars: int = 0
    """Characters other than whitespace that no placed chunk covers (a system that drops text, or a
    misplaced chunk, shows here)."""
    examples: list[str] = field(default_factory=list)

    def add(self, other: Placement) -> None:
        self.chunks += other.chunks
        self.by_own_offset += other.by_own_offset
        self.by_search += other.by_search
        self.at_other_repeat += other.at_other_repeat
        self.not_located += other.not_located
        self.empty += other.empty
        self.uncovered_chars += other.uncovered_chars
        self.examples += other.examples[: MAX_EXAMPLES - len(self.examples)]


def place_chunks(
    doc_id: str, text: str, chunks: Iterable[tuple[int | None, str]]
) -> tuple[list[PlacedChunk], Placement]:
    """Place each ``(claimed start, chunk text)`` of one document, in the order the system gave them.

    Every system here covers its document in order: each chunk starts after the previous one's start, at
    or before its end plus whitespace (overlap or not). A claimed start is taken when
    ``text[start:start + len(chunk)] == chunk`` and it follows on in that way. A claim that matches but
    lies elsewhere (on an earlier or later repeat of the chunk's text) is moved to the first occurrence
    after the previous chunk's start; a claim that does not match (or no claim) is replaced by that search.
    Both are counted, and a chunk found nowhere is counted and left out."""
    placed: list[PlacedChunk] = []
    placement = Placement()
    previous_start, previous_end = -1, 0
    for claimed, chunk in chunks:
        placement.chunks += 1
        if not chunk:
            placement.empty += 1
            continue
        claim_matches = claimed is not None and 0 <= claimed and text.startswith(chunk, claimed)
        follows_on = (
            claim_matches
            and claimed > previous_start
            and (claimed <= previous_end or not text[previous_end:claimed].strip())
        )
        if follows_on:
            start = claimed
            placement.by_own_offset += 1
        else:
            start = text.find(chunk, previous_start + 1)
            if start < 0:
                placement.not_located += 1
                if len(placement.examples) < MAX_EXAMPLES:
                    placement.examples.append(f"{doc_id}: {chunk[:60]!r}")
                continue
            if not claim_matches:
                placement.by_search += 1
            elif start != claimed:
                placement.at_other_repeat += 1
            else:
                placement.by_own_offset += 1  # the first occurrence after the previous chunk: the claim stands
        placed.append(PlacedChunk(start, start + len(chunk), chunk, chunk))
        previous_start, previous_end = start, max(previous_end, start + len(chunk))
    return placed, placement


def uncovered_characters(text: str, placed: Sequence[PlacedChunk]) -> int:
    """Characters of ``text`` other than whitespace outside every placed chunk's range."""
    uncovered = 0
    covered_to = 0
    for chunk in sorted(placed, key=lambda chunk: chunk.start_char):
        if chunk.start_char > covered_to:
            uncovered += len(_WHITESPACE.sub("", text[covered_to : chunk.start_char]))
        covered_to = max(covered_to, chunk.end_char)
    return uncovered + len(_WHITESPACE.sub("", text[covered_to:]))


@dataclass(frozen=True)
class System:
    name: str
    chunk: Callable[[Document], tuple[list[PlacedChunk], Placement]]
    settings: str
    """What the system was configured with, in one line."""


def chunkline_system(name: str, config: ChunkConfig, *, index_by_evaluation_text: bool = True) -> System:
    from chunkline.evaluation.retrieval import evaluation_text

    def chunk(document: Document) -> tuple[list[PlacedChunk], Placement]:
        chunks = chunkline.chunk_markdown(document.text, config, doc_id=document.doc_id)
        placement = Placement(chunks=len(chunks), by_own_offset=len(chunks))
        placed = []
        for item in chunks:
            if item.end_char == item.start_char:
                placement.empty += 1
                placement.by_own_offset -= 1
                continue
            index_text = evaluation_text(item) if index_by_evaluation_text else item.text
            placed.append(PlacedChunk(item.start_char, item.end_char, index_text, item.text))
        return placed, placement

    return System(name, chunk, config.fingerprint())


def semantic_systems(chunk_tokens: int, overlap_tokens: int) -> list[System]:
    try:
        from semantic_text_splitter import MarkdownSplitter, TextSplitter
    except ImportError:
        return []
    systems = []
    for label, splitter_type in (("markdown", MarkdownSplitter), ("text", TextSplitter)):
        splitter = splitter_type.from_tiktoken_model(SEMANTIC_MODEL, chunk_tokens, overlap=overlap_tokens)

        def chunk(document: Document, splitter: Any = splitter) -> tuple[list[PlacedChunk], Placement]:
            return place_chunks(document.doc_id, document.text, splitter.chunk_indices(document.text))

        settings = f"{splitter_type.__name__}.from_tiktoken_model({SEMANTIC_MODEL!r}, {chunk_tokens}, overlap={overlap_tokens})"
        systems.append(System(f"semantic-text-splitter {label}", chunk, settings))
    return systems


def langchain_systems(chunk_tokens: int, overlap_tokens: int) -> list[System]:
    try:
        from langchain_text_splitters import MarkdownTextSplitter, RecursiveCharacterTextSplitter
    except ImportError:
        return []
    systems = []
    for label, splitter_type in (("recursive", RecursiveCharacterTextSplitter), ("markdown", MarkdownTextSplitter)):
        splitter = splitter_type.from_tiktoken_encoder(
            encoding_name=ENCODING_NAME, chunk_size=chunk_tokens, chunk_overlap=overlap_tokens, add_start_index=True
        )

        def chunk(document: Document, splitter: Any = splitter) -> tuple[list[PlacedChunk], Placement]:
            pieces = splitter.create_documents([document.text])
            claimed = ((piece.metadata.get("start_index"), piece.page_content) for piece in pieces)
            return place_chunks(document.doc_id, document.text, claimed)

        settings = (
            f"{splitter_type.__name__}.from_tiktoken_encoder({ENCODING_NAME!r}, chunk_size={chunk_tokens}, "
            f"chunk_overlap={overlap_tokens}, add_start_index=True)"
        )
        systems.append(System(f"langchain {label}", chunk, settings))
    return systems


def chonkie_systems(chunk_tokens: int) -> list[System]:
    try:
        from chonkie import RecursiveChunker
    except ImportError:
        return []
    chunker = RecursiveChunker(tokenizer=load_encoding(ENCODING_NAME), chunk_size=chunk_tokens)

    def chunk(document: Document) -> tuple[list[PlacedChunk], Placement]:
        pieces = chunker.chunk(document.text)
        return place_chunks(document.doc_id, document.text, ((piece.start_index, piece.text) for piece in pieces))

    return [
        System("chonkie recursive", chunk, f"RecursiveChunker(tokenizer={ENCODING_NAME}, chunk_size={chunk_tokens})")
    ]


def register_offline_encoding() -> None:
    """Hand tiktoken chunkline's offline cl100k_base, so ``tiktoken.get_encoding`` (LangChain's
    ``from_tiktoken_encoder``) never downloads it."""
    tiktoken.registry.ENCODINGS.setdefault(ENCODING_NAME, load_encoding(ENCODING_NAME))


def chunkline_config(assignments: Sequence[str]) -> ChunkConfig:
    return load_chunk_config(None, list(assignments), environ={})


def expand_variants(arguments: Sequence[str]) -> list[list[str]]:
    """Each argument is one variant (``a=1;b=2``), or several when its one assignment lists values with
    ``/`` (``min_tokens=32/64/128``)."""
    variants: list[list[str]] = []
    for argument in arguments:
        assignments = [item.strip() for item in argument.split(";") if item.strip()]
        if len(assignments) == 1 and "=" in assignments[0] and "/" in assignments[0].split("=", 1)[1]:
            key, values = assignments[0].split("=", 1)
            variants += [[f"{key}={value}"] for value in values.split("/")]
        elif assignments:
            variants.append(assignments)
    return variants


def build_systems(args: argparse.Namespace) -> tuple[list[System], list[str]]:
    """Every system the arguments name, in table order, and a note per system that could not be built."""
    register_offline_encoding()
    base = [f"max_tokens={args.chunk_tokens}", f"overlap_tokens={args.overlap_tokens}"]
    candidates: list[tuple[str, Callable[[], list[System]]]] = []
    variant_names: set[str] = set()

    def chunkline_candidate(name: str, assignments: list[str], **options: Any) -> None:
        candidates.append((name, lambda: [chunkline_system(name, chunkline_config(assignments), **options)]))

    chunkline_candidate("chunkline", [*base, *args.settings])
    for variant in expand_variants(args.chunkline_variants):
        variant_names.add(name := "chunkline " + " ".join(variant))
        chunkline_candidate(name, [*base, *args.settings, *variant])
    for strategy in CHUNKLINE_STRATEGIES:
        assignments = [f"strategy={strategy}", *base, *STRATEGY_SETTINGS.get(strategy, ()), *args.settings]
        chunkline_candidate(f"chunkline {strategy}", assignments)
    candidates.append(("semantic-text-splitter", lambda: semantic_systems(args.chunk_tokens, args.overlap_tokens)))
    candidates.append(("langchain", lambda: langchain_systems(args.chunk_tokens, args.overlap_tokens)))
    candidates.append(("chonkie", lambda: chonkie_systems(args.chunk_tokens)))
    for tokens in WINDOW_TOKENS:
        # Plain windows of exactly that many tokens: no embed_text context takes a share of them.
        assignments = ["strategy=tokens", f"max_tokens={tokens}", "overlap_tokens=0", "embed_context=none"]
        chunkline_candidate(f"window {tokens}", assignments, index_by_evaluation_text=False)

    systems: list[System] = []
    notes: list[str] = []
    for family, make in candidates:
        try:
            made = make()
        except ConfigError as error:
            raise SystemExit(f"error: the {family!r} row's chunkline config is refused: {error}") from None
        if not made:
            notes.append(f"{family}: not installed (the bench extra: pip install -e '.[bench]'); its rows are left out")
        systems += [system for system in made if system.name in variant_names or selected(system.name, args.systems)]
    return systems, notes


def selected(name: str, patterns: Sequence[str] | None) -> bool:
    if not patterns:
        return True
    return any(fnmatch.fnmatchcase(name.casefold(), pattern.casefold()) for pattern in patterns)


# ------------------------------------------------------------------------------------------- harness


@dataclass
class Timings:
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


@dataclass
class SystemResult:
    name: str
    chunks: int
    mean_tokens: float
    placement: Placement
    scores: dict[str, dict[int, dict[str, dict[str, float]]]]
    """embedder -> budget -> group -> metric -> mean (recall, precision, iou in 0..1; hit as a rate)."""
    seconds: dict[str, float]


def mean_scores(per_question: Sequence[Any], indices: Sequence[int]) -> dict[str, float]:
    if not indices:
        return dict.fromkeys(METRICS, 0.0)
    picked = [per_question[index] for index in indices]
    return {
        "recall": statistics.fmean(score.recall for score in picked),
        "precision": statistics.fmean(score.precision for score in picked),
        "iou": statistics.fmean(score.iou for score in picked),
        "hit": statistics.fmean(1.0 if score.hit else 0.0 for score in picked),
    }


def evaluate_system(
    system: System,
    question_set: QuestionSet,
    embedder: Any,
    embedders: Sequence[str],
    budgets: Sequence[int],
    count_tokens: Callable[[str], int],
) -> SystemResult:
    from chunkline.evaluation.metrics import RetrievedRange, score_question
    from chunkline.evaluation.retrieval import Bm25Index, EmbeddingIndex, take_within_budget

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    ranges: list[RetrievedRange] = []
    index_texts: list[str] = []
    budget_texts: list[str] = []
    placement = Placement()
    for document in question_set.documents:
        placed, document_placement = system.chunk(document)
        document_placement.uncovered_chars = uncovered_characters(document.text, placed)
        placement.add(document_placement)
        for item in placed:
            ranges.append(RetrievedRange(document.doc_id, item.start_char, item.end_char))
            index_texts.append(item.index_text)
            budget_texts.append(item.budget_text)
    seconds["chunk"] = time.perf_counter() - started

    started = time.perf_counter()
    token_counts = [count_tokens(text) for text in budget_texts]
    seconds["count"] = time.perf_counter() - started

    scores: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    for embedder_name in embedders:
        started = time.perf_counter()
        index = EmbeddingIndex(embedder, index_texts) if embedder_name == "wordllama" else Bm25Index(index_texts)
        seconds[f"{embedder_name} index"] = time.perf_counter() - started
        started = time.perf_counter()
        per_budget: dict[int, list[Any]] = {budget: [] for budget in budgets}
        for question in question_set.questions:
            ranked = index.rank(question.question)
            for budget in budgets:
                retrieved = []
                for share in take_within_budget(ranked, token_counts, budget):
                    whole = ranges[share.index]
                    retrieved.append(RetrievedRange(whole.doc_id, *share.char_range(whole.start_char, whole.end_char)))
                per_budget[budget].append(score_question(retrieved, question.references))
        seconds[f"{embedder_name} query"] = time.perf_counter() - started
        scores[embedder_name] = {
            budget: {group: mean_scores(results, indices) for group, indices in question_set.groups.items()}
            for budget, results in per_budget.items()
        }
    mean_tokens = statistics.fmean(token_counts) if token_counts else 0.0
    return SystemResult(system.name, len(ranges), mean_tokens, placement, scores, seconds)


# -------------------------------------------------------------------------------------------- output


def aligned_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(line[column]) for line in [header, *rows]) for column in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            [cells[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))]
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * width for width in widths), *(line(cells) for cells in rows)])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "| --- |" + " ---: |" * (len(header) - 1), *(line(cells) for cells in rows)])


def score_table(
    results: Sequence[SystemResult], embedders: Sequence[str], budget: int, group: str
) -> tuple[list[str], list[list[str]]]:
    header = ["system", "chunks", "mean tok"]
    header += [f"{EMBEDDER_LABELS[name]} {METRIC_LABELS[metric]}" for name in embedders for metric in METRICS]
    rows = []
    for result in results:
        cells = [result.name, str(result.chunks), f"{result.mean_tokens:.0f}"]
        for name in embedders:
            figures = result.scores[name][budget][group]
            cells += [f"{100 * figures[metric]:.1f}" for metric in METRICS]
        rows.append(cells)
    return header, rows


def table_title(question_set: QuestionSet, group: str, budget: int) -> str:
    count = len(question_set.groups[group])
    where = question_set.name if group == "all" else f"{question_set.name} / {group}"
    return f"{where}: {count} questions, budget {budget} tokens (means in %)"


def placement_lines(results: Sequence[SystemResult]) -> list[str]:
    lines = []
    for result in results:
        placement = result.placement
        if (
            placement.by_search
            or placement.at_other_repeat
            or placement.not_located
            or placement.empty
            or placement.uncovered_chars
        ):
            lines.append(
                f"  {result.name}: {placement.chunks} chunks, {placement.by_own_offset} at their own offset, "
                f"{placement.by_search} placed by search (own offset wrong or missing), "
                f"{placement.at_other_repeat} moved from another repeat of their text, "
                f"{placement.not_located} not located, {placement.empty} empty; "
                f"{placement.uncovered_chars} non-whitespace characters in no chunk"
            )
            lines += [f"    not located: {example}" for example in placement.examples]
    return lines or [
        "  every chunk of every system lies at its own offset (text[start:end] == chunk), and together they "
        "cover every character but whitespace"
    ]


def timing_table(results: Sequence[SystemResult], embedders: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    phases = ["chunk", "count", *(f"{name} {step}" for name in embedders for step in ("index", "query"))]
    header = ["system", *(f"{phase} s" for phase in phases), "total s"]
    rows = [
        [
            result.name,
            *(f"{result.seconds.get(phase, 0.0):.2f}" for phase in phases),
            f"{sum(result.seconds.values()):.2f}",
        ]
        for result in results
    ]
    return header, rows


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    packages = (
        "chunkline",
        "tiktoken",
        "markdown-it-py",
        "semantic-text-splitter",
        "langchain-text-splitters",
        "chonkie",
        "wordllama",
        "bm25s",
    )
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def rule_lines(question_set: QuestionSet) -> list[str]:
    counts = dict(question_set.rule_counts or {})
    if not counts:
        return []
    documents, qualifying, kept = counts.pop("documents"), counts.pop("qualifying"), counts.pop("kept")
    counts.pop("question", None)
    reasons = ", ".join(f"{reason}: {number}" for reason, number in sorted(counts.items(), key=lambda kv: -kv[1]))
    return [
        f"markdown rule: {documents} files, {qualifying} give a question, {kept} kept "
        f"(smallest sha256 of doc id); no question: {reasons}"
    ]


def text_report(
    args: argparse.Namespace,
    question_sets: Sequence[QuestionSet],
    results: dict[str, list[SystemResult]],
    systems: Sequence[System],
    notes: Sequence[str],
    phases: Timings,
    markdown: bool,
) -> str:
    render = markdown_table if markdown else aligned_table
    found = versions()
    lines = [
        f"chunk size {args.chunk_tokens} {ENCODING_NAME} tokens, overlap {args.overlap_tokens} where a system has "
        f"a token overlap setting; budgets {', '.join(map(str, args.budgets))} tokens; embedders "
        f"{', '.join(args.embedders)}",
        "versions: " + "  ".join(f"{name} {version}" for name, version in found.items()),
        *notes,
    ]
    for question_set in question_sets:
        lines += ["", f"## {question_set.name}" if markdown else f"=== {question_set.name} ==="]
        lines.append(
            f"{len(question_set.documents)} documents, "
            f"{sum(len(document.text) for document in question_set.documents):,} characters, "
            f"{len(question_set.questions)} questions"
        )
        lines += rule_lines(question_set) + question_set.notes
        set_results = results[question_set.name]
        for budget in args.budgets:
            for group in question_set.groups:
                header, rows = score_table(set_results, args.embedders, budget, group)
                title = table_title(question_set, group, budget)
                lines += ["", f"### {title}" if markdown else title, "", render(header, rows)]
        lines += ["", "chunk placement (peers' offsets checked against the text):", *placement_lines(set_results)]
        header, rows = timing_table(set_results, args.embedders)
        lines += ["", f"wall time per system on {question_set.name} (seconds):", "", render(header, rows)]
    lines += ["", "settings per system:"]
    lines += [f"  {system.name}: {system.settings}" for system in systems]
    lines += [
        "",
        "wall time per phase: " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases.seconds.items()),
    ]
    return "\n".join(lines)


def json_report(
    args: argparse.Namespace,
    question_sets: Sequence[QuestionSet],
    results: dict[str, list[SystemResult]],
    systems: Sequence[System],
    notes: Sequence[str],
    phases: Timings,
) -> str:
    def result_json(result: SystemResult) -> dict[str, Any]:
        placement = result.placement
        return {
            "chunks": result.chunks,
            "mean_tokens": result.mean_tokens,
            "placement": {
                "chunks": placement.chunks,
                "by_own_offset": placement.by_own_offset,
                "by_search": placement.by_search,
                "at_other_repeat": placement.at_other_repeat,
                "not_located": placement.not_located,
                "empty": placement.empty,
                "uncovered_chars": placement.uncovered_chars,
                "examples": placement.examples,
            },
            "scores": {
                embedder: {str(budget): groups for budget, groups in budgets.items()}
                for embedder, budgets in result.scores.items()
            },
            "seconds": result.seconds,
        }

    report = {
        "settings": {
            "chunk_tokens": args.chunk_tokens,
            "overlap_tokens": args.overlap_tokens,
            "budgets_tokens": list(args.budgets),
            "tokenizer": ENCODING_NAME,
            "embedders": list(args.embedders),
            "set": list(args.settings),
            "questions_limit": args.questions_limit,
            "markdown_questions": args.markdown_questions,
        },
        "versions": versions(),
        "notes": list(notes),
        "systems": {system.name: system.settings for system in systems},
        "sets": {
            question_set.name: {
                "documents": len(question_set.documents),
                "questions": len(question_set.questions),
                "groups": {group: len(indices) for group, indices in question_set.groups.items()},
                "rule": question_set.rule_counts,
                "results": {result.name: result_json(result) for result in results[question_set.name]},
            }
            for question_set in question_sets
        },
        "seconds": phases.seconds,
    }
    return json.dumps(report, indent=2)


# ---------------------------------------------------------------------------------------------- main


def comma_list(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give at least one name")
    return items


def budget_list(value: str) -> list[int]:
    try:
        budgets = [int(item) for item in comma_list(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets are whole numbers of tokens, got {value!r}") from None
    if any(budget < 1 for budget in budgets):
        raise argparse.ArgumentTypeError("budgets must be at least 1 token")
    return budgets


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets", type=comma_list, help="question sets (default: markdown, and chroma when --retrieval is given)"
    )
    parser.add_argument("--systems", type=comma_list, help="names or shell patterns of the rows (default: all)")
    parser.add_argument("--embedders", type=comma_list, default=list(EMBEDDERS), help="default: wordllama,bm25")
    parser.add_argument("--budgets", type=budget_list, default=list(BUDGETS_TOKENS), help="default: 1024,2048")
    parser.add_argument("--questions-limit", type=int, metavar="N", help="the first N questions of each corpus")
    parser.add_argument(
        "--markdown-questions",
        type=int,
        default=MARKDOWN_QUESTIONS,
        metavar="N",
        help=f"the most questions the markdown rule keeps (default: {MARKDOWN_QUESTIONS})",
    )
    parser.add_argument("--chunk-tokens", type=int, default=CHUNK_TOKENS, help=f"default: {CHUNK_TOKENS}")
    parser.add_argument("--overlap-tokens", type=int, default=OVERLAP_TOKENS, help=f"default: {OVERLAP_TOKENS}")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a chunkline setting for every chunkline row (not the windows), as chunkline run --set takes it: "
        "min_tokens=64, chunking.headings.sub_split=window",
    )
    parser.add_argument(
        "--chunkline-variants",
        nargs="+",
        action="extend",
        default=[],
        metavar="VARIANT",
        help="extra chunkline rows: 'a=1;b=2' is one, 'min_tokens=32/64/128' three",
    )
    parser.add_argument("--retrieval", type=Path, help="the folder of Chroma's chunking evaluation (the chroma set)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="the markdown corpus folder")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument("--markdown", action="store_true", help="the same as --format markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        args.format = "markdown"
    if args.sets is None:
        args.sets = ["chroma", "markdown"] if args.retrieval is not None else ["markdown"]
    for name in args.sets:
        if name not in SETS:
            parser.error(f"unknown set {name!r}; sets: {', '.join(SETS)}")
    for name in args.embedders:
        if name not in EMBEDDERS:
            parser.error(f"unknown embedder {name!r}; embedders: {', '.join(EMBEDDERS)}")
    if args.questions_limit is not None and args.questions_limit < 1:
        parser.error("--questions-limit must be at least 1")
    if not 0 <= args.overlap_tokens < args.chunk_tokens:
        parser.error("--overlap-tokens must be >= 0 and less than --chunk-tokens")
    folders = {"chroma": (args.retrieval, "--retrieval"), "markdown": (args.corpus, "--corpus")}
    for name in args.sets:
        folder, option = folders[name]
        if folder is None:
            parser.error(f"the {name} set needs its folder: pass it with {option} PATH")
        if not folder.is_dir():
            parser.error(f"the {name} set's folder {folder.resolve()} is missing; pass it with {option} PATH")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    phases = Timings()
    try:
        from chunkline.evaluation.retrieval import budget_token_counter, load_wordllama_embedder
    except ImportError as error:
        raise SystemExit(f"error: the evaluation core is not importable ({error})") from None

    started = time.perf_counter()
    systems, notes = build_systems(args)
    if not systems:
        raise SystemExit("error: --systems matches no system")
    count_tokens = budget_token_counter()
    embedder = load_wordllama_embedder() if "wordllama" in args.embedders else None
    phases.add("setup", time.perf_counter() - started)

    question_sets: list[QuestionSet] = []
    started = time.perf_counter()
    if "chroma" in args.sets:
        question_sets.append(load_chroma_set(args.retrieval, args.questions_limit))
    if "markdown" in args.sets:
        question_sets.append(
            load_markdown_set(args.corpus, args.markdown_questions, args.questions_limit, count_tokens)
        )
    phases.add("load sets and build questions", time.perf_counter() - started)
    for question_set in question_sets:
        progress(
            f"{question_set.name}: {len(question_set.documents)} documents, {len(question_set.questions)} questions"
        )
        for line in rule_lines(question_set):
            progress(line)

    results: dict[str, list[SystemResult]] = {}
    for question_set in question_sets:
        results[question_set.name] = []
        for system in systems:
            result = evaluate_system(system, question_set, embedder, args.embedders, args.budgets, count_tokens)
            results[question_set.name].append(result)
            for phase, seconds in result.seconds.items():
                phases.add(phase.split(" ")[0] if phase in ("chunk", "count") else phase, seconds)
            progress(
                f"{question_set.name} / {system.name}: {result.chunks} chunks in "
                + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in result.seconds.items())
            )
    phases.add("total", time.perf_counter() - wall)
    if args.format == "json":
        print(json_report(args, question_sets, results, systems, notes, phases))
    else:
        print(text_report(args, question_sets, results, systems, notes, phases, args.format == "markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
