"""``blocks``: atomic markdown blocks packed up to a soft size target (the structure-aware chunker, seed 001).

How the chunks are made
-----------------------
1. **Atoms.** The document is cut into atoms at the start of every top-level block: paragraph, fenced or
   indented code block, table, block quote, HTML block, thematic break, front matter, heading — and a
   list is cut into its items, each item one atom. Whatever lies between blocks (blank lines, link
   reference definitions) belongs to the atom before it, and leading whitespace to the first atom, so the
   atoms partition the text: every byte of input is in exactly one atom.
2. **Sections.** Chunks break at every document-level heading: the heading's atom starts a new chunk and
   sticks to the atoms after it (a heading is never the last thing in a chunk). ``heading_path`` comes from
   the heading stack: a heading closes every open heading of the same or a deeper level.
3. **Packing.** Within a section, atoms are added to the chunk in order while the chunk stays within the
   soft target: ``max_bytes`` UTF-8 bytes (``target: bytes``, the seed's ``MAX_CHUNK_BYTES = 1000``) or
   ``chunking.max_tokens`` tokens (``target: tokens``). A chunk always takes at least one atom after its
   heading, so one atom over the target is a chunk of its own rather than being cut; a code block over the
   target is always a chunk by itself (with its heading, if it is the section's first atom).
4. **Token limit** (PRODUCT invariant 2). A chunk whose exact token count is over ``chunking.max_tokens`` is
   split at the best boundaries (:func:`chunkline.splitting.split_at_boundaries`, no overlap, pieces marked
   ``is_sub_split``). The one exception is the documented soft bound: with ``never_split_code: true`` (the
   default) a top-level fenced or indented code block (:data:`SOFT_LIMIT_KINDS`) over the limit is kept whole
   as a chunk of exactly that one atom — the seed's "hard-capped only inside an intact code block". A block
   whose lines fit and only its trailing blank lines go over is not over the limit: it is cut before them.
   :func:`soft_limit_spans` lists the ranges allowed to exceed the limit. Code inside a list item or a
   quote is part of that atom; it is kept whole when it fits within ``max_tokens`` and cut between lines
   when it does not.

Chunks never overlap: ``chunking.overlap_tokens`` is not used by this strategy.

Heading lines stay in the chunk text by default, so ``reconstruct(chunks)`` is exact. With
``strip_headings: true`` a heading's atom (its line(s) and the blank lines after it) is left out of every
chunk, as in seed 001, where headings live only in the breadcrumb: chunk text then holds content only, and
``reconstruct()`` cannot rebuild the document (the heading lines are gaps). A section with no content
under its heading then produces no chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from chunkline.context import ChunkContext
from chunkline.record import ChunkSpan
from chunkline.registry import register_strategy
from chunkline.settings import check_whole_number
from chunkline.structure import Block, BlockKind, HeadingStack, MarkdownDocument

__all__ = [
    "SOFT_LIMIT_KINDS",
    "Atom",
    "BlocksParams",
    "atomic_blocks",
    "chunk_blocks",
    "is_soft_limit_chunk",
    "soft_limit_spans",
]

#: Kinds of top-level block that ``never_split_code`` keeps whole even over ``max_tokens`` (the soft bound).
SOFT_LIMIT_KINDS = frozenset({BlockKind.FENCE, BlockKind.CODE_BLOCK})

_LIST_KINDS = frozenset({BlockKind.BULLET_LIST, BlockKind.ORDERED_LIST})


@dataclass(frozen=True)
class BlocksParams:
    """Parameters of the ``blocks`` strategy."""

    target: Literal["bytes", "tokens"] = "bytes"
    """The soft size target's unit: ``max_bytes`` UTF-8 bytes, or ``chunking.max_tokens`` tokens."""
    max_bytes: int = 1000
    """Soft size target in UTF-8 bytes (``target: bytes``); one atom larger than it is a chunk of its own."""
    never_split_code: bool = True
    """Keep a top-level code block whole even over ``max_tokens`` (the documented soft bound)."""
    strip_headings: bool = False
    """Leave heading lines out of the chunks (they stay in ``heading_path``); reconstruction is then lossy."""

    def __post_init__(self) -> None:
        if self.target not in ("bytes", "tokens"):
            raise ValueError(f"target must be 'bytes' or 'tokens', got {self.target!r}")
        check_whole_number(self.max_bytes, "max_bytes", minimum=1)
        for name in ("never_split_code", "strip_headings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")


class Atom(NamedTuple):
    """An atomic range of the document: one top-level block (or list item) and the whitespace after it."""

    start_char: int
    end_char: int
    block: Block | None
    """The block the atom starts with; ``None`` for a document without blocks (empty or blank)."""

    @property
    def kind(self) -> str | None:
        """The starting block's kind (a :class:`~chunkline.structure.BlockKind` name), or ``None``."""
        return self.block.kind if self.block is not None else None


def atomic_blocks(document: MarkdownDocument) -> list[Atom]:
    """The document's atoms, in order; they partition ``document.text`` (one empty atom for empty text)."""
    starters = [
        block
        for block in document.blocks
        if (block.depth == 0 and block.kind not in _LIST_KINDS)
        or (block.depth == 1 and block.kind == BlockKind.LIST_ITEM)
    ]
    length = len(document.text)
    if not starters:
        return [Atom(0, length, None)]
    starts = [0] + [block.start_char for block in starters[1:]]
    ends = starts[1:] + [length]
    return [Atom(start, end, block) for start, end, block in zip(starts, ends, starters)]


def soft_limit_spans(document: MarkdownDocument) -> frozenset[tuple[int, int]]:
    """(start_char, end_char) of every atom that is a top-level code block: with ``never_split_code`` these
    are the only chunks ``blocks`` lets exceed ``max_tokens``."""
    return frozenset(
        (atom.start_char, atom.end_char) for atom in atomic_blocks(document) if atom.kind in SOFT_LIMIT_KINDS
    )


def is_soft_limit_chunk(document: MarkdownDocument, start_char: int, end_char: int) -> bool:
    """Whether ``[start_char, end_char)`` is exactly one top-level code block atom (the soft bound)."""
    return (start_char, end_char) in soft_limit_spans(document)


# --------------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------------


class _Section(NamedTuple):
    heading: Atom | None
    content: list[Atom]
    path: tuple[str, ...]


def _sections(atoms: Sequence[Atom]) -> list[_Section]:
    """Atoms grouped under their document-level headings, with each heading's path."""
    sections: list[_Section] = [_Section(None, [], ())]
    stack = HeadingStack()
    for atom in atoms:
        if atom.kind == BlockKind.HEADING:
            block = atom.block
            sections.append(_Section(atom, [], stack.enter(block.heading_level, block.heading_text)))
        else:
            sections[-1].content.append(atom)
    return [section for section in sections if section.heading is not None or section.content]


def _pack_section(
    section: _Section,
    size_of: Callable[[Atom], int],
    fits: Callable[[int, int, int], bool],
    target_size: int,
) -> list[list[Atom]]:
    """Groups of consecutive atoms of one section: greedy, within ``fits``; a heading sticks to the next atom
    and a code atom over ``target_size`` is a group of its own."""
    groups: list[list[Atom]] = []
    current: list[Atom] = [section.heading] if section.heading is not None else []
    current_size = size_of(section.heading) if section.heading is not None else 0
    has_content = False
    for atom in section.content:
        size = size_of(atom)
        if atom.kind in SOFT_LIMIT_KINDS and size > target_size:
            if has_content:
                groups.append(current)
                current, current_size = [], 0
            groups.append(current + [atom])
            current, current_size, has_content = [], 0, False
            continue
        if has_content and not fits(current[0].start_char, atom.end_char, current_size + size):
            groups.append(current)
            current, current_size = [], 0
        current.append(atom)
        current_size += size
        has_content = True
    if current:
        groups.append(current)
    return groups


class _BlocksChunker:
    """One document's atoms, sizes and token offsets, and the packing and limit checks over them."""

    def __init__(self, context: ChunkContext):
        document = context.document
        self.context = context
        self.params: BlocksParams = context.params
        self.text = context.text
        self.max_tokens = context.max_tokens
        self.offsets = context.offsets
        self.atoms = atomic_blocks(document)
        bounds = [atom.start_char for atom in self.atoms] + [len(self.text)]
        if self.params.target == "tokens":
            counts = self.offsets.counts_between(bounds)
            self.sizes = {atom.start_char: count for atom, count in zip(self.atoms, counts)}
            self.target_size = self.max_tokens
        else:
            byte_at = document.index.byte_offsets(bounds)
            self.sizes = {atom.start_char: byte_at[atom.end_char] - byte_at[atom.start_char] for atom in self.atoms}
            self.target_size = self.params.max_bytes

    def _size_of(self, atom: Atom) -> int:
        return self.sizes[atom.start_char]

    def _fits(self, start: int, end: int, size: int) -> bool:
        """Whether ``[start, end)`` of summed size ``size`` is within the target (exact near a token target)."""
        if self.params.target == "bytes":
            return size <= self.target_size
        capacity = self.context.capacity
        if not capacity.may_fit(size):
            return False
        return capacity.surely_fits(size) or capacity.within(start, end)

    def _kept_code_count(self, atom: Atom) -> int | None:
        """The token count of a code atom over ``max_tokens`` that ``never_split_code`` keeps whole, else
        ``None``."""
        if not self.params.never_split_code or atom.kind not in SOFT_LIMIT_KINDS:
            return None
        count = self.offsets.count(atom.start_char, atom.end_char)
        if count <= self.max_tokens:
            return None
        # The atom holds the blank lines after the block: a block that fits only without them is not over
        # the limit, and is cut with the rest of its run (before its trailing line breaks) instead.
        content_end = atom.start_char + len(self.text[atom.start_char : atom.end_char].rstrip())
        if self.offsets.count(atom.start_char, content_end) <= self.max_tokens:
            return None
        return count

    def _spans_of_group(self, group: list[Atom], path: tuple[str, ...]) -> list[ChunkSpan]:
        """The group as one chunk when it fits ``max_tokens``; otherwise each code atom over the limit whole
        (the soft bound) and the runs of atoms between them split at the best boundaries."""
        start, end = group[0].start_char, group[-1].end_char
        count = self.offsets.count(start, end)
        if count <= self.max_tokens:
            return [ChunkSpan(start, end, path, False, count)]
        spans: list[ChunkSpan] = []
        run_start = start
        for atom in group:
            code_count = self._kept_code_count(atom)
            if code_count is None:
                continue
            if run_start < atom.start_char:
                spans.extend(self._spans_of_run(run_start, atom.start_char, path))
            spans.append(ChunkSpan(atom.start_char, atom.end_char, path, False, code_count))
            run_start = atom.end_char
        if run_start < end:
            spans.extend(self._spans_of_run(run_start, end, path))
        return spans

    def _spans_of_run(self, start: int, end: int, path: tuple[str, ...]) -> list[ChunkSpan]:
        """``[start, end)`` as one chunk, or split at the best boundaries when over ``max_tokens``."""
        count = self.offsets.count(start, end)
        if count <= self.max_tokens:
            return [ChunkSpan(start, end, path, False, count)]
        return self.context.split(start, end, path)

    def chunk(self) -> list[ChunkSpan]:
        """The document's chunk spans, in order."""
        spans: list[ChunkSpan] = []
        for section in _sections(self.atoms):
            for group in _pack_section(section, self._size_of, self._fits, self.target_size):
                if self.params.strip_headings and group[0].kind == BlockKind.HEADING:
                    group = group[1:]
                if group:
                    spans.extend(self._spans_of_group(group, section.path))
        return spans or [ChunkSpan(0, 0, (), False, 0)]


def within_max_bytes(context: ChunkContext, start_char: int, end_char: int, joins_heading: bool = False) -> bool:
    """Whether ``[start_char, end_char)`` keeps the ``max_bytes`` target (always, with ``target: tokens``).
    The target is soft: a heading (or front matter) joining its neighbour may go past it."""
    params: BlocksParams = context.params
    if joins_heading or params.target == "tokens" or 4 * (end_char - start_char) <= params.max_bytes:
        return True  # a character is at most 4 bytes
    if end_char - start_char > params.max_bytes:
        return False
    return len(context.text[start_char:end_char].encode("utf-8", "surrogatepass")) <= params.max_bytes


@register_strategy(
    "blocks", BlocksParams, soft_limit_kinds=SOFT_LIMIT_KINDS, merges_fragments=True, size_target=within_max_bytes
)
def chunk_blocks(context: ChunkContext) -> list[ChunkSpan]:
    """Whole blocks (paragraphs, code, list items, tables) packed to a soft size; a chunk per heading.

    The size target is ``max_bytes`` UTF-8 bytes or ``max_tokens`` tokens; code blocks are never split and
    every byte is in exactly one chunk (seed 001)."""
    return _BlocksChunker(context).chunk()
