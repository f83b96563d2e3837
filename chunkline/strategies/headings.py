"""``headings``: split at headings, then guard the token limit (mdvdb's algorithm, with exact cuts).

1. The document is cut at every document-level heading whose level is within
   ``min_heading_level..max_heading_level``. Text before the first such heading is the preamble chunk with
   an empty heading path (whitespace alone before the first heading joins that heading's chunk instead). A
   document without headings is one chunk; an empty document is one empty chunk.
2. A heading stack gives each section its ``heading_path``: a heading pops every open heading of the same
   or a deeper level, so ``## Setup`` under ``# Installation`` has the path ``["Installation", "Setup"]``.
3. A section over ``max_tokens`` is split into pieces with ``overlap_tokens`` of overlap, each marked
   ``is_sub_split`` and keeping the section's path. ``sub_split: boundaries`` (the default) cuts at the best
   boundary inside the window: between blocks, then lines, sentences, words, and tokens only when one word
   is longer than the window; code blocks, tables and list items that fit are never cut.
   ``sub_split: window`` is mdvdb's exact sliding token window.

Headings inside fenced or indented code, HTML blocks, block quotes and list items never split: the first
three are not headings in CommonMark, and the last two are content of the quote or item that holds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chunkline.context import ChunkContext
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.splitting import split_token_windows
from chunkline.structure import HeadingStack


@dataclass(frozen=True)
class HeadingsParams:
    """Parameters of the ``headings`` strategy."""

    min_heading_level: int = 1
    """Shallowest heading level that starts a chunk (1 = ``#``)."""
    max_heading_level: int = 6
    """Deepest heading level that starts a chunk; deeper headings stay inside their parent's chunk."""
    sub_split: Literal["boundaries", "window"] = "boundaries"
    """How a section over ``max_tokens`` is split: at the best boundaries, or mdvdb's raw token window."""

    def __post_init__(self) -> None:
        for name in ("min_heading_level", "max_heading_level"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 6:
                raise ValueError(f"{name} must be a heading level from 1 to 6, got {value!r}")
        if self.min_heading_level > self.max_heading_level:
            raise ValueError(
                f"min_heading_level ({self.min_heading_level}) is greater than "
                f"max_heading_level ({self.max_heading_level})"
            )
        if self.sub_split not in ("boundaries", "window"):
            raise ValueError(f"sub_split must be 'boundaries' or 'window', got {self.sub_split!r}")


@register_strategy("headings", HeadingsParams, merges_fragments=True)
def chunk_by_headings(context: ChunkContext) -> list[ChunkSpan]:
    """Split at headings (levels min..max) with a heading path; sections over max_tokens are sub-split."""
    params: HeadingsParams = context.params
    text = context.text
    splitting = [
        heading
        for heading in context.document.headings
        if params.min_heading_level <= heading.heading_level <= params.max_heading_level
    ]
    # (start, end, heading path) of each section.
    sections: list[tuple[int, int, tuple[str, ...]]] = []
    starts = [heading.start_char for heading in splitting]
    if not splitting or text[: starts[0]].strip():
        sections.append((0, starts[0] if starts else len(text), ()))
    elif starts:
        starts[0] = 0
    stack = HeadingStack()
    for number, heading in enumerate(splitting):
        end = starts[number + 1] if number + 1 < len(starts) else len(text)
        sections.append((starts[number], end, stack.enter(heading.heading_level, heading.heading_text)))

    # One encoding of the whole document; sections cut at clean line starts are counted from it exactly.
    offsets = context.offsets
    max_tokens, overlap_tokens = context.max_tokens, context.overlap_tokens
    counts = offsets.counts_between([start for start, _, _ in sections] + [len(text)])
    spans: list[ChunkSpan] = []
    for (start, end, path), token_count in zip(sections, counts):
        if token_count <= max_tokens:
            spans.append(ChunkSpan(start, end, path, False, token_count))
        elif params.sub_split == "window":
            if overlap_tokens:
                context.check_overlap_tokens()
            pieces = split_token_windows(text, start, end, context.counter, max_tokens, overlap_tokens, offsets)
            spans.extend(ChunkSpan(p.start_char, p.end_char, path, True, p.token_count) for p in pieces)
        else:
            spans.extend(context.split(start, end, path, overlap_tokens))
    return spans
