"""A chunking strategy shipped by another package, registered through the ``chunkline.strategies``
entry point: one chunk per part of the document between thematic breaks (``---``), parts over the token
limit split at chunkline's best boundaries."""

from __future__ import annotations

from dataclasses import dataclass

from chunkline.record import ChunkSpan
from chunkline.registry import Strategy
from chunkline.splitting import split_document_range
from chunkline.structure import BlockKind


@dataclass(frozen=True)
class ThematicBreakParams:
    """Parameters of ``thematic-breaks``."""

    break_before: bool = True
    """True: a thematic break starts the part after it; False: it ends the part before it."""


def chunk_at_thematic_breaks(document, config, counter):
    text = document.text
    cuts = [0]
    for block in document.blocks:
        if block.kind == BlockKind.THEMATIC_BREAK and block.depth == 0:
            cuts.append(block.start_char if config.params.break_before else block.end_char)
    cuts = sorted(set(cuts) | {len(text)})
    spans = []
    for start, end in zip(cuts, cuts[1:] or [len(text)]):
        pieces = split_document_range(document, start, end, counter, config.max_tokens)
        spans.extend(ChunkSpan(p.start_char, p.end_char, None, len(pieces) > 1, p.token_count) for p in pieces)
    return spans


STRATEGY = Strategy(
    name="thematic-breaks",
    params_type=ThematicBreakParams,
    chunk=chunk_at_thematic_breaks,
    description="One chunk per part between thematic breaks (an example plugin).",
)
