"""``sections``: headings are the preferred break points; small sections are packed together whole.

LocalVectorDB's ``sections`` method, on a CommonMark parse:

1. The document's sections are its units: the preamble (text before the first heading, when it is more
   than whitespace), then one section per document-level heading, running to the next heading of any
   level. Headings come from the parser, so a ``#`` line inside a fenced or indented code block, an HTML
   block, a block quote or a list item never starts a section; setext headings do.
2. Consecutive sections are packed into one chunk while the chunk stays within ``max_tokens``: a run of
   short sections becomes one chunk, and a section that fits is never cut. A chunk's ``heading_path`` is
   the path of the section it starts in.
3. A section over ``max_tokens`` is split on its own at its best boundaries -- between paragraphs and
   other blocks first, then lines, sentences, words (:mod:`chunkline.splitting`); code blocks, tables and
   list items that fit stay whole. Its pieces are marked ``is_sub_split``.

``overlap`` counts *sections* the next chunk repeats (default 0: sections typically do not overlap).

``heading_pattern`` replaces markdown headings by a pattern of your own, like LocalVectorDB's
``SectionDetector(pattern=...)``: a regular expression with exactly two capture groups, the level indicator
and the heading text, matched line by line (``^`` and ``$`` match at every line), e.g.
``^(SECTION \\d+): (.+)$``. Every line it matches starts a section, except lines inside fenced or indented
code, and inside a table, list item or HTML block that fits within ``max_tokens`` (never split). Heading
paths then come from those lines: the level is the indicator's length when it is one repeated symbol
(``##`` is level 2), the number of parts of a dotted number (``2.1`` is level 2), else 1.
The pattern runs with a time limit of ``timeout_seconds`` per document (see the ``regex`` strategy).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import regex

from chunkline.context import ChunkContext
from chunkline.packing import pack_units, units_from_cuts
from chunkline.patterns import (
    DEFAULT_TIMEOUT_SECONDS,
    check_timeout,
    compile_pattern,
    finditer_within,
)
from chunkline.protected import merge_ranges
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.strategies.units import check_overlap
from chunkline.structure import BlockKind, HeadingStack, indicator_level

__all__ = ["SectionsParams", "custom_headings"]

_CODE_KINDS = frozenset({BlockKind.FENCE, BlockKind.CODE_BLOCK})


@dataclass(frozen=True)
class SectionsParams:
    """Parameters of the ``sections`` strategy."""

    overlap: int = 0
    """Sections the next chunk repeats from the end of the previous one."""
    heading_pattern: str | None = None
    """A regex with two groups (level indicator, heading text) whose lines start sections instead of
    markdown headings; ``None`` uses the document's CommonMark headings."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """Time limit of ``heading_pattern`` on one document."""

    def __post_init__(self) -> None:
        check_overlap(self.overlap, "sections")
        check_timeout(self.timeout_seconds)
        if self.heading_pattern is not None:
            if not isinstance(self.heading_pattern, str) or not self.heading_pattern:
                raise ValueError(f"heading_pattern must be a regular expression, got {self.heading_pattern!r}")
            groups = self.compiled().groups
            if groups != 2:
                raise ValueError(
                    f"heading_pattern {self.heading_pattern!r} must have exactly two capture groups "
                    f"(level indicator, heading text), it has {groups}; use (?:...) for other groups"
                )

    def compiled(self) -> regex.Pattern:
        """The compiled ``heading_pattern`` (multi-line)."""
        return compile_pattern(self.heading_pattern, regex.MULTILINE)


@dataclass(frozen=True, slots=True)
class CustomHeading:
    """A line matched by ``heading_pattern``."""

    start_char: int
    """Start of the heading's line."""
    level: int
    text: str


@register_strategy("sections", SectionsParams, merges_fragments=True)
def chunk_by_sections(context: ChunkContext) -> list[ChunkSpan]:
    """Sections packed whole within max_tokens; sections over it split at paragraph boundaries."""
    params: SectionsParams = context.params
    text = context.text
    if params.heading_pattern is None:
        units = [(section.start_char, section.end_char) for section in context.sections]
        return pack_units(context, units, params.overlap, unit_name="sections")
    headings = custom_headings(context, params.compiled(), params.timeout_seconds)
    starts = [heading.start_char for heading in headings]
    if starts and not text[: starts[0]].strip():
        starts[0] = 0  # whitespace before the first heading joins its section, as with markdown headings
    units = units_from_cuts(starts, len(text))
    spans = pack_units(context, units, params.overlap, unit_name="sections")
    return _with_custom_paths(spans, starts, headings)


def custom_headings(context: ChunkContext, compiled: regex.Pattern, timeout_seconds: float) -> list[CustomHeading]:
    """The lines ``compiled`` matches, one heading per line, except lines inside fenced or indented code
    and lines inside a table, list item or HTML block that fits within ``max_tokens`` (a break there
    would split a block the product promises to keep whole)."""
    document = context.document
    text = document.text
    # "\r" alone ends a line too: matched on a copy where every "\r" is "\n" (same length, same offsets).
    subject = text.replace("\r", "\n") if "\r" in text else text
    code = merge_ranges((block.start_char, block.end_char) for block in document.blocks if block.kind in _CODE_KINDS)
    protected = context.protected_ranges
    index = document.index
    headings: list[CustomHeading] = []
    for match in finditer_within(compiled, subject, timeout_seconds, "heading_pattern"):
        line_start = index.line_starts[index.line_of(match.start())]
        if _range_at(code, line_start, starts_inside=True) or _range_at(protected, line_start, starts_inside=False):
            continue
        if headings and headings[-1].start_char == line_start:
            continue
        indicator = (match.group(1) or "").strip()
        headings.append(CustomHeading(line_start, indicator_level(indicator), " ".join((match.group(2) or "").split())))
    return headings


def _range_at(ranges: list[tuple[int, int]], position: int, *, starts_inside: bool) -> bool:
    """Whether ``position`` lies in one of the disjoint ascending ``ranges`` (at its start too when
    ``starts_inside``, else strictly after it)."""
    slot = bisect_right(ranges, (position, float("inf"))) - 1
    if slot < 0:
        return False
    start, end = ranges[slot]
    return position < end and (starts_inside or position > start)


def _with_custom_paths(spans: list[ChunkSpan], starts: list[int], headings: list[CustomHeading]) -> list[ChunkSpan]:
    """``spans`` with the heading path of the custom section each one starts in."""
    stack = HeadingStack()
    paths = [stack.enter(heading.level, heading.text) for heading in headings]
    result = []
    for span in spans:
        slot = bisect_right(starts, span.start_char) - 1
        path = paths[slot] if slot >= 0 else ()
        result.append(ChunkSpan(span.start_char, span.end_char, path, span.is_sub_split, span.token_count))
    return result
