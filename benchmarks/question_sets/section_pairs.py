"""The rule the proposal sets of this package share (``swift-proposals``, ``keps``): a section that states what a document is about is the question,
the opening of a later section that answers it is the reference, and the question's words are taken out of
the searched text.

A set names its source's two headings (``Introduction`` and ``Proposed solution``, for example) and its
bounds in a :class:`SectionPairRule`; :func:`build_section_pair_set` applies it. Exactly:

1. The source folder is read as ``chunkline run`` reads it (``chunkline.evaluation.corpus.read_corpus``:
   markdown files, doc ids their POSIX paths relative to the folder, UTF-8 decoding); a file it leaves out is
   counted as ``left out by chunkline run``. If the documents hold more than ``max_corpus_chars``
   characters in all, they are taken in order of the sha256 of their doc id, smallest first, each one kept
   while the kept total stays within the cap (one that would pass it is counted as ``over the corpus cap``
   and the next is tried); the kept documents are the set's corpus, in doc id order.
2. Each document is parsed with markdown-it-py (CommonMark, with tables), after its front matter, and only
   its top-level blocks are read. A block's range runs from its first to past its last non-whitespace
   character. An HTML comment block (a template's instructions left in the file) is not the author's text:
   it is never part of a question or a reference.
3. The question section is the first heading whose text is one of ``question_titles`` (any case). Its
   blocks are the author's blocks after it up to the next heading of any level, less those that start with
   one of the set's ``question_skip_prefixes`` (which stay in the text). The question is their text,
   as written, joined by a blank line; it holds ``min_question_chars`` to ``max_question_chars``
   characters.
4. The answer section is the first heading after the question section, at the question heading's level,
   whose text is one of ``answer_titles`` (any case); it runs to the next heading at that level or above.
   Its opening is the run of whole author's blocks from its first block that is not a heading, ending with
   the last block (not a heading) that keeps the range within ``max_reference_chars``; HTML comment blocks
   before the first kept block are skipped. The reference is that one range; it holds at least
   ``min_reference_chars`` characters.
5. The document is rewritten: each of the question's blocks is cut out of the text (the heading stays, so
   the document keeps its outline; the section is left empty). The reference's offsets index the rewritten
   text, which is what every system chunks and the benchmark searches. A document that gives no question
   is searched exactly as its author wrote it.
6. A document gives no question when a part is missing or out of its bounds, when the question holds the
   reference or the reference the question, or when the question's text (whitespace collapsed) is still
   found in any document of the rewritten corpus (a copy in front matter, in another file): the question is
   never a verbatim copy of searched text. Of the documents that give a question, up to ``max_questions``
   are kept, those whose doc id has the smallest sha256, listed in doc id order.

Every step is a CommonMark parse and character counts; no system's chunks, boundaries or settings are read,
so the same ranges score every system.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from benchmarks.question_sets import BuiltSet
from chunkline.evaluation.questions import Question, ReferenceSpan

__all__ = [
    "MAX_CORPUS_CHARS",
    "MAX_QUESTIONS",
    "SectionPairRule",
    "TopBlock",
    "build_section_pair_set",
    "cap_documents",
    "read_source_documents",
    "section_pair_question",
    "top_level_blocks",
]

MAX_CORPUS_CHARS = 5_000_000
"""The most characters a set's corpus holds (about 5 MB of English text)."""
MAX_QUESTIONS = 250
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WHITESPACE = re.compile(r"\s+")
_BLOCK_PARSER = MarkdownIt("commonmark").enable("table").disable("inline")
"""CommonMark with tables; inline content is left unparsed (only block ranges and heading text are read)."""


@dataclass(frozen=True, slots=True)
class SectionPairRule:
    """The headings and bounds one set applies the shared rule with."""

    question_titles: tuple[str, ...]
    """Heading texts (compared case-folded) of the section that is the question."""
    answer_titles: tuple[str, ...]
    """Heading texts (compared case-folded) of the section whose opening is the reference."""
    question_skip_prefixes: tuple[str, ...] = ()
    """A question block whose text starts with one of these (any case) is left in place and out of the
    question (a line of links to a discussion, for example)."""
    min_question_chars: int = 30
    max_question_chars: int = 1_500
    min_reference_chars: int = 300
    max_reference_chars: int = 2_000
    max_questions: int = MAX_QUESTIONS
    max_corpus_chars: int = MAX_CORPUS_CHARS


@dataclass(frozen=True, slots=True)
class TopBlock:
    """One top-level block of a markdown document: its kind, a heading's level and text, its range."""

    kind: str
    """markdown-it's token type without ``_open`` (``heading``, ``paragraph``, ``html_block``...)."""
    heading_level: int
    """1..6 for a heading, 0 for any other block."""
    heading_text: str
    start_char: int
    """The block's first non-whitespace character."""
    end_char: int
    """Past the block's last non-whitespace character."""

    def is_comment(self, text: str) -> bool:
        return self.kind == "html_block" and text.startswith("<!--", self.start_char)


def top_level_blocks(text: str, body_start: int = 0) -> list[TopBlock]:
    """The top-level blocks of ``text[body_start:]`` (the text after front matter), in order, by a
    CommonMark parse (markdown-it-py, tables on); ranges are offsets into ``text``."""
    body = text[body_start:]
    tokens = _BLOCK_PARSER.parse(body)
    starts = [0, *(match.end() for match in _LINE_BREAK.finditer(body)), len(body)]
    blocks: list[TopBlock] = []
    for index, token in enumerate(tokens):
        if token.level != 0 or token.nesting == -1 or token.map is None:
            continue
        first_line, end_line = token.map
        start = starts[min(first_line, len(starts) - 1)]
        end = starts[min(end_line, len(starts) - 1)]
        while start < end and body[start].isspace():
            start += 1
        while end > start and body[end - 1].isspace():
            end -= 1
        if start == end:
            continue
        kind = token.type.removesuffix("_open")
        level = int(token.tag[1:]) if kind == "heading" else 0
        heading = tokens[index + 1].content.strip() if kind == "heading" else ""
        blocks.append(TopBlock(kind, level, heading, body_start + start, body_start + end))
    return blocks


@dataclass(frozen=True, slots=True)
class PairedQuestion:
    """One document's question: the rewritten document, the question and the reference range in it."""

    doc_id: str
    text: str
    """The document with the question's blocks cut out."""
    question: str
    start_char: int
    end_char: int


def section_pair_question(
    doc_id: str, text: str, body_start: int, rule: SectionPairRule
) -> tuple[PairedQuestion | None, str]:
    """The rule's question for one document (before the corpus-wide check of step 6), or ``None`` and the
    reason it gives none."""
    blocks = top_level_blocks(text, body_start)
    titles = {title.casefold() for title in rule.question_titles}
    asked = next((index for index, block in enumerate(blocks) if block.heading_text.casefold() in titles), None)
    if asked is None:
        return None, "no question section"
    level = blocks[asked].heading_level
    skipped = tuple(prefix.casefold() for prefix in rule.question_skip_prefixes)
    question_blocks: list[TopBlock] = []
    for block in blocks[asked + 1 :]:
        if block.heading_level:
            break
        written = text[block.start_char : block.end_char].casefold()
        if not block.is_comment(text) and not written.startswith(skipped):
            question_blocks.append(block)
    question = "\n\n".join(text[block.start_char : block.end_char] for block in question_blocks)
    if len(question) < rule.min_question_chars:
        return None, f"question section empty or under {rule.min_question_chars} characters"
    if len(question) > rule.max_question_chars:
        return None, f"question section over {rule.max_question_chars} characters"
    answers = {title.casefold() for title in rule.answer_titles}
    answer = next(
        (
            index
            for index in range(asked + 1, len(blocks))
            if blocks[index].heading_level == level and blocks[index].heading_text.casefold() in answers
        ),
        None,
    )
    if answer is None:
        return None, "no answer section"
    section: list[TopBlock] = []
    for block in blocks[answer + 1 :]:
        if block.heading_level and block.heading_level <= level:
            break
        if section or not (block.heading_level or block.is_comment(text)):
            section.append(block)
    kept = [
        block
        for block in section
        if block.end_char - section[0].start_char <= rule.max_reference_chars and not block.is_comment(text)
    ]
    while kept and kept[-1].heading_level:
        kept.pop()
    if not kept:
        return None, f"answer section empty or its first block over {rule.max_reference_chars} characters"
    start, end = kept[0].start_char, kept[-1].end_char
    if end - start < rule.min_reference_chars:
        return None, f"answer opening under {rule.min_reference_chars} characters"
    reference = text[start:end]
    if question in reference or reference in question:
        return None, "question and reference hold one another"
    rewritten, removed = [], 0
    cursor = 0
    for block in question_blocks:
        rewritten.append(text[cursor : block.start_char])
        removed += block.end_char - block.start_char
        cursor = block.end_char
    rewritten.append(text[cursor:])
    # The question section comes before the answer section, so the reference moves back by what was cut.
    paired = PairedQuestion(doc_id, "".join(rewritten), question, start - removed, end - removed)
    assert paired.text[paired.start_char : paired.end_char] == reference
    return paired, "question"


def read_source_documents(source: Path) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """``(doc_id, text, body_start)`` of every markdown document under ``source`` as ``chunkline run`` reads
    it (``body_start``: where the text after front matter starts), in doc id order, and the files it leaves
    out with the reason."""
    from chunkline.evaluation.corpus import load_input_config, read_corpus

    corpus = read_corpus(load_input_config([str(source)], environ={}))
    documents = []
    for doc_id, item in corpus.documents.items():
        front_matter = item.document.front_matter
        documents.append((doc_id, item.text, front_matter.end_char if front_matter is not None else 0))
    return documents, dict(corpus.left_out)


def sha256_order(doc_id: str) -> str:
    return hashlib.sha256(doc_id.encode("utf-8")).hexdigest()


def cap_documents(documents: Sequence[tuple[str, str, int]], max_chars: int) -> tuple[list[tuple[str, str, int]], int]:
    """The documents kept within ``max_chars`` characters (all when they fit; otherwise by smallest sha256
    of doc id, each kept while the total stays within the cap), in doc id order, and how many were not."""
    if sum(len(text) for _, text, _ in documents) <= max_chars:
        return list(documents), 0
    kept, total = [], 0
    for document in sorted(documents, key=lambda item: sha256_order(item[0])):
        if total + len(document[1]) <= max_chars:
            kept.append(document)
            total += len(document[1])
    kept.sort(key=lambda item: item[0])
    return kept, len(documents) - len(kept)


def collapse_whitespace(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def build_section_pair_set(
    source: Path, rule: SectionPairRule, notes: Sequence[str] = (), *, held_out: bool = False
) -> BuiltSet:
    """The rule applied to every markdown document under ``source``; see the module docstring."""
    read, left_out = read_source_documents(source)
    return section_pair_set(read, left_out, rule, notes, held_out=held_out)


def section_pair_set(
    read: Sequence[tuple[str, str, int]],
    left_out: dict[str, str],
    rule: SectionPairRule,
    notes: Sequence[str] = (),
    *,
    held_out: bool = False,
) -> BuiltSet:
    """The rule applied to documents already read (``(doc_id, text, body_start)``, in doc id order)."""
    kept, over_cap = cap_documents(read, rule.max_corpus_chars)
    reasons: dict[str, int] = {}
    found: list[PairedQuestion] = []
    for doc_id, text, body_start in kept:
        paired, reason = section_pair_question(doc_id, text, body_start, rule)
        if paired is not None:
            found.append(paired)
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    # Step 6, conservatively: the question is looked for in its own rewritten document and in every other
    # document as its author wrote it (whether or not that one is rewritten in the end).
    originals = {doc_id: collapse_whitespace(text) for doc_id, text, _ in kept}
    qualifying: list[PairedQuestion] = []
    for paired in found:
        needle = collapse_whitespace(paired.question)
        if needle in collapse_whitespace(paired.text) or any(
            needle in text for doc_id, text in originals.items() if doc_id != paired.doc_id
        ):
            reasons["question text still in the corpus"] = reasons.get("question text still in the corpus", 0) + 1
        else:
            qualifying.append(paired)
    qualifying.sort(key=lambda paired: sha256_order(paired.doc_id))
    chosen = sorted(qualifying[: rule.max_questions], key=lambda paired: paired.doc_id)
    texts = {doc_id: text for doc_id, text, _ in kept}
    texts.update((paired.doc_id, paired.text) for paired in chosen)
    documents = [(doc_id, texts[doc_id]) for doc_id, _, _ in kept]
    questions = [
        Question(paired.question, (ReferenceSpan(paired.doc_id, paired.start_char, paired.end_char),))
        for paired in chosen
    ]
    counts = {
        "documents": len(kept),
        "qualifying": len(qualifying),
        "kept": len(chosen),
        **({"left out by chunkline run": len(left_out)} if left_out else {}),
        **({"over the corpus cap": over_cap} if over_cap else {}),
        **dict(sorted(reasons.items())),
    }
    corpus_chars = sum(len(text) for _, text in documents)
    set_notes = [
        *notes,
        f"{len(documents)} documents, {corpus_chars:,} characters; {len(questions)} questions",
        *(f"left out (as chunkline run would): {doc_id}: {why}" for doc_id, why in left_out.items()),
    ]
    return BuiltSet(documents, questions, counts, set_notes, held_out)
