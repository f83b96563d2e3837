"""Exact positions in a document: line starts, line/column lookup and character-to-byte offsets.

Line breaks are markdown's: ``\\r\\n``, ``\\r`` and ``\\n``. ``\\u2028``, ``\\x85`` and ``\\x0c`` are ordinary
characters here, as they are to a CommonMark parser, even though ``str.splitlines`` would break on them.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

__all__ = ["LINE_BREAK", "TextIndex", "as_tokenizers_see_it", "utf8_length"]

LINE_BREAK = re.compile(r"\r\n?|\n")

_plus_one = (1).__add__


def utf8_length(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (lone surrogates count as the 3 bytes they would occupy)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def as_tokenizers_see_it(text: str) -> tuple[str, list[int] | None]:
    """``text`` with its surrogate code points as tiktoken encodes them, and where each character came from.

    A Python string can hold surrogate code points that UTF-8 cannot: tiktoken encodes such text by
    reading it as UTF-16, so a high surrogate followed by a low one is the character they encode and any
    other surrogate is U+FFFD. Returns ``(text, None)`` when there is none; otherwise the text tiktoken
    encodes and, for each of its characters and one past its end, the offset in ``text`` it starts at (a
    pair is one character standing for two)."""
    if text.isascii():
        return text, None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text, None
    seen = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    sources: list[int] = []
    position = 0
    length = len(text)
    while position < length:
        sources.append(position)
        is_pair = (
            "\ud800" <= text[position] <= "\udbff"
            and position + 1 < length
            and "\udc00" <= text[position + 1] <= "\udfff"
        )
        position += 2 if is_pair else 1
    sources.append(length)
    if len(sources) != len(seen) + 1:  # not the reading described above: fail loudly, never miscount
        raise AssertionError("surrogates were not read as UTF-16 reads them")
    return seen, sources


class TextIndex:
    """Line starts of a text and conversions from character offsets to lines, columns and bytes."""

    __slots__ = ("text", "line_starts", "is_ascii")

    def __init__(self, text: str):
        self.text = text
        if "\r" in text:
            self.line_starts: list[int] = [0]
            self.line_starts.extend([match.end() for match in LINE_BREAK.finditer(text)])
        else:
            # The common case, in C: a line starts after each "\n" (no Python code runs per line).
            self.line_starts = list(accumulate(map(_plus_one, map(len, text.split("\n"))), initial=0))
            del self.line_starts[-1]
        self.is_ascii = text.isascii()

    @property
    def line_count(self) -> int:
        """Number of lines, counting a last line that has no line break; an empty text has one line."""
        return len(self.line_starts)

    def line_start(self, line: int) -> int:
        """Character offset where 0-based ``line`` starts; one past the last line gives ``len(text)``."""
        if line < len(self.line_starts):
            return self.line_starts[line]
        return len(self.text)

    def line_of(self, char: int) -> int:
        """0-based line that contains character offset ``char``."""
        return bisect_right(self.line_starts, char) - 1

    def line_column(self, char: int) -> tuple[int, int]:
        """1-based (line, column) of character offset ``char``; columns count characters."""
        line = bisect_right(self.line_starts, char) - 1
        return line + 1, char - self.line_starts[line] + 1

    def byte_offsets(self, chars: Iterable[int]) -> dict[int, int]:
        """UTF-8 byte offset of each character offset in ``chars``, computed in one pass over the text."""
        wanted = sorted(set(chars))
        if self.is_ascii:
            return {char: char for char in wanted}
        offsets: dict[int, int] = {}
        previous_char = 0
        previous_byte = 0
        text = self.text
        for char in wanted:
            previous_byte += utf8_length(text[previous_char:char])
            previous_char = char
            offsets[char] = previous_byte
        return offsets
