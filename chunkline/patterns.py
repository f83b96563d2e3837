"""User regular expressions with a time limit, so that a pattern cannot hang a run on one document.

Patterns run on the `regex` module (Python ``re`` syntax), whose searches take a ``timeout``: a pattern
that backtracks catastrophically raises :class:`RegexTimeoutError` for that document instead of running
for hours; the pipeline records it as an error row and goes on.
"""

from __future__ import annotations

import functools

import regex

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_TIMEOUT_SECONDS",
    "RegexTimeoutError",
    "check_timeout",
    "compile_pattern",
    "finditer_within",
    "match_starts",
]

#: Default time limit of one pattern on one document, in seconds.
DEFAULT_TIMEOUT_SECONDS = 5.0


class RegexTimeoutError(ValueError):
    """A user's pattern ran longer than its time limit on one document (catastrophic backtracking)."""


@functools.lru_cache(maxsize=64)
def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern:
    """``pattern`` compiled with the regex module; a ``ValueError`` naming the pattern if it is invalid."""
    try:
        return regex.compile(pattern, flags | regex.VERSION0)
    except (regex.error, TypeError, OverflowError, RecursionError) as error:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {error}") from None


#: The longest time limit: the regex module treats a larger one (1e15 s and up) as already spent.
MAX_TIMEOUT_SECONDS = 86_400.0


def check_timeout(timeout_seconds: object) -> None:
    """A time limit is a finite, positive number of seconds, at most :data:`MAX_TIMEOUT_SECONDS`."""
    if (
        isinstance(timeout_seconds, bool)
        or not isinstance(timeout_seconds, (int, float))
        or not 0 < timeout_seconds <= MAX_TIMEOUT_SECONDS  # also refuses nan and inf
    ):
        raise ValueError(
            f"timeout_seconds must be a number of seconds > 0 and at most {MAX_TIMEOUT_SECONDS:g}, "
            f"got {timeout_seconds!r}"
        )


def finditer_within(compiled: regex.Pattern, text: str, timeout_seconds: float, setting: str = "pattern"):
    """The matches of ``compiled`` in ``text``, all found within ``timeout_seconds`` in total.

    :class:`RegexTimeoutError` names the pattern and the limit when the search runs out of time."""
    try:
        return list(compiled.finditer(text, timeout=timeout_seconds))
    except TimeoutError:
        raise RegexTimeoutError(
            f"{setting} {compiled.pattern!r} did not finish within the time limit of {timeout_seconds:g} s "
            f"on this document ({len(text)} characters); it probably backtracks catastrophically (nested "
            f"quantifiers such as (a+)+): simplify it, or raise timeout_seconds"
        ) from None


def match_starts(compiled: regex.Pattern, text: str, timeout_seconds: float) -> list[int]:
    """Start offset of every match, ascending (within the time limit)."""
    return [match.start() for match in finditer_within(compiled, text, timeout_seconds)]
