"""``powershell-examples`` (held out): the PowerShell 7.5 command reference, where every example's heading
says what it does and the text under it shows how.

Source: ``MicrosoftDocs/PowerShell-Docs`` at commit ``27138b21b41de3e2b43cfcac4a56861ca419d5eb``, the
folder ``reference/7.5`` (one page per cmdlet with YAML front matter, ``SYNOPSIS``, ``SYNTAX``,
``DESCRIPTION``, ``EXAMPLES``, ``PARAMETERS`` sections, and the ``about_*`` topics)::

    git clone https://github.com/MicrosoftDocs/PowerShell-Docs.git && cd PowerShell-Docs
    git checkout 27138b21b41de3e2b43cfcac4a56861ca419d5eb
    mkdir -p ../powershell && git archive HEAD reference/7.5 | tar -x -C ../powershell
    # then: --source powershell-examples=../powershell/reference/7.5

The rule. A cmdlet page's examples are headings ``### Example 3: Get all processes that use more than
1 GB of memory``; the title after the colon is a task a user states in their own words, and the text under
the heading (the command, its output, the explanation) is how the page answers it. Exactly:

1. The folder is read as ``chunkline run`` reads it (``chunkline.evaluation.corpus.read_corpus``); a file
   it leaves out is counted as ``left out by chunkline run``. If the documents hold more than 5,000,000
   characters, they are kept in order of the sha256 of their doc id, smallest first, each one while the
   total stays within the cap (the others are counted as ``over the corpus cap``), as in
   :mod:`benchmarks.question_sets.section_pairs`.
2. Each document is parsed with markdown-it-py (CommonMark, tables on) after its front matter; top-level
   blocks only. An example heading is a heading of any level whose text matches ``Example <number>:
   <title>`` (``-`` or ``.`` also taken for the colon).
3. Every example heading of every kept document is rewritten to ``Example <number>`` (the heading's
   markers, level and number kept; the colon and title removed), whether or not it gives a question: the
   titles' words are not searchable anywhere, so a question never meets its own words.
4. The question is the title, as written, followed by ``(PowerShell)`` so that it names the shell it asks
   about, as a user typing it into a search box would. It must hold 25 to 300 characters; a title that
   appears more than once among the kept documents' example titles (case and whitespace folded) gives no
   question (two answers to one question).
5. The reference is the example's body: the run of whole blocks after the heading up to the next heading
   of any level, ending with the last block that keeps the range within 2,000 characters; it must hold at
   least 150 characters. A title whose text (whitespace collapsed) is found in the rewritten corpus gives no
   question.
6. Of the examples that give a question, up to 250 are kept: those whose key ``<doc id>#<number>`` has the
   smallest sha256, listed in doc id and example order. Each document's rewriting is the same whichever
   examples are kept.

This set is held out: it is reported last and never used to choose a default.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.question_sets import SETS, BuiltSet
from benchmarks.question_sets.section_pairs import (
    MAX_CORPUS_CHARS,
    MAX_QUESTIONS,
    cap_documents,
    collapse_whitespace,
    read_source_documents,
    top_level_blocks,
)
from chunkline.evaluation.questions import Question, ReferenceSpan

SET_NAME = "powershell-examples"
COMMIT = "27138b21b41de3e2b43cfcac4a56861ca419d5eb"
EXAMPLE_TITLE = re.compile(r"Example\s+(\d+)\s*[:.\-]\s*(\S.*)", re.IGNORECASE | re.DOTALL)
QUESTION_SUFFIX = " (PowerShell)"
MIN_TITLE_CHARS = 25
MAX_TITLE_CHARS = 300
MIN_REFERENCE_CHARS = 150
MAX_REFERENCE_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Example:
    doc_id: str
    number: str
    title: str
    start_char: int
    """Where the body starts in the rewritten document."""
    end_char: int
    problem: str | None
    """Why it gives no question (before the checks across documents), or None."""


def rewrite_examples(doc_id: str, text: str, body_start: int) -> tuple[str, list[Example]]:
    """The document with every example heading's title removed, and its examples (body ranges index the
    rewritten text)."""
    blocks = top_level_blocks(text, body_start)
    pieces: list[str] = []
    cursor = 0
    shift = 0
    pending: list[tuple[str, str, int, int, str | None]] = []
    for index, block in enumerate(blocks):
        if not block.heading_level:
            continue
        match = EXAMPLE_TITLE.fullmatch(block.heading_text)
        if match is None:
            continue
        number, title = match.group(1), collapse_whitespace(match.group(2))
        heading = text[block.start_char : block.end_char]
        word = heading.find(block.heading_text.split()[0])
        if "\n" in heading or word < 0 or not heading.startswith(block.heading_text, word):
            continue  # a setext heading or one whose text is not written as parsed (escapes): left as it is
        new_heading = f"{heading[:word]}Example {number}"
        pieces.append(text[cursor : block.start_char])
        pieces.append(new_heading)
        cursor = block.end_char
        shift += len(new_heading) - len(heading)
        body: list = []
        for later in blocks[index + 1 :]:
            if later.heading_level:
                break
            body.append(later)
        kept = [item for item in body if item.end_char - body[0].start_char <= MAX_REFERENCE_CHARS] if body else []
        problem = None
        if not MIN_TITLE_CHARS <= len(title) <= MAX_TITLE_CHARS:
            problem = f"title not {MIN_TITLE_CHARS} to {MAX_TITLE_CHARS} characters"
        elif not kept:
            problem = f"example body empty or its first block over {MAX_REFERENCE_CHARS} characters"
        elif kept[-1].end_char - kept[0].start_char < MIN_REFERENCE_CHARS:
            problem = f"example body under {MIN_REFERENCE_CHARS} characters"
        start, end = (kept[0].start_char + shift, kept[-1].end_char + shift) if kept else (0, 0)
        pending.append((number, title, start, end, problem))
    pieces.append(text[cursor:])
    rewritten = "".join(pieces)
    return rewritten, [Example(doc_id, *item) for item in pending]


def build(source: Path, count_tokens: Callable[[str], int]) -> BuiltSet:
    read, left_out = read_source_documents(source)
    return build_from_documents(read, left_out)


def build_from_documents(read, left_out: dict[str, str], max_questions: int = MAX_QUESTIONS) -> BuiltSet:
    """The rule over documents already read (``(doc_id, text, body_start)`` in doc id order)."""
    kept, over_cap = cap_documents(read, MAX_CORPUS_CHARS)
    documents: list[tuple[str, str]] = []
    examples: list[Example] = []
    example_pages = 0
    for doc_id, text, body_start in kept:
        rewritten, found = rewrite_examples(doc_id, text, body_start)
        documents.append((doc_id, rewritten))
        examples.extend(found)
        example_pages += bool(found)
    reasons: dict[str, int] = {}

    def count(reason: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1

    title_uses: dict[str, int] = {}
    for example in examples:
        key = example.title.casefold()
        title_uses[key] = title_uses.get(key, 0) + 1
    searched = [collapse_whitespace(text) for _, text in documents]
    qualifying: list[Example] = []
    for example in examples:
        if example.problem is not None:
            count(example.problem)
        elif title_uses[example.title.casefold()] > 1:
            count("title of more than one example")
        elif any(example.title in text for text in searched):
            count("title text still in the corpus")
        else:
            qualifying.append(example)
    qualifying.sort(key=lambda item: hashlib.sha256(f"{item.doc_id}#{item.number}".encode()).hexdigest())
    chosen = sorted(qualifying[:max_questions], key=lambda item: (item.doc_id, item.start_char))
    texts = dict(documents)
    questions = []
    for example in chosen:
        assert texts[example.doc_id][example.start_char : example.end_char].strip()
        questions.append(
            Question(
                example.title + QUESTION_SUFFIX, (ReferenceSpan(example.doc_id, example.start_char, example.end_char),)
            )
        )
    counts = {
        "documents": len(documents),
        "documents with examples": example_pages,
        "examples": len(examples),
        "qualifying": len(qualifying),
        "kept": len(chosen),
        **({"left out by chunkline run": len(left_out)} if left_out else {}),
        **({"over the corpus cap": over_cap} if over_cap else {}),
        **dict(sorted(reasons.items())),
    }
    notes = [
        f"{SET_NAME}: MicrosoftDocs/PowerShell-Docs {COMMIT[:12]}, reference/7.5; example titles are the "
        "questions, example bodies the references; every example heading's title is removed from the corpus",
        f"{len(documents)} documents, {sum(len(text) for _, text in documents):,} characters; {len(questions)} questions",
        *(f"left out (as chunkline run would): {doc_id}: {why}" for doc_id, why in left_out.items()),
    ]
    return BuiltSet(documents, questions, counts, notes, held_out=True)


SETS[SET_NAME] = build
