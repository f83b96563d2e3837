"""``chunk_markdown`` and ``reconstruct``: the engine's entry points. No Beam here."""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from chunkline.config import ChunkConfig
from chunkline.context import ChunkContext
from chunkline.fragments import merge_fragments
from chunkline.record import Chunk, ChunkSpan, chunk_uuid
from chunkline.registry import get_strategy
from chunkline.structure import MarkdownDocument, Section, parse_markdown, section_paths, sections_by_pattern
from chunkline.tokenizers import TokenCounter, counter_for

__all__ = ["CHUNKING_VERSION", "chunk_markdown", "chunk_document", "reconstruct", "ReconstructionError"]

#: Raised whenever the same bytes and config would give different chunks than before, so that incremental
#: rebuilds know that chunks made by an older chunkline cannot be reused.
CHUNKING_VERSION = "4"


class ReconstructionError(ValueError):
    """The chunks do not cover one document without gaps."""


def chunk_markdown(
    text: str,
    config: ChunkConfig | None = None,
    *,
    doc_id: str = "",
    source_uri: str = "",
) -> list[Chunk]:
    """Chunk the markdown ``text`` with ``config`` (the defaults when ``None``).

    Every chunk's ``text`` is ``text[start_char:end_char]``, no chunk has more than ``config.max_tokens``
    tokens, and ``reconstruct(chunks) == text``.
    """
    config = config or ChunkConfig()
    counter = counter_for(config)
    return chunk_document(parse_markdown(text), config, counter, doc_id=doc_id, source_uri=source_uri)


def chunk_document(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
) -> list[Chunk]:
    """Chunk an already parsed document with an already loaded tokenizer (what pipeline workers call).

    ``replaced_bytes`` lists ``(char_offset, byte_length)`` for each U+FFFD that stands for invalid bytes
    of the file, so that byte offsets still point into the file's bytes."""
    strategy = get_strategy(config.strategy)
    context = ChunkContext(document, config, counter)
    spans = strategy.run(context)
    if not spans:
        spans = [ChunkSpan(0, len(document.text))]
    sections = sections_by_pattern(document, config.section_pattern) if config.section_pattern else None
    if strategy.merges_fragments and config.effective_min_tokens:
        spans = merge_fragments(context, spans, config.effective_min_tokens, sections, strategy.size_target)
    return build_chunks(
        document,
        spans,
        config.strategy,
        counter,
        doc_id=doc_id,
        source_uri=source_uri,
        replaced_bytes=replaced_bytes,
        sections=sections,
    )


def build_chunks(
    document: MarkdownDocument,
    spans: Sequence[ChunkSpan],
    strategy_name: str,
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    sections: tuple[Section, ...] | None = None,
) -> list[Chunk]:
    """Chunk records for ``spans``: ids, positions in characters, bytes and lines, token counts, hashes.

    ``section_index`` (and the heading path of spans without one) refer to ``sections``, the document's
    markdown sections by default."""
    text = document.text
    index = document.index
    byte_at = index.byte_offsets(position for span in spans for position in (span.start_char, span.end_char))
    if replaced_bytes:
        byte_at = _file_byte_offsets(byte_at, replaced_bytes)
    if sections is None:
        sections = document.sections
    section_starts = [section.start_char for section in sections]
    paths = section_paths(sections)
    chunks = []
    for chunk_index, span in enumerate(spans):
        start, end = span.start_char, span.end_char
        if not 0 <= start <= end <= len(text):
            raise ValueError(f"strategy {strategy_name!r} returned an invalid span {start}..{end}")
        chunk_text = text[start:end]
        start_line, start_column = index.line_column(start)
        end_line, end_column = index.line_column(end - 1) if end > start else (start_line, start_column)
        token_count = span.token_count if span.token_count is not None else counter.count(chunk_text)
        chunk_id = f"{doc_id}#{chunk_index}"
        section_index = max(bisect_right(section_starts, start) - 1, 0)
        chunks.append(
            Chunk(
                chunk_id=chunk_id,
                chunk_uuid=chunk_uuid(chunk_id),
                doc_id=doc_id,
                source_uri=source_uri,
                chunk_index=chunk_index,
                text=chunk_text,
                start_char=start,
                end_char=end,
                start_byte=byte_at[start],
                end_byte=byte_at[end],
                start_line=start_line,
                start_column=start_column,
                end_line=end_line,
                end_column=end_column,
                heading_path=paths[section_index] if span.heading_path is None else tuple(span.heading_path),
                section_index=section_index,
                token_count=token_count,
                char_count=end - start,
                is_sub_split=span.is_sub_split,
                strategy=strategy_name,
                content_sha256=hashlib.sha256(chunk_text.encode("utf-8", "surrogatepass")).hexdigest(),
            )
        )
    return chunks


def _file_byte_offsets(byte_at: dict[int, int], replaced_bytes: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Offsets into the UTF-8 text moved to offsets into the file: each U+FFFD (3 bytes in the text) stood
    for ``byte_length`` invalid bytes."""
    replaced_chars = [char for char, _ in replaced_bytes]
    shift = [0]
    for _, byte_length in replaced_bytes:
        shift.append(shift[-1] + byte_length - 3)
    return {char: offset + shift[bisect_left(replaced_chars, char)] for char, offset in byte_at.items()}


def reconstruct(chunks: Sequence[Chunk]) -> str:
    """The document the chunks came from, exactly: overlaps are merged, a gap is an error."""
    ordered = sorted(chunks, key=lambda chunk: (chunk.start_char, chunk.end_char))
    if len({chunk.doc_id for chunk in ordered}) > 1:
        raise ReconstructionError("chunks come from more than one document")
    parts: list[str] = []
    covered = 0
    for chunk in ordered:
        if chunk.start_char > covered:
            raise ReconstructionError(
                f"characters {covered}..{chunk.start_char} of {chunk.doc_id or 'the document'} are in no chunk"
            )
        if chunk.end_char > covered:
            parts.append(chunk.text[covered - chunk.start_char :])
            covered = chunk.end_char
    return "".join(parts)
