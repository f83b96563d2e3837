"""Markdown structure from a CommonMark parse, with exact character ranges into the text the user gave.

A CommonMark parser (plus GFM tables) finds the blocks: markdown-it-pyrs by default (:data:`FAST_PARSER`,
through :mod:`chunkline.pyrs_blocks`), or markdown-it-py, the reference (:data:`REFERENCE_PARSER`), which
also parses every input the fast one leaves to it. Either gives block records (kind, first line, line after
the last, level, heading level and inline source) held equal by tests/test_parser_differential.py.
markdown-it-py's ``normalize`` rule rewrites ``\\r\\n``, ``\\r`` and NUL before parsing, and its token
``map`` counts the normalized text's lines; both rewrites keep the number of lines, so a block's range is
recovered exactly by looking its lines up in a :class:`~chunkline.text_index.TextIndex` of the original text.
A block's range therefore spans whole lines, from the start of its first line to the start of the line
after its last one (line break included).

Front matter (YAML between ``---`` lines, TOML between ``+++`` lines, at the very start of the document,
after an optional byte order mark) is recognized here, loaded safely into JSON-safe data with bounded work
(:mod:`chunkline.front_matter`), and hidden from the markdown parser so that nothing in it becomes a
heading. A fenced block that loads to something other than a mapping (``---`` then prose then ``---``) is
markdown, not front matter; one that cannot be loaded at all (a syntax error, a tag such as
``!!python/object`` that safe loading refuses, aliases that expand too far) is front matter with an
``error`` and no data. Its characters stay in the document: chunks and reconstruction still cover them.

Quotes and list items are parsed as containers down to :data:`MAX_CONTAINER_DEPTH` levels; what is nested
deeper is parsed with the leaf rules only (its paragraphs, fences, headings... but no further quotes or
lists), so that 5,000 nested quotes cost a bounded parse and a list nested past the limit still ends where
CommonMark ends it instead of swallowing the rest of the document.
"""

from __future__ import annotations

import functools
import re
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any, NamedTuple

from markdown_it import MarkdownIt
from markdown_it.parser_block import ParserBlock
from markdown_it.ruler import Ruler
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.token import Token

from chunkline.front_matter import FrontMatterError, NotAMapping, load_front_matter
from chunkline.patterns import DEFAULT_TIMEOUT_SECONDS, compile_pattern, finditer_within
from chunkline.pyrs_blocks import BlockRecord, block_records
from chunkline.text_index import TextIndex

__all__ = [
    "Block",
    "BlockKind",
    "DEFAULT_PARSER",
    "FAST_PARSER",
    "FrontMatter",
    "HeadingStack",
    "MAX_CONTAINER_DEPTH",
    "MarkdownDocument",
    "PARSERS",
    "REFERENCE_PARSER",
    "Section",
    "parse_markdown",
    "PROTECTED_KINDS",
]


class BlockKind:
    """Names of the block kinds chunkline reports (markdown-it token types, without ``_open``)."""

    HEADING = "heading"
    PARAGRAPH = "paragraph"
    FENCE = "fence"
    CODE_BLOCK = "code_block"
    TABLE = "table"
    BULLET_LIST = "bullet_list"
    ORDERED_LIST = "ordered_list"
    LIST_ITEM = "list_item"
    BLOCKQUOTE = "blockquote"
    HTML_BLOCK = "html_block"
    THEMATIC_BREAK = "hr"
    FRONT_MATTER = "front_matter"


_CODE_KINDS = frozenset({"fence", "code_block"})

#: Blocks that are never split when they fit within the token limit on their own.
PROTECTED_KINDS = frozenset(
    {BlockKind.FENCE, BlockKind.CODE_BLOCK, BlockKind.TABLE, BlockKind.LIST_ITEM, BlockKind.HTML_BLOCK}
)

#: The fast parser: markdown-it.rs through markdown-it-pyrs (:mod:`chunkline.pyrs_blocks`).
FAST_PARSER = "markdown-it-pyrs"
#: The reference parser: markdown-it-py, configured above. The fast parser's blocks are held equal to its
#: blocks (tests/test_parser_differential.py), and it parses what the fast parser leaves to it.
REFERENCE_PARSER = "markdown-it-py"
#: The parsers ``chunking.parser`` can name.
PARSERS = (FAST_PARSER, REFERENCE_PARSER)
DEFAULT_PARSER = FAST_PARSER

_BLOCK_TOKEN_KINDS = {
    "heading_open": BlockKind.HEADING,
    "paragraph_open": BlockKind.PARAGRAPH,
    "fence": BlockKind.FENCE,
    "code_block": BlockKind.CODE_BLOCK,
    "table_open": BlockKind.TABLE,
    "bullet_list_open": BlockKind.BULLET_LIST,
    "ordered_list_open": BlockKind.ORDERED_LIST,
    "list_item_open": BlockKind.LIST_ITEM,
    "blockquote_open": BlockKind.BLOCKQUOTE,
    "html_block": BlockKind.HTML_BLOCK,
    "hr": BlockKind.THEMATIC_BREAK,
}


class Block(NamedTuple):
    """One markdown block with its exact character range in the document."""

    kind: str
    """One of the :class:`BlockKind` names."""
    start_char: int
    """Offset of the first character of the block's first line."""
    end_char: int
    """Offset just past the block's last line, its line break included (half-open)."""
    depth: int
    """Nesting depth (markdown-it's token level): 0 for a block directly in the document, 1 for a list's
    items or a quote's children, 2 for the paragraphs of those items, and so on."""
    heading_level: int = 0
    """1..6 for headings, 0 for every other kind."""
    heading_text: str = ""
    """A heading's plain text (inline markup removed); empty for other kinds."""


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """Front matter at the start of a document."""

    format: str
    """``"yaml"`` or ``"toml"``."""
    start_char: int
    end_char: int
    data: dict[str, Any] | None
    """The parsed mapping as JSON-safe data (text keys as written; see :mod:`chunkline.front_matter`), or
    ``None`` when it could not be parsed safely or was refused (see ``error``)."""
    error: str | None = None
    """Why the front matter could not be parsed; ``None`` when it was."""


@dataclass(frozen=True, slots=True)
class Section:
    """A heading's section, from the heading to the next document-level heading of any level."""

    index: int
    heading: str | None
    """The heading's text; ``None`` for the preamble before the first heading."""
    level: int
    """1..6, or 0 for the preamble."""
    start_char: int
    end_char: int
    parent: int | None
    """Index of the nearest earlier section with a lower level, or ``None``."""


class MarkdownDocument:
    """A parsed markdown document: its text, line index, headings, front matter, sections and blocks.

    ``blocks`` is built from the parser's block records on first use: strategies that only need headings
    never pay for it.
    """

    __slots__ = (
        "text",
        "index",
        "headings",
        "front_matter",
        "sections",
        "parser",
        "_records",
        "_record_start_lines",
        "_blocks",
        "_blocks_of_ranges",
    )

    def __init__(
        self,
        text: str,
        index: TextIndex,
        headings: tuple[Block, ...],
        front_matter: FrontMatter | None,
        records: list[BlockRecord],
        parser: str = REFERENCE_PARSER,
    ):
        self.text = text
        self.index = index
        self.headings = headings
        """Document-level headings (depth 0) in order; headings in quotes and list items are content."""
        self.front_matter = front_matter
        self.sections: tuple[Section, ...] = detect_sections(text, headings)
        """The preamble (if any) and one section per document-level heading."""
        self.parser = parser
        """The parser that found the blocks (one of :data:`PARSERS`; the reference parses what the fast
        parser leaves to it)."""
        self._records = records
        self._record_start_lines: list[int] | None = None
        self._blocks: tuple[Block, ...] | None = None
        # The blocks of ranges asked for before (a section the engine looked into, then the strategy split).
        self._blocks_of_ranges: dict[tuple[int, int], list[Block]] = {}

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Every block in document order (parents before their children), front matter first."""
        if self._blocks is None:
            self._blocks = tuple(self._find_blocks_within(0, len(self.text)))
        return self._blocks

    def blocks_within(self, start_char: int, end_char: int, kinds: frozenset[str] | None = None) -> list[Block]:
        """The blocks that lie inside ``[start_char, end_char)``, in document order (only those of ``kinds``
        when given).

        Built from the parser's records for just that range, so a strategy that looks at a few long sections
        does not pay for the blocks of the whole document; kept for the next call for the same range."""
        if kinds is not None:
            return [block for block in self.blocks_within(start_char, end_char) if block.kind in kinds]
        found = self._blocks_of_ranges.get((start_char, end_char))
        if found is None:
            found = self._blocks_of_ranges[(start_char, end_char)] = self._find_blocks_within(start_char, end_char)
        return list(found)

    def _find_blocks_within(self, start_char: int, end_char: int) -> list[Block]:
        if self._blocks is not None:
            found = []
            for block in self._blocks[bisect_left(self._blocks, start_char, key=_block_start) :]:
                if block.start_char >= end_char:
                    break
                if block.end_char <= end_char:
                    found.append(block)
            return found
        records = self._records
        if self._record_start_lines is None:
            self._record_start_lines = [record[1] for record in records]
        index = self.index
        first_line = index.line_of(start_char)
        blocks: list[Block] = []
        front_matter = self.front_matter
        if front_matter is not None and start_char == 0 and front_matter.end_char <= end_char:
            blocks.append(Block(BlockKind.FRONT_MATTER, 0, front_matter.end_char, 0))
        line_starts = index.line_starts
        line_count = len(line_starts)
        text_length = len(self.text)
        for slot in range(bisect_left(self._record_start_lines, first_line), len(records)):
            kind, start_line, end_line, level, heading_level, heading_source = records[slot]
            block_start = line_starts[start_line] if start_line < line_count else text_length
            if block_start >= end_char:
                break
            if block_start < start_char:
                continue
            block_end = line_starts[end_line] if end_line < line_count else text_length
            if block_end > end_char:
                continue
            if heading_level:
                blocks.append(
                    Block(kind, block_start, block_end, level, heading_level, heading_plain_text(heading_source))
                )
            else:
                blocks.append(Block(kind, block_start, block_end, level))
        return blocks

    def table_ranges(self) -> list[tuple[int, int, int]]:
        """``(start, header end, end)`` of every table, in document order: the start of its header row's
        line, the start of the line after its delimiter row, and the start of the line after its last row."""
        line_start = self.index.line_start
        return [
            (line_start(record[1]), line_start(record[1] + 2), line_start(record[2]))
            for record in self._records
            if record[0] == BlockKind.TABLE
        ]

    @property
    def title(self) -> str | None:
        """The front matter's ``title`` if it has one, else the first level-1 heading, else ``None``."""
        if self.front_matter and isinstance(self.front_matter.data, dict):
            title = self.front_matter.data.get("title")
            if isinstance(title, str) and title.strip():
                return title.strip()
        for heading in self.headings:
            if heading.heading_level == 1:
                return heading.heading_text
        return None


#: Container depth (markdown-it token levels: one per quote, two per list) up to which quotes and list items
#: are parsed as containers; content nested deeper is parsed with leaf rules only. CommonMark parsing of
#: nested containers costs depth x lines, so the limit bounds what a hostile file can cost; 32 levels is 16
#: nested lists, far beyond what documents use.
MAX_CONTAINER_DEPTH = 32


class _DepthLimitedBlockParser(ParserBlock):
    """markdown-it's block parser, with a different answer to content nested too deep.

    markdown-it's own ``maxNesting`` skips everything from the limit to the end of the enclosing range, so a
    list item at the limit swallows the rest of the document, document-level headings included. Here the
    content at the limit is parsed with the leaf rules (paragraph, fence, heading, table...): its extent
    is found as it would be, only quotes and lists inside it are not opened."""

    def __init__(self, ruler: Ruler, leaf_ruler: Ruler):
        super().__init__()
        self.ruler = ruler
        self._leaf = ParserBlock()
        self._leaf.ruler = leaf_ruler

    def tokenize(self, state: StateBlock, startLine: int, endLine: int) -> None:  # noqa: N803 - markdown-it's names
        if state.level >= MAX_CONTAINER_DEPTH:
            self._leaf.tokenize(state, startLine, endLine)
        else:
            super().tokenize(state, startLine, endLine)


_THEMATIC_BREAK_TAIL = {marker: re.compile(f"[ \\t{re.escape(marker)}]*") for marker in "*-_"}


def _thematic_break(state: StateBlock, startLine: int, endLine: int, silent: bool) -> bool:  # noqa: N803
    """markdown-it's ``hr`` rule with the line scanned by a regular expression: the rule runs again at every
    list level, and a Python loop over a ``- - - ...`` line made 2,000 nested lists quadratic."""
    src = state.src
    pos = state.bMarks[startLine] + state.tShift[startLine]
    # The rule runs at every line start: most start with another character, looked at first.
    marker = src[pos : pos + 1]
    tail = _THEMATIC_BREAK_TAIL.get(marker)
    if tail is None or state.is_code_block(startLine):
        return False
    maximum = state.eMarks[startLine]
    if tail.match(src, pos + 1, maximum).end() != maximum:
        return False
    count = 1 + src.count(marker, pos + 1, maximum)
    if count < 3:
        return False
    if silent:
        return True
    state.line = startLine + 1
    token = state.push("hr", "hr", 0)
    token.map = [startLine, state.line]
    token.markup = marker * (count + 1)  # as markdown-it-py sets it
    return True


def _configured_parser() -> MarkdownIt:
    # The depth limit is the block parser's own (above), never markdown-it's skipping.
    parser = MarkdownIt("commonmark", {"maxNesting": sys.maxsize}).enable("table")
    # Only block structure is needed; inline parsing of every paragraph would double the parse time.
    parser.core.ruler.disable(["inline", "text_join"])
    ruler = parser.block.ruler
    hr_alt = next(rule.alt for rule in ruler.__rules__ if rule.name == "hr")
    ruler.at("hr", _thematic_break, {"alt": list(hr_alt)})
    return parser


@functools.lru_cache(maxsize=1)
def _block_parser() -> MarkdownIt:
    parser = _configured_parser()
    leaf_ruler = _configured_parser().block.ruler
    leaf_ruler.disable(["blockquote", "list"])
    parser.block = _DepthLimitedBlockParser(parser.block.ruler, leaf_ruler)
    return parser


@functools.lru_cache(maxsize=1)
def _inline_parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark")
    # Link normalization percent-encodes through UTF-8, which a surrogate code point in a link cannot pass;
    # a heading's plain text only needs the link's text, so such a link keeps its destination as written.
    for name in ("normalizeLink", "normalizeLinkText"):
        setattr(parser, name, _keeping_unencodable_links(getattr(parser, name)))
    return parser


def _keeping_unencodable_links(normalize: Callable[[str], str]) -> Callable[[str], str]:
    def normalized(url: str) -> str:
        try:
            return normalize(url)
        except UnicodeError:
            return url

    return normalized


_INLINE_MARKUP = frozenset("*_`[]<>!\\&~")
# The markup of everything but code spans.
_MARKUP_BUT_CODE = _INLINE_MARKUP - {"`"}


@functools.lru_cache(maxsize=4096)
def heading_plain_text(source: str) -> str:
    """Plain text of a heading's inline markdown: emphasis, links and code marks removed."""
    if _INLINE_MARKUP.isdisjoint(source):
        return " ".join(source.split())
    if _MARKUP_BUT_CODE.isdisjoint(source):
        # Code spans are the only markup (most headings with any): read as markdown-it reads them.
        return " ".join(_without_code_marks(source).split())
    return inline_parse_plain_text(source)


def inline_parse_plain_text(source: str) -> str:
    """:func:`heading_plain_text` read from markdown-it-py's inline parse, whatever the markup."""
    parts: list[str] = []
    for token in _inline_parser().parseInline(source):
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
            elif child.type == "image":
                parts.extend(grandchild.content for grandchild in child.children or ())
    return " ".join("".join(parts).split())


def _without_code_marks(source: str) -> str:
    """The text of inline markdown whose only markup is backticks, as markdown-it-py's ``backticks`` rule
    reads them: a run of backticks opens a code span when a later run of the same length closes it (else it
    is text); the span's line breaks are spaces, and one space is taken off each end when both ends have one
    and it is not all spaces. Line breaks outside spans become whitespace either way (a softbreak or a
    hardbreak, never nothing), which the caller collapses."""
    source = source.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")  # markdown-it's normalize
    length = len(source)
    parts: list[str] = []
    text_start = 0  # where the text since the last code span starts
    opener = source.find("`")
    while opener >= 0:
        opener_end = opener + 1
        while opener_end < length and source[opener_end] == "`":
            opener_end += 1
        run = opener_end - opener
        closer = source.find("`", opener_end)
        while closer >= 0:
            closer_end = closer + 1
            while closer_end < length and source[closer_end] == "`":
                closer_end += 1
            if closer_end - closer == run:
                break
            closer = source.find("`", closer_end)
        if closer < 0:
            # No closer: the run is text, and the next run is looked at.
            opener = source.find("`", opener_end)
            continue
        parts.append(source[text_start:opener])
        content = source[opener_end:closer].replace("\n", " ")
        if content.startswith(" ") and content.endswith(" ") and len(content.strip()) > 0:
            content = content[1:-1]
        parts.append(content)
        text_start = closer_end
        opener = source.find("`", text_start)
    parts.append(source[text_start:])
    return "".join(parts)


_FRONT_MATTER_FENCES = {"---": ("yaml", ("---", "...")), "+++": ("toml", ("+++",))}


def _find_front_matter(text: str, index: TextIndex) -> tuple[str, int, int, int] | None:
    """(format, body start, body end, lines covered) of front matter at the start of ``text``, if any."""
    offset = 1 if text.startswith("\ufeff") else 0
    first_line_end = index.line_start(1)
    opening = text[offset:first_line_end].rstrip("\r\n").rstrip(" \t")
    if opening not in _FRONT_MATTER_FENCES or first_line_end == len(text) and not text.endswith(("\n", "\r")):
        return None
    format_name, closings = _FRONT_MATTER_FENCES[opening]
    for line in range(1, index.line_count):
        start = index.line_start(line)
        end = index.line_start(line + 1)
        if text[start:end].rstrip("\r\n").rstrip(" \t") in closings:
            return format_name, first_line_end, start, line + 1
    return None


def _records_from_tokens(tokens: list[Token]) -> list[BlockRecord]:
    """The block records of markdown-it-py's tokens (see :data:`chunkline.pyrs_blocks.BlockRecord`)."""
    kinds = _BLOCK_TOKEN_KINDS
    records: list[BlockRecord] = []
    append = records.append
    for position, token in enumerate(tokens):
        kind = kinds.get(token.type)
        if kind is None or token.map is None:
            continue
        start_line, end_line = token.map
        if kind == BlockKind.HEADING:
            append((kind, start_line, end_line, token.level, int(token.tag[1]), tokens[position + 1].content))
        else:
            append((kind, start_line, end_line, token.level, 0, ""))
    return records


def _parse_blocks(
    source: str, parser: str, ascii_line_starts: list[int] | None = None
) -> tuple[list[BlockRecord], str]:
    """The block records of ``source`` and the parser that found them (``ascii_line_starts``: the line starts
    of an ASCII ``source``, when known)."""
    if parser == FAST_PARSER:
        records = block_records(source, MAX_CONTAINER_DEPTH, ascii_line_starts)
        if records is not None:
            return records, FAST_PARSER
    elif parser != REFERENCE_PARSER:
        raise ValueError(f"unknown markdown parser {parser!r}; known: {', '.join(PARSERS)}")
    return _records_from_tokens(_block_parser().parse(source)), REFERENCE_PARSER


def parse_markdown(text: str, parser: str = DEFAULT_PARSER) -> MarkdownDocument:
    """Parse ``text`` into a :class:`MarkdownDocument` with exact block ranges, with ``parser`` (one of
    :data:`PARSERS`: the fast parser by default, or the reference parser it is held equal to)."""
    index = TextIndex(text)
    front_matter = None
    parser_source = text
    found = _find_front_matter(text, index)
    if found is not None:
        format_name, body_start, body_end, lines_covered = found
        data, error = None, None
        try:
            data = load_front_matter(format_name, text[body_start:body_end])
        except FrontMatterError as refused:
            error = f"{format_name} front matter could not be parsed: {refused}; fix it in the file"
        except NotAMapping:
            found = None
    if found is not None:
        end_char = index.line_start(lines_covered)
        front_matter = FrontMatter(format_name, 0, end_char, data, error)
        # Blank lines keep the parser's line numbers aligned with the original text.
        parser_source = "\n" * lines_covered + text[end_char:]
    elif text.startswith("\ufeff"):
        # A byte order mark is not part of the first line's markdown; dropping it keeps line numbers.
        parser_source = text[1:]

    # The text's own line starts are the parser's when it parses the text itself (byte offsets are character
    # offsets in ASCII).
    same_lines = parser_source is text and index.is_ascii
    records, used_parser = _parse_blocks(parser_source, parser, index.line_starts if same_lines else None)
    line_start = index.line_start
    # The heading records picked out in C (a heading level is 0 for every other kind).
    headings = tuple(
        Block(
            BlockKind.HEADING,
            line_start(start_line),
            line_start(end_line),
            0,
            heading_level,
            heading_plain_text(heading_source),
        )
        for kind, start_line, end_line, level, heading_level, heading_source in compress(
            records, map(_HEADING_LEVEL, records)
        )
        if level == 0
    )
    return MarkdownDocument(text, index, headings, front_matter, records, used_parser)


_HEADING_LEVEL = itemgetter(4)


def _block_start(block: Block) -> int:
    return block.start_char


def detect_sections(text: str, headings: tuple[Block, ...]) -> tuple[Section, ...]:
    """The document's sections: a preamble (when text other than whitespace precedes the first heading),
    then one per document-level heading, each running to the next heading of any level."""
    return sections_from_headings(
        text, [(block.start_char, block.heading_level, block.heading_text) for block in headings]
    )


def sections_from_headings(text: str, headings: list[tuple[int, int, str]]) -> tuple[Section, ...]:
    """Sections from ``(start_char, level, heading)`` of each heading line, ascending; see
    :func:`detect_sections`. A heading's parent is the nearest earlier one with a lower level."""
    starts = [list(heading) for heading in headings]
    sections: list[Section] = []
    first_start = starts[0][0] if starts else len(text)
    if not starts or text[:first_start].strip():
        sections.append(Section(0, None, 0, 0, first_start, None))
    else:
        # Whitespace before the first heading belongs to the first heading's section.
        starts[0][0] = 0
    open_levels: list[tuple[int, int]] = []  # (level, section index) of the enclosing sections
    for number, (start, level, heading) in enumerate(starts):
        end = starts[number + 1][0] if number + 1 < len(starts) else len(text)
        while open_levels and open_levels[-1][0] >= level:
            open_levels.pop()
        parent = open_levels[-1][1] if open_levels else None
        section_index = len(sections)
        sections.append(Section(section_index, heading, level, start, end, parent))
        open_levels.append((level, section_index))
    return tuple(sections)


_DOTTED_NUMBER = re.compile(r"\d+(?:\.\d+)*\.?")


def indicator_level(indicator: str) -> int:
    """A heading level from a custom pattern's level indicator: ``###`` -> 3, ``2.1`` -> 2, else 1."""
    indicator = indicator.strip()
    if indicator and len(set(indicator)) == 1 and not indicator[0].isalnum():
        return len(indicator)
    if _DOTTED_NUMBER.fullmatch(indicator):
        return len(indicator.rstrip(".").split("."))
    return 1


def sections_by_pattern(
    document: MarkdownDocument, heading_pattern: str, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
) -> tuple[Section, ...]:
    r"""The document's sections with headings found by a custom line pattern (LocalVectorDB's
    SectionDetector): two groups, the level indicator and the heading text, e.g. ``^(SECTION \d+): (.+)$``
    or ``^(#{1,6})\s+(.+)$``. Matches inside fenced or indented code are ignored; the pattern runs with
    a time limit (:class:`chunkline.patterns.RegexTimeoutError`)."""
    import regex

    compiled = compile_pattern(heading_pattern, regex.MULTILINE)
    if compiled.groups < 2:
        raise ValueError(f"heading pattern {heading_pattern!r} needs two groups: level indicator and heading text")
    text = document.text
    # "\r" alone ends a line too: match on a copy where every "\r" is "\n" (same length, same offsets).
    subject = text.replace("\r", "\n") if "\r" in text else text
    code = [(block.start_char, block.end_char) for block in document.blocks if block.kind in _CODE_KINDS]
    code_starts = [start for start, _ in code]
    index = document.index
    headings: list[tuple[int, int, str]] = []
    for match in finditer_within(compiled, subject, timeout_seconds, "heading pattern"):
        line_start = index.line_starts[index.line_of(match.start())]
        slot = bisect_right(code_starts, line_start) - 1
        if slot >= 0 and line_start < code[slot][1]:
            continue
        if headings and headings[-1][0] == line_start:
            continue
        heading = " ".join((match.group(2) or "").split())
        headings.append((line_start, indicator_level(match.group(1) or ""), heading))
    return sections_from_headings(text, headings)


class HeadingStack:
    """The open headings as a document is read: a heading closes every open heading of the same or a
    deeper level."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> tuple[str, ...]:
        """The heading path of a heading of ``level`` titled ``title``, read next."""
        stack = self._open
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        return tuple(open_title for _, open_title in stack)


def section_paths(sections: tuple[Section, ...]) -> list[tuple[str, ...]]:
    """Each section's heading path: its ancestors' headings and its own, outermost first."""
    paths: list[tuple[str, ...]] = []
    for section in sections:
        parent = paths[section.parent] if section.parent is not None else ()
        paths.append(parent + (section.heading,) if section.heading is not None else ())
    return paths
