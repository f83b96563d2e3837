"""``regex``: cut the document at every match of a pattern of your own (LocalVectorDB's RegexChunker).

Every match *start* is a cut, so the matched text opens the next chunk: ``pattern: "^## "`` gives one chunk
per level-2 section, ``pattern: "^(SECTION \\d+): "`` one per ``SECTION n:`` line, ``pattern: "^---$"`` one
per part between rules (each rule heading the part after it). Text before the first match is a chunk of
its own. Nothing is dropped: the chunks are verbatim slices that reconstruct the document exactly.

Options:

* ``multiline`` (default true): ``^`` and ``$`` match at every line, as they do in most editors;
  ``ignore_case`` (default false).
* Each piece between two matches is one chunk. A piece over ``max_tokens`` is split at its best boundaries
  (between blocks, lines, sentences, words; see :mod:`chunkline.splitting`) with ``overlap_tokens`` of
  overlap, as the ``headings`` strategy does; its pieces are marked ``is_sub_split``.
* ``merge_small`` (default false) packs consecutive pieces into chunks while they fit within
  ``max_tokens`` instead, for patterns that match often (one piece over the budget is still split alone).

The pattern runs on the `regex <https://pypi.org/project/regex/>`_ module (Python ``re`` syntax, plus a
few extensions) with a time limit: ``timeout_seconds`` (default 5) per document. A pattern that
backtracks catastrophically, such as ``(a+)+$`` on a long run of ``a``, raises :class:`RegexTimeoutError`
for that document -- the pipeline records it as an error row and goes on -- instead of hanging the run.
A pattern that does not compile is refused when the config is loaded, with the pattern in the message.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from chunkline.context import ChunkContext
from chunkline.packing import pack_units, units_from_cuts
from chunkline.patterns import (
    DEFAULT_TIMEOUT_SECONDS,
    RegexTimeoutError,
    check_timeout,
    compile_pattern,
    match_starts,
)
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy

__all__ = ["RegexParams", "RegexTimeoutError", "compile_pattern", "match_starts"]


@dataclass(frozen=True)
class RegexParams:
    """Parameters of the ``regex`` strategy."""

    pattern: str
    """Regular expression whose every match starts a new chunk (required)."""
    multiline: bool = True
    """``^`` and ``$`` match at line starts and ends (``re.MULTILINE``)."""
    ignore_case: bool = False
    """Match letters case-insensitively (``re.IGNORECASE``)."""
    merge_small: bool = False
    """Pack consecutive pieces into chunks while they fit within ``max_tokens``."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """Time limit of the pattern on one document; past it the document fails with RegexTimeoutError."""

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ValueError(f"pattern must be a non-empty regular expression, got {self.pattern!r}")
        for name in ("multiline", "ignore_case", "merge_small"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_timeout(self.timeout_seconds)
        self.compiled()

    def compiled(self) -> regex.Pattern:
        """The compiled pattern with the configured flags."""
        flags = (regex.MULTILINE if self.multiline else 0) | (regex.IGNORECASE if self.ignore_case else 0)
        return compile_pattern(self.pattern, flags)


@register_strategy(
    "regex",
    RegexParams,
    keeps_blocks_whole=False,  # the user's pattern decides where chunks start, even inside a table
    example_params=RegexParams(pattern=r"^#{1,6} "),
)
def chunk_by_regex(context: ChunkContext) -> list[ChunkSpan]:
    """One chunk per piece between matches of a pattern; pieces over max_tokens are split."""
    params: RegexParams = context.params
    text = context.text
    pieces = units_from_cuts(match_starts(params.compiled(), text, params.timeout_seconds), len(text))
    if params.merge_small:
        return pack_units(context, pieces, 0, unit_name="pieces")
    counts = context.offsets.counts_between([start for start, _ in pieces] + [len(text)])
    spans: list[ChunkSpan] = []
    for (start, end), token_count in zip(pieces, counts):
        if token_count <= context.max_tokens:
            spans.append(ChunkSpan(start, end, None, False, token_count))
        else:
            spans.extend(context.split(start, end, None, context.overlap_tokens))
    return spans
