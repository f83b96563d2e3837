"""``code``: code-aware chunking that keeps functions and classes together (LocalVectorDB's code-blocks).

Units and where they start
--------------------------
Source text is cut into units at its *top-level definitions*: lines at the code's smallest indentation
that open one, for the language in use:

* ``python`` -- ``def``, ``async def``, ``class``; decorators (``@...``) and ``#`` comments directly above
  stick to the definition, and a top-level statement after an indented body starts a unit too
  (``if __name__ == "__main__":``).
* ``javascript`` (TypeScript too) -- ``function``, ``class``, ``export ...``, ``interface``, ``enum``,
  ``type X =``, ``const x = (...) =>`` / ``= function`` / ``= async ...``, ``module.exports``.
* ``java`` -- class, interface, enum, record and annotation declarations, and method or constructor
  signatures (``public static void main(String[] args) {``); annotations and ``//``, ``/* */`` or Javadoc
  comments directly above stick to them.
* ``generic`` -- blocks separated by blank lines.

A unit over ``max_tokens`` (a class, a long function) is cut again at the definitions one indentation
level further in (its methods), and so on; what is still over the budget is packed line by line, and a
single line over the budget is split at its best boundaries (:mod:`chunkline.splitting`).

``language: auto`` (the default) reads the language of each fenced block from its info string (``py``,
``python``, ``js``, ``ts``, ``typescript``, ``java``, ...; any other language is ``generic``), and guesses
it from the code's own keywords when there is none. Set a language to apply it to all code.

Markdown documents and source files
-----------------------------------
In a document with fenced code blocks, prose between the fences is cut into blank-line separated blocks
and each fence is a unit of its own: a fence that fits within ``max_tokens`` is never split (nor is a
table, list item or HTML block that fits), and one that is over the budget is cut at its definitions as
above. Heading paths come from the document's markdown headings.

A document without fences is taken as one source file. When its language is a programming language (set,
or guessed from at least three keyword signs), markdown means nothing there: its heading paths are empty (a
Python ``# comment`` is no heading) and no markdown block is protected (an indented method body is no
indented code block, a ``*`` comment line no list item). With ``generic`` it is still markdown: blank-line
blocks, markdown heading paths, and fitting tables, list items and HTML blocks kept whole.

Packing and overlap
-------------------
Consecutive units are packed into chunks within ``max_tokens``. ``overlap`` counts LINES (default 2): each
chunk after the first starts ``overlap`` lines before the end of the previous one, and always after the
previous chunk's start, so every chunk brings new text; when the overlap would push a chunk over the
budget it shrinks. An overlap that re-emits most of every chunk logs a warning.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from chunkline.capacity import Capacity
from chunkline.context import ChunkContext
from chunkline.protected import after_blank_lines, keep_ranges_whole, merge_ranges
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.strategies.units import check_overlap, paragraph_cuts, units_between
from chunkline.structure import BlockKind, MarkdownDocument
from chunkline.token_offsets import TokenOffsets

__all__ = ["CodeParams", "code_cuts", "guess_language", "language_of_info"]

logger = logging.getLogger(__name__)

Language = Literal["auto", "python", "javascript", "java", "generic"]
_LANGUAGES = ("auto", "python", "javascript", "java", "generic")


@dataclass(frozen=True)
class CodeParams:
    """Parameters of the ``code`` strategy."""

    language: Language = "auto"
    """Language of the code: ``auto`` reads fence info strings and guesses from keywords."""
    overlap: int = 2
    """LINES each chunk repeats from the end of the previous one."""

    def __post_init__(self) -> None:
        if self.language not in _LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(_LANGUAGES)}, got {self.language!r}")
        check_overlap(self.overlap, "lines")


# ------------------------------------------------------------------------------------------ languages


@dataclass(frozen=True)
class LanguageRules:
    """How one language's definitions look, line by line (each pattern matches after the indentation)."""

    name: str
    definition: re.Pattern | None
    """A line that opens a top-level definition."""
    member: re.Pattern | None
    """A line that opens a definition inside another one (a method)."""
    attached: re.Pattern | None
    """A line that belongs to the definition below it (decorator, annotation, comment)."""
    continuation: re.Pattern | None = None
    """A line that continues the statement before it (Python's ``else:``); ``None``: no dedent units."""


_JS_FUNCTION = r"(?:export[ \t]+(?:default[ \t]+)?)?(?:declare[ \t]+)?(?:async[ \t]+)?function\b"
_JS_CLASS = r"(?:export[ \t]+(?:default[ \t]+)?)?(?:declare[ \t]+)?(?:abstract[ \t]+)?class\b"
_JS_ARROW = (
    r"(?:export[ \t]+)?(?:const|let|var)[ \t]+[\w$]+[ \t]*(?::[^=]+)?=[ \t]*(?:async\b[ \t]*)?"
    r"(?:function\b|\([^)]*\)[^=;]*=>|[\w$]+[ \t]*=>|\([ \t]*$|\([^)]*$)"
)
_JS_TYPES = (
    r"(?:export[ \t]+)?(?:declare[ \t]+)?(?:interface|enum|namespace)[ \t]+[\w$]"
    r"|(?:export[ \t]+)?type[ \t]+[\w$]+.*="
)
_JS_KEYWORDS = r"(?:if|for|while|switch|catch|return|with|do|else|new|typeof|await|yield|throw|super|function)\b"
_JS_METHOD = (
    rf"(?!{_JS_KEYWORDS})(?:(?:static|async|get|set|public|private|protected|readonly|override|abstract)[ \t]+)*"
    r"\*?[ \t]*#?[\w$]+[ \t]*(?:<[^>]*>)?\([^;]*$"
)
_JAVA_MODIFIERS = (
    r"(?:(?:public|protected|private|static|abstract|final|sealed|non-sealed|strictfp|synchronized|native"
    r"|default|transient|volatile)[ \t]+)"
)
_JAVA_TYPE = rf"{_JAVA_MODIFIERS}*(?:class|interface|enum|record|@interface)[ \t]+\w"
_JAVA_KEYWORDS = r"(?:return|new|else|throw|case|if|for|while|switch|catch|try|do|assert|yield)\b"
# A return type is a dotted name with optional type arguments and array brackets: Map<String, List<T>>[].
_JAVA_RETURN_TYPE = r"[\w$.]+(?:<[^()\n]*>)?(?:[ \t]*\[\])*"
_JAVA_METHOD = (
    rf"{_JAVA_MODIFIERS}*(?!{_JAVA_KEYWORDS})(?:<[^()\n]*>[ \t]+)?{_JAVA_RETURN_TYPE}[ \t]+[\w$]+[ \t]*\([^;]*$"
    rf"|{_JAVA_MODIFIERS}+[\w$]+[ \t]*\([^;]*$"
)
_C_STYLE_ATTACHED = re.compile(r"@|//|/\*|\*")

RULES = {
    "python": LanguageRules(
        "python",
        definition=re.compile(r"(?:async[ \t]+def|def|class)[ \t]+\w"),
        member=re.compile(r"(?:async[ \t]+def|def|class)[ \t]+\w"),
        attached=re.compile(r"@|#"),
        continuation=re.compile(r"(?:else|elif|except|finally|case)\b|[)\]}]"),
    ),
    "javascript": LanguageRules(
        "javascript",
        definition=re.compile(rf"{_JS_FUNCTION}|{_JS_CLASS}|{_JS_ARROW}|{_JS_TYPES}|export\b|module\.exports\b"),
        member=re.compile(rf"{_JS_FUNCTION}|{_JS_CLASS}|{_JS_ARROW}|{_JS_METHOD}"),
        attached=_C_STYLE_ATTACHED,
    ),
    "java": LanguageRules(
        "java",
        definition=re.compile(rf"{_JAVA_TYPE}|{_JAVA_METHOD}"),
        member=re.compile(rf"{_JAVA_TYPE}|{_JAVA_METHOD}"),
        attached=_C_STYLE_ATTACHED,
    ),
    "generic": LanguageRules("generic", None, None, None),
}

_INFO_LANGUAGES = {
    **dict.fromkeys(("python", "py", "python3", "py3", "pycon", "ipython", "pyi", "sage"), "python"),
    **dict.fromkeys(
        ("javascript", "js", "jsx", "mjs", "cjs", "node", "typescript", "ts", "tsx", "mts", "cts"), "javascript"
    ),
    "java": "java",
}
_FENCE_CLOSING = re.compile(r"[ \t>]*(?:`{3,}|~{3,})[ \t]*$")
_INFO_WORD = re.compile(r"[ \t>]*(?:[-+*]|\d{1,9}[.)])?[ \t]*(?:`{3,}|~{3,})[ \t]*\{?\.?([^\s`{}]*)")

# Keyword signs of each language, counted to guess the language of code without an info string.
_SIGNS = {
    "python": re.compile(
        r"^[ \t]*(?:(?:async[ \t]+)?def[ \t]+\w+[ \t]*\([^\n]*:[ \t]*$|class[ \t]+\w+[^\n{;]*:[ \t]*$"
        r"|from[ \t]+[\w.]+[ \t]+import[ \t]|import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*$|if __name__ ==)"
        r"|\belif\b",
        re.MULTILINE,
    ),
    "javascript": re.compile(
        r"^[ \t]*(?:(?:export[ \t]+)?(?:async[ \t]+)?function\b|(?:const|var)[ \t]+[\w$]+[ \t]*=(?!=)"
        r"|import[ \t].*[ \t]from[ \t]+['\"]|module\.exports|export[ \t]+(?:default|const|class|function"
        r"|interface|type)\b)|console\.log\(|require\(['\"]|[ \t]===[ \t]",
        re.MULTILINE,
    ),
    "java": re.compile(
        rf"^[ \t]*(?:(?:public|private|protected)[ \t]+(?:static[ \t]+)?(?:final[ \t]+)?{_JAVA_RETURN_TYPE}[ \t]+\w+"
        r"[ \t]*\(|package[ \t]+[\w.]+;|import[ \t]+(?:static[ \t]+)?[\w.]+(?:\.\*)?;"
        r"|(?:public[ \t]+)?(?:final[ \t]+|abstract[ \t]+)?class[ \t]+\w+[^\n]*\{)|System\.out|@Override",
        re.MULTILINE,
    ),
}
# Characters of a text the language guess reads, and signs it needs to name a language.
_GUESS_CHARS = 65_536
_MIN_SIGNS = 1
# A whole document without fences needs more signs to be taken as source code rather than markdown.
_MIN_FILE_SIGNS = 3


def language_of_info(info: str) -> str | None:
    """The language of a fence's info string (``None`` when it names none)."""
    word = info.strip().lower()
    if not word:
        return None
    return _INFO_LANGUAGES.get(word, "generic")


def guess_language(text: str, start: int = 0, end: int | None = None, min_signs: int = _MIN_SIGNS) -> str:
    """The language whose keyword signs ``text[start:end]`` shows most (at least ``min_signs``), else
    ``generic``."""
    end = len(text) if end is None else end
    end = min(end, start + _GUESS_CHARS)
    scores = {name: sum(1 for _ in sign.finditer(text, start, end)) for name, sign in _SIGNS.items()}
    best = max(scores, key=lambda name: (scores[name], name == "python", name == "javascript"))
    return best if scores[best] >= min_signs else "generic"


# ------------------------------------------------------------------------------------ code boundaries


class Line(NamedTuple):
    """One line of a code region."""

    start: int
    """Offset of the line's first character."""
    content: int
    """Offset of its first character after the indentation."""
    end: int
    """Offset of its line break (or of the region's end)."""
    indent: int
    """Indentation width, a tab counting 4."""
    blank: bool


_INDENTATION = re.compile(r"[ \t]*")
# Characters of a line the definition patterns look at (a signature starts well within them; the bound
# keeps a very long line from costing more than that).
_LINE_WINDOW = 1000
# A code unit is cut again at its members when over the budget, at most this many levels deep.
_MAX_DEPTH = 4


def code_lines(text: str, line_starts: Sequence[int], start: int, end: int) -> list[Line]:
    """The lines of ``text[start:end]`` (``start`` a line start)."""
    first = bisect_left(line_starts, start)
    last = bisect_left(line_starts, end)
    lines = []
    for number in range(first, last):
        line_start = line_starts[number]
        line_end = line_starts[number + 1] if number + 1 < len(line_starts) else len(text)
        line_end = min(line_end, end)
        while line_end > line_start and text[line_end - 1] in "\r\n":
            line_end -= 1
        content = _INDENTATION.match(text, line_start, line_end).end()
        width = content - line_start + 3 * text.count("\t", line_start, content)
        lines.append(Line(line_start, content, line_end, width, content >= line_end))
    return lines


def _definition_starts(text: str, lines: Sequence[Line], rules: LanguageRules, indent: int, member: bool) -> list[int]:
    """Where the units of ``lines`` at indentation ``indent`` start: each definition line, moved up over
    the decorators and comments directly above it, and (Python) each statement after an indented body."""
    pattern = rules.member if member else rules.definition
    attached = rules.attached
    starts: list[int] = []
    previous_indent = -1
    for number, line in enumerate(lines):
        if line.blank:
            continue
        if line.indent == indent:
            if pattern.match(text, line.content, min(line.end, line.content + _LINE_WINDOW)):
                first = number
                while first > 0 and _is_attached(text, lines[first - 1], attached, indent):
                    first -= 1
                starts.append(lines[first].start)
            elif (
                rules.continuation is not None
                and previous_indent > indent
                and not rules.continuation.match(text, line.content, min(line.end, line.content + _LINE_WINDOW))
            ):
                starts.append(line.start)
        previous_indent = line.indent
    return starts


def _is_attached(text: str, line: Line, attached: re.Pattern, indent: int) -> bool:
    """A decorator, annotation or comment line directly above a definition at ``indent``."""
    if line.blank or line.indent < indent or not attached.match(text, line.content, line.content + 2):
        return False
    return line.indent == indent or text.startswith("*", line.content)  # Javadoc lines sit one space in


def code_cuts(
    text: str,
    line_starts: Sequence[int],
    start: int,
    end: int,
    language: str,
    offsets: TokenOffsets,
    max_tokens: int,
) -> list[int]:
    """Unit boundaries of the code in ``text[start:end]`` (``start`` a line start)."""
    rules = RULES[language]
    if rules.definition is None:
        return paragraph_cuts(text, start, end)
    lines = code_lines(text, line_starts, start, end)
    indents = [line.indent for line in lines if not line.blank]
    if not indents:
        return []
    cuts = _definition_starts(text, lines, rules, min(indents), member=False)
    return _refine(text, lines, rules, [start, *cuts, end], offsets, max_tokens, 1)


def _refine(
    text: str,
    lines: list[Line],
    rules: LanguageRules,
    bounds: list[int],
    offsets: TokenOffsets,
    max_tokens: int,
    depth: int,
) -> list[int]:
    """``bounds`` plus, inside each unit over ``max_tokens``, the starts of its members one level in."""
    bounds = sorted(set(bounds))
    result = list(bounds)
    if depth > _MAX_DEPTH:
        return result
    line_offsets = [line.start for line in lines]
    for unit_start, unit_end in zip(bounds, bounds[1:]):
        if offsets.estimate(unit_start, unit_end) <= max_tokens:
            continue
        unit_lines = lines[bisect_left(line_offsets, unit_start) : bisect_left(line_offsets, unit_end)]
        member_indent = _member_indent(text, unit_lines, rules)
        if member_indent is None:
            continue
        member_starts = [
            start
            for start in _definition_starts(text, unit_lines, rules, member_indent, member=True)
            if unit_start < start < unit_end
        ]
        # The header (class line, docstring, fields) goes with the first member when the two fit together.
        if member_starts:
            second = member_starts[1] if len(member_starts) > 1 else unit_end
            if offsets.estimate(unit_start, second) <= max_tokens:
                member_starts.pop(0)
        if member_starts:
            inner_bounds = [unit_start, *member_starts, unit_end]
            result.extend(_refine(text, unit_lines, rules, inner_bounds, offsets, max_tokens, depth + 1))
    return sorted(set(result))


def _member_indent(text: str, unit_lines: Sequence[Line], rules: LanguageRules) -> int | None:
    """Indentation of the members of the definition that ``unit_lines`` hold: the smallest one deeper than
    the header line, after it (comments and decorators above the header do not count)."""
    body = [line for line in unit_lines if not line.blank]
    if not body:
        return None
    header_indent = body[0].indent
    header = 0
    while header < len(body) - 1 and _is_attached(text, body[header], rules.attached, header_indent):
        header += 1
    inner = [line.indent for line in body[header + 1 :] if line.indent > header_indent]
    return min(inner) if inner else None


# -------------------------------------------------------------------------------------------- units


_FENCE = BlockKind.FENCE


def _fence_language(document: MarkdownDocument, start: int, end: int, language: str) -> str:
    """The language of the fence at ``[start, end)``: the configured one, else its info string's, else
    guessed from its lines."""
    if language != "auto":
        return language
    text = document.text
    first_line_end = document.index.line_start(document.index.line_of(start) + 1)
    match = _INFO_WORD.match(text, start, first_line_end)
    named = language_of_info(match.group(1)) if match else None
    return named or guess_language(text, first_line_end, end)


def markdown_cuts(document: MarkdownDocument, language: str, offsets: TokenOffsets, max_tokens: int) -> list[int]:
    """Unit boundaries of a markdown document: blank lines in prose, fence edges, and code boundaries
    inside each fence over the budget."""
    text = document.text
    fences = merge_ranges(
        (block.start_char, after_blank_lines(text, block.end_char)) for block in document.blocks if block.kind == _FENCE
    )
    cuts = keep_ranges_whole(paragraph_cuts(text), fences)  # no prose cuts inside code; fence edges added
    line_starts = document.index.line_starts
    for start, end in fences:
        if offsets.estimate(start, end) <= max_tokens:
            continue
        fence_language = _fence_language(document, start, end, language)
        body_start, body_end = _fence_body(document, start, end)
        code = code_cuts(text, line_starts, body_start, body_end, fence_language, offsets, max_tokens)
        # The opening line goes with the first unit and the closing line with the last.
        cuts.extend(cut for cut in code if body_start < cut < body_end)
    return cuts


def _fence_body(document: MarkdownDocument, start: int, end: int) -> tuple[int, int]:
    """The code lines of the fence at ``[start, end)``: without its opening line, and without its closing
    line when it has one (an unclosed fence runs to the end of its container)."""
    text, index = document.text, document.index
    body_start = index.line_start(index.line_of(start) + 1)
    content_end = start + len(text[start:end].rstrip())
    last_line_start = index.line_starts[index.line_of(max(content_end - 1, start))]
    is_closed = last_line_start > start and _FENCE_CLOSING.match(text, last_line_start, content_end)
    body_end = last_line_start if is_closed else end
    return min(body_start, body_end), body_end


def _expand_oversized(
    document: MarkdownDocument,
    units: list[tuple[int, int]],
    capacity: Capacity,
    protected: list[tuple[int, int]],
) -> tuple[list[tuple[int, int]], list[bool]]:
    """``units`` with each one over ``max_tokens`` replaced by its lines (protected ranges kept whole);
    the flags mark the units that came from such a split."""
    line_starts = document.index.line_starts
    expanded: list[tuple[int, int]] = []
    flags: list[bool] = []
    offsets, max_tokens = capacity.offsets, capacity.max_tokens
    for start, end in units:
        estimate = offsets.estimate(start, end)
        if estimate <= max_tokens or (capacity.may_fit(estimate) and capacity.within(start, end)):
            expanded.append((start, end))
            flags.append(False)
            continue
        inner = line_starts[bisect_left(line_starts, start + 1) : bisect_left(line_starts, end)]
        cuts = [cut for cut in keep_ranges_whole(inner, protected) if start < cut < end]
        bounds = [start, *cuts, end]
        expanded.extend(zip(bounds, bounds[1:]))
        flags.extend([True] * (len(bounds) - 1))
    return expanded, flags


# ------------------------------------------------------------------------------------------ packing


class _LinePacker:
    """Packs units into chunks within the budget, each chunk starting ``overlap_lines`` lines before the
    previous chunk's end (fewer when that would not fit; never at or before the previous start)."""

    def __init__(self, context: ChunkContext):
        self.context = context
        self.capacity = context.capacity
        self.line_starts = context.document.index.line_starts

    def pack(
        self,
        units: Sequence[tuple[int, int]],
        sub_split: Sequence[bool],
        overlap_lines: int,
        heading_path: tuple[str, ...] | None,
    ) -> list[ChunkSpan]:
        spans: list[ChunkSpan] = []
        first = 0
        while first < len(units):
            floor = spans[-1].start_char + 1 if spans else 0
            found = None
            for start in self._overlap_starts(units[first][0], overlap_lines, floor):
                found = self._last_fitting(units, first, start)
                if found is not None:
                    break
            if found is None:
                spans.extend(self.context.split(*units[first], heading_path))
                first += 1
                continue
            last, token_count = found
            is_sub_split = any(sub_split[first : last + 1])
            spans.append(ChunkSpan(start, units[last][1], heading_path, is_sub_split, token_count))
            first = last + 1
        return spans

    def _overlap_starts(self, unit_start: int, overlap_lines: int, floor: int) -> list[int]:
        """Chunk starts to try, the widest overlap first: ``overlap_lines`` line starts before
        ``unit_start``, then half as many, ... then ``unit_start`` itself; all at or after ``floor``."""
        before = bisect_left(self.line_starts, unit_start)  # line starts strictly before unit_start
        starts: list[int] = []
        lines = overlap_lines
        while lines > 0:
            start = self.line_starts[max(before - lines, 0)]
            if floor <= start < unit_start and start not in starts:
                starts.append(start)
            lines //= 2
        starts.append(unit_start)
        return starts

    def _last_fitting(self, units: Sequence[tuple[int, int]], first: int, start: int) -> tuple[int, int] | None:
        """(last unit, exact count) of the longest run of units from ``first`` that fits when the chunk
        begins at ``start``; ``None`` when even ``units[first]`` does not."""
        last, count = self.capacity.last_fitting(units, first, start)
        return None if count > self.capacity.max_tokens else (last, count)


def _warn_if_overlap_is_large(spans: Sequence[ChunkSpan], overlap_lines: int) -> None:
    repeated = sum(max(0, previous.end_char - span.start_char) for previous, span in zip(spans, spans[1:]))
    emitted = sum(span.end_char - span.start_char for span in spans)
    if overlap_lines and emitted and repeated * 2 > emitted:
        logger.warning(
            "overlap of %d lines re-emits %.0f%% of the text in every chunk: overlap is counted in lines, "
            "not tokens; a value of 1-3 is typical",
            overlap_lines,
            100 * repeated / emitted,
        )


# ----------------------------------------------------------------------------------------- strategy


@register_strategy("code", CodeParams)
def chunk_code(context: ChunkContext) -> list[ChunkSpan]:
    """Code-aware chunks: units at function/class definitions, packed with overlap in lines."""
    params: CodeParams = context.params
    document, text = context.document, context.text
    max_tokens, offsets = context.max_tokens, context.offsets
    has_fences = any(block.kind == _FENCE for block in document.blocks)
    heading_path: tuple[str, ...] | None = None
    if has_fences:
        cuts = markdown_cuts(document, params.language, offsets, max_tokens)
    else:
        language = params.language if params.language != "auto" else guess_language(text, min_signs=_MIN_FILE_SIGNS)
        cuts = code_cuts(text, document.index.line_starts, 0, len(text), language, offsets, max_tokens)
        if language != "generic":
            # Source code, not markdown: its comments are no headings, its indented bodies no code blocks,
            # its "*" comment lines no list items.
            heading_path = ()
    protected = context.protected_ranges if heading_path is None else []
    cuts = keep_ranges_whole(cuts, protected)
    units, sub_split = _expand_oversized(document, units_between(text, cuts), context.capacity, protected)
    spans = _LinePacker(context).pack(units, sub_split, params.overlap, heading_path)
    _warn_if_overlap_is_large(spans, params.overlap)
    return spans
