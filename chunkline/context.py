"""What a strategy works from: one document prepared once, and the token budget it is chunked to.

The engine builds one :class:`ChunkContext` per document and hands it to the strategy: the document, the
config and its parameters, the tokenizer, the document's token offsets (one encoding of the whole text),
its sections and the protected blocks that fit. Its :class:`Capacity` answers "does this range fit" and
"how far does a run of units fit" with exact counts.

Chunks cut with ``overlap_tokens`` of overlap repeat up to that much of the chunk before them: fixed windows
of the budget (``tokens``, ``sub_split: window``) advance by the budget less ``overlap_tokens``, pieces cut
at boundaries (:meth:`ChunkContext.split`, ``scored`` in token mode) by at least that much.
:meth:`ChunkContext.check_overlap_tokens` logs a warning, once per process, when that re-emits most of every
chunk, as the unit strategies do for their ``overlap`` (:mod:`chunkline.packing`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from chunkline.capacity import Capacity
from chunkline.protected import fitting_protected_ranges
from chunkline.record import ChunkSpan
from chunkline.splitting import first_piece_of_range, split_document_range
from chunkline.structure import MarkdownDocument, Section
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter

__all__ = ["ChunkContext"]

logger = logging.getLogger(__name__)


class ChunkContext:
    """One document prepared for a strategy; what it needs more than once is computed once, when first
    asked for."""

    def __init__(
        self,
        document: MarkdownDocument,
        config: Any,
        counter: TokenCounter,
        *,
        max_tokens: int | None = None,
        offsets: TokenOffsets | None = None,
    ):
        self.document = document
        self.config = config
        self.counter = counter
        self.text = document.text
        self.params = config.params
        self.max_tokens: int = config.max_tokens if max_tokens is None else max_tokens
        """The token budget of each span: ``config.max_tokens`` less what the engine reserves for the
        context it adds to each chunk's ``embed_text`` (:mod:`chunkline.embed_text`). Strategies read
        budgets here (and through :attr:`capacity`), never from the config."""
        self.overlap_tokens: int = config.overlap_tokens
        if offsets is not None:
            self.offsets = offsets

    @cached_property
    def offsets(self) -> TokenOffsets:
        """Token offsets of the whole document, from one encoding."""
        return TokenOffsets(self.text, 0, len(self.text), self.counter)

    @cached_property
    def capacity(self) -> Capacity:
        return Capacity(self.offsets, self.max_tokens)

    @property
    def sections(self) -> tuple[Section, ...]:
        return self.document.sections

    @cached_property
    def protected_ranges(self) -> list[tuple[int, int]]:
        """Merged ranges of the protected blocks that fit within ``max_tokens`` (see
        :func:`chunkline.protected.fitting_protected_ranges`)."""
        return fitting_protected_ranges(self.document, self.offsets, self.max_tokens)

    def split(
        self, start: int, end: int, heading_path: tuple[str, ...] | None = None, overlap_tokens: int = 0
    ) -> list[ChunkSpan]:
        """``text[start:end]``, over the budget, split at its best boundaries into sub-split spans."""
        pieces = split_document_range(
            self.document, start, end, self.counter, self.max_tokens, overlap_tokens, self.offsets
        )
        spans = [ChunkSpan(piece.start_char, piece.end_char, heading_path, True, piece.token_count) for piece in pieces]
        if overlap_tokens:
            self.check_overlap_tokens(spans)
        return spans

    def check_overlap_tokens(self, spans: Sequence[ChunkSpan] | None = None) -> None:
        """Log a warning when ``overlap_tokens`` re-emits most of every chunk, once per process for a
        strategy, ``max_tokens``, ``overlap_tokens`` and ``embed_context`` (not once per document). Changes no chunk.

        Without ``spans``: for fixed windows of the budget (``max_tokens`` less the reserve for the context
        line) that advance by the budget less ``overlap_tokens``, when that stride is under half the
        budget. With ``spans`` (consecutive chunks cut at boundaries, whose overlap is at most
        ``overlap_tokens``): when the text they repeat is over half the text they hold."""
        budget, overlap = self.max_tokens, self.overlap_tokens
        if overlap * 2 <= budget:
            return  # no chunk of the budget repeats more than half of itself
        key = (self.config.strategy, self.config.max_tokens, overlap, getattr(self.config, "embed_context", None))
        if key in _warned:
            return
        if spans is None:
            stride = budget - overlap
            found = (
                f"leaves windows of {budget} tokens ({self._budget_of()}) advancing {stride} "
                f"token{'' if stride == 1 else 's'}: each token of text lands in about "
                f"{round(budget / max(stride, 1))} chunks"
            )
        else:
            repeated = sum(max(0, before.end_char - after.start_char) for before, after in zip(spans, spans[1:]))
            emitted = sum(span.end_char - span.start_char for span in spans)
            if repeated * 2 <= emitted:
                return
            found = (
                f"re-emits {100 * repeated / emitted:.0f}% of the text in every chunk of up to {budget} tokens "
                f"({self._budget_of()})"
            )
        _warned.add(key)
        remedy = f"lower overlap_tokens to {budget // 2} or less"
        if self.config.max_tokens > budget:
            remedy += f" ({self.config.max_tokens // 2} or less with embed_context: none)"
        logger.warning("overlap_tokens %d %s; %s", overlap, found, remedy)

    def _budget_of(self) -> str:
        """How the budget comes from ``max_tokens``, for a message."""
        max_tokens = self.config.max_tokens
        reserve = max_tokens - self.max_tokens
        return (
            f"max_tokens {max_tokens} less {reserve} for the context line"
            if reserve > 0
            else f"max_tokens {max_tokens}"
        )

    def first_split_end(self, start: int, end: int) -> int:
        """Where the first span :meth:`split` cuts ``text[start:end]`` into ends (whatever the overlap),
        found without cutting the rest of the range."""
        return first_piece_of_range(self.document, start, end, self.counter, self.max_tokens, self.offsets).end_char


_warned: set[tuple[str, int, int, str | None]] = set()
