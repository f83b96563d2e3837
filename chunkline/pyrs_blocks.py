"""Block records from markdown-it-pyrs (markdown-it.rs, the Rust port of markdown-it), the fast parser behind
:mod:`chunkline.structure`.

markdown-it.rs implements the same CommonMark algorithm as markdown-it-py, the reference parser, and finds
the same blocks; this module turns its syntax tree into the records the reference's tokens give
(:data:`BlockRecord`), so that every strategy sees the same blocks whichever parser ran. Where the two
trees differ in shape, the records are made to agree:

* markdown-it.rs gives the byte range a block's syntax covers; a record holds the 0-based line the block
  starts on and the line after its last one, as markdown-it-py's token ``map`` does. Bytes are mapped to
  lines through the UTF-8 line starts of the text parsed.
* The paragraphs of a tight list are not nodes in markdown-it.rs (their text sits in the list item
  directly); markdown-it-py keeps them as hidden paragraph tokens, so they are paragraph records here too.
* Link reference definitions are nodes in markdown-it.rs and no token in markdown-it-py: no record.
* A heading's inline source is the text of its inline node, which is the string markdown-it-py gives its
  inline token (NUL read as U+FFFD, as markdown-it-py reads it).
* Quotes, list items and lists end where markdown-it-py's block parser stopped in their content, which can
  be past blank lines markdown-it.rs leaves out; unclosed fences and HTML blocks that run to the end of
  their container keep their trailing blank lines (:func:`_end_containers_as_the_reference_does`).

Some inputs are left to the reference parser (:func:`block_records` returns ``None``), every one of them
tested in tests/test_parser_differential.py:

* text that UTF-8 cannot encode (lone surrogates);
* a block inside a container that starts or ends on a line with a tab in its indentation or container
  markers: markdown-it.rs counts the tab as the columns it expands to in the byte ranges it gives there,
  which can then miss their lines;
* a table right after a quote or list, or a quote with a lazy continuation line: the two parsers disagree
  on what continues the paragraph in the container (markdown-it-py reads a table's header row as a
  continuation line and a lone ``-`` as an empty list item, markdown-it.rs the other way round);
* containers nested so deep that markdown-it-py's depth limit (``MAX_CONTAINER_DEPTH`` in
  :mod:`chunkline.structure`) changes how their content is parsed. markdown-it.rs parses nesting with
  recursion and no limit (10,000 nested lists overflow the stack and end the process), so nesting is
  bounded from the text before it is parsed: a container needs at least one column of each line it holds
  a block on, so a text whose lines all begin with fewer than :data:`MAX_PREFIX_COLUMNS` columns of
  container markers and indentation cannot nest deeper than that.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import Any

__all__ = ["BlockRecord", "MAX_PREFIX_COLUMNS", "block_records"]

#: ``(kind, start_line, end_line, level, heading_level, heading_source)``: a block's kind (a
#: :class:`chunkline.structure.BlockKind` name), its 0-based first line and the line after its last,
#: markdown-it-py's token level, the heading's level (0 for other kinds) and its inline source ("" for other
#: kinds).
BlockRecord = tuple[str, int, int, int, int, str]

#: Texts with a line that begins with this many columns of container markers and indentation (a tab counts
#: as 4) go to the reference parser: at most this many containers can be open on any line of the others,
#: a depth markdown-it.rs parses within a thread's stack.
MAX_PREFIX_COLUMNS = 128

# The characters a line's container prefix is made of: indentation, quote markers, list markers.
_PREFIX_CHARACTERS = " \t>*+\\-.)0-9"
# A run of prefix characters at a line start long enough that it could reach MAX_PREFIX_COLUMNS (a tab is 4).
# Searched for after a line break, and matched at the start of the text (one pattern with both would
# try the alternation at every character, several times slower).
_LONG_PREFIX_RUN = f"([{_PREFIX_CHARACTERS}]{{{MAX_PREFIX_COLUMNS // 4},}})"
_LONG_PREFIX = re.compile(f"[\\r\\n]{_LONG_PREFIX_RUN}")
# The same after "\n" only, for text without "\r": a pattern that begins with one character is searched for
# that character alone, five times faster than for a set of two.
_LONG_PREFIX_AFTER_LF = re.compile(f"\n{_LONG_PREFIX_RUN}")
_LONG_PREFIX_AT_START = re.compile(_LONG_PREFIX_RUN)
_TAB_IN_PREFIX = re.compile(f"[\\r\\n][{_PREFIX_CHARACTERS}]*\\t")
_TAB_IN_PREFIX_AT_START = re.compile(f"[{_PREFIX_CHARACTERS}]*\\t")
# The indentation and quote markers a line begins with.
_QUOTE_PREFIX = re.compile("[ \t>]*")
_QUOTE_PREFIX_BYTES = re.compile(b"[ \t>]*")
_LINE_BREAK_BYTES = re.compile(rb"\r\n?|\n")

_BLOCK_NODE_KINDS = {
    "heading": "heading",
    "lheading": "heading",
    "paragraph": "paragraph",
    "fence": "fence",
    "code_block": "code_block",
    "table": "table",
    "bullet_list": "bullet_list",
    "ordered_list": "ordered_list",
    "list_item": "list_item",
    "blockquote": "blockquote",
    "html_block": "html_block",
    "hr": "hr",
}
# Nodes whose children are blocks; every other block node is a leaf to the records.
_CONTAINERS = frozenset({"bullet_list", "ordered_list", "list_item", "blockquote"})
_NESTING_CONTAINERS = frozenset({"bullet_list", "ordered_list", "blockquote"})
_LIST_KINDS = frozenset({"bullet_list", "ordered_list"})
_DEFINITION = "definition"
# Blocks whose range markdown-it-py takes from their content: the lines before the content (a fence's
# opening line) by kind.
_RAW_BLOCKS = {"fence": 1, "html_block": 0}
_LINE_BREAK_TEXT = re.compile(r"\r\n?|\n")
# What a line can begin with to start a block other than a paragraph: a list item, a heading, a quote, a
# fence, HTML, a thematic break.
_BLOCK_START = re.compile(
    r"[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|#{1,6}(?:[ \t]|$)|>|`{3}|~{3}|<|([-_*])(?:[ \t]*\1){2}"
)
_plus_one = (1).__add__


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it_pyrs import MarkdownIt

    # The block rules of CommonMark plus GFM tables, as the reference parser has them; no inline rules, so a
    # block's inline content stays one text node holding its source.
    return MarkdownIt("zero").enable_many(
        ["blockquote", "code", "fence", "heading", "hr", "lheading", "list", "paragraph", "reference", "html_block"]
        + ["table"]
    )


def _prefix_columns(prefix: str) -> int:
    return len(prefix) + 3 * prefix.count("\t")


def has_tab_in_line_prefix(source: str) -> bool:
    """Whether a tab stands among the container markers and indentation a line of ``source`` begins with.

    markdown-it.rs counts a tab there as the columns it expands to when it gives the byte ranges of the
    blocks after it, so their ranges can point past their own lines."""
    return "\t" in source and (
        _TAB_IN_PREFIX_AT_START.match(source) is not None or _TAB_IN_PREFIX.search(source) is not None
    )


def tab_prefixed_lines(source: str) -> set[int]:
    """The 0-based lines of ``source`` with a tab among the container markers and indentation they begin with."""
    lines = set()
    if _TAB_IN_PREFIX_AT_START.match(source) is not None:
        lines.add(0)
    line_breaks = [match.end() for match in _LINE_BREAK_TEXT.finditer(source)]
    for match in _TAB_IN_PREFIX.finditer(source):
        lines.add(bisect_right(line_breaks, match.start() + 1))
    return lines


def _touches_tab_lines(records: list[list[Any]], tab_lines: set[int]) -> bool:
    """Whether a block inside a container starts or ends on a line with a tab in its prefix (or on the line
    after one, where a range counted with the tab's columns can land)."""
    for record in records:
        if record[3] == 0:
            continue
        start_line, end_line = record[1], record[2]
        if not tab_lines.isdisjoint((start_line - 1, start_line, end_line - 2, end_line - 1)):
            return True
    return False


def _has_lazy_line(source: str, quotes: list[tuple[int, int, int]], byte_line_starts: list[int]) -> bool:
    """Whether a quote has a lazy continuation line: a line after its first without as many ``>`` markers
    before anything but indentation as the first line has up to the quote's own (``> - > a`` then
    ``>   > b`` goes on with the inner quote, ``> b`` would be lazy). The two parsers tell such a line from
    the start of a new block differently (markdown-it-py ends a quote at ``-`` alone, an empty list item;
    markdown-it.rs reads it as paragraph text). ``quotes`` holds each quote's first line, the line after
    its last and the byte offset of its marker."""
    encoded: str | bytes = source if source.isascii() else source.encode("utf-8")
    marker, prefix = (">", _QUOTE_PREFIX) if isinstance(encoded, str) else (b">", _QUOTE_PREFIX_BYTES)
    line_starts = [*byte_line_starts, len(encoded)]
    last_line = len(line_starts) - 1
    for start_line, end_line, marker_byte in quotes:
        markers = encoded.count(marker, line_starts[start_line], marker_byte + 1)  # type: ignore[arg-type]
        for line in range(start_line + 1, min(end_line, last_line)):
            found = prefix.match(encoded, line_starts[line], line_starts[line + 1])  # type: ignore[arg-type]
            if found.group().count(marker) < markers:  # type: ignore[arg-type,union-attr]
                return True
    return False


def _has_ambiguous_row(encoded: str | bytes, line_starts: list[int], first_line: int, end_line: int) -> bool:
    """Whether a body row of a table could end it in markdown-it-py and not in markdown-it.rs: a row of only
    Unicode whitespace (U+2028, U+0085, no-break space...: markdown-it-py strips rows with ``str.strip``,
    markdown-it.rs spaces and tabs only), or one that begins with what could start another block (a list
    marker, a quote, a heading, a fence, HTML, indented code), where the two disagree on what interrupts a
    table (markdown-it-py ends it at ``-`` alone, an empty list item)."""
    line_ends = [*line_starts[first_line + 1 : end_line + 1], len(encoded)]
    for line, line_end in zip(range(first_line, end_line), line_ends):
        row = encoded[line_starts[line] : line_end]
        if isinstance(row, bytes):
            row = row.decode("utf-8")
        content = row.lstrip(" \t>").rstrip("\r\n")
        if not content.strip() or _BLOCK_START.match(content) or row.replace(">", " ").startswith("    "):
            return True
    return False


def nests_too_deep_to_parse(source: str) -> bool:
    """Whether a line of ``source`` begins with :data:`MAX_PREFIX_COLUMNS` or more columns of container
    markers and indentation."""
    at_start = _LONG_PREFIX_AT_START.match(source)
    if at_start is not None and _prefix_columns(at_start.group(1)) >= MAX_PREFIX_COLUMNS:
        return True
    pattern = _LONG_PREFIX if "\r" in source else _LONG_PREFIX_AFTER_LF
    return any(_prefix_columns(match.group(1)) >= MAX_PREFIX_COLUMNS for match in pattern.finditer(source))


def _line_count(content: str) -> int:
    """Lines of a block's content (a last line without a line break counts)."""
    breaks = content.count("\n") if "\r" not in content else len(_LINE_BREAK_TEXT.findall(content))
    return breaks + (1 if content and not content.endswith(("\n", "\r")) else 0)


def _line_starts(text: str | bytes) -> list[int]:
    """Offset of the start of each line of ``text`` (line breaks as markdown's: CR LF, CR, LF)."""
    if isinstance(text, bytes):
        if b"\r" in text:
            return [0, *(match.end() for match in _LINE_BREAK_BYTES.finditer(text))]
        lines = text.split(b"\n")
    else:
        if "\r" in text:
            return [0, *(match.end() for match in _LINE_BREAK_TEXT.finditer(text))]
        lines = text.split("\n")
    # Computed in C: a line starts one past the end of the one before it.
    starts = list(accumulate(map(_plus_one, map(len, lines)), initial=0))
    del starts[-1]
    return starts


def block_records(
    source: str, max_container_level: int, ascii_line_starts: list[int] | None = None
) -> list[BlockRecord] | None:
    """The block records of ``source`` in document order (parents before children), or ``None`` when the
    reference parser must parse it: text UTF-8 cannot encode, nesting past :data:`MAX_PREFIX_COLUMNS`, or a
    quote or list at token level ``max_container_level`` or deeper (markdown-it-py parses the content there
    with leaf rules only). ``ascii_line_starts``: the line starts of an ASCII ``source`` when the caller has
    them already (as :func:`_line_starts` finds them; read, never changed)."""
    if nests_too_deep_to_parse(source):
        return None
    try:
        tree = _parser().tree(source)
    except UnicodeEncodeError:
        return None
    encoded: str | bytes = source if source.isascii() else source.encode("utf-8")
    line_starts = ascii_line_starts if ascii_line_starts is not None and encoded is source else _line_starts(encoded)
    pipe = "|" if isinstance(encoded, str) else b"|"
    # markdown-it's line count: a line break at the very end starts no line.
    line_count = len(line_starts) - (1 if len(line_starts) > 1 and source.endswith(("\n", "\r")) else 0)
    records: list[list[Any]] = []
    append = records.append
    # The position of each record in a container or of a container, and its parent's position (-1 at the
    # top), ascending: what the end of a container depends on.
    inner: list[int] = []
    inner_parents: list[int] = []
    # Of each quote and list item: the line markdown-it-py's parse of its content is bounded by.
    content_ends: dict[int, int] = {}
    # (first line, line after the last, byte offset of the marker) of each quote, as markdown-it.rs has them.
    quotes: list[tuple[int, int, int]] = []
    # The line after each quote, list and list item, as markdown-it.rs ends them.
    container_end_lines: set[int] = set()
    has_definitions = False
    kinds = _BLOCK_NODE_KINDS
    containers = _CONTAINERS
    nesting = _NESTING_CONTAINERS
    # (node, level, the line the parse of the enclosing content is bounded by, the parent's position)
    stack: list[tuple[Any, int, int, int]] = [(child, 0, line_count, -1) for child in reversed(tree.children)]
    pop = stack.pop
    push = stack.append
    while stack:
        node, level, bound, parent = pop()
        name = node.name
        start_byte, end_byte = node.srcmap
        start_line = bisect_right(line_starts, start_byte) - 1
        kind = kinds.get(name)
        if kind is None:
            # A tight list item's paragraph (hidden in markdown-it-py, there all the same), or a link
            # reference definition: no token in markdown-it-py, but it ends its container's content too.
            if name == "text":
                kind = "paragraph"
            else:
                kind = _DEFINITION
                has_definitions = True
        end_line = bisect_right(line_starts, end_byte - 1) if end_byte > start_byte else start_line + 1
        position = len(records)
        if parent >= 0:
            inner.append(position)
            inner_parents.append(parent)
        if kind == "heading":
            children = node.children
            heading_source = children[0].meta["content"] if children else ""
            if "\x00" in heading_source:  # markdown-it-py reads NUL as U+FFFD, as CommonMark says
                heading_source = heading_source.replace("\x00", "\ufffd")
            if name == "lheading" and "|" in heading_source and node.meta.get("marker") == "-":
                # markdown-it-py tries tables before setext headings: ``a|`` over ``--`` is a table there.
                return None
            append([kind, start_line, end_line, level, node.meta["level"], heading_source])
            continue
        if name in _RAW_BLOCKS:
            # An unclosed fence, or an HTML block that runs to the end of its container, holds the blank lines
            # at its end in markdown-it-py; markdown-it.rs keeps them in the content but not in the range.
            end_line = max(end_line, start_line + _RAW_BLOCKS[name] + _line_count(node.meta["content"]))
        elif name == "table" and (
            start_line in container_end_lines
            or pipe not in encoded[line_starts[start_line] : line_starts[start_line + 1]]  # type: ignore[operator]
        ):
            # Right after a quote or list, the header row would be a lazy continuation line of the paragraph
            # inside it to markdown-it-py, where markdown-it.rs starts a table; and markdown-it-py wants a
            # pipe in the header row, markdown-it.rs only in the delimiter row: the reference decides.
            return None
        elif name == "table" and _has_ambiguous_row(encoded, line_starts, start_line + 2, end_line):
            return None
        append([kind, start_line, end_line, level, 0, ""])
        if name not in containers:
            continue
        container_end_lines.add(end_line)
        if parent < 0:
            inner.append(position)
            inner_parents.append(parent)
        if name in nesting and level >= max_container_level:
            return None
        if name == "blockquote":
            bound = end_line
            quotes.append((start_line, end_line, start_byte))
        if name != "bullet_list" and name != "ordered_list":
            content_ends[position] = bound
        for child in reversed(node.children):
            push((child, level + 1, bound, position))
    if has_tab_in_line_prefix(source) and _touches_tab_lines(records, tab_prefixed_lines(source)):
        return None
    if quotes and _has_lazy_line(source, quotes, line_starts):
        return None
    if content_ends:
        # Every record's first line, in document order (non-decreasing), link reference definitions included.
        block_start_lines = [record[1] for record in records]
        _end_containers_as_the_reference_does(
            records, inner, inner_parents, content_ends, block_start_lines, line_count
        )
    if not has_definitions:
        return list(map(tuple, records))  # type: ignore[arg-type]
    return [tuple(record) for record in records if record[0] is not _DEFINITION]  # type: ignore[misc]


def _end_containers_as_the_reference_does(
    records: list[list[Any]],
    inner: list[int],
    inner_parents: list[int],
    content_ends: dict[int, int],
    block_start_lines: list[int],
    line_count: int,
) -> None:
    """Give quotes, list items and lists the last lines markdown-it-py gives them.

    markdown-it.rs ends a container with its content. markdown-it-py ends a quote or list item where its
    block parser stopped in the container's content: after the last block, one blank line is taken if the
    content goes on past it, and then every blank line up to the next line that holds anything (the first
    line of the next block) or the end of the text, even past the container's own last line; a container
    with no content at all stops at that next line too. An empty list item followed by a blank line takes
    that one line only. A list ends where its last item does. Every block start is known, so a line after
    the last block of a container is blank exactly when no block starts on it."""
    starts = set(block_start_lines)
    starts_count = len(block_start_lines)

    def next_start(line: int) -> int:
        slot = bisect_left(block_start_lines, line)
        return block_start_lines[slot] if slot < starts_count else line_count

    last_child_ends: dict[int, int] = {}
    # A block at the top that is no container changes no end: only the others are looked at, last first.
    for position, parent in zip(reversed(inner), reversed(inner_parents)):
        record = records[position]
        content_end = content_ends.get(position)
        if content_end is not None:
            last_end = last_child_ends.get(position)
            if last_end is not None:
                end_line = last_end
                if end_line < content_end and end_line not in starts:
                    end_line += 1
                if end_line < content_end:
                    end_line = next_start(end_line)
            elif record[0] == "list_item" and record[1] + 1 not in starts:
                end_line = min(record[1] + 2, content_end)
            else:
                end_line = next_start(record[1] + 1)
            record[2] = end_line
        elif record[0] in _LIST_KINDS:
            record[2] = last_child_ends[position]
        if parent >= 0 and parent not in last_child_ends:
            last_child_ends[parent] = record[2]
