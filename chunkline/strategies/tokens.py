"""``tokens``: fixed windows of ``max_tokens`` tokens with ``overlap_tokens`` of overlap, ignoring structure.

DocForge's ``size`` strategy and LocalVectorDB's ``tokens`` method. The windows advance by
``max_tokens - overlap_tokens`` tokens of the document's own encoding (``chunking.tokenizer``, any tiktoken
encoding; DocForge calls it ``token_model``). Each chunk is still the verbatim slice of the source: a window
edge that falls inside a multi-byte character moves back to the start of that character, and a window
whose text re-encodes to more tokens than the limit is shortened until it fits. DocForge's bounds apply:
``max_tokens`` from 64 to 8192.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunkline.context import ChunkContext
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.splitting import split_token_windows

#: DocForge's accepted range of ``max_tokens`` for size-based chunking.
MIN_WINDOW_TOKENS = 64
MAX_WINDOW_TOKENS = 8192


@dataclass(frozen=True)
class TokensParams:
    """``tokens`` has no parameters of its own: it uses ``max_tokens``, ``overlap_tokens`` and ``tokenizer``."""

    def check(self, config) -> None:
        if not MIN_WINDOW_TOKENS <= config.max_tokens <= MAX_WINDOW_TOKENS:
            raise ValueError(
                f"max_tokens must be from {MIN_WINDOW_TOKENS} to {MAX_WINDOW_TOKENS} for the tokens strategy, "
                f"got {config.max_tokens}"
            )


@register_strategy("tokens", TokensParams, keeps_blocks_whole=False)
def chunk_by_tokens(context: ChunkContext) -> list[ChunkSpan]:
    """Windows of max_tokens tokens advancing by max_tokens - overlap_tokens (DocForge size)."""
    text = context.text
    pieces = split_token_windows(
        text, 0, len(text), context.counter, context.max_tokens, context.overlap_tokens, context.offsets
    )
    if context.overlap_tokens and len(pieces) > 1:
        context.check_overlap_tokens()
    return [ChunkSpan(piece.start_char, piece.end_char, None, False, piece.token_count) for piece in pieces]
