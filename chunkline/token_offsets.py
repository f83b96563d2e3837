"""Where the tokens of a text end, and exact token counts of slices without encoding them again.

A :class:`TokenOffsets` encodes a range of the document once and records the character offset at which
each token ends. From it, a slice's token count can be estimated anywhere, and is *exact* between two
positions that are "clean cuts" for the encoding.

tiktoken first splits text into pieces with a regular expression and then encodes each piece on its own,
so a slice encodes to exactly the tokens between its ends when both ends are piece boundaries and the
pieces at its edges come out the same with the slice's own ends. Two kinds of position are such "clean
cuts":

* For encodings whose pattern ends a whitespace run at its last line break (``\\s*[\\r\\n]``, as in
  ``cl100k_base`` and ``o200k_base``), a line start whose first character is neither whitespace nor ``/``:
  the run before it ends with the line break whether or not the text goes on, and nothing after a line
  break can join the piece before it (``o200k_base`` lets ``/`` follow punctuation and a line break).
* For the patterns of tiktoken's published encodings (:data:`SPACE_CUT_PATTERNS`), a space or tab right
  after a character that is not whitespace: in those patterns whitespace is only ever a piece's first
  character or part of an all-whitespace piece, so no piece runs across that position, and the pieces on
  either side are matched alike whether the text stops there or goes on.

A slice with ragged ends is counted as the encoded stretches between each end and the nearest clean cut
inside it, plus the offsets' count between those cuts.

A counter with ``slices_counted_exactly`` (a Hugging Face tokenizer, whose normalizer, pre-tokenizer and
post-processor make no such promise) has no clean cuts: every slice is counted by encoding it, and the
token ends come from the tokenizer's offsets mapping, for estimates only (``exact_estimates`` is false).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

from chunkline.text_index import as_tokenizers_see_it
from chunkline.tokenizers import TokenCounter

__all__ = ["SPACE_CUT_PATTERNS", "TokenOffsets", "spaces_are_clean_cuts"]

#: Pre-tokenizer patterns (tiktoken's ``r50k``/``p50k``, ``cl100k`` and ``o200k`` families, as tiktoken has
#: written them) for which a space or tab after a non-whitespace character is a clean cut. Another pattern
#: gets line-start cuts only: the property holds for these by their construction, not for any pattern.
SPACE_CUT_PATTERNS = frozenset(
    {
        r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
        r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
        r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
        r"""\s*[\r\n]+|\s+(?!\S)|\s+""",
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
                r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
                r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
    }
)

# Candidate clean cuts (zero-width): after a line break before a character that is neither whitespace nor
# "/", and before a space or tab that follows a non-whitespace character. Python's \s is str.isspace(),
# a superset of the Unicode White_Space the patterns use, so \S here is never whitespace to them.
_LINE_CUT = r"(?<=[\r\n])(?=[^\s/])"
_SPACE_CUT = r"(?<=\S)(?=[ \t])"
_CUT_CANDIDATES = {
    (True, False): re.compile(_LINE_CUT),
    (False, True): re.compile(_SPACE_CUT),
    (True, True): re.compile(f"{_LINE_CUT}|{_SPACE_CUT}"),
}


def spaces_are_clean_cuts(counter: TokenCounter) -> bool:
    """Whether a space or tab after a character that is not whitespace is a clean cut for ``counter``
    (a tiktoken encoding with one of the :data:`SPACE_CUT_PATTERNS`)."""
    encoding = getattr(counter, "encoding", None)
    return getattr(encoding, "_pat_str", None) in SPACE_CUT_PATTERNS


class TokenOffsets:
    """Token end offsets (in characters) of ``text[start:end]`` from one encoding of that range."""

    __slots__ = (
        "text",
        "start",
        "end",
        "counter",
        "_clean_lines",
        "_clean_spaces",
        "_cut_candidates",
        "_end_chars",
        "_aligned",
        "_end_chars_list",
        "_aligned_list",
        "exact_estimates",
        "_special_tokens",
    )

    def __init__(self, text: str, start: int, end: int, counter: TokenCounter):
        self.text = text
        self.start = start
        self.end = end
        self.counter = counter
        self._clean_lines = bool(getattr(counter, "line_starts_are_clean_cuts", False))
        self._clean_spaces = spaces_are_clean_cuts(counter)
        self._cut_candidates = _CUT_CANDIDATES.get((self._clean_lines, self._clean_spaces))
        segment = text[start:end]
        self._end_chars_list: list[int] | None = None
        self._aligned_list: list[int] | None = None
        self.exact_estimates = not getattr(counter, "slices_counted_exactly", False)
        self._special_tokens = int(getattr(counter, "special_tokens_added", 0))
        if not self.exact_estimates:
            self._clean_lines = self._clean_spaces = False
            self._cut_candidates = None
            self._end_chars = counter.token_end_chars(segment) + start
            self._aligned = None  # offsets mapping ends are character offsets
            return
        if segment.isascii():
            byte_ends = np.cumsum(counter.token_byte_lengths(counter.encode_array(segment)), dtype=np.int64)
            self._end_chars = byte_ends + start
            self._aligned = None  # every token end is a character boundary
            return
        sources = None
        try:
            encoded = segment.encode("utf-8")
        except UnicodeEncodeError:
            # Surrogate code points: encode the text as tiktoken does (see as_tokenizers_see_it) and map the
            # token ends back to offsets in the text itself.
            segment, sources = as_tokenizers_see_it(segment)
            encoded = segment.encode("utf-8")
        byte_ends = np.cumsum(counter.token_byte_lengths(counter.encode_array(segment)), dtype=np.int64)
        raw = np.frombuffer(encoded, dtype=np.uint8)
        is_char_start = (raw & 0xC0) != 0x80
        # chars_before[b] = number of characters that start before byte b.
        chars_before = np.concatenate(([0], np.cumsum(is_char_start)))
        if sources is None:
            self._end_chars = chars_before[byte_ends] + start
        else:
            self._end_chars = np.asarray(sources, dtype=np.int64)[chars_before[byte_ends]] + start
        aligned = np.ones(len(byte_ends), dtype=bool)
        inside = byte_ends < len(raw)
        aligned[inside] = is_char_start[byte_ends[inside]]
        self._aligned = aligned

    @property
    def token_end_chars(self) -> list[int]:
        """Character offset where each token ends, ascending (a token ending inside a character maps to
        the offset after that character's start)."""
        if self._end_chars_list is None:
            self._end_chars_list = self._end_chars.tolist()
        return self._end_chars_list

    @property
    def aligned_end_chars(self) -> list[int]:
        """The token ends that fall on character boundaries."""
        if self._aligned_list is None:
            if self._aligned is None:
                self._aligned_list = self.token_end_chars
            else:
                self._aligned_list = self._end_chars[self._aligned].tolist()
        return self._aligned_list

    def estimate(self, start: int, end: int) -> int:
        """Approximate token count of ``text[start:end]`` (tokens of the range that overlap the slice)."""
        if end <= start:
            return 0
        token_ends = self._end_chars_list
        if token_ends is None:
            # Two searches of the array cost less than making the list, which few documents need.
            ends = self._end_chars
            return int(ends.searchsorted(end)) - int(ends.searchsorted(start, side="right")) + 1 + self._special_tokens
        return bisect_left(token_ends, end) - bisect_right(token_ends, start) + 1 + self._special_tokens

    @property
    def token_count(self) -> int:
        """The number of tokens of the range's encoding (special tokens added included): its estimate."""
        return len(self._end_chars) + self._special_tokens

    def estimates(self, starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
        """:meth:`estimate` of each ``text[starts[i]:ends[i]]``, in two searches of the token ends."""
        token_ends = self._end_chars
        starts_array = np.asarray(starts, dtype=np.int64)
        ends_array = np.asarray(ends, dtype=np.int64)
        found = token_ends.searchsorted(ends_array) - token_ends.searchsorted(starts_array, side="right") + 1
        return np.where(ends_array > starts_array, found + self._special_tokens, 0)

    def char_after_tokens(self, start: int, tokens: int) -> int:
        """Character offset where roughly ``tokens`` tokens after ``start`` end."""
        ends = self._end_chars
        first = int(ends.searchsorted(start, side="right"))
        last = min(first + tokens - 1, len(ends) - 1)
        return int(ends[last]) if last >= 0 else start

    def char_before_tokens(self, end: int, tokens: int) -> int:
        """Character offset roughly ``tokens`` tokens before ``end`` (the range start at the most)."""
        ends = self._end_chars
        first = int(ends.searchsorted(end)) - tokens
        return int(ends[first - 1]) if first >= 1 else self.start

    def _is_clean_cut(self, position: int) -> bool:
        if position == self.start or position == self.end:
            return True
        if not self.start < position < self.end:
            return False
        if not self._clean_around(position):
            return False
        # It must also be a token end of this range's encoding.
        ends = self._end_chars
        slot = int(ends.searchsorted(position))
        return slot < len(ends) and int(ends[slot]) == position

    def _clean_around(self, position: int) -> bool:
        """The characters on either side of ``position`` (inside the range) make it a clean cut, provided
        that it is a token end too."""
        before, at = self.text[position - 1], self.text[position]
        if self._clean_spaces and at in " \t" and not before.isspace():
            return True
        return self._clean_lines and before in "\r\n" and not at.isspace() and at != "/"

    def _tokens_before(self, position: int) -> int:
        if position == self.start:
            return 0
        return int(self._end_chars.searchsorted(position, side="right"))

    def first_clean_cut(self, start: int, end: int) -> int | None:
        """The first position in ``[start, end]`` that is a clean cut of any text holding the characters
        around it (looked for a bounded distance ahead), or ``None``."""
        return self._first_clean_cut(start, end)

    def _first_clean_cut(self, start: int, end: int) -> int | None:
        """The first clean cut in [start, end], looking a bounded distance ahead."""
        if self._is_clean_cut(start):
            return start
        if self._cut_candidates is None:
            return None
        text = self.text
        if self._clean_spaces:
            window_end = min(end, start + _CHARS_SEARCHED)
            if _has_space_or_tab(text, start, window_end):
                for match in self._cut_candidates.finditer(text, start, window_end):
                    if self._is_clean_cut(match.start()):
                        return match.start()
                if window_end == end:
                    return None
        position = start
        for _ in range(_LINES_SEARCHED):
            newline = _next_line_break(text, position, end)
            if newline < 0:
                return None
            position = newline + 2 if text.startswith("\r\n", newline) else newline + 1
            if position > end:
                return None
            if self._is_clean_cut(position):
                return position
        return None

    def _last_clean_cut(self, start: int, end: int) -> int | None:
        """The last clean cut in [start, end], looking a bounded distance back."""
        if self._is_clean_cut(end):
            return end
        if self._cut_candidates is None:
            return None
        text = self.text
        if self._clean_spaces:
            # A short look first: in text with spaces the last cut is a word away.
            top = end
            scanned_all = True  # every window so far was searched for line cuts too
            for distance in (_CHARS_SEARCHED // 8, _CHARS_SEARCHED):
                window_start = max(start, end - distance)
                if _has_space_or_tab(text, window_start, top):
                    found = [match.start() for match in self._cut_candidates.finditer(text, window_start, top)]
                    for position in reversed(found):
                        if self._is_clean_cut(position):
                            return position
                else:
                    scanned_all = False
                if window_start == start:
                    if scanned_all:
                        return None
                    break
                top = window_start
        position = end
        for _ in range(_LINES_SEARCHED):
            newline = max(text.rfind("\n", start, position - 1), text.rfind("\r", start, position - 1))
            if newline < 0:
                return None
            position = newline + 1
            if position < start:
                return None
            if self._is_clean_cut(position):
                return position
        return None

    def clean_cuts(self, positions: list[int]) -> list[bool]:
        """Whether each of ``positions`` (ascending, inside the range) is a clean cut: a slice that ends or
        starts there counts exactly as the offsets say, and the counts of two slices that meet there add
        up to the count of the two together."""
        if not self.exact_estimates:
            return [position == self.start or position == self.end for position in positions]
        ends = self._end_chars
        if len(ends) == 0:
            return [position == self.start or position == self.end for position in positions]
        array = np.asarray(positions, dtype=np.int64)
        slots = ends.searchsorted(array)
        is_token_end = (slots < len(ends)) & (ends[np.minimum(slots, len(ends) - 1)] == array)
        return [
            position == self.start or position == self.end or (at_token_end and self._clean_around(position))
            for position, at_token_end in zip(positions, is_token_end.tolist())
        ]

    def counts_between(self, cuts: list[int], clean: list[bool] | None = None) -> list[int]:
        """Exact token counts of ``text[cuts[i]:cuts[i+1]]`` for ascending ``cuts`` inside the range
        (``clean``: their :meth:`clean_cuts`, when known)."""
        if len(cuts) < 2:
            return []
        if not self.exact_estimates:
            return [self.count(cuts[number], cuts[number + 1]) for number in range(len(cuts) - 1)]
        ends = self._end_chars
        if len(ends) == 0:
            return [0] * (len(cuts) - 1)
        before = ends.searchsorted(np.asarray(cuts, dtype=np.int64), side="right")
        if clean is None:
            clean = self.clean_cuts(cuts)
        before_list = before.tolist()
        if cuts[0] == self.start:
            before_list[0] = 0
        counts = []
        for number in range(len(cuts) - 1):
            if clean[number] and clean[number + 1]:
                counts.append(before_list[number + 1] - before_list[number])
            else:
                counts.append(self.count(cuts[number], cuts[number + 1]))
        return counts

    def clean_cuts_and_counts(self, cuts: list[int]) -> tuple[list[bool], list[int]]:
        """:meth:`clean_cuts` of ``cuts`` (ascending, inside the range, at least two) and the
        :meth:`counts_between` them, from one search of the token ends for each side (a cut is a token end
        when some token ends there: more ends at or before it than before it)."""
        ends = self._end_chars
        if not self.exact_estimates or len(ends) == 0:
            clean = self.clean_cuts(cuts)
            return clean, self.counts_between(cuts, clean)
        array = np.asarray(cuts, dtype=np.int64)
        ends_up_to = ends.searchsorted(array, side="right").tolist()  # token ends at or before each cut
        ends_before = ends.searchsorted(array).tolist()  # token ends strictly before each cut
        start, end = self.start, self.end
        clean = [
            position == start or position == end or (up_to > before and self._clean_around(position))
            for position, up_to, before in zip(cuts, ends_up_to, ends_before)
        ]
        if cuts[0] == start:
            ends_up_to[0] = 0
        counts = [
            ends_up_to[number + 1] - ends_up_to[number]
            if clean[number] and clean[number + 1]
            else self.count(cuts[number], cuts[number + 1])
            for number in range(len(cuts) - 1)
        ]
        return clean, counts

    def count(self, start: int, end: int) -> int:
        """Exact token count of ``text[start:end]``.

        Between clean cuts it is read off the offsets; a slice with ragged ends is counted as its encoded
        first and last partial lines plus the offsets' count between them, since a clean cut is a boundary
        of every slice that contains it."""
        if end <= start:
            return 0
        if not self.exact_estimates:
            return self.counter.count(self.text[start:end])
        first = self._first_clean_cut(start, end)
        last = self._last_clean_cut(first, end) if first is not None else None
        if first is None or last is None or last < first:
            return self.counter.count(self.text[start:end])
        total = self._tokens_before(last) - self._tokens_before(first)
        if first > start:
            total += self.counter.count(self.text[start:first])
        if last < end:
            total += self.counter.count(self.text[last:end])
        return total


# A ragged slice end looks this many characters, then this many lines, ahead or back for a clean cut before
# encoding the whole slice.
_CHARS_SEARCHED = 256
_LINES_SEARCHED = 16


def _has_space_or_tab(text: str, start: int, end: int) -> bool:
    return text.find(" ", start, end) >= 0 or text.find("\t", start, end) >= 0


def _next_line_break(text: str, start: int, end: int) -> int:
    newline = text.find("\n", start, end)
    carriage = text.find("\r", start, newline if newline >= 0 else end)
    return carriage if carriage >= 0 else newline
