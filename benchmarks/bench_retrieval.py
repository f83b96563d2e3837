"""Retrieval benchmark: chunkline's strategies and other chunkers, judged at equal settings.

Usage::

    python benchmarks/bench_retrieval.py [--sets chroma,markdown,NAME...] [--source NAME=DIR ...]
                                         [--systems PATTERN,...] [--max-tokens 256,512] [--budgets 1024]
                                         [--retrievers bm25,wordllama,hybrid] [--overlap-fraction 0.09765625]
                                         [--set key=value ...] [--chunkline-variants key=v1/v2 ...]
                                         [--bootstrap-resamples 2000] [--bootstrap-seed SEED]
                                         [--questions-limit N] [--markdown-questions 250]
                                         [--format text|markdown|json] [--markdown] [--retrieval DIR] [--corpus DIR]

``--set`` takes what ``chunkline run --set`` takes (``min_tokens=64``; a strategy's parameter as
``chunking.headings.sub_split=window``) and applies to every chunkline row but the windows.

Equal settings: every system chunks the same documents at each chunk size of ``--max-tokens`` (256 and
512 cl100k_base tokens), with the same overlap where it has a token overlap setting; its chunks are indexed
once per size for each retriever; for each question the ranking is cut at the same retrieved-token budget
by the same rule (the chunk that crosses the budget counted only up to it); and the retrieved character
ranges are scored against the question's reference character ranges. Everything is deterministic and
offline: same data, same packages, same figures.

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

``NAME`` (a set of ``benchmarks.question_sets``)
    Built by that module's written rule from the folder given with ``--source NAME=DIR`` (its
    ``build(source, count_tokens) -> BuiltSet``: the documents every system chunks and the benchmark
    searches, the questions with their reference spans, how many source files gave a question and why the
    others did not, notes). A set marked ``held_out`` is kept out of every choice of default: it is
    reported last, under a heading that says so, and its verdict rows come last. With no ``--sets``, every
    set given a ``--source`` is run.

The chroma and markdown sets' documents are read as ``chunkline run`` reads them (``chunkline.evaluation.corpus.read_corpus``:
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
   author's text (the motivation, mostly): more than a 512-token chunk can span, so no chunk of any
   system at the sizes run by default (256 and 512) holds both the question text and a reference
   character.
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

Systems (``--systems``: comma-separated names or shell patterns, e.g. ``'chunkline*,window'``)
---------------------------------------------------------------------------------------------

Every system runs at each size N of ``--max-tokens`` (default 256 and 512): chunks of at most N cl100k_base
tokens and, where a system has a token overlap setting, an overlap of ``round(N * 50 / 512)`` tokens (25 at
256, 50 at 512: the 50 tokens chunkline's default config overlaps by at its default size of 512, in
proportion; ``--overlap-fraction``). The default row and the ``--chunkline-variants`` rows always run,
whatever ``--systems`` selects: every other row's difference is measured against the default.

``chunkline``
    The default: ``chunk_markdown(text, config, doc_id=...)`` with the default config (``headings``),
    ``max_tokens`` N, the overlap above and ``--set``; indexed by
    ``chunkline.evaluation.retrieval.evaluation_text(chunk)`` (what the embedding model is meant to see),
    retrieved as ``(doc_id, start_char, end_char)`` and budgeted by the chunk's text.
``chunkline sections|blocks|scored|sentences|paragraphs|tokens``
    The same with ``strategy`` set and each strategy's default parameters, except ``blocks.target=tokens``
    and ``scored.mode=tokens`` (so that they too pack to ``max_tokens`` instead of a byte or character
    size). ``sentences`` and ``paragraphs`` overlap by their own default of one unit; ``sections`` by none.
``chunkline KEY=VALUE ...``
    One row per ``--chunkline-variants`` argument, at every size: the default config at that size, then
    ``--set``, then the variant's assignments (``min_tokens=64;embed_context=none`` is one variant;
    ``min_tokens=32/64/128`` is three).
``semantic-text-splitter markdown`` / ``semantic-text-splitter text``
    ``MarkdownSplitter`` / ``TextSplitter.from_tiktoken_model("gpt-3.5-turbo", N, overlap=...)``
    (cl100k_base), its default ``trim``; offsets from ``chunk_indices`` (character offsets, checked).
``langchain recursive`` / ``langchain markdown``
    ``RecursiveCharacterTextSplitter`` / ``MarkdownTextSplitter.from_tiktoken_encoder("cl100k_base",
    chunk_size=N, chunk_overlap=..., add_start_index=True)``; offsets from ``start_index`` (checked).
``chonkie recursive``
    ``RecursiveChunker(tokenizer=<cl100k_base>, chunk_size=N)``, its default rules; it has no overlap
    setting. Offsets from ``start_index`` (checked).
``window``
    The baseline: plain windows of N tokens without overlap (Chroma's fixed-size baseline), chunkline's
    ``tokens`` strategy with ``max_tokens`` N, ``overlap_tokens`` 0 and ``embed_context: none``, indexed by
    the verbatim text (no ``--set``).

``chunkline (expand section:N)``
    Small to big, one row per N of ``--expand section:N,...`` (none by default), at every size: the default
    row's chunks ranked as it ranks them, and each ranked chunk handed out as the largest section around it
    of at most N tokens, else the chunk, deduplicated, within the same budget by the same cut rule
    (``chunkline.evaluation.expansion.take_expanded_within_budget``, as ``chunkline evaluate --expand``).
    ``section:0`` expands nothing and keeps only the deduplication (no overlap handed out twice): the control.

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

Three retrievers (``--retrievers``), side by side in one run: BM25 (bm25s; ``bm25``), wordllama's static
embedding model with cosine similarity (``load_wordllama_embedder``, offline; ``wordllama``, ``wl``), and
their hybrid (``hybrid``, ``hyb``): the two rankings of the question fused by reciprocal rank fusion
(``reciprocal_rank_fusion``: each chunk scores ``1 / (60 + rank)`` summed over the two, ties in the chunks'
order). Each system's chunks are indexed once per size for BM25 and once for the embedder; the hybrid reuses
both rankings. Budgets (``--budgets``, default 1024 cl100k_base tokens) count each chunk's verbatim text
with ``budget_token_counter()``; chunks are taken with ``take_within_budget``, as ``chunkline evaluate``
takes them: walking the ranking best first, whole chunks while they fit; the chunk that crosses the budget
counts only up to it, its character range cut to the same share of its characters as of its tokens
(``start_char + floor(characters * tokens left / chunk tokens)``); then the walk stops. Every system is
handed exactly the budget (unless its ranking runs out), and is scored on those ranges. Per question, as
in Chroma's evaluation (``score_question``, over character ranges): recall = reference characters covered /
reference characters; precision = covered / characters retrieved (overlapping chunks counted each time);
IoU = covered / (retrieved + reference - covered); hit = at least one reference character covered. Tables
show the means over the questions, in percent.

Differences and the verdict
---------------------------

For every system, its difference to the default on recall and on IoU, per question, is resampled over the
questions (a paired bootstrap: ``--bootstrap-resamples`` 2,000 resamples from a fixed seed, the same draws
for every system) and printed as the mean difference in points with its 95% percentile interval: a
0.5-point difference whose interval spans -3 to +4 is read as no difference. The final verdict table gives,
for each set (all its questions) x size x budget x retriever x metric (recall, IoU): the default's figure,
the best other system (another chunker or the plain windows: no chunkline row) and its figure, the gap
(default - best other system) with its interval, whether the default is first, within 0.5 points, or behind,
and, beside it, the best chunkline row other than the default (another strategy or a variant) and its
figure: what chunkline could give at that cell, shown but not judged. Under it, a count: the cells where
the default is first, within 0.5 points, behind, and, listed, the cells where it is behind by more than 0.5
points across its whole interval (a gap no draw of the questions explains). Each set also prints, per size,
the share of the default's chunks under 32 tokens, and what a chunker has to cover there: its reference
spans' median size in tokens (and the middle half), the share longer than each ``max_tokens``, and the share
with a heading inside (a heading after the span's first character, from a CommonMark parse).

Output: per question set (and per corpus of ``chroma``), size and budget, a table of every system (chunk
count, mean tokens per chunk, and recall / IoU / precision / hit for each retriever, ``*`` on the best of
each column) and a table of each system's differences to the default; then the chunk placement checks and
the wall time per system and phase; held-out sets last; then the verdict. ``--format markdown`` (or
``--markdown``) prints the tables as markdown; ``--format json`` prints all of it (scores, intervals, best
rows, verdict, small-chunk shares, placements, timings) as one JSON object. Progress goes to stderr.
``--questions-limit N`` keeps the first N questions of each corpus (each registered set: its first N), for
quick runs.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.metadata
import json
import math
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken.registry
from markdown_it import MarkdownIt

import chunkline
from chunkline import ChunkConfig, ConfigError, load_chunk_config
from chunkline.tokenizers import load_encoding

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:
    sys.path.insert(0, str(REPOSITORY))  # run as a script: benchmarks.question_sets is imported from here

DEFAULT_CORPUS = REPOSITORY / "sample_corpus"
ENCODING_NAME = "cl100k_base"
SEMANTIC_MODEL = "gpt-3.5-turbo"  # tiktoken-rs maps it to cl100k_base
MAX_TOKENS = (256, 512)
OVERLAP_FRACTION = 50 / 512
"""Overlap as a share of the chunk size, for every system with a token overlap setting: 50 tokens at 512
(the overlap chunkline's default config has at its default size), 25 at 256."""
BUDGETS_TOKENS = (1024,)
MARKDOWN_QUESTIONS = 250
BUILTIN_SETS = ("chroma", "markdown")
RETRIEVERS = ("bm25", "wordllama", "hybrid")
RETRIEVER_LABELS = {"bm25": "bm25", "wordllama": "wl", "hybrid": "hyb"}
METRICS = ("recall", "iou", "precision", "hit")
METRIC_LABELS = {"recall": "recall", "precision": "prec", "iou": "IoU", "hit": "hit"}
COMPARED_METRICS = ("recall", "iou")
"""The metrics every system's difference to the default is resampled for, and the verdict is given on."""
DEFAULT_SYSTEM = "chunkline"
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20260512
CONFIDENCE = 0.95
WITHIN_POINTS = 0.5
"""A default this close to the best other system (in percentage points) is called level with it."""
SMALL_CHUNK_TOKENS = 32
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
    held_out: bool = False
    """Kept out of every choice of default: reported last, under a heading saying so."""


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


def registered_sets() -> dict[str, Any]:
    """The sets of ``benchmarks.question_sets`` by name (looked up on every call, so a set registered later
    is found)."""
    from benchmarks.question_sets import SETS

    return SETS


def load_registered_set(name: str, source: Path, limit: int | None, count_tokens: Callable[[str], int]) -> QuestionSet:
    """A set of ``benchmarks.question_sets`` built from its ``--source`` folder: its documents (the text
    every system chunks and the benchmark searches), questions, rule counts, notes and whether it is held
    out. ``--questions-limit N`` keeps its first N questions."""
    built = registered_sets()[name](source, count_tokens)
    documents = [Document(doc_id, text) for doc_id, text in built.documents]
    doc_ids = [document.doc_id for document in documents]
    if len(set(doc_ids)) != len(doc_ids):
        raise SystemExit(f"error: the {name} set gives the same doc id to two documents")
    questions = list(built.questions)
    if limit is not None:
        questions = questions[:limit]
    check_references(name, documents, questions)
    return QuestionSet(
        name,
        documents,
        questions,
        {"all": list(range(len(questions)))},
        list(built.notes),
        dict(built.rule_counts),
        held_out=bool(built.held_out),
    )


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


def overlap_tokens_for(max_tokens: int, fraction: float = OVERLAP_FRACTION) -> int:
    """The overlap of every system with a token overlap setting at chunk size ``max_tokens``: that share of
    it, rounded (50 at 512, 25 at 256 with the default share)."""
    return round(max_tokens * fraction)


def build_systems(args: argparse.Namespace, max_tokens: int) -> tuple[list[System], list[str]]:
    """Every system the arguments name at chunk size ``max_tokens``, in table order, and a note per system
    that could not be built. The default (``chunkline``) and the variant rows are always run."""
    register_offline_encoding()
    overlap = overlap_tokens_for(max_tokens, args.overlap_fraction)
    base = [f"max_tokens={max_tokens}", f"overlap_tokens={overlap}"]
    candidates: list[tuple[str, tuple[str, ...], Callable[[], list[System]]]] = []
    """(family, the names of its rows, how to make them)"""
    always: set[str] = {DEFAULT_SYSTEM}

    def chunkline_candidate(name: str, assignments: list[str], **options: Any) -> None:
        def make() -> list[System]:
            return [chunkline_system(name, chunkline_config(assignments), **options)]

        candidates.append((name, (name,), make))

    chunkline_candidate(DEFAULT_SYSTEM, [*base, *args.settings])
    for variant in expand_variants(args.chunkline_variants):
        always.add(name := "chunkline " + " ".join(variant))
        chunkline_candidate(name, [*base, *args.settings, *variant])
    for strategy in CHUNKLINE_STRATEGIES:
        assignments = [f"strategy={strategy}", *base, *STRATEGY_SETTINGS.get(strategy, ()), *args.settings]
        chunkline_candidate(f"chunkline {strategy}", assignments)
    candidates.append(
        (
            "semantic-text-splitter",
            ("semantic-text-splitter markdown", "semantic-text-splitter text"),
            lambda: semantic_systems(max_tokens, overlap),
        )
    )
    candidates.append(
        ("langchain", ("langchain recursive", "langchain markdown"), lambda: langchain_systems(max_tokens, overlap))
    )
    candidates.append(("chonkie", ("chonkie recursive",), lambda: chonkie_systems(max_tokens)))
    # The baseline: plain windows of exactly max_tokens tokens, no overlap, no embed_text context.
    window = ["strategy=tokens", f"max_tokens={max_tokens}", "overlap_tokens=0", "embed_context=none"]
    chunkline_candidate("window", window, index_by_evaluation_text=False)

    systems: list[System] = []
    notes: list[str] = []
    for family, names, make in candidates:
        if not any(name in always or selected(name, args.systems) for name in names):
            continue  # not asked for: not imported either
        try:
            made = make()
        except ConfigError as error:
            raise SystemExit(
                f"error: the {family!r} row's chunkline config is refused at max_tokens {max_tokens}: {error}"
            ) from None
        if not made:
            notes.append(f"{family}: not installed (the bench extra: pip install -e '.[bench]'); its rows are left out")
        systems += [system for system in made if system.name in always or selected(system.name, args.systems)]
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
    """One system at one chunk size on one question set."""

    name: str
    max_tokens: int
    chunks: int
    mean_tokens: float
    small_chunks: int
    """Chunks of fewer than SMALL_CHUNK_TOKENS tokens (cl100k_base, counted on their verbatim text)."""
    placement: Placement
    per_question: dict[str, dict[int, np.ndarray]]
    """retriever -> budget -> one row per question, one column per metric of METRICS (0..1; hit 0 or 1)."""
    seconds: dict[str, float]

    def means(self, retriever: str, budget: int, indices: Sequence[int]) -> dict[str, float]:
        rows = self.per_question[retriever][budget][list(indices)]
        if not len(rows):
            return dict.fromkeys(METRICS, 0.0)
        return {metric: float(rows[:, column].mean()) for column, metric in enumerate(METRICS)}

    def column(self, retriever: str, budget: int, indices: Sequence[int], metric: str) -> np.ndarray:
        return self.per_question[retriever][budget][list(indices), METRICS.index(metric)]


def ranking_by_scores(scores: np.ndarray) -> np.ndarray:
    """Indices best first; equal scores keep the chunks' order (as chunkline.evaluation's rankings do)."""
    return np.argsort(-scores, kind="stable")


def retrieve(ranked: np.ndarray, token_counts: Sequence[int], budget: int, ranges: Sequence[Any]) -> list[Any]:
    """The character ranges retrieved within ``budget`` by the budget rule of ``chunkline evaluate``
    (``take_within_budget``): whole chunks while they fit, then the chunk that crosses the budget cut to it."""
    from chunkline.evaluation.metrics import RetrievedRange
    from chunkline.evaluation.retrieval import take_within_budget

    retrieved = []
    for share in take_within_budget(ranked, token_counts, budget):
        whole = ranges[share.index]
        retrieved.append(RetrievedRange(whole.doc_id, *share.char_range(whole.start_char, whole.end_char)))
    return retrieved


@dataclass(frozen=True)
class Judging:
    """How every system is judged: the same retrievers, budgets and budget tokenizer."""

    retrievers: tuple[str, ...]
    budgets: tuple[int, ...]
    count_tokens: Callable[[str], int]
    embedder: Any
    """wordllama's embedder, or None when neither wordllama nor the hybrid is run."""


def evaluate_system(
    system: System, question_set: QuestionSet, max_tokens: int, judging: Judging, query_vectors: np.ndarray | None
) -> SystemResult:
    """Chunk the set's documents with ``system``, index the chunks once for BM25 and once for the embedder,
    and score every question with every retriever and budget; the hybrid fuses the two rankings already
    computed for the question."""
    from chunkline.evaluation.metrics import RetrievedRange, score_question
    from chunkline.evaluation.retrieval import Bm25Index, EmbeddingIndex, reciprocal_rank_fusion

    retrievers, budgets = judging.retrievers, judging.budgets
    seconds: dict[str, float] = {}

    def timed(phase: str, started: float) -> None:
        seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - started

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
    timed("chunk", started)

    started = time.perf_counter()
    token_counts = [judging.count_tokens(text) for text in budget_texts]
    timed("count", started)

    lexical = "bm25" in retrievers or "hybrid" in retrievers
    dense = "wordllama" in retrievers or "hybrid" in retrievers
    if lexical:
        started = time.perf_counter()
        bm25 = Bm25Index(index_texts)
        timed("bm25 index", started)
    if dense:
        started = time.perf_counter()
        vectors = EmbeddingIndex(judging.embedder, index_texts).vectors
        timed("wordllama index", started)
    questions = question_set.questions
    per_question = {
        retriever: {budget: np.zeros((len(questions), len(METRICS))) for budget in budgets} for retriever in retrievers
    }
    for number, question in enumerate(questions):
        rankings: dict[str, np.ndarray] = {}
        if lexical:
            started = time.perf_counter()
            rankings["bm25"] = bm25.rank(question.question)
            timed("bm25 query", started)
        if dense:
            started = time.perf_counter()
            rankings["wordllama"] = ranking_by_scores(vectors @ query_vectors[number])
            timed("wordllama query", started)
        if "hybrid" in retrievers:
            started = time.perf_counter()
            rankings["hybrid"] = reciprocal_rank_fusion([rankings["bm25"], rankings["wordllama"]])
            timed("hybrid fuse", started)
        started = time.perf_counter()
        for retriever in retrievers:
            for budget in budgets:
                score = score_question(retrieve(rankings[retriever], token_counts, budget, ranges), question.references)
                per_question[retriever][budget][number] = (score.recall, score.iou, score.precision, float(score.hit))
        timed("score", started)
    mean_tokens = statistics.fmean(token_counts) if token_counts else 0.0
    small = sum(1 for count in token_counts if count < SMALL_CHUNK_TOKENS)
    return SystemResult(system.name, max_tokens, len(ranges), mean_tokens, small, placement, per_question, seconds)


# ------------------------------------------------------------------------------------ small-to-big


def expanded_results(
    question_set: QuestionSet,
    max_tokens: int,
    config: ChunkConfig,
    sizes: Sequence[int],
    judging: Judging,
    query_vectors: np.ndarray | None,
) -> list[SystemResult]:
    """One row per ``--expand section:N``: the default config's chunks ranked as its own row ranks them,
    each ranked chunk returned as the largest section around it of at most N tokens, deduplicated, within
    the same budget (``chunkline.evaluation.expansion.take_expanded_within_budget``, as ``chunkline
    evaluate --expand`` returns them)."""
    import functools

    from chunkline.evaluation.expansion import take_expanded_within_budget, unit_chains
    from chunkline.evaluation.metrics import RetrievedRange, score_question
    from chunkline.evaluation.retrieval import Bm25Index, EmbeddingIndex, evaluation_text, reciprocal_rank_fusion

    retrievers, budgets, count_tokens = judging.retrievers, judging.budgets, judging.count_tokens
    started = time.perf_counter()
    chunks, sections = [], []
    texts = {document.doc_id: document.text for document in question_set.documents}
    for document in question_set.documents:
        chunked = chunkline.chunk_markdown_with_sections(document.text, config, doc_id=document.doc_id)
        chunks += [chunk for chunk in chunked.chunks if chunk.end_char > chunk.start_char]
        sections += chunked.sections
    token_counts = [count_tokens(chunk.text) for chunk in chunks]
    chains = unit_chains(chunks, sections, token_counts, lambda section: count_tokens(section.text))
    count_range = functools.lru_cache(maxsize=None)(lambda doc_id, start, end: count_tokens(texts[doc_id][start:end]))
    index_texts = [evaluation_text(chunk) for chunk in chunks]
    bm25 = Bm25Index(index_texts) if "bm25" in retrievers or "hybrid" in retrievers else None
    vectors = EmbeddingIndex(judging.embedder, index_texts).vectors if query_vectors is not None else None
    seconds = {"chunk": time.perf_counter() - started}  # chunks, sections, token counts and both indexes
    started = time.perf_counter()
    questions = question_set.questions
    per_size = {
        size: {
            retriever: {budget: np.zeros((len(questions), len(METRICS))) for budget in budgets}
            for retriever in retrievers
        }
        for size in sizes
    }
    for number, question in enumerate(questions):
        rankings: dict[str, np.ndarray] = {}
        if bm25 is not None:
            rankings["bm25"] = bm25.rank(question.question)
        if vectors is not None:
            rankings["wordllama"] = ranking_by_scores(vectors @ query_vectors[number])
        if "hybrid" in retrievers:
            rankings["hybrid"] = reciprocal_rank_fusion([rankings["bm25"], rankings["wordllama"]])
        for size in sizes:
            for retriever in retrievers:
                for budget in budgets:
                    taken = take_expanded_within_budget(rankings[retriever], chains, size, budget, count_range)
                    ranges = [RetrievedRange(share.doc_id, share.start_char, share.end_char) for share in taken]
                    score = score_question(ranges, question.references)
                    per_size[size][retriever][budget][number] = (
                        score.recall,
                        score.iou,
                        score.precision,
                        float(score.hit),
                    )
    seconds["score"] = time.perf_counter() - started  # ranking, expanding and scoring
    mean_tokens = statistics.fmean(token_counts) if token_counts else 0.0
    small = sum(1 for count in token_counts if count < SMALL_CHUNK_TOKENS)
    placement = Placement(chunks=len(chunks), by_own_offset=len(chunks))
    return [
        SystemResult(
            f"{DEFAULT_SYSTEM} (expand section:{size})",
            max_tokens,
            len(chunks),
            mean_tokens,
            small,
            placement,
            per_size[size],
            seconds if size == sizes[0] else {},
        )
        for size in sizes
    ]


def expand_sizes(value: str) -> list[int]:
    """``--expand section:256,section:512``: the N of each."""
    from chunkline.evaluation.expansion import parse_expand

    try:
        return list(dict.fromkeys(parse_expand(item) for item in comma_list(value)))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# ------------------------------------------------------------------------------------ paired bootstrap


@dataclass(frozen=True)
class Interval:
    """A system's difference to the default over the same questions: the mean, and the bootstrap interval."""

    mean: float
    low: float
    high: float

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high}


def negated(interval: Interval) -> Interval:
    """The interval of the opposite difference (default - system for system - default)."""
    return Interval(-interval.mean, -interval.high, -interval.low)


def bootstrap_weights(size: int, resamples: int, seed: int) -> np.ndarray:
    """How many times each of ``size`` questions is drawn in each of ``resamples`` resamples (one row each),
    from a fixed seed: the same draws for every system, so each system's difference to the default is
    resampled over the same questions (paired)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, size, size=(resamples, size)) if size else np.zeros((resamples, 0), dtype=np.int64)
    offsets = (np.arange(resamples) * size)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=resamples * size)
    return counts.reshape(resamples, size).astype(np.float64)


def difference_interval(system: np.ndarray, default: np.ndarray, weights: np.ndarray) -> Interval:
    """The mean per-question difference ``system - default`` and its percentile bootstrap interval
    (CONFIDENCE, two-sided) over the resamples ``weights``."""
    differences = np.asarray(system, dtype=np.float64) - np.asarray(default, dtype=np.float64)
    if not len(differences):
        return Interval(0.0, 0.0, 0.0)
    resampled = weights @ differences / len(differences)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return Interval(float(differences.mean()), float(low), float(high))


# -------------------------------------------------------------------------------------------- analysis


@dataclass
class Table:
    """The figures of one set x group x chunk size x budget: every system with every retriever."""

    set_name: str
    group: str
    questions: int
    max_tokens: int
    budget: int
    means: dict[str, dict[str, dict[str, float]]]
    """system -> retriever -> metric -> mean (0..1)."""
    differences: dict[str, dict[str, dict[str, Interval]]]
    """system (the default left out) -> retriever -> metric of COMPARED_METRICS -> difference to the default."""
    best: dict[str, dict[str, list[str]]]
    """retriever -> metric -> the systems with the highest mean."""


def build_tables(
    question_set: QuestionSet, results: dict[int, list[SystemResult]], judging: Judging, *, resamples: int, seed: int
) -> list[Table]:
    """One table per size x budget x group of the set: every system's means, its differences to the default
    (paired bootstrap), and the best system of each column."""
    retrievers, budgets = judging.retrievers, judging.budgets
    weights_by_size: dict[int, np.ndarray] = {}
    tables = []
    for max_tokens, size_results in results.items():
        default = next(result for result in size_results if result.name == DEFAULT_SYSTEM)
        for budget in budgets:
            for group, indices in question_set.groups.items():
                if len(indices) not in weights_by_size:
                    weights_by_size[len(indices)] = bootstrap_weights(len(indices), resamples, seed)
                weights = weights_by_size[len(indices)]
                means = {
                    result.name: {retriever: result.means(retriever, budget, indices) for retriever in retrievers}
                    for result in size_results
                }
                differences = {
                    result.name: {
                        retriever: {
                            metric: difference_interval(
                                result.column(retriever, budget, indices, metric),
                                default.column(retriever, budget, indices, metric),
                                weights,
                            )
                            for metric in COMPARED_METRICS
                        }
                        for retriever in retrievers
                    }
                    for result in size_results
                    if result.name != DEFAULT_SYSTEM
                }
                best = {
                    retriever: {
                        metric: [
                            name
                            for name, figures in means.items()
                            if figures[retriever][metric]
                            >= max(other[retriever][metric] for other in means.values()) - 1e-12
                        ]
                        for metric in METRICS
                    }
                    for retriever in retrievers
                }
                tables.append(
                    Table(question_set.name, group, len(indices), max_tokens, budget, means, differences, best)
                )
    return tables


def is_chunkline_row(name: str) -> bool:
    return name == DEFAULT_SYSTEM or name.startswith(DEFAULT_SYSTEM + " ")


@dataclass(frozen=True)
class VerdictRow:
    set_name: str
    held_out: bool
    max_tokens: int
    budget: int
    retriever: str
    metric: str
    default: float
    best_other: str
    """The best system that is no chunkline row (another chunker or the plain windows)."""
    best_other_figure: float
    gap: float
    """default - best other system (0..1): >= 0 when the default is first."""
    gap_interval: Interval
    """default - best other system, paired bootstrap over the questions."""
    best_alternative: str | None
    """The best chunkline row other than the default (another strategy or a variant), shown beside the
    verdict but not judged by it."""
    best_alternative_figure: float | None

    @property
    def behind(self) -> bool:
        """Behind the best other system by more than the 0.5 points allowed."""
        return 100 * -self.gap > WITHIN_POINTS

    @property
    def clearly_behind(self) -> bool:
        """Behind, and by more than 0.5 points across the whole interval: not a draw of the questions."""
        return self.behind and 100 * -self.gap_interval.high > WITHIN_POINTS

    @property
    def verdict(self) -> str:
        if self.gap >= 0:
            return "first"
        if 100 * -self.gap <= WITHIN_POINTS:
            return f"within {WITHIN_POINTS:g}"
        return f"behind by {100 * -self.gap:.1f}"

    def to_json(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "held_out": self.held_out,
            "max_tokens": self.max_tokens,
            "budget_tokens": self.budget,
            "retriever": self.retriever,
            "metric": self.metric,
            "default": self.default,
            "best_other": self.best_other,
            "best_other_figure": self.best_other_figure,
            "gap": self.gap,
            "gap_interval": self.gap_interval.to_json(),
            "best_alternative": self.best_alternative,
            "best_alternative_figure": self.best_alternative_figure,
            "verdict": self.verdict,
            "clearly_behind": self.clearly_behind,
        }


def verdict_summary(rows: Sequence[VerdictRow], markdown: bool) -> list[str]:
    """How many cells the default is first in, within 0.5 points, or behind, and, one line each (a markdown
    list, or indented), the cells where it is behind across its whole interval (the interval's upper end
    more than 0.5 points below the best other system)."""
    first = sum(row.gap >= 0 for row in rows)
    behind = sum(row.behind for row in rows)
    clear = [row for row in rows if row.clearly_behind]
    lines = [
        f"{DEFAULT_SYSTEM} is first in {first} of {len(rows)} cells, within {WITHIN_POINTS:g} point in "
        f"{len(rows) - first - behind}, behind in {behind}; behind by more than {WITHIN_POINTS:g} point "
        f"across its whole {CONFIDENCE:.0%} interval in {len(clear)}" + (":" if clear else "")
    ]
    if clear and markdown:
        lines.append("")
    lines += [
        ("- " if markdown else "  ")
        + f"{row.set_name}, max_tokens {row.max_tokens}, budget {row.budget}, {row.retriever} "
        f"{METRIC_LABELS[row.metric]}: {percent(row.default)} against {row.best_other} {percent(row.best_other_figure)}, "
        f"gap [{100 * row.gap_interval.low:+.1f}, {100 * row.gap_interval.high:+.1f}]"
        for row in clear
    ]
    return lines


def verdict_rows(tables: Sequence[Table], held_out: dict[str, bool], retrievers: Sequence[str]) -> list[VerdictRow]:
    """For each set (all its questions) x size x budget x retriever x compared metric: the default against
    the best other system (no chunkline row), with the best other chunkline row beside it. Held-out sets
    come last; a table without another system gives no row."""
    rows = []
    for table in sorted((t for t in tables if t.group == "all"), key=lambda t: held_out[t.set_name]):
        for retriever in retrievers:
            for metric in COMPARED_METRICS:
                default = table.means[DEFAULT_SYSTEM][retriever][metric]
                scores = [(name, figures[retriever][metric]) for name, figures in table.means.items()]
                others = [(name, figure) for name, figure in scores if not is_chunkline_row(name)]
                if not others:
                    continue
                best_name, best_figure = max(others, key=lambda item: item[1])  # the first row of the highest
                alternatives = [item for item in scores if is_chunkline_row(item[0]) and item[0] != DEFAULT_SYSTEM]
                alternative, alternative_figure = max(alternatives, key=lambda item: item[1], default=(None, None))
                rows.append(
                    VerdictRow(
                        table.set_name,
                        held_out[table.set_name],
                        table.max_tokens,
                        table.budget,
                        retriever,
                        metric,
                        default,
                        best_name,
                        best_figure,
                        default - best_figure,
                        negated(table.differences[best_name][retriever][metric]),
                        alternative,
                        alternative_figure,
                    )
                )
    return rows


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


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def points_interval(interval: Interval) -> str:
    return f"{100 * interval.mean:+.1f} [{100 * interval.low:+.1f}, {100 * interval.high:+.1f}]"


def score_table(
    table: Table, results: Sequence[SystemResult], retrievers: Sequence[str], markdown: bool
) -> tuple[list[str], list[list[str]]]:
    header = ["system", "chunks", "mean tok"]
    header += [f"{RETRIEVER_LABELS[name]} {METRIC_LABELS[metric]}" for name in retrievers for metric in METRICS]
    rows = []
    for result in results:
        cells = [result.name, str(result.chunks), f"{result.mean_tokens:.0f}"]
        for retriever in retrievers:
            for metric in METRICS:
                cell = percent(table.means[result.name][retriever][metric])
                if result.name in table.best[retriever][metric]:
                    cell = f"**{cell}**" if markdown else f"{cell}*"
                cells.append(cell)
        rows.append(cells)
    return header, rows


def difference_table(
    table: Table, results: Sequence[SystemResult], retrievers: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    header = ["system"]
    header += [
        f"{RETRIEVER_LABELS[name]} {METRIC_LABELS[metric]}" for name in retrievers for metric in COMPARED_METRICS
    ]
    rows = [
        [
            result.name,
            *(
                points_interval(table.differences[result.name][retriever][metric])
                for retriever in retrievers
                for metric in COMPARED_METRICS
            ),
        ]
        for result in results
        if result.name != DEFAULT_SYSTEM
    ]
    return header, rows


def table_title(table: Table) -> str:
    where = table.set_name if table.group == "all" else f"{table.set_name} / {table.group}"
    return (
        f"{where}: {table.questions} questions, max_tokens {table.max_tokens}, budget {table.budget} tokens "
        "(means in %; * the best of a column)"
    )


def difference_title(table: Table, resamples: int) -> str:
    where = table.set_name if table.group == "all" else f"{table.set_name} / {table.group}"
    return (
        f"{where}, max_tokens {table.max_tokens}, budget {table.budget}: each system minus {DEFAULT_SYSTEM}, in "
        f"points, mean [{CONFIDENCE:.0%} interval, paired bootstrap, {resamples:,} resamples of the questions]"
    )


def verdict_table(rows: Sequence[VerdictRow]) -> tuple[list[str], list[list[str]]]:
    header = [
        "set",
        "max tok",
        "budget",
        "retriever",
        "metric",
        DEFAULT_SYSTEM,
        "best other system",
        "its figure",
        "gap",
        f"gap {CONFIDENCE:.0%}",
        "verdict",
        f"best {DEFAULT_SYSTEM} alternative",
        "its figure",
    ]
    body = [
        [
            row.set_name + (" (held out)" if row.held_out else ""),
            str(row.max_tokens),
            str(row.budget),
            row.retriever,
            METRIC_LABELS[row.metric],
            percent(row.default),
            row.best_other,
            percent(row.best_other_figure),
            f"{100 * row.gap:+.1f}",
            f"[{100 * row.gap_interval.low:+.1f}, {100 * row.gap_interval.high:+.1f}]",
            row.verdict,
            row.best_alternative or "-",
            percent(row.best_alternative_figure) if row.best_alternative_figure is not None else "-",
        ]
        for row in rows
    ]
    return header, body


def small_chunk_lines(question_set: QuestionSet, results: dict[int, list[SystemResult]]) -> list[str]:
    parts = []
    for max_tokens, size_results in results.items():
        default = next(result for result in size_results if result.name == DEFAULT_SYSTEM)
        share = default.small_chunks / default.chunks if default.chunks else 0.0
        parts.append(f"max_tokens {max_tokens}: {share:.2%} ({default.small_chunks} of {default.chunks})")
    return [f"{DEFAULT_SYSTEM}'s chunks under {SMALL_CHUNK_TOKENS} tokens: " + "; ".join(parts)]


def reference_line(question_set: QuestionSet, count_tokens: Callable[[str], int], sizes: Sequence[int]) -> str:
    """What a chunker must cover: the reference spans' sizes in tokens (median and middle half), the share
    longer than each ``max_tokens``, and the share with a heading inside (a heading after the span's first
    character), from a CommonMark parse of the searched text."""
    texts = {document.doc_id: document.text for document in question_set.documents}
    spans = [
        (reference.doc_id, reference.start_char, reference.end_char)
        for question in question_set.questions
        for reference in question.references
    ]
    if not spans:
        return "references: none"
    heading_starts = {
        doc_id: [heading.start_char for heading in chunkline.parse_markdown(texts[doc_id]).headings]
        for doc_id in sorted({doc_id for doc_id, _, _ in spans})
    }
    tokens = [count_tokens(texts[doc_id][start:end]) for doc_id, start, end in spans]
    with_heading = sum(
        any(start < position < end for position in heading_starts[doc_id]) for doc_id, start, end in spans
    )
    low, median, high = statistics.quantiles(tokens, n=4, method="inclusive") if len(tokens) > 1 else tokens * 3
    longer = ", ".join(f"{sum(count > size for count in tokens) / len(tokens):.0%} over {size}" for size in sizes)
    return (
        f"references: {len(spans)} spans of {whole(median)} tokens (median; middle half "
        f"{whole(low)}-{whole(high)}), {longer}; {with_heading / len(spans):.0%} with a heading inside"
    )


def whole(value: float) -> int:
    """``value`` rounded to the nearest whole number, halves up."""
    return math.floor(value + 0.5)


def placement_lines(results: dict[int, list[SystemResult]]) -> list[str]:
    lines = []
    for max_tokens, size_results in results.items():
        for result in size_results:
            placement = result.placement
            if (
                placement.by_search
                or placement.at_other_repeat
                or placement.not_located
                or placement.empty
                or placement.uncovered_chars
            ):
                lines.append(
                    f"  {result.name} (max_tokens {max_tokens}): {placement.chunks} chunks, "
                    f"{placement.by_own_offset} at their own offset, "
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


TIMING_PHASES = (
    "chunk",
    "count",
    "bm25 index",
    "bm25 query",
    "wordllama index",
    "wordllama query",
    "hybrid fuse",
    "score",
)


def timing_table(results: dict[int, list[SystemResult]]) -> tuple[list[str], list[list[str]]]:
    header = ["system", "max tok", *(f"{phase} s" for phase in TIMING_PHASES), "total s"]
    rows = [
        [
            result.name,
            str(max_tokens),
            *(f"{result.seconds.get(phase, 0.0):.2f}" for phase in TIMING_PHASES),
            f"{sum(result.seconds.values()):.2f}",
        ]
        for max_tokens, size_results in results.items()
        for result in size_results
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
    if {"documents", "qualifying", "kept"} <= counts.keys():
        documents, qualifying, kept = counts.pop("documents"), counts.pop("qualifying"), counts.pop("kept")
        counts.pop("question", None)
        reasons = ", ".join(f"{reason}: {number}" for reason, number in sorted(counts.items(), key=lambda kv: -kv[1]))
        return [
            f"{question_set.name} rule: {documents} files, {qualifying} give a question, {kept} kept "
            f"(smallest sha256 of doc id); no question: {reasons}"
        ]
    return [f"{question_set.name} rule: " + ", ".join(f"{reason}: {number}" for reason, number in counts.items())]


def settings_line(args: argparse.Namespace) -> str:
    overlaps = ", ".join(f"{overlap_tokens_for(size, args.overlap_fraction)} at {size}" for size in args.max_tokens)
    return (
        f"chunk sizes {', '.join(map(str, args.max_tokens))} {ENCODING_NAME} tokens for every system; overlap "
        f"{args.overlap_fraction:.4g} of the size ({overlaps}) where a system has a token overlap setting; the "
        f"windows {', '.join(map(str, args.max_tokens))} tokens without overlap; budgets "
        f"{', '.join(map(str, args.budgets))} tokens, the chunk that crosses a budget cut to it; retrievers "
        f"{', '.join(args.retrievers)} (hybrid: reciprocal rank fusion of bm25 and wordllama, k 60); "
        f"differences to {DEFAULT_SYSTEM}: paired bootstrap, {args.bootstrap_resamples:,} resamples of the "
        f"questions, seed {args.bootstrap_seed}, {CONFIDENCE:.0%} percentile intervals"
    )


def ordered_sets(question_sets: Sequence[QuestionSet]) -> list[QuestionSet]:
    """The sets in the order asked for, the held-out ones last."""
    return sorted(question_sets, key=lambda question_set: question_set.held_out)


@dataclass
class Run:
    """Everything one run measured, as both reports print it."""

    args: argparse.Namespace
    question_sets: list[QuestionSet]
    """In report order: the held-out sets last."""
    systems: dict[int, list[System]]
    """max_tokens -> the systems run at that size."""
    results: dict[str, dict[int, list[SystemResult]]]
    """set -> max_tokens -> one result per system."""
    tables: dict[str, list[Table]]
    verdict: list[VerdictRow]
    notes: list[str]
    phases: Timings


def text_report(run: Run, markdown: bool) -> str:
    args, results, tables, systems, phases = run.args, run.results, run.tables, run.systems, run.phases
    render = markdown_table if markdown else aligned_table
    found = versions()
    lines = [
        settings_line(args),
        "versions: " + "  ".join(f"{name} {version}" for name, version in found.items()),
        *run.notes,
    ]
    for question_set in run.question_sets:
        title = question_set.name
        if question_set.held_out:
            title = f"held out: {question_set.name} (kept out of every choice of default; the check on it)"
        lines += ["", f"## {title}" if markdown else f"=== {title} ==="]
        lines.append(
            f"{len(question_set.documents)} documents, "
            f"{sum(len(document.text) for document in question_set.documents):,} characters, "
            f"{len(question_set.questions)} questions"
        )
        set_results = results[question_set.name]
        lines += rule_lines(question_set) + question_set.notes + small_chunk_lines(question_set, set_results)
        for table in tables[question_set.name]:
            size_results = set_results[table.max_tokens]
            header, rows = score_table(table, size_results, args.retrievers, markdown)
            lines += ["", f"### {table_title(table)}" if markdown else table_title(table), "", render(header, rows)]
            header, rows = difference_table(table, size_results, args.retrievers)
            if rows:
                title = difference_title(table, args.bootstrap_resamples)
                lines += ["", f"#### {title}" if markdown else title, "", render(header, rows)]
        lines += ["", "chunk placement (peers' offsets checked against the text):", *placement_lines(set_results)]
        header, rows = timing_table(set_results)
        lines += ["", f"wall time per system on {question_set.name} (seconds):", "", render(header, rows)]
    title = (
        f"verdict: {DEFAULT_SYSTEM} against the best other system (other chunkers and the plain windows), all "
        f"questions of each set; gap = {DEFAULT_SYSTEM} - best other system, in points, with its {CONFIDENCE:.0%} "
        f"interval (paired bootstrap); verdict: first, within {WITHIN_POINTS:g} point, or behind; beside it the "
        f"best other {DEFAULT_SYSTEM} row, not judged"
    )
    header, rows = verdict_table(run.verdict)
    lines += ["", f"## {title}" if markdown else f"=== {title} ===", "", render(header, rows)]
    lines += ["", *verdict_summary(run.verdict, markdown)]
    lines += ["", "settings per system:"]
    for max_tokens, size_systems in systems.items():
        lines += [f"  {system.name} (max_tokens {max_tokens}): {system.settings}" for system in size_systems]
    lines += [
        "",
        "wall time per phase: " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases.seconds.items()),
    ]
    return "\n".join(lines)


def json_report(run: Run) -> str:
    args, results, tables = run.args, run.results, run.tables

    def result_json(result: SystemResult, set_tables: Sequence[Table]) -> dict[str, Any]:
        placement = result.placement
        own = [table for table in set_tables if table.max_tokens == result.max_tokens]
        scores: dict[str, Any] = {}
        differences: dict[str, Any] = {}
        for table in own:
            for retriever in args.retrievers:
                scores.setdefault(retriever, {}).setdefault(str(table.budget), {})[table.group] = table.means[
                    result.name
                ][retriever]
                if result.name in table.differences:
                    differences.setdefault(retriever, {}).setdefault(str(table.budget), {})[table.group] = {
                        metric: interval.to_json()
                        for metric, interval in table.differences[result.name][retriever].items()
                    }
        return {
            "chunks": result.chunks,
            "mean_tokens": result.mean_tokens,
            "chunks_under_small_tokens": result.small_chunks,
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
            "scores": scores,
            "difference_to_default": differences,
            "seconds": result.seconds,
        }

    def best_json(set_tables: Sequence[Table], max_tokens: int) -> dict[str, Any]:
        best: dict[str, Any] = {}
        for table in set_tables:
            if table.max_tokens == max_tokens:
                for retriever, metrics in table.best.items():
                    best.setdefault(retriever, {}).setdefault(str(table.budget), {})[table.group] = metrics
        return best

    def set_json(question_set: QuestionSet) -> dict[str, Any]:
        set_results = results[question_set.name]
        set_tables = tables[question_set.name]
        return {
            "held_out": question_set.held_out,
            "documents": len(question_set.documents),
            "questions": len(question_set.questions),
            "groups": {group: len(indices) for group, indices in question_set.groups.items()},
            "rule": question_set.rule_counts,
            "notes": question_set.notes,
            "sizes": {
                str(max_tokens): {
                    "default_small_chunks": next(
                        {"under_tokens": SMALL_CHUNK_TOKENS, "chunks": r.small_chunks, "of": r.chunks}
                        for r in size_results
                        if r.name == DEFAULT_SYSTEM
                    ),
                    "results": {result.name: result_json(result, set_tables) for result in size_results},
                    "best": best_json(set_tables, max_tokens),
                }
                for max_tokens, size_results in set_results.items()
            },
        }

    report = {
        "settings": {
            "max_tokens": list(args.max_tokens),
            "overlap_fraction": args.overlap_fraction,
            "overlap_tokens": {str(size): overlap_tokens_for(size, args.overlap_fraction) for size in args.max_tokens},
            "budgets_tokens": list(args.budgets),
            "budget_rule": "whole chunks while they fit, then the chunk that crosses the budget cut to it",
            "tokenizer": ENCODING_NAME,
            "retrievers": list(args.retrievers),
            "rrf_k": 60,
            "bootstrap": {
                "resamples": args.bootstrap_resamples,
                "seed": args.bootstrap_seed,
                "confidence": CONFIDENCE,
                "paired_with": DEFAULT_SYSTEM,
                "metrics": list(COMPARED_METRICS),
            },
            "within_points": WITHIN_POINTS,
            "units": "scores, differences and gaps are fractions from 0 to 1 (the text report shows % and points)",
            "set": list(args.settings),
            "chunkline_variants": list(args.chunkline_variants),
            "questions_limit": args.questions_limit,
            "markdown_questions": args.markdown_questions,
            "sources": {name: str(folder) for name, folder in args.sources.items()},
        },
        "versions": versions(),
        "notes": list(run.notes),
        "systems": {
            str(max_tokens): {system.name: system.settings for system in size_systems}
            for max_tokens, size_systems in run.systems.items()
        },
        "sets": {question_set.name: set_json(question_set) for question_set in run.question_sets},
        "verdict": [row.to_json() for row in run.verdict],
        "seconds": run.phases.seconds,
    }
    return json.dumps(report, indent=2)


# ---------------------------------------------------------------------------------------------- main


def comma_list(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give at least one name")
    return items


def count_list(value: str) -> list[int]:
    try:
        counts = [int(item) for item in comma_list(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"give whole numbers of tokens, got {value!r}") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError("token counts must be at least 1")
    return list(dict.fromkeys(counts))


def source_pair(value: str) -> tuple[str, Path]:
    name, equals, folder = value.partition("=")
    if not equals or not name.strip() or not folder:
        raise argparse.ArgumentTypeError(f"give NAME=DIR, got {value!r}")
    return name.strip(), Path(folder)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets",
        type=comma_list,
        help="question sets: chroma, markdown, and the sets of benchmarks.question_sets (default: markdown, "
        "chroma when --retrieval is given, and every set given a --source)",
    )
    parser.add_argument(
        "--source",
        dest="sources",
        action="append",
        type=source_pair,
        default=[],
        metavar="NAME=DIR",
        help="the folder a set of benchmarks.question_sets is built from (repeatable)",
    )
    parser.add_argument("--systems", type=comma_list, help="names or shell patterns of the rows (default: all)")
    parser.add_argument(
        "--retrievers", type=comma_list, default=list(RETRIEVERS), help="default: " + ",".join(RETRIEVERS)
    )
    parser.add_argument(
        "--max-tokens",
        type=count_list,
        default=list(MAX_TOKENS),
        help="chunk sizes, every system at each (default: " + ",".join(map(str, MAX_TOKENS)) + ")",
    )
    parser.add_argument(
        "--overlap-fraction",
        type=float,
        default=OVERLAP_FRACTION,
        help="overlap as a share of the chunk size where a system has a token overlap setting (default 50/512)",
    )
    parser.add_argument(
        "--budgets",
        type=count_list,
        default=list(BUDGETS_TOKENS),
        help="default: " + ",".join(map(str, BUDGETS_TOKENS)),
    )
    parser.add_argument("--bootstrap-resamples", type=int, default=BOOTSTRAP_RESAMPLES, metavar="N")
    parser.add_argument("--bootstrap-seed", type=int, default=BOOTSTRAP_SEED, metavar="SEED")
    parser.add_argument("--questions-limit", type=int, metavar="N", help="the first N questions of each corpus")
    parser.add_argument(
        "--markdown-questions",
        type=int,
        default=MARKDOWN_QUESTIONS,
        metavar="N",
        help=f"the most questions the markdown rule keeps (default: {MARKDOWN_QUESTIONS})",
    )
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
        help="extra chunkline rows at every size: 'a=1;b=2' is one, 'min_tokens=32/64/128' three",
    )
    parser.add_argument(
        "--expand",
        type=expand_sizes,
        default=[],
        metavar="section:N,...",
        help="small-to-big rows beside the default's at every size: its ranked chunks returned as the largest "
        "section around each of at most N tokens (section:0: only the deduplication)",
    )
    parser.add_argument("--retrieval", type=Path, help="the folder of Chroma's chunking evaluation (the chroma set)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="the markdown corpus folder")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument("--markdown", action="store_true", help="the same as --format markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        args.format = "markdown"
    registered = registered_sets()
    sources: dict[str, Path] = {}
    for name, folder in args.sources:
        if name in BUILTIN_SETS:
            option = "--retrieval" if name == "chroma" else "--corpus"
            parser.error(f"--source {name}=...: the {name} set takes its folder with {option}")
        if name not in registered:
            parser.error(f"--source {name}=...: no set {name!r}; sets: {', '.join([*BUILTIN_SETS, *registered])}")
        if name in sources:
            parser.error(f"--source {name}=... is given twice")
        sources[name] = folder
    args.sources = sources
    if args.sets is None:
        args.sets = [*(["chroma"] if args.retrieval is not None else []), "markdown", *sources]
    args.sets = list(dict.fromkeys(args.sets))
    for name in args.sets:
        if name not in BUILTIN_SETS and name not in registered:
            parser.error(f"unknown set {name!r}; sets: {', '.join([*BUILTIN_SETS, *registered])}")
    for name in args.retrievers:
        if name not in RETRIEVERS:
            parser.error(f"unknown retriever {name!r}; retrievers: {', '.join(RETRIEVERS)}")
    args.retrievers = [name for name in RETRIEVERS if name in args.retrievers]
    if args.questions_limit is not None and args.questions_limit < 1:
        parser.error("--questions-limit must be at least 1")
    if not 0 <= args.overlap_fraction < 1:
        parser.error("--overlap-fraction must be >= 0 and less than 1")
    if args.bootstrap_resamples < 1:
        parser.error("--bootstrap-resamples must be at least 1")
    folders = {"chroma": (args.retrieval, "--retrieval"), "markdown": (args.corpus, "--corpus")}
    for name in args.sets:
        folder, option = folders.get(name, (sources.get(name), f"--source {name}=DIR"))
        if folder is None:
            parser.error(f"the {name} set needs its folder: pass it with {option}")
        if not folder.is_dir():
            parser.error(f"the {name} set's folder {folder.resolve()} is missing; pass it with {option}")
    return args


def load_sets(args: argparse.Namespace, count_tokens: Callable[[str], int]) -> list[QuestionSet]:
    question_sets = []
    for name in args.sets:
        if name == "chroma":
            question_sets.append(load_chroma_set(args.retrieval, args.questions_limit))
        elif name == "markdown":
            question_sets.append(
                load_markdown_set(args.corpus, args.markdown_questions, args.questions_limit, count_tokens)
            )
        else:
            question_sets.append(load_registered_set(name, args.sources[name], args.questions_limit, count_tokens))
    return ordered_sets(question_sets)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    phases = Timings()
    try:
        from chunkline.evaluation.retrieval import budget_token_counter, load_wordllama_embedder
    except ImportError as error:
        raise SystemExit(f"error: the evaluation core is not importable ({error})") from None

    started = time.perf_counter()
    systems: dict[int, list[System]] = {}
    notes: list[str] = []
    for max_tokens in args.max_tokens:
        systems[max_tokens], size_notes = build_systems(args, max_tokens)
        notes += [note for note in size_notes if note not in notes]
    count_tokens = budget_token_counter()
    dense = "wordllama" in args.retrievers or "hybrid" in args.retrievers
    embedder = load_wordllama_embedder() if dense else None
    judging = Judging(tuple(args.retrievers), tuple(args.budgets), count_tokens, embedder)
    phases.add("setup", time.perf_counter() - started)

    started = time.perf_counter()
    question_sets = load_sets(args, count_tokens)
    for question_set in question_sets:
        question_set.notes.append(reference_line(question_set, count_tokens, args.max_tokens))
    phases.add("load sets and build questions", time.perf_counter() - started)
    for question_set in question_sets:
        progress(
            f"{question_set.name}: {len(question_set.documents)} documents, {len(question_set.questions)} questions"
            + (" (held out)" if question_set.held_out else "")
        )
        for line in rule_lines(question_set):
            progress(line)

    run = Run(args, question_sets, systems, {}, {}, [], notes, phases)
    for question_set in question_sets:
        query_vectors = None
        if embedder is not None:
            started = time.perf_counter()
            query_vectors = embedder.embed([question.question for question in question_set.questions])
            phases.add("wordllama query", time.perf_counter() - started)
        set_results: dict[int, list[SystemResult]] = {}
        for max_tokens, size_systems in systems.items():
            set_results[max_tokens] = []
            for system in size_systems:
                result = evaluate_system(system, question_set, max_tokens, judging, query_vectors)
                set_results[max_tokens].append(result)
                for phase, seconds in result.seconds.items():
                    phases.add(phase, seconds)
                progress(
                    f"{question_set.name} / {system.name} / {max_tokens}: {result.chunks} chunks in "
                    + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in result.seconds.items())
                )
            if args.expand:
                overlap = overlap_tokens_for(max_tokens, args.overlap_fraction)
                config = chunkline_config([f"max_tokens={max_tokens}", f"overlap_tokens={overlap}", *args.settings])
                expanded = expanded_results(question_set, max_tokens, config, args.expand, judging, query_vectors)
                set_results[max_tokens] += expanded
                progress(
                    f"{question_set.name} / small-to-big / {max_tokens}: "
                    + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in expanded[0].seconds.items())
                )
        run.results[question_set.name] = set_results
        started = time.perf_counter()
        run.tables[question_set.name] = build_tables(
            question_set, set_results, judging, resamples=args.bootstrap_resamples, seed=args.bootstrap_seed
        )
        phases.add("bootstrap", time.perf_counter() - started)
    held_out = {question_set.name: question_set.held_out for question_set in question_sets}
    run.verdict = verdict_rows([table for name in run.tables for table in run.tables[name]], held_out, args.retrievers)
    phases.add("total", time.perf_counter() - wall)
    print(json_report(run) if args.format == "json" else text_report(run, args.format == "markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
