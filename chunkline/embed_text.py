"""What the embedding model sees of a chunk: ``title``, ``embed_text`` and ``embed_token_count``.

A chunk's ``text`` is the verbatim slice of its document; its ``embed_text`` is that text as a retrieval
model should embed it::

    <context line> "\\n\\n" [<table header row> <delimiter row>] <body>

* The context line renders ``chunking.embed_context``, a template with the placeholders ``{title}`` (the
  document's title), ``{heading_path}`` (the chunk's heading path joined with `` > ``) and ``{breadcrumb}``
  (the title, then the heading path; the title is left out when it is the first heading). Empty headings
  are left out, the rendered line is stripped, and a line that renders empty adds nothing: no separator,
  no blank line.
* A chunk that starts inside a table, after the table's header, gets the header row and the delimiter row
  repeated after the context line, so that its rows still say what their columns are.
* ``none`` turns both off: ``embed_text`` is then the body alone, and the strategy keeps the whole budget
  (its chunks are those of a chunker without ``embed_text``).
* The body is the chunk's text without the front matter (metadata, not content: its title is in the
  context line), without a byte order mark and without leading blank lines.

``embed_token_count`` is the exact count of ``embed_text`` in the configured tokenizer, and never over
``max_tokens`` -- except for a chunk that is over it itself (a strategy's documented soft bound on one atomic
unit), whose ``embed_text`` is then its body alone.

The budget: before the strategy runs, :meth:`EmbedText.reserve` works out what the context may add to a
chunk of this document -- the count of the longest context line among the sections that hold 90% of the
document's text (:data:`RESERVE_TEXT_SHARE`; sections ordered by the count of their line, so that a few
small sections under long headings do not take budget from the rest), plus the largest header of a table
that may be split -- capped at a quarter of ``max_tokens``, and never so much that a protected block (code,
table, list item, HTML block) that fits ``max_tokens`` would no longer fit the rest. The strategy chunks to
``max_tokens`` minus the reserve: the context line is cut before the text. A chunk whose ``embed_text`` is
still over ``max_tokens`` (a section whose line is longer than the reserve, a heading path of the strategy's
own, tokens that merge differently across a join) drops the header repeat, then shortens its context line
(outer headings first, then the title), then goes without; each step is counted exactly.
"""

from __future__ import annotations

import re
import string
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

from chunkline.capacity import Capacity
from chunkline.protected import after_blank_lines
from chunkline.structure import PROTECTED_KINDS, MarkdownDocument, Section, section_paths
from chunkline.token_offsets import TokenOffsets, spaces_are_clean_cuts
from chunkline.tokenizers import TiktokenCounter, TokenCounter

__all__ = [
    "DEFAULT_EMBED_CONTEXT",
    "NO_CONTEXT",
    "PLACEHOLDERS",
    "EmbedText",
    "check_embed_context",
    "context_is_off",
]

#: The placeholders of ``chunking.embed_context``.
PLACEHOLDERS = ("title", "heading_path", "breadcrumb")

#: The default template: the title and the heading path, as one breadcrumb line.
DEFAULT_EMBED_CONTEXT = "{breadcrumb}"

#: The ``embed_context`` value that turns the context line off.
NO_CONTEXT = "none"

#: Between the context line (and the repeated table header) and the body.
SEPARATOR = "\n\n"

#: Between the parts of ``{heading_path}`` and ``{breadcrumb}``.
PATH_SEPARATOR = " > "

#: The reserve is at most ``max_tokens // RESERVE_SHARE``: the chunk's own text keeps most of the budget.
RESERVE_SHARE = 4

#: The reserve is the longest context line of the sections with the shortest lines that together hold this
#: share of the document's text: chosen by the retrieval benchmark (benchmarks/bench_retrieval.py) over the
#: longest line of all sections, whose reserve took up to a quarter of the budget from every chunk of a
#: document for a few sections under long headings.
RESERVE_TEXT_SHARE = 0.9

# Exact counts of breadcrumb pieces (a heading after " > ", a title), per tokenizer name: the same
# headings recur across the documents of a corpus ("Motivation", "Examples", ...).
_PIECE_COUNTS: dict[str, dict[str, int]] = {}
_MAX_PIECE_COUNTS = 100_000

#: The smallest budget a strategy is given (see chunkline.config.MIN_MAX_TOKENS).
_MIN_BUDGET = 4

# The delimiter row of a table with a leading pipe or two columns holds a "|" before a "-" or ":";
# documents without one have no such table, and their parser tokens are not scanned for tables. (The
# pattern starts with a literal, which the regular expression engine looks for at C speed.)
_MAYBE_DELIMITER_ROW = re.compile(r"\|[ \t]*[-:]")


def context_is_off(template: str) -> bool:
    """Whether ``template`` turns the context line off (``none``, in any case)."""
    return template.strip().lower() == NO_CONTEXT


def check_embed_context(template: object) -> None:
    """Raise ``ValueError`` unless ``template`` is ``none`` or a template of known placeholders."""
    if not isinstance(template, str):
        raise ValueError(f"expected a template such as {DEFAULT_EMBED_CONTEXT!r} or {NO_CONTEXT!r}, got {template!r}")
    if context_is_off(template):
        return
    known = ", ".join(f"{{{name}}}" for name in PLACEHOLDERS)
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise ValueError(
            f"{template!r} is not a template ({error}); placeholders: {known}, and {{{{ or }}}} for a brace"
        ) from None
    unknown = sorted({name for name in names if name not in PLACEHOLDERS})
    if unknown:
        raise ValueError(
            f"unknown placeholder{'s' if len(unknown) > 1 else ''} {', '.join(f'{{{name}}}' for name in unknown)} "
            f"in {template!r}; known: {known} (or {NO_CONTEXT!r} for no context line)"
        )
    try:
        template.format_map(dict.fromkeys(PLACEHOLDERS, "x"))
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as error:
        raise ValueError(f"{template!r} cannot be rendered: {error}") from None


class _Table:
    """A table's header (its header row and delimiter row) and where its body rows are."""

    __slots__ = ("start", "header_end", "end", "header")

    def __init__(self, start: int, header_end: int, end: int, header: str):
        self.start = start
        self.header_end = header_end
        self.end = end
        self.header = header


class EmbedText:
    """The ``title``, ``embed_text`` and ``embed_token_count`` of one document's chunks.

    Built once per document. :meth:`reserve` (called before the strategy runs, when the budget is reduced
    for the context) may encode the document's token offsets, which the strategy can then reuse
    (:attr:`offsets`); :meth:`embed` gives each chunk its ``embed_text`` and count."""

    def __init__(
        self,
        document: MarkdownDocument,
        counter: TokenCounter,
        max_tokens: int | None,
        template: str = DEFAULT_EMBED_CONTEXT,
        overlap_tokens: int = 0,
        *,
        doc_id: str = "",
    ):
        self.document = document
        self.counter = counter
        self.max_tokens = max_tokens
        """No ``embed_text`` has more tokens than this; ``None`` for no limit."""
        self.overlap_tokens = overlap_tokens
        self.template = None if context_is_off(template) else template
        self.title = document.title or title_from_doc_id(doc_id)
        """The front matter's ``title`` when it is a non-empty string, else the first H1's text, else the
        words of the file's name (:func:`title_from_doc_id`), else ``""``."""
        self._title_part = " ".join(self.title.split())
        self.offsets: TokenOffsets | None = None
        """The document's token offsets, when the reserve needed them."""
        self._prefix_counts: dict[str, int] = {}
        self._line_counts: dict[tuple[str, ...], int] = {}
        # heading path -> (context line and separator, its count, context line)
        self._prefixes: dict[tuple[str, ...], tuple[str, int, str]] = {}
        self._special = int(getattr(counter, "special_tokens_added", 0))
        self._byte_level = isinstance(counter, TiktokenCounter)
        # The default breadcrumb is counted from its parts where spaces are clean cuts.
        self._breadcrumbs_by_parts = self.template == DEFAULT_EMBED_CONTEXT and spaces_are_clean_cuts(counter)
        # A line start whose first character is neither whitespace nor "/" is a clean cut for such counters
        # (chunkline.token_offsets): a prefix that ends with a line break then counts on its own.
        self._clean_joins = bool(getattr(counter, "line_starts_are_clean_cuts", False)) and not getattr(
            counter, "slices_counted_exactly", False
        )
        text = self._text = document.text
        front_matter = document.front_matter
        self._front_matter_end = front_matter.end_char if front_matter is not None else 0
        if not self._front_matter_end and text.startswith("\ufeff"):
            self._front_matter_end = 1
        self._tables = self._find_tables() if self.template is not None else []
        self._table_header_ends = [table.header_end for table in self._tables]

    # ----------------------------------------------------------------------------------------------
    # The context line
    # ----------------------------------------------------------------------------------------------

    def context_line(self, heading_path: Sequence[str]) -> str:
        """The rendered context line of a chunk under ``heading_path`` (``""`` for none)."""
        return self._prefix(tuple(heading_path))[2]

    def _prefix(self, heading_path: tuple[str, ...]) -> tuple[str, int, str]:
        """(the context line and separator, its exact token count, the context line) for ``heading_path``."""
        prefixed = self._prefixes.get(heading_path)
        if prefixed is None:
            try:
                prefixed = self._prefixes[heading_path] = self._new_prefix(heading_path)
            except TypeError:
                # A heading path that is not text (a strategy's bug): the chunk row's own check names it.
                prefixed = self._prefixes[heading_path] = self._new_prefix(tuple(map(str, heading_path)))
        return prefixed

    def _new_prefix(self, heading_path: tuple[str, ...]) -> tuple[str, int, str]:
        if not self._breadcrumbs_by_parts:
            line = self._render(self._title_part, heading_path)
            return line + SEPARATOR, self._prefix_count(line + SEPARATOR) if line else 0, line
        crumbs = self._crumbs(self._title_part, heading_path)
        line = PATH_SEPARATOR.join(crumbs)
        if not line:
            return SEPARATOR, 0, ""
        if all(part and not part[-1].isspace() for part in crumbs) and not line[0].isspace():
            return line + SEPARATOR, self._breadcrumb_count(crumbs), line
        line = line.strip()
        return line + SEPARATOR, self._prefix_count(line + SEPARATOR) if line else 0, line

    def _breadcrumb_count(self, crumbs: tuple[str, ...]) -> int:
        """The count of ``" > ".join(crumbs) + SEPARATOR``, from the parent breadcrumb's count: the space
        before each ``>`` follows a character that is not whitespace, a clean cut for the counter
        (:data:`chunkline.token_offsets.SPACE_CUT_PATTERNS`), so the line counts as its parent and the
        rest counted apart (pieces shared by many lines, such as a heading that recurs in many documents,
        are counted once per process)."""
        if len(crumbs) == 1:
            return self._piece_count(crumbs[0] + SEPARATOR)
        return self._breadcrumb_line_count(crumbs[:-1]) + self._piece_count(PATH_SEPARATOR + crumbs[-1] + SEPARATOR)

    def _breadcrumb_line_count(self, crumbs: tuple[str, ...]) -> int:
        """The count of ``" > ".join(crumbs)`` (see :meth:`_breadcrumb_count`)."""
        count = self._line_counts.get(crumbs)
        if count is None:
            if len(crumbs) == 1:
                count = self._piece_count(crumbs[0])
            else:
                count = self._breadcrumb_line_count(crumbs[:-1]) + self._piece_count(PATH_SEPARATOR + crumbs[-1])
            self._line_counts[crumbs] = count
        return count

    def _piece_count(self, piece: str) -> int:
        counts = _PIECE_COUNTS.setdefault(self.counter.name, {})
        count = counts.get(piece)
        if count is None:
            if len(counts) >= _MAX_PIECE_COUNTS:
                counts.clear()
            count = counts[piece] = self.counter.count(piece)
        return count

    @staticmethod
    def _crumbs(title: str, heading_path: tuple[str, ...]) -> tuple[str, ...]:
        parts = heading_path if "" not in heading_path else tuple(part for part in heading_path if part)
        return parts if not title or (parts and parts[0] == title) else (title, *parts)

    def _render(self, title: str, heading_path: tuple[str, ...]) -> str:
        template = self.template
        if template is None:
            return ""
        parts = heading_path if "" not in heading_path else tuple(part for part in heading_path if part)
        crumbs = self._crumbs(title, parts)
        if template == DEFAULT_EMBED_CONTEXT:
            return PATH_SEPARATOR.join(crumbs).strip()
        values = {
            "title": title,
            "heading_path": PATH_SEPARATOR.join(parts),
            "breadcrumb": PATH_SEPARATOR.join(crumbs),
        }
        return template.format_map(values).strip()

    def _shorter_lines(self, heading_path: tuple[str, ...]) -> list[str]:
        """Ever shorter context lines for ``heading_path``: outer headings dropped one by one (the innermost
        kept), then the title; ``""`` last. Lines equal to one before them are left out."""
        parts = tuple(part for part in heading_path if part)
        candidates = [(self._title_part, parts[drop:]) for drop in range(1, len(parts))]
        candidates += [(self._title_part, ()), ("", parts[-1:])] if parts else []
        lines: list[str] = []
        seen = {self.context_line(heading_path)}
        for title, path in candidates:
            line = self._render(title, path)
            if line and line not in seen:
                seen.add(line)
                lines.append(line)
        return [*lines, ""]

    # ----------------------------------------------------------------------------------------------
    # The reserve
    # ----------------------------------------------------------------------------------------------

    def reserve(
        self,
        heading_paths: Iterable[Sequence[str]],
        keeps_blocks_whole: bool = True,
        section_chars: Sequence[int] | None = None,
    ) -> int:
        """Tokens of the budget left to what :meth:`embed` adds to the chunks of this document.

        ``heading_paths`` are the heading paths the chunks will have (those of the document's sections),
        ``section_chars`` the length of each of those sections in characters. The longest context line
        (with its separator) of the sections that hold :data:`RESERVE_TEXT_SHARE` of the text, taken in
        the order of their lines' counts (of all of them without ``section_chars``), plus the largest
        header of a table that may be split, capped at ``max_tokens // 4``, so that the rest stays above ``overlap_tokens`` and leaves a
        chunk's text at least 4 tokens besides the special tokens every count includes; for a
        strategy that ``keeps_blocks_whole``, lowered so that every protected block that fits
        ``max_tokens`` still fits the rest."""
        max_tokens = self.max_tokens
        if max_tokens is None:
            return 0
        # The special tokens every count includes are not room for text: the reserve never takes the last
        # _MIN_BUDGET tokens of what they leave.
        cap = min(
            max_tokens // RESERVE_SHARE,
            max_tokens - self._special - _MIN_BUDGET,
            max_tokens - self.overlap_tokens - 1,
        )
        if cap <= 0:
            return 0
        line_tokens = 0
        if self.template is not None:
            prefix_of = self._prefix
            line_counts = [prefix_of(path)[1] for path in heading_paths]
            if section_chars is not None and len(section_chars) == len(line_counts) and line_counts:
                line_tokens = max(0, _covering_count(line_counts, section_chars, RESERVE_TEXT_SHARE) - self._special)
            else:
                line_tokens = max(0, max(line_counts, default=0) - self._special)
        header_tokens = 0
        if self._tables:
            offsets = self._document_offsets()
            slack = _slack(offsets)
            threshold = max_tokens - min(cap, line_tokens)
            table_estimates = offsets.estimates(
                [table.start for table in self._tables], [table.end for table in self._tables]
            )
            for table, estimate in zip(self._tables, table_estimates.tolist()):
                if not keeps_blocks_whole or estimate + slack > threshold:
                    header_tokens = max(header_tokens, self._prefix_count(table.header) - self._special)
        reserve = min(cap, line_tokens + header_tokens)
        if reserve and keeps_blocks_whole:
            largest = self._largest_block_over(max_tokens - reserve)
            if largest:
                reserve = max_tokens - largest
        return reserve

    def _largest_block_over(self, threshold: int) -> int:
        """The largest exact count of a protected block's content that is over ``threshold`` and within
        ``max_tokens``; 0 when there is none."""
        max_tokens = self.max_tokens
        assert max_tokens is not None
        document = self.document
        text = document.text
        offsets = self._document_offsets()
        slack = _slack(offsets)
        if offsets.token_count + slack <= threshold:
            return 0
        # Estimates from the offsets' arrays (the strategy may never need the token ends as a list), in
        # one call for the sections and one for the long blocks in those that may hold one over threshold.
        sections = document.sections
        section_estimates = offsets.estimates(
            [section.start_char for section in sections], [section.end_char for section in sections]
        ).tolist()
        # A byte-level BPE token holds at least one UTF-8 byte: a block of few characters has few tokens.
        min_chars = threshold // (1 if document.index.is_ascii else 4) if self._byte_level else 0
        blocks = [
            block
            for section, estimate in zip(sections, section_estimates)
            if estimate + slack > threshold
            for block in document.blocks_within(section.start_char, section.end_char, PROTECTED_KINDS)
            if block.end_char - block.start_char > min_chars
        ]
        if not blocks:
            return 0
        block_estimates = offsets.estimates(
            [block.start_char for block in blocks], [block.end_char for block in blocks]
        )
        largest = 0
        for block, estimate in zip(blocks, block_estimates.tolist()):
            if estimate + slack <= threshold or estimate > max_tokens + slack:
                continue
            content_end = block.start_char + len(text[block.start_char : block.end_char].rstrip())
            count = offsets.count(block.start_char, content_end)
            if threshold < count <= max_tokens:
                largest = max(largest, count)
        return largest

    def _document_offsets(self) -> TokenOffsets:
        if self.offsets is None:
            text = self.document.text
            self.offsets = TokenOffsets(text, 0, len(text), self.counter)
        return self.offsets

    # ----------------------------------------------------------------------------------------------
    # Tables
    # ----------------------------------------------------------------------------------------------

    def _find_tables(self) -> list[_Table]:
        document = self.document
        text = document.text
        if not _MAYBE_DELIMITER_ROW.search(text):
            return []
        tables = []
        for start, header_end, end in document.table_ranges():
            if header_end < end:  # a table with body rows: only a chunk that starts in those gets the header
                tables.append(_Table(start, header_end, end, text[start:header_end]))
        return tables

    def _table_header_at(self, position: int) -> str:
        """The header and delimiter rows of the table whose body rows hold ``position``, or ``""``."""
        slot = bisect_right(self._table_header_ends, position) - 1
        if slot >= 0:
            table = self._tables[slot]
            if position < table.end:
                return table.header
        return ""

    # ----------------------------------------------------------------------------------------------
    # Each chunk
    # ----------------------------------------------------------------------------------------------

    def embed(
        self, start: int, end: int, heading_path: tuple[str, ...], token_count: int, chunk_text: str | None = None
    ) -> tuple[str, int]:
        """``(embed_text, embed_token_count)`` of the chunk ``text[start:end]`` (``chunk_text`` when given)
        under ``heading_path``, whose text has ``token_count`` tokens."""
        text = self._text
        if chunk_text is None:
            chunk_text = text[start:end]
        body_start = start if start >= self._front_matter_end else self._front_matter_end
        if body_start < end and text[body_start].isspace():
            body_start = after_blank_lines(text, body_start, end)
        if body_start == start:
            body, body_count = chunk_text, token_count
        else:
            body = text[body_start:end]
            body_count = self.offsets.count(body_start, end) if self.offsets is not None else self.counter.count(body)
        prefix, prefix_count, line = self._prefixes.get(heading_path) or self._prefix(heading_path)
        header = self._table_header_at(body_start) if self._tables and body else ""
        if not body:
            return self._line_alone(heading_path, line)
        if header:
            prefix = (prefix if line else "") + header
            prefix_count = self._prefix_count(prefix)
        elif not line:
            return body, body_count
        if self._clean_joins and not body[0].isspace() and body[0] != "/":
            count = prefix_count + body_count  # the prefix ends with a line break: a clean cut
        else:
            count = self._joined_count(prefix, body_start, end, body, body_count)
        max_tokens = self.max_tokens
        if max_tokens is None or count <= max_tokens:
            return prefix + body, count
        return self._shortened(heading_path, line, header, (body_start, end, body, body_count), chunk_text, token_count)

    def embed_many(
        self,
        starts: Sequence[int],
        ends: Sequence[int],
        heading_paths: Sequence[tuple[str, ...]],
        token_counts: Sequence[int],
        chunk_texts: Sequence[str],
    ) -> list[tuple[str, int]]:
        """:meth:`embed` of each chunk; the common case (a chunk that starts with its own text, outside
        front matter and tables, under a context line that joins it cleanly) without a call per chunk."""
        text = self._text
        front_matter_end = self._front_matter_end
        prefixes = self._prefixes
        prefix_of = self._prefix
        clean = self._clean_joins and not self._tables
        limit = self.max_tokens if self.max_tokens is not None else float("inf")
        embed = self.embed
        results = []
        append = results.append
        for start, end, heading_path, token_count, chunk_text in zip(
            starts, ends, heading_paths, token_counts, chunk_texts
        ):
            if clean and front_matter_end <= start < end:
                first = text[start]
                if not first.isspace() and first != "/":
                    prefix, prefix_count, line = prefixes.get(heading_path) or prefix_of(heading_path)
                    if not line:
                        append((chunk_text, token_count))
                        continue
                    count = prefix_count + token_count
                    if count <= limit:
                        append((prefix + chunk_text, count))
                        continue
            append(embed(start, end, heading_path, token_count, chunk_text))
        return results

    def _line_alone(self, heading_path: tuple[str, ...], line: str) -> tuple[str, int]:
        """The ``embed_text`` of a chunk without a body (its text is front matter or blank): the context
        line, shortened until it is within ``max_tokens``."""
        max_tokens = self.max_tokens
        for candidate in [line, *self._shorter_lines(heading_path)] if line else []:
            count = self._prefix_count(candidate)
            if max_tokens is None or count <= max_tokens:
                return candidate, count
        return "", 0

    def _shortened(
        self,
        heading_path: tuple[str, ...],
        line: str,
        header: str,
        body_slice: tuple[int, int, str, int],
        chunk_text: str,
        token_count: int,
    ) -> tuple[str, int]:
        """The first of these within ``max_tokens``: without the table header, then with ever shorter
        context lines; else the body, or the verbatim text when only that fits."""
        max_tokens = self.max_tokens
        assert max_tokens is not None
        body_start, end, body, body_count = body_slice
        lines = [line] if header and line else []
        lines += self._shorter_lines(heading_path) if line else [""]
        for candidate in lines:
            if not candidate:
                break
            prefix = candidate + SEPARATOR
            count = self._joined_count(prefix, body_start, end, body, body_count)
            if count <= max_tokens:
                return prefix + body, count
        if body_count > max_tokens and token_count <= max_tokens:
            return chunk_text, token_count
        return body, body_count

    def _prefix_count(self, prefix: str) -> int:
        count = self._prefix_counts.get(prefix)
        if count is None:
            count = self._prefix_counts[prefix] = self.counter.count(prefix)
        return count

    def _joined_count(self, prefix: str, body_start: int, end: int, body: str, body_count: int) -> int:
        """The exact count of ``prefix + body`` (``body`` is ``text[body_start:end]``).

        For counters with clean line-start cuts (:mod:`chunkline.token_offsets`), a prefix that ends with a
        line break counts on its own when the body starts with neither whitespace nor ``/``; otherwise
        only the prefix and the body up to the body's first clean cut are encoded, and the rest is read off
        the document's token offsets. Any other counter encodes the joined text."""
        if self._clean_joins and prefix[-1] in "\r\n":
            first = body[0]
            if not first.isspace() and first != "/":
                return self._prefix_count(prefix) + body_count
            offsets = self.offsets
            if offsets is not None:
                # Past the body's first character, so that the cut's neighbours are the body's own.
                cut = offsets.first_clean_cut(body_start + 1, end)
                if cut is not None and cut < end:
                    return self.counter.count(prefix + self._text[body_start:cut]) + offsets.count(cut, end)
        return self.counter.count(prefix + body)


def _covering_count(counts: Sequence[int], weights: Sequence[int], share: float) -> int:
    """The smallest of ``counts`` that is at least the count of ``share`` of the total weight."""
    total = sum(weights)
    if total <= 0:
        return max(counts)
    covered = 0
    for count, weight in sorted(zip(counts, weights)):
        covered += weight
        if covered >= share * total:
            return count
    return max(counts)


def _slack(offsets: TokenOffsets) -> int:
    """How far an estimate of these offsets can be from an exact count (see :class:`Capacity`)."""
    return Capacity.SLACK if offsets.exact_estimates else Capacity.LOOSE_SLACK


def heading_paths_of(sections: Sequence[Section] | None, document: MarkdownDocument) -> list[tuple[str, ...]]:
    """The heading paths a document's chunks can take by default: its markdown sections' and, when a
    custom section pattern is set, those sections' too."""
    paths = section_paths(document.sections)
    if sections is not None and sections is not document.sections:
        paths += section_paths(tuple(sections))
    return paths


def embed_text_for(document: MarkdownDocument, config: Any, counter: TokenCounter, doc_id: str = "") -> EmbedText:
    """The :class:`EmbedText` of the document ``doc_id`` under the ``chunking`` config ``config``."""
    return EmbedText(document, counter, config.max_tokens, config.embed_context, config.overlap_tokens, doc_id=doc_id)


#: File names that name a folder's page rather than a topic: their folder's name is the title.
_FOLDER_PAGE_NAMES = frozenset({"index", "_index", "readme"})
_NAME_SEPARATORS = re.compile(r"[-_.\s]+")


def title_from_doc_id(doc_id: str) -> str:
    """The title a file's name gives a document without a front matter title or an H1: the words of its
    name without the extension and without leading parts that hold digits (``rust-rfcs/0001-private-fields.md``
    -> ``private fields``, ``ch03-02-data-types.md`` -> ``data types``); an ``index``, ``_index`` or ``README``
    page takes its folder's name. ``""`` when nothing is left."""
    parts = [part for part in doc_id.split("/") if part]
    while parts:
        name = parts.pop()
        stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
        if stem.lower() in _FOLDER_PAGE_NAMES:
            continue
        words = [word for word in _NAME_SEPARATORS.split(stem) if word]
        while words and any(character.isdigit() for character in words[0]):
            words.pop(0)
        return " ".join(words)
    return ""
