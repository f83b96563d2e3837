"""What a strategy works from: one document prepared once, and the token budget it is chunked to.

The engine builds one :class:`ChunkContext` per document and hands it to the strategy: the document, the
config and its parameters, the tokenizer, the document's token offsets (one encoding of the whole text),
its sections and the protected blocks that fit. Its :class:`Capacity` answers "does this range fit" and
"how far does a run of units fit" with exact counts.
"""

from __future__ import annotations

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
        return [ChunkSpan(piece.start_char, piece.end_char, heading_path, True, piece.token_count) for piece in pieces]

    def first_split_end(self, start: int, end: int) -> int:
        """Where the first span :meth:`split` cuts ``text[start:end]`` into ends (whatever the overlap),
        found without cutting the rest of the range."""
        return first_piece_of_range(self.document, start, end, self.counter, self.max_tokens, self.offsets).end_char
