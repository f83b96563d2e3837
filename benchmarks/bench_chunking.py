"""Chunking benchmark: chunkline's speed and output quality next to a floor and semantic-text-splitter.

Usage::

    python benchmarks/bench_chunking.py [FOLDER ...] [--max-tokens 512] [--overlap-tokens 50]
                                        [--min-tokens N] [--runs 5]
                                        [--strategies NAME,... | --no-strategies]
                                        [--json out.json] [--compare-parsers | --encode-ahead]

FOLDER defaults to ``sample_corpus/``, the small corpus this repository ships; the published figures are of
a larger corpus given as the argument (``python benchmarks/bench_chunking.py ../shared/corpus``). Every ``*.md`` / ``*.markdown`` file under the folders is read once, decoded as
UTF-8 (line breaks untouched), and held in memory, so no system pays for file I/O.

Speed. These systems each chunk (or parse) the whole corpus, ``--runs`` times:

``chunkline``
    ``chunkline.chunk_markdown(text, ChunkConfig(max_tokens, overlap_tokens), doc_id=...)``: the full
    engine, chunk records (positions, ids, hashes) included, with the default parser (markdown-it-pyrs).
``chunkline (markdown-it-py)``
    The same with ``parser="markdown-it-py"``, the reference parser.
``floor``
    One block-level markdown-it-py parse (the ``inline`` core rule disabled) plus one tiktoken
    ``encode_ordinary`` pass over each document: the least a chunker that follows CommonMark structure and
    counts tokens exactly must do with that parser. chunkline's speed is read against it.
``floor (markdown-it-pyrs)``
    The same with one markdown-it-pyrs block parse (chunkline's configuration of it) instead.
``semantic-text-splitter``
    ``MarkdownSplitter.from_tiktoken_model("gpt-3.5-turbo", max_tokens, overlap, trim=False)`` and
    ``chunk_indices(text)``: a Rust markdown splitter with the same tokenizer (cl100k_base). Optional:
    skipped when the ``bench`` extra is not installed.

Parsers. Untimed, every file is chunked with both parsers and the chunks compared (they must be equal);
``--compare-parsers`` does only that, exits 1 if any file's chunks differ, and times nothing.

Encoding ahead. ``chunk_markdown`` encodes a document of at least ``chunkline.encode_ahead.MIN_CHARS_AHEAD``
characters on a second thread while it parses it (``chunkline`` above includes that; the floors run on one
thread). ``--encode-ahead`` times only that choice: the corpus's text, joined and cut into documents of 8,
32, 128 and 512 KB (the first 4 MB), chunked with ``encode_ahead=True`` (every size handed to the thread)
and ``encode_ahead=False``, side by side in rotated rounds; it prints the medians and their ratio per size.

The systems run side by side in one process, and the order is rotated each round, so that warm-up, CPU
frequency and background noise are spread over all of them instead of favouring whichever runs first or
last. Each system's figure is the MEDIAN of its per-round times for one pass over the corpus (the median
shrugs off a round disturbed by something else); throughput is MB/s with MB = 1e6 bytes of UTF-8 input.
The ratios compare the medians of systems measured in the same rounds, which makes them far more stable
across machines than the absolute MB/s. One-time setup (loading the encoding, building the splitters)
happens before timing, and each system chunks one document untimed first.

Quality. Each system chunks the corpus once more, outside timing, and its output is checked:

* chunks, and chunks over the limit: the chunk text's exact cl100k_base count (``encode_ordinary``) is
  above ``max_tokens``;
* fences/tables (and, separately, list items) that fit but were split: a block from
  ``chunkline.parse_markdown(text).blocks`` whose text (trailing whitespace removed) has at most
  ``max_tokens`` tokens, and which no single chunk's ``[start, end)`` holds whole;
* characters lost: characters of a document that no chunk's range covers;
* exact offsets: chunks whose text is ``text[start:end]`` (semantic-text-splitter's ``chunk_indices``
  offsets are taken in the unit its documentation gives, checked against the text and converted from
  bytes to characters if they are byte offsets);
* for chunkline also ``reconstruct(chunks) == text`` per document and ``token_count`` equal to the exact
  count per chunk;
* fragments: heading-only chunks (nothing but heading lines from ``chunkline.parse_markdown``, front matter
  and whitespace allowed) and front-matter-only chunks, counted in documents that have other text; the
  share of chunks under 32 exact tokens; the mean tokens per chunk. ``--min-tokens`` sets chunkline's
  ``chunking.min_tokens`` (``0``: no fragment merging, the chunks of each strategy alone).

The floor produces no chunks; its quality figures are ``n/a``.

Strategies. A second section (on by default; ``--strategies a,b`` chooses the strategies, ``--no-strategies``
skips it) holds every registered strategy (``chunkline.available_strategies()``, entry-point plugins
included) to the same measure: ``chunk_markdown`` over the whole corpus with ``ChunkConfig(strategy=name,
max_tokens, overlap_tokens, params=get_strategy(name).default_params())``. Each of the ``--runs`` rounds
times the floor first, then every strategy, in an order rotated each round; a strategy's figures are the
median MB/s of its rounds and that over the floor's median from the same rounds. The TARGET every strategy
is measured against is half the floor's throughput: at least 0.5x the floor (at most twice its time); the
strategies below it are named under the table. A strategy for which these settings are not a valid config
(``tokens`` needs ``max_tokens >= 64``) gets the ConfigError message in its row instead of figures.

Its quality figures are those above, read against the guarantees the strategy declares
(``chunkline.Strategy``):

* chunks over the limit count only those that are not a declared soft-limit unit. A chunk over
  ``max_tokens`` is one when the strategy declares ``soft_limit_kinds``, the chunk holds a block of one of
  those kinds (its text, trailing whitespace removed) whose own count is over ``max_tokens``, and the rest
  of the chunk is within it; such chunks are counted apart (``n/a`` for strategies that declare none);
* fences/tables + list items that fit but were split are checked only for strategies that keep blocks
  whole (``keeps_blocks_whole``); the others cut by their own unit (token windows, lines, characters, a
  pattern) on purpose and show ``n/a (cuts by its unit)``;
* characters lost, exact offsets and reconstruct failures (documents where ``reconstruct(chunks) != text``)
  as for chunkline above.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import math
import platform
import re
import statistics
import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

import tiktoken
from markdown_it import MarkdownIt

import chunkline
from chunkline import (
    ChunkConfig,
    ConfigError,
    ReconstructionError,
    Strategy,
    available_strategies,
    get_strategy,
    parse_markdown,
    reconstruct,
)
from chunkline.pyrs_blocks import _parser as fast_block_parser
from chunkline.structure import DEFAULT_PARSER, FAST_PARSER, REFERENCE_PARSER, Block
from chunkline.tokenizers import load_encoding

CHUNKLINE = "chunkline"
CHUNKLINE_REFERENCE = f"chunkline ({REFERENCE_PARSER})"
FLOOR = "floor"
FLOOR_FAST = f"floor ({FAST_PARSER})"
SEMANTIC = "semantic-text-splitter"

MARKDOWN_SUFFIXES = (".md", ".markdown")
DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
ENCODING_NAME = "cl100k_base"
SEMANTIC_MODEL = "gpt-3.5-turbo"  # tiktoken-rs maps it to cl100k_base, the encoding chunkline counts with
FENCE_OR_TABLE = frozenset({"fence", "table"})
LIST_ITEM = "list_item"
MAX_EXAMPLES = 5
FLOOR_TARGET = 0.5
"""The throughput every strategy is measured against, as a share of the floor's."""
SPLIT_PROBLEMS = ("fences_tables_split", "list_items_split")
SMALL_CHUNK_TOKENS = 32
"""Chunks under this many tokens are counted as small (fragments)."""
FRAGMENT_EXAMPLES = ("heading_only", "front_matter_only")
"""Examples kept for the fragment figures: measurements, not broken promises."""


# --------------------------------------------------------------------------------------------- corpus


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    """POSIX path relative to the folder the file was found in."""
    text: str
    size_bytes: int


@dataclass(frozen=True)
class Corpus:
    folders: tuple[Path, ...]
    documents: tuple[Document, ...]

    @property
    def total_bytes(self) -> int:
        return sum(document.size_bytes for document in self.documents)

    @property
    def megabytes(self) -> float:
        return self.total_bytes / 1e6


def markdown_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() and path.suffix.lower() in MARKDOWN_SUFFIXES)


def load_corpus(folders: Sequence[Path]) -> Corpus:
    """Every markdown file under ``folders``, decoded as UTF-8 with its line breaks as they are."""
    documents: list[Document] = []
    for folder in folders:
        for path in markdown_files(folder):
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise SystemExit(f"error: {path} is not valid UTF-8 ({error})") from None
            documents.append(Document(path.relative_to(folder).as_posix(), text, len(raw)))
    return Corpus(tuple(folders), tuple(documents))


# -------------------------------------------------------------------------------------------- systems


@dataclass(frozen=True, slots=True)
class Span:
    """One chunk as a character range of its document, the text the system returned, and its own count."""

    start: int
    end: int
    text: str
    reported_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class DocumentOutput:
    spans: list[Span]
    reconstructs: bool | None = None
    """Whether the system's own reconstruction gives the document back; ``None`` when it has none."""


@dataclass(frozen=True)
class System:
    name: str
    run: Callable[[Document], object]
    """What is timed: chunk one document, nothing else."""
    collect: Callable[[Document], DocumentOutput] | None
    """Chunk one document and normalize the output for the quality checks; ``None`` for the floor."""
    notes: dict[str, Any] = field(default_factory=dict)


def chunkline_system(config: ChunkConfig, name: str = CHUNKLINE) -> System:
    """``chunk_markdown`` with ``config``: the main section's ``chunkline``, or one strategy of the second."""
    chunk_markdown = chunkline.chunk_markdown

    def run(document: Document) -> object:
        return chunk_markdown(document.text, config, doc_id=document.doc_id)

    def collect(document: Document) -> DocumentOutput:
        chunks = chunk_markdown(document.text, config, doc_id=document.doc_id)
        spans = [Span(chunk.start_char, chunk.end_char, chunk.text, chunk.token_count) for chunk in chunks]
        try:
            reconstructs = reconstruct(chunks) == document.text
        except ReconstructionError:
            reconstructs = False
        return DocumentOutput(spans, reconstructs)

    return System(name, run, collect)


def floor_system(encoding: tiktoken.Encoding) -> System:
    parser = MarkdownIt("commonmark").enable("table")
    parser.core.ruler.disable(["inline", "text_join"])
    parse = parser.parse
    encode = encoding.encode_ordinary

    def run(document: Document) -> object:
        return parse(document.text), encode(document.text)

    return System(FLOOR, run, None)


def fast_floor_system(encoding: tiktoken.Encoding) -> System:
    """The floor with the fast parser: one markdown-it-pyrs block parse (the configuration chunkline uses,
    no inline rules) plus one tiktoken pass."""
    tree = fast_block_parser().tree
    encode = encoding.encode_ordinary

    def run(document: Document) -> object:
        return tree(document.text), encode(document.text)

    return System(FLOOR_FAST, run, None)


def semantic_system(max_tokens: int, overlap_tokens: int) -> System | None:
    """semantic-text-splitter's markdown splitter, or ``None`` when the package is not installed."""
    try:
        from semantic_text_splitter import MarkdownSplitter
    except ImportError:
        return None
    splitter = MarkdownSplitter.from_tiktoken_model(SEMANTIC_MODEL, max_tokens, overlap=overlap_tokens, trim=False)
    chunk_indices = splitter.chunk_indices
    unit = documented_offset_unit(MarkdownSplitter.chunk_indices.__doc__ or "")
    to_span = span_from_byte_offset if unit == "byte" else span_from_char_offset

    def run(document: Document) -> object:
        return chunk_indices(document.text)

    def collect(document: Document) -> DocumentOutput:
        text = document.text
        encoded = text.encode("utf-8") if unit == "byte" else b""
        return DocumentOutput([to_span(text, encoded, offset, chunk) for offset, chunk in chunk_indices(text)])

    notes = {"offset_unit_documented": unit, "offset_unit_used": unit or "character"}
    return System(SEMANTIC, run, collect, notes)


def documented_offset_unit(docstring: str) -> str | None:
    """``"character"`` or ``"byte"``, as ``chunk_indices``' documentation states it; ``None`` if it does not."""
    lowered = docstring.lower()
    if "character offset" in lowered:
        return "character"
    if "byte offset" in lowered:
        return "byte"
    return None


def span_from_char_offset(text: str, encoded: bytes, offset: int, chunk: str) -> Span:
    return Span(offset, offset + len(chunk), chunk)


def span_from_byte_offset(text: str, encoded: bytes, offset: int, chunk: str) -> Span:
    start = len(encoded[:offset].decode("utf-8", "replace"))
    return Span(start, start + len(chunk), chunk)


@dataclass(frozen=True)
class OffsetUnitCheck:
    """How semantic-text-splitter's offsets line up with the text, on chunks of non-ASCII documents."""

    chunks_checked: int
    match_as_characters: int
    match_as_bytes: int


def check_offset_unit(system: System, documents: Sequence[Document]) -> OffsetUnitCheck:
    """Compare each raw ``chunk_indices`` offset with the text, read as characters and as bytes."""
    checked = as_characters = as_bytes = 0
    for document in documents:
        text = document.text
        if text.isascii():
            continue  # both readings agree; nothing to learn
        encoded = text.encode("utf-8")
        for offset, chunk in cast("list[tuple[int, str]]", system.run(document)):
            checked += 1
            as_characters += text[offset : offset + len(chunk)] == chunk
            chunk_bytes = chunk.encode("utf-8")
            as_bytes += encoded[offset : offset + len(chunk_bytes)] == chunk_bytes
    return OffsetUnitCheck(checked, as_characters, as_bytes)


# --------------------------------------------------------------------------------------------- timing


def rotated(items: Sequence[System], round_index: int) -> list[System]:
    if not items:
        return []
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def time_pass(system: System, documents: Sequence[Document]) -> float:
    """Seconds for one pass of ``system`` over every document."""
    run = system.run
    gc.collect()
    start = time.perf_counter()
    for document in documents:
        run(document)
    return time.perf_counter() - start


def warm_up(systems: Iterable[System], documents: Sequence[Document]) -> None:
    """One untimed call per system on the largest document: lazy tables and caches are built here."""
    largest = max(documents, key=lambda document: document.size_bytes)
    for system in systems:
        system.run(largest)


def measure(
    systems: Sequence[System],
    documents: Sequence[Document],
    runs: int,
    lead: System | None = None,
    label: str = "round",
) -> dict[str, list[float]]:
    """Per-round seconds of each system, the order rotated every round; ``lead``, if given, runs first in
    every round (the strategies section's floor, timed once per round beside all of them)."""
    leading = [lead] if lead is not None else []
    seconds: dict[str, list[float]] = {system.name: [] for system in [*leading, *systems]}
    for round_index in range(runs):
        order = [*leading, *rotated(systems, round_index)]
        for system in order:
            seconds[system.name].append(time_pass(system, documents))
        summary = ", ".join(f"{system.name} {seconds[system.name][-1]:.2f} s" for system in order)
        print(f"{label} {round_index + 1}/{runs}: {summary}", file=sys.stderr, flush=True)
    return seconds


# -------------------------------------------------------------------------------------------- quality


@dataclass(frozen=True, slots=True)
class BlockRange:
    kind: str
    start: int
    end: int
    """Past the block's last character that is not whitespace."""


@dataclass(frozen=True)
class FittingBlocks:
    """Per document, the fences/tables and the list items that fit within ``max_tokens`` on their own."""

    fences_and_tables: dict[str, list[BlockRange]]
    list_items: dict[str, list[BlockRange]]

    def total(self, which: str) -> int:
        return sum(len(blocks) for blocks in getattr(self, which).values())


def block_content(text: str, block: Block) -> BlockRange:
    """The block's range with its trailing whitespace left out."""
    stripped = text[block.start_char : block.end_char].rstrip()
    return BlockRange(block.kind, block.start_char, block.start_char + len(stripped))


def fitting_blocks(documents: Sequence[Document], encoding: tiktoken.Encoding, max_tokens: int) -> FittingBlocks:
    fences_and_tables: dict[str, list[BlockRange]] = {}
    list_items: dict[str, list[BlockRange]] = {}
    for document in documents:
        text = document.text
        fences_and_tables[document.doc_id] = []
        list_items[document.doc_id] = []
        for block in parse_markdown(text).blocks:
            if block.kind in FENCE_OR_TABLE:
                target = fences_and_tables[document.doc_id]
            elif block.kind == LIST_ITEM:
                target = list_items[document.doc_id]
            else:
                continue
            content = block_content(text, block)
            if content.end > content.start and token_count(encoding, text, content) <= max_tokens:
                target.append(content)
    return FittingBlocks(fences_and_tables, list_items)


@dataclass(frozen=True)
class DocumentMarkup:
    """Per document, the heading lines and the front matter (``(start, end)`` ascending) and whether the
    document has text besides them: what a fragment chunk consists of."""

    ranges: dict[str, list[tuple[int, int]]]
    front_matter_end: dict[str, int]
    has_other_text: dict[str, bool]


def document_markup(documents: Sequence[Document]) -> DocumentMarkup:
    ranges: dict[str, list[tuple[int, int]]] = {}
    front_matter_end: dict[str, int] = {}
    has_other_text: dict[str, bool] = {}
    for document in documents:
        parsed = parse_markdown(document.text)
        end = parsed.front_matter.end_char if parsed.front_matter is not None else 0
        found = ([(0, end)] if end else []) + [(heading.start_char, heading.end_char) for heading in parsed.headings]
        ranges[document.doc_id] = found
        front_matter_end[document.doc_id] = end
        has_other_text[document.doc_id] = fragment_kind(document.text, 0, len(document.text), found, end) == "text"
    return DocumentMarkup(ranges, front_matter_end, has_other_text)


_NON_SPACE = re.compile(r"\S")


def fragment_kind(text: str, start: int, end: int, ranges: Sequence[tuple[int, int]], front_matter_end: int) -> str:
    """``"heading"`` (heading lines, maybe with front matter), ``"front matter"``, ``"blank"`` or ``"text"``:
    what ``text[start:end]`` holds besides whitespace."""
    starts = [low for low, _ in ranges]
    seen_heading = seen_front_matter = False
    position = start
    while True:
        match = _NON_SPACE.search(text, position, end)
        if match is None:
            break
        position = match.start()
        slot = bisect_right(starts, position) - 1
        if slot < 0 or position >= ranges[slot][1]:
            return "text"
        if ranges[slot][1] == front_matter_end and ranges[slot][0] == 0:
            seen_front_matter = True
        else:
            seen_heading = True
        position = ranges[slot][1]
    if seen_heading:
        return "heading"
    return "front matter" if seen_front_matter else "blank"


def oversized_blocks(
    documents: Sequence[Document], encoding: tiktoken.Encoding, max_tokens: int, kinds: frozenset[str]
) -> dict[str, list[BlockRange]]:
    """Per document, the blocks of ``kinds`` over ``max_tokens`` on their own: a strategy that declares
    them as its ``soft_limit_kinds`` may give each a chunk over the limit."""
    found: dict[str, list[BlockRange]] = {}
    for document in documents:
        text = document.text
        contents = (block_content(text, block) for block in parse_markdown(text).blocks if block.kind in kinds)
        found[document.doc_id] = [block for block in contents if token_count(encoding, text, block) > max_tokens]
    return found


def token_count(encoding: tiktoken.Encoding, text: str, block: BlockRange) -> int:
    return len(encoding.encode_ordinary(text[block.start : block.end]))


def is_soft_limit_chunk(
    text: str, span: Span, units: Sequence[BlockRange], encoding: tiktoken.Encoding, max_tokens: int
) -> bool:
    """Whether a chunk over the limit is a declared soft-limit unit: it holds one of ``units`` (each over
    the limit on its own) and the rest of the chunk, around that unit, is within the limit."""
    for unit in units:
        if span.start <= unit.start and unit.end <= span.end:
            rest = text[span.start : unit.start] + text[unit.end : span.end]
            if len(encoding.encode_ordinary(rest)) <= max_tokens:
                return True
    return False


@dataclass
class Quality:
    documents: int = 0
    chunks: int = 0
    over_limit: int = 0
    soft_limit_chunks: int | None = None
    """Chunks over the limit that are a declared soft-limit unit (not in ``over_limit``); ``None`` when the
    system declares none."""
    fences_tables_split: int = 0
    list_items_split: int = 0
    characters: int = 0
    characters_lost: int = 0
    overlapping_chunks: int = 0
    """Chunks that start inside the chunk before them (the overlap of a split)."""
    overlap_starts_mid_sentence: int = 0
    """Of those, the ones that start neither at a line start nor after a sentence's end."""
    offsets_exact: int = 0
    chunk_tokens: int = 0
    """Exact cl100k_base tokens of every chunk, summed (for the mean)."""
    small_chunks: int = 0
    """Chunks under SMALL_CHUNK_TOKENS exact tokens."""
    heading_only_chunks: int = 0
    """Chunks whose text is heading lines only (front matter and whitespace allowed), in documents that have
    more than headings and front matter."""
    front_matter_only_chunks: int = 0
    """Chunks whose text is front matter only (whitespace allowed), in documents that have more."""
    documents_reconstructed: int | None = None
    token_counts_exact: int | None = None
    examples: dict[str, list[str]] = field(default_factory=dict)

    def example(self, problem: str, description: str) -> None:
        found = self.examples.setdefault(problem, [])
        if len(found) < MAX_EXAMPLES:
            found.append(description)


def holds_whole(spans: Sequence[Span]) -> Callable[[int, int], bool]:
    """A test: does some span hold ``[start, end)`` entirely?"""
    ordered = sorted((span.start, span.end) for span in spans)
    starts = [start for start, _ in ordered]
    reach = list(accumulate((end for _, end in ordered), max))  # furthest end among spans starting so far

    def test(start: int, end: int) -> bool:
        slot = bisect_right(starts, start) - 1
        return slot >= 0 and reach[slot] >= end

    return test


# The end of a sentence just before a position: ., ! or ? with optional closing quotes or brackets, then
# whitespace (a CJK full stop needs none).
_SENTENCE_ENDS_HERE = re.compile(r"(?:[.!?][\"'\u2019\u201d)\]]*\s+|[\u3002\uff01\uff1f][\"'\u2019\u201d)\]]*\s*)$")


def starts_mid_sentence(text: str, position: int) -> bool:
    """A chunk starting at ``position`` begins inside a sentence: not at a line start, not after a
    sentence's end."""
    if position == 0 or text[position - 1] in "\n\r":
        return False
    return not _SENTENCE_ENDS_HERE.search(text, max(position - 16, 0), position)


def uncovered(length: int, spans: Iterable[Span]) -> int:
    """Characters of ``[0, length)`` in no span."""
    covered = 0
    reached = 0
    for start, end in sorted((max(span.start, 0), min(span.end, length)) for span in spans):
        if end > reached:
            covered += end - max(start, reached)
            reached = end
    return length - covered


def check_document(
    quality: Quality,
    document: Document,
    output: DocumentOutput,
    blocks: FittingBlocks,
    encoding: tiktoken.Encoding,
    max_tokens: int,
    soft_limit_units: Sequence[BlockRange] | None = None,
    markup: DocumentMarkup | None = None,
) -> None:
    """Add one document's figures to ``quality``; ``soft_limit_units`` are the document's blocks a chunk
    may exceed the limit for (see :func:`is_soft_limit_chunk`), ``None`` when the system declares none;
    ``markup``, the documents' headings and front matter for the fragment figures."""
    text = document.text
    quality.documents += 1
    quality.chunks += len(output.spans)
    quality.characters += len(text)
    count_fragments = markup is not None and markup.has_other_text[document.doc_id]
    for index, span in enumerate(output.spans):
        exact = len(encoding.encode_ordinary(span.text))
        quality.chunk_tokens += exact
        quality.small_chunks += exact < SMALL_CHUNK_TOKENS
        if count_fragments:
            assert markup is not None
            kind = fragment_kind(
                text,
                max(span.start, 0),
                min(span.end, len(text)),
                markup.ranges[document.doc_id],
                markup.front_matter_end[document.doc_id],
            )
            if kind == "heading":
                quality.heading_only_chunks += 1
                quality.example("heading_only", f"{document.doc_id} chunk {index}: {span.text[:60]!r}")
            elif kind == "front matter":
                quality.front_matter_only_chunks += 1
                quality.example("front_matter_only", f"{document.doc_id} chunk {index}")
        if exact > max_tokens:
            if soft_limit_units and is_soft_limit_chunk(text, span, soft_limit_units, encoding, max_tokens):
                quality.soft_limit_chunks = (quality.soft_limit_chunks or 0) + 1
            else:
                quality.over_limit += 1
                quality.example(
                    "over_limit", f"{document.doc_id} chunk {index} [{span.start}:{span.end}]: {exact} tokens"
                )
        if text[span.start : span.end] == span.text:
            quality.offsets_exact += 1
        else:
            quality.example("offset_mismatch", f"{document.doc_id} chunk {index} at {span.start}")
        if span.reported_tokens is not None:
            quality.token_counts_exact = (quality.token_counts_exact or 0) + (span.reported_tokens == exact)
            if span.reported_tokens != exact:
                quality.example(
                    "token_count_mismatch",
                    f"{document.doc_id} chunk {index}: token_count {span.reported_tokens}, exact {exact}",
                )
    for previous, span in zip(output.spans, output.spans[1:]):
        if previous.start < span.start < previous.end:
            quality.overlapping_chunks += 1
            # Not an engine bug (a window may hold no sentence or line start), so no example is kept.
            quality.overlap_starts_mid_sentence += starts_mid_sentence(text, span.start)
    inside = holds_whole(output.spans)
    for problem, ranges in (
        ("fences_tables_split", blocks.fences_and_tables[document.doc_id]),
        ("list_items_split", blocks.list_items[document.doc_id]),
    ):
        for block in ranges:
            if not inside(block.start, block.end):
                setattr(quality, problem, getattr(quality, problem) + 1)
                quality.example(problem, f"{document.doc_id} {block.kind} [{block.start}:{block.end}]")
    lost = uncovered(len(text), output.spans)
    quality.characters_lost += lost
    if lost:
        quality.example("characters_lost", f"{document.doc_id}: {lost} characters")
    if output.reconstructs is not None:
        quality.documents_reconstructed = (quality.documents_reconstructed or 0) + output.reconstructs
        if not output.reconstructs:
            quality.example("reconstruct_mismatch", document.doc_id)


def assess(
    system: System,
    documents: Sequence[Document],
    blocks: FittingBlocks,
    encoding: tiktoken.Encoding,
    max_tokens: int,
    soft_limit_units: dict[str, list[BlockRange]] | None = None,
    markup: DocumentMarkup | None = None,
) -> Quality:
    """The quality figures of one untimed pass of ``system`` over the corpus; ``soft_limit_units`` per
    document for a system that declares soft-limit units (see :func:`oversized_blocks`)."""
    assert system.collect is not None
    quality = Quality(soft_limit_chunks=None if soft_limit_units is None else 0)
    for document in documents:
        units = None if soft_limit_units is None else soft_limit_units[document.doc_id]
        check_document(quality, document, system.collect(document), blocks, encoding, max_tokens, units, markup)
    return quality


# -------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SystemResult:
    name: str
    seconds: list[float]
    megabytes: float
    quality: Quality | None

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def mb_per_second(self) -> float:
        return self.megabytes / self.median_seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds_per_run": self.seconds,
            "median_seconds": self.median_seconds,
            "median_mb_per_second": self.mb_per_second,
            "quality": asdict(self.quality) if self.quality else None,
        }


def ratio(results: dict[str, SystemResult], numerator: str, denominator: str) -> float | None:
    """Throughput of ``numerator`` over that of ``denominator`` (above 1: ``numerator`` is faster)."""
    if numerator not in results or denominator not in results:
        return None
    return results[numerator].mb_per_second / results[denominator].mb_per_second


def percent_exact(part: int, whole: int) -> str:
    """A percentage that never rounds up to 100.00% unless every item is exact."""
    if whole == 0:
        return "n/a"
    value = math.floor(10000 * part / whole) / 100
    return f"{value:.2f}%"


def of(part: int, whole: int) -> str:
    return f"{part} of {whole}"


def small_share(quality: Quality) -> str:
    """The share of chunks under SMALL_CHUNK_TOKENS tokens, in percent."""
    return "n/a" if not quality.chunks else f"{100 * quality.small_chunks / quality.chunks:.2f}%"


def mean_tokens(quality: Quality) -> str:
    return "n/a" if not quality.chunks else f"{quality.chunk_tokens / quality.chunks:.1f}"


def table_rows(
    results: dict[str, SystemResult], blocks: FittingBlocks, max_tokens: int
) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the results table: one row per figure, one column per system."""
    names = list(results)
    fences = blocks.total("fences_and_tables")
    items = blocks.total("list_items")

    def row(label: str, cell: Callable[[SystemResult], str], quality_only: bool = True) -> list[str]:
        cells = []
        for name in names:
            result = results[name]
            cells.append("n/a" if quality_only and result.quality is None else cell(result))
        return [label, *cells]

    def quality(result: SystemResult) -> Quality:
        assert result.quality is not None
        return result.quality

    def chunkline_only(
        value: Callable[[Quality], int | None], whole: Callable[[Quality], int]
    ) -> Callable[[SystemResult], str]:
        def cell(result: SystemResult) -> str:
            found = value(quality(result))
            return "n/a" if found is None else of(found, whole(quality(result)))

        return cell

    def speed_ratio(result: SystemResult) -> str:
        value = ratio(results, CHUNKLINE, result.name)
        return "n/a" if value is None else f"{value:.2f}x"

    rows = [
        row("throughput, MB/s (median)", lambda r: f"{r.mb_per_second:.2f}", quality_only=False),
        row("seconds per corpus pass (median)", lambda r: f"{r.median_seconds:.3f}", quality_only=False),
        row("chunkline throughput / this", speed_ratio, quality_only=False),
        row("chunks", lambda r: str(quality(r).chunks)),
        row(f"chunks over {max_tokens} tokens", lambda r: str(quality(r).over_limit)),
        row(f"fences/tables that fit but were split (of {fences})", lambda r: str(quality(r).fences_tables_split)),
        row(f"list items that fit but were split (of {items})", lambda r: str(quality(r).list_items_split)),
        row("heading-only chunks", lambda r: str(quality(r).heading_only_chunks)),
        row("front-matter-only chunks", lambda r: str(quality(r).front_matter_only_chunks)),
        row(f"chunks under {SMALL_CHUNK_TOKENS} tokens", lambda r: small_share(quality(r))),
        row("mean tokens per chunk", lambda r: mean_tokens(quality(r))),
        row("characters lost", lambda r: str(quality(r).characters_lost)),
        row(
            "overlapping chunks that start mid-sentence",
            lambda r: of(quality(r).overlap_starts_mid_sentence, quality(r).overlapping_chunks),
        ),
        row(
            "exact offsets (text[start:end] == chunk)",
            lambda r: percent_exact(quality(r).offsets_exact, quality(r).chunks),
        ),
        row(
            "reconstruct(chunks) == text (documents)",
            chunkline_only(lambda q: q.documents_reconstructed, lambda q: q.documents),
        ),
        row("token_count == exact count (chunks)", chunkline_only(lambda q: q.token_counts_exact, lambda q: q.chunks)),
    ]
    return ["figure", *names], rows


def aligned_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns aligned; a row shorter than the header ends in a cell that runs on over the columns left."""
    full = [cells for cells in [header, *rows] if len(cells) == len(header)]
    widths = [max(len(line[column]) for line in full) for column in range(len(header))]

    def line(cells: list[str]) -> str:
        aligned = [cells[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))]
        if 1 < len(cells) < len(header):
            aligned[-1] = cells[-1]
        return "  ".join(aligned).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(cells) for cells in rows)])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    separator = "| --- |" + " ---: |" * (len(header) - 1)
    return "\n".join([line(header), separator, *(line(cells) for cells in rows)])


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("chunkline", "tiktoken", "markdown-it-py", "markdown-it-pyrs", "semantic-text-splitter"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def corpus_summary(corpus: Corpus, args: argparse.Namespace, found_versions: dict[str, str]) -> str:
    folders = ", ".join(str(folder) for folder in corpus.folders)
    version_text = "  ".join(f"{name} {version}" for name, version in found_versions.items())
    return "\n".join(
        [
            f"corpus: {folders}",
            f"  {len(corpus.documents)} files, {corpus.megabytes:.2f} MB (1 MB = 1e6 bytes of UTF-8 input)",
            f"  runs: {args.runs} (order rotated each round; median reported)  "
            f"max_tokens: {args.max_tokens}  overlap_tokens: {args.overlap_tokens}  "
            f"min_tokens: {'default' if args.min_tokens is None else args.min_tokens}  tokenizer: {ENCODING_NAME}",
            f"versions: {version_text}",
        ]
    )


def ratio_lines(results: dict[str, SystemResult]) -> list[str]:
    lines = []
    others = (
        (FLOOR, f"{REFERENCE_PARSER} block parse + one tiktoken pass"),
        (FLOOR_FAST, f"{FAST_PARSER} block parse + one tiktoken pass"),
        (SEMANTIC, "Rust markdown splitter"),
    )
    for engine in (CHUNKLINE, CHUNKLINE_REFERENCE):
        for other, meaning in others:
            value = ratio(results, engine, other)
            if value is not None:
                lines.append(
                    f"{engine} / {other}: {value:.2f}x the throughput ({meaning}; "
                    f"{engine} takes {1 / value:.2f}x its time)"
                )
    return lines


def problem_lines(name: str, quality: Quality | None, exempt: Iterable[str] = ()) -> list[str]:
    """A chunkline strategy's broken promises, with where to reproduce them (each one is an engine bug);
    ``exempt`` problems are not promises this strategy makes."""
    skipped = frozenset(exempt).union(FRAGMENT_EXAMPLES)
    recorded = quality.examples if quality is not None else {}
    found = {problem: examples for problem, examples in recorded.items() if problem not in skipped}
    if not found:
        return []
    lines = [f"{name} problems (engine bugs; first examples):"]
    for problem, examples in found.items():
        lines.extend(f"  {problem}: {example}" for example in examples)
    return lines


# ----------------------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class StrategyResult:
    strategy: Strategy
    params: Any
    """The parameters benchmarked (``Strategy.default_params()``); ``None`` when the config is invalid."""
    result: SystemResult | None
    """Timing and quality; ``None`` when the benchmark's settings are not a valid config for the strategy."""
    config_error: str | None = None
    """The ConfigError message in that case."""


@dataclass(frozen=True)
class StrategySection:
    floor: SystemResult
    """The floor, timed first in every round of this section."""
    entries: list[StrategyResult]

    def over_floor(self, entry: StrategyResult) -> float | None:
        """The strategy's throughput over the floor's, both medians of the same rounds."""
        if entry.result is None:
            return None
        return entry.result.mb_per_second / self.floor.mb_per_second

    def below_target(self) -> list[StrategyResult]:
        return [
            entry for entry in self.entries if (share := self.over_floor(entry)) is not None and share < FLOOR_TARGET
        ]


def strategy_config(
    strategy: Strategy, max_tokens: int, overlap_tokens: int, min_tokens: int | None = None
) -> ChunkConfig | str:
    """The strategy with its default parameters at the benchmark's settings, or why that is no valid config."""
    try:
        params = strategy.default_params()
    except TypeError:  # required parameters and no example: ChunkConfig names them
        params = None
    try:
        return ChunkConfig(
            strategy=strategy.name,
            max_tokens=max_tokens,
            overlap_tokens=overlap_tokens,
            min_tokens=min_tokens,
            params=params,
        )
    except ConfigError as error:
        return str(error)


def run_strategies(
    names: Sequence[str],
    corpus: Corpus,
    encoding: tiktoken.Encoding,
    blocks: FittingBlocks,
    max_tokens: int,
    overlap_tokens: int,
    runs: int,
    min_tokens: int | None = None,
    markup: DocumentMarkup | None = None,
) -> StrategySection:
    """Time each strategy over the corpus beside the floor, then check its output (untimed)."""
    documents = corpus.documents
    strategies = [get_strategy(name) for name in names]
    configs = {
        strategy.name: strategy_config(strategy, max_tokens, overlap_tokens, min_tokens) for strategy in strategies
    }
    systems = {
        name: chunkline_system(config, name) for name, config in configs.items() if isinstance(config, ChunkConfig)
    }
    floor = floor_system(encoding)
    warm_up([floor, *systems.values()], documents)
    seconds = measure(list(systems.values()), documents, runs, lead=floor, label="strategies round")

    print("checking strategy quality (untimed)...", file=sys.stderr, flush=True)
    soft_limit_units: dict[frozenset[str], dict[str, list[BlockRange]]] = {}
    entries: list[StrategyResult] = []
    for strategy in strategies:
        config = configs[strategy.name]
        if isinstance(config, str):
            entries.append(StrategyResult(strategy, None, None, config))
            continue
        kinds = strategy.soft_limit_kinds
        if kinds and kinds not in soft_limit_units:
            soft_limit_units[kinds] = oversized_blocks(documents, encoding, max_tokens, kinds)
        units = soft_limit_units[kinds] if kinds else None
        quality = assess(systems[strategy.name], documents, blocks, encoding, max_tokens, units, markup)
        result = SystemResult(strategy.name, seconds[strategy.name], corpus.megabytes, quality)
        entries.append(StrategyResult(strategy, config.params, result))
    return StrategySection(SystemResult(FLOOR, seconds[FLOOR], corpus.megabytes, None), entries)


def strategy_rows(section: StrategySection, max_tokens: int) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the strategies table: one row per strategy (the floor first), one column per figure
    (:func:`strategy_legend` spells the columns out). A strategy whose config is invalid gets one cell after
    its name: the ConfigError message."""
    header = [
        "strategy",
        "MB/s",
        "/ floor",
        "chunks",
        "mean tok",
        f"<{SMALL_CHUNK_TOKENS} tok",
        "heading-only",
        "fm-only",
        f"over {max_tokens}",
        "soft-limit",
        "fit but split",
        "chars lost",
        "exact offsets",
        "reconstruct fails",
    ]
    rows = [[FLOOR, f"{section.floor.mb_per_second:.2f}", "1.00x", *(["n/a"] * (len(header) - 3))]]
    for entry in section.entries:
        strategy, result = entry.strategy, entry.result
        if result is None or result.quality is None:
            rows.append([strategy.name, f"invalid config: {entry.config_error}"])
            continue
        quality = result.quality
        rows.append(
            [
                strategy.name,
                f"{result.mb_per_second:.2f}",
                f"{section.over_floor(entry):.2f}x",
                str(quality.chunks),
                mean_tokens(quality),
                small_share(quality),
                str(quality.heading_only_chunks),
                str(quality.front_matter_only_chunks),
                str(quality.over_limit),
                "n/a" if quality.soft_limit_chunks is None else str(quality.soft_limit_chunks),
                (
                    f"{quality.fences_tables_split} + {quality.list_items_split}"
                    if strategy.keeps_blocks_whole
                    else "n/a (cuts by its unit)"
                ),
                str(quality.characters_lost),
                percent_exact(quality.offsets_exact, quality.chunks),
                str(quality.documents - (quality.documents_reconstructed or 0)),
            ]
        )
    return header, rows


def strategy_legend(blocks: FittingBlocks, documents: int, max_tokens: int) -> list[str]:
    return [
        "MB/s: median throughput; / floor: that over the floor's median from the same rounds",
        f"mean tok: mean exact cl100k_base tokens per chunk; <{SMALL_CHUNK_TOKENS} tok: share of chunks under "
        f"{SMALL_CHUNK_TOKENS} tokens; heading-only / fm-only: chunks of heading lines only (front matter "
        "allowed) / of front matter only, in documents that have other text",
        f"over {max_tokens}: chunks over {max_tokens} tokens that are not a declared soft-limit unit; soft-limit: "
        "chunks over it that are one (a block of the strategy's soft_limit_kinds, itself over the limit, with "
        "the rest of the chunk within it); n/a: the strategy declares none",
        f"fit but split: fences/tables (of {blocks.total('fences_and_tables')}) + list items "
        f"(of {blocks.total('list_items')}) that fit within {max_tokens} tokens but no chunk holds whole; "
        "checked for strategies that keep blocks whole",
        f"chars lost: characters in no chunk; exact offsets: chunks whose text is text[start:end]; "
        f"reconstruct fails: documents (of {documents}) where reconstruct(chunks) != text",
    ]


def strategy_section_lines(
    section: StrategySection, blocks: FittingBlocks, documents: int, max_tokens: int
) -> list[str]:
    header, rows = strategy_rows(section, max_tokens)
    below = section.below_target()
    if below:
        shortfalls = (f"{entry.strategy.name} ({section.over_floor(entry):.2f}x)" for entry in below)
        verdict = "below it: " + ", ".join(shortfalls)
    elif any(entry.result is not None for entry in section.entries):
        verdict = "every strategy measured meets it"
    else:
        verdict = "no strategy could be measured"
    lines = [
        "strategies: each with get_strategy(name).default_params(), timed beside the floor (the floor first in "
        "every round, the strategies in an order rotated each round)",
        "",
        aligned_table(header, rows),
        "",
        *strategy_legend(blocks, documents, max_tokens),
        f"target: at least {FLOOR_TARGET:.2f}x the floor's throughput (at most {1 / FLOOR_TARGET:.0f}x its time); "
        + verdict,
    ]
    for entry in section.entries:
        exempt = () if entry.strategy.keeps_blocks_whole else SPLIT_PROBLEMS
        problems = problem_lines(entry.strategy.name, entry.result.quality if entry.result else None, exempt)
        if problems:
            lines += ["", *problems]
    return [*lines, "", "Markdown (strategies):", "", markdown_table(header, rows)]


def strategies_json(section: StrategySection) -> dict[str, Any]:
    def entry_json(entry: StrategyResult) -> dict[str, Any]:
        over_floor = section.over_floor(entry)
        timing_and_quality = (
            entry.result.to_json()
            if entry.result is not None
            else dict.fromkeys(("seconds_per_run", "median_seconds", "median_mb_per_second", "quality"))
        )
        return {
            "keeps_blocks_whole": entry.strategy.keeps_blocks_whole,
            "soft_limit_kinds": sorted(entry.strategy.soft_limit_kinds),
            "params": None if entry.params is None else asdict(entry.params),
            "config_error": entry.config_error,
            **timing_and_quality,
            "over_floor": over_floor,
            "meets_target": None if over_floor is None else over_floor >= FLOOR_TARGET,
        }

    return {
        "target_over_floor": FLOOR_TARGET,
        "floor": section.floor.to_json(),
        "strategies": {entry.strategy.name: entry_json(entry) for entry in section.entries},
    }


# ----------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folders",
        nargs="*",
        type=Path,
        metavar="FOLDER",
        help=f"folders of markdown files (default: {DEFAULT_CORPUS.resolve()})",
    )
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--overlap-tokens", type=int, default=50)
    parser.add_argument(
        "--min-tokens",
        type=int,
        default=None,
        help="chunkline's chunking.min_tokens (default: the config's default; 0 turns fragment merging off)",
    )
    parser.add_argument("--runs", type=int, default=5, help="timed passes per system (default: 5)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every figure to this JSON file")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--encode-ahead",
        action="store_true",
        help="only time chunk_markdown with and without encoding ahead on a second thread, by document size",
    )
    only.add_argument(
        "--compare-parsers",
        action="store_true",
        help=f"only check that {DEFAULT_PARSER} (the default) and {REFERENCE_PARSER} give the same chunks for "
        "every file (exit status 1 if any differ); nothing is timed",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--strategies",
        type=comma_separated,
        metavar="NAME,...",
        help="strategies of the second section (default: every registered one)",
    )
    which.add_argument("--no-strategies", action="store_true", help="skip the strategies section")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not 0 <= args.overlap_tokens < args.max_tokens:
        parser.error("--overlap-tokens must be >= 0 and less than --max-tokens")
    if args.min_tokens is not None and not 0 <= args.min_tokens < args.max_tokens:
        parser.error("--min-tokens must be >= 0 and less than --max-tokens")
    registered = available_strategies()
    if args.no_strategies:
        args.strategies = []
    elif args.strategies is None:
        args.strategies = registered
    else:
        unknown = [name for name in args.strategies if name not in registered]
        if unknown:
            parser.error(f"unknown strategy {unknown[0]!r}; registered: {', '.join(registered)}")
    if not args.folders:
        default = DEFAULT_CORPUS.resolve()
        if not default.is_dir():
            parser.error(
                f"the sample corpus is not at {default}; "
                "pass a folder of markdown files: python benchmarks/bench_chunking.py PATH/TO/MARKDOWN"
            )
        args.folders = [default]
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder; pass a folder of markdown files")
    return args


def comma_separated(value: str) -> list[str]:
    names = list(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    if not names:
        raise argparse.ArgumentTypeError("name at least one strategy, e.g. --strategies headings,tokens")
    return names


def build_systems(args: argparse.Namespace, encoding: tiktoken.Encoding) -> list[System]:
    config = bench_config(args)
    reference_config = replace(config, parser=REFERENCE_PARSER)
    systems = [
        chunkline_system(config),
        chunkline_system(reference_config, CHUNKLINE_REFERENCE),
        floor_system(encoding),
        fast_floor_system(encoding),
    ]
    semantic = semantic_system(args.max_tokens, args.overlap_tokens)
    if semantic is None:
        print(
            "semantic-text-splitter is not installed (the bench extra: pip install -e '.[bench]'); "
            "skipping its column.",
            file=sys.stderr,
        )
    else:
        systems.append(semantic)
    return systems


def bench_config(args: argparse.Namespace) -> ChunkConfig:
    """chunkline's config for the main section (the default parser)."""
    return ChunkConfig(max_tokens=args.max_tokens, overlap_tokens=args.overlap_tokens, min_tokens=args.min_tokens)


@dataclass(frozen=True)
class ParserComparison:
    """Whether the default parser and the reference give the same chunks, file by file."""

    files: int
    identical: int
    left_to_reference: int
    """Files the fast parser leaves to the reference (see chunkline.pyrs_blocks), so identical by construction."""
    differing: list[str]

    def summary(self) -> str:
        verdict = (
            "identical"
            if not self.differing
            else f"DIFFERENT in {len(self.differing)}: " + ", ".join(self.differing[:MAX_EXAMPLES])
        )
        return (
            f"chunks with parser {DEFAULT_PARSER} (default) vs {REFERENCE_PARSER} (reference): {verdict}; "
            f"{self.identical} of {self.files} files identical ({self.left_to_reference} of them parsed by the "
            f"reference because the fast parser leaves their input to it)"
        )


def compare_parsers(documents: Sequence[Document], config: ChunkConfig) -> ParserComparison:
    """Chunk every document with the default parser and with the reference; the chunks must be equal."""
    reference_config = replace(config, parser=REFERENCE_PARSER)
    identical = left = 0
    differing: list[str] = []
    for document in documents:
        fast = chunkline.chunk_markdown(document.text, config, doc_id=document.doc_id)
        reference = chunkline.chunk_markdown(document.text, reference_config, doc_id=document.doc_id)
        if fast == reference:
            identical += 1
        else:
            differing.append(document.doc_id)
        left += parse_markdown(document.text, config.parser).parser != config.parser
    return ParserComparison(len(documents), identical, left, differing)


ENCODE_AHEAD_SIZES = (8_000, 32_000, 128_000, 512_000)
"""Document sizes (characters) of the ``--encode-ahead`` comparison."""
ENCODE_AHEAD_CHARS = 4_000_000
"""Characters of the corpus's text the ``--encode-ahead`` comparison cuts into documents."""


def compare_encode_ahead(documents: Sequence[Document], config: ChunkConfig, runs: int) -> list[str]:
    """Seconds to chunk the corpus's text cut into documents of each of :data:`ENCODE_AHEAD_SIZES`, with every
    document's tokens encoded on the second thread and with none, in the same rotated rounds."""
    from chunkline import encode_ahead

    text = "\n\n".join(document.text for document in documents)[:ENCODE_AHEAD_CHARS]
    lines = [f"encoding ahead on a second thread, {len(text) / 1e6:.1f} M characters of the corpus, medians of {runs}:"]
    threshold = encode_ahead.MIN_CHARS_AHEAD
    encode_ahead.MIN_CHARS_AHEAD = 0
    try:
        for size in ENCODE_AHEAD_SIZES:
            pieces = [
                Document(f"piece-{start}", text[start : start + size], len(text[start : start + size].encode()))
                for start in range(0, len(text), size)
            ]
            systems = [
                System(
                    name,
                    lambda document, ahead=ahead: chunkline.chunk_markdown(document.text, config, encode_ahead=ahead),
                    None,
                )
                for name, ahead in (("ahead", True), ("one thread", False))
            ]
            warm_up(systems, pieces)
            seconds = measure(systems, pieces, runs, label=f"{size // 1000} KB round")
            ahead, alone = (statistics.median(seconds[system.name]) for system in systems)
            lines.append(
                f"  {size // 1000:>4} KB x {len(pieces):>4}: one thread {alone:.3f} s, ahead {ahead:.3f} s, "
                f"{alone / ahead:.2f}x"
            )
    finally:
        encode_ahead.MIN_CHARS_AHEAD = threshold
    lines.append(f"  (chunk_markdown encodes ahead from {threshold:,} characters, on a process with 2+ cores)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    corpus = load_corpus(args.folders)
    if not corpus.documents:
        raise SystemExit(f"error: no *.md or *.markdown files under {', '.join(map(str, args.folders))}")
    documents = corpus.documents
    if args.compare_parsers:
        comparison = compare_parsers(documents, bench_config(args))
        print(comparison.summary())
        return 1 if comparison.differing else 0
    if args.encode_ahead:
        print("\n".join(compare_encode_ahead(documents, bench_config(args), args.runs)))
        return 0
    encoding = load_encoding(ENCODING_NAME)
    systems = build_systems(args, encoding)

    warm_up(systems, documents)
    seconds = measure(systems, documents, args.runs)

    print("checking quality (untimed)...", file=sys.stderr, flush=True)
    blocks = fitting_blocks(documents, encoding, args.max_tokens)
    markup = document_markup(documents)
    results: dict[str, SystemResult] = {}
    for system in systems:
        quality = (
            assess(system, documents, blocks, encoding, args.max_tokens, markup=markup) if system.collect else None
        )
        results[system.name] = SystemResult(system.name, seconds[system.name], corpus.megabytes, quality)
    offset_check = next((check_offset_unit(system, documents) for system in systems if system.name == SEMANTIC), None)

    found_versions = versions()
    header, rows = table_rows(results, blocks, args.max_tokens)
    output = [corpus_summary(corpus, args, found_versions), "", aligned_table(header, rows), ""]
    output += ratio_lines(results)
    if offset_check is not None:
        notes = next(system.notes for system in systems if system.name == SEMANTIC)
        output.append(
            f"semantic-text-splitter chunk_indices offsets: {notes['offset_unit_used']} offsets "
            f"(documented: {notes['offset_unit_documented'] or 'not stated'}); on {offset_check.chunks_checked} "
            f"chunks of non-ASCII documents, {offset_check.match_as_characters} match as character offsets, "
            f"{offset_check.match_as_bytes} as byte offsets"
        )
    problems = problem_lines(CHUNKLINE, results[CHUNKLINE].quality)
    if problems:
        output += ["", *problems]
    print("comparing the parsers' chunks (untimed)...", file=sys.stderr, flush=True)
    comparison = compare_parsers(documents, bench_config(args))
    output += ["", comparison.summary()]
    output += ["", "Markdown:", "", markdown_table(header, rows)]
    print("\n".join(output), flush=True)

    section = None
    if args.strategies:
        section = run_strategies(
            args.strategies,
            corpus,
            encoding,
            blocks,
            args.max_tokens,
            args.overlap_tokens,
            args.runs,
            args.min_tokens,
            markup,
        )
        print("\n".join(["", *strategy_section_lines(section, blocks, len(documents), args.max_tokens)]))

    if args.json:
        report = {
            "corpus": {
                "folders": [str(folder) for folder in corpus.folders],
                "files": len(documents),
                "bytes": corpus.total_bytes,
                "megabytes": corpus.megabytes,
                "fences_and_tables_that_fit": blocks.total("fences_and_tables"),
                "list_items_that_fit": blocks.total("list_items"),
            },
            "settings": {
                "runs": args.runs,
                "max_tokens": args.max_tokens,
                "overlap_tokens": args.overlap_tokens,
                "min_tokens": args.min_tokens,
                "tokenizer": ENCODING_NAME,
            },
            "versions": found_versions,
            "parser_comparison": asdict(comparison),
            "systems": {name: result.to_json() for name, result in results.items()},
            "ratios": {
                "chunkline_over_floor": ratio(results, CHUNKLINE, FLOOR),
                "chunkline_over_fast_parser_floor": ratio(results, CHUNKLINE, FLOOR_FAST),
                "reference_parser_chunkline_over_floor": ratio(results, CHUNKLINE_REFERENCE, FLOOR),
                "reference_parser_chunkline_over_fast_parser_floor": ratio(results, CHUNKLINE_REFERENCE, FLOOR_FAST),
                "chunkline_over_semantic_text_splitter": ratio(results, CHUNKLINE, SEMANTIC),
            },
            "semantic_text_splitter_offsets": (
                {**next(s.notes for s in systems if s.name == SEMANTIC), **asdict(offset_check)}
                if offset_check is not None
                else None
            ),
            "strategies": strategies_json(section) if section is not None else None,
        }
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
