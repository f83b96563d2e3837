"""``chunk_markdown`` and ``reconstruct``: the engine's entry points. No Beam here."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from chunkline.config import ChunkConfig, ConfigError
from chunkline.context import ChunkContext
from chunkline.embed_text import NO_CONTEXT, EmbedText, embed_text_for, heading_paths_of
from chunkline.encode_ahead import encode_ahead_default, parse_encoding_ahead
from chunkline.fragments import merge_fragments
from chunkline.record import Chunk, ChunkSpan, chunk_uuid
from chunkline.registry import Strategy, get_strategy
from chunkline.structure import MarkdownDocument, Section, section_paths, sections_by_pattern
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter, counter_for

__all__ = ["CHUNKING_VERSION", "chunk_markdown", "chunk_document", "reconstruct", "ReconstructionError", "span_budget"]

#: Raised whenever the same bytes and config would give different chunks than before, so that incremental
#: rebuilds know that chunks made by an older chunkline cannot be reused.
CHUNKING_VERSION = "5"


class ReconstructionError(ValueError):
    """The chunks do not cover one document without gaps."""


def chunk_markdown(
    text: str,
    config: ChunkConfig | None = None,
    *,
    doc_id: str = "",
    source_uri: str = "",
    encode_ahead: bool | None = None,
) -> list[Chunk]:
    """Chunk the markdown ``text`` with ``config`` (the defaults when ``None``).

    Every chunk's ``text`` is ``text[start_char:end_char]``, no chunk's text or ``embed_text`` has more
    than ``config.max_tokens`` tokens, and ``reconstruct(chunks) == text``.

    ``encode_ahead`` encodes a large document's tokens on a second thread while this one parses it
    (:mod:`chunkline.encode_ahead`); by default, when the process may run on more than one core. The chunks
    are the same either way, and the thread is joined before this returns.
    """
    config = config or ChunkConfig()
    counter = counter_for(config)
    if encode_ahead is None:
        encode_ahead = encode_ahead_default()
    document, offsets = parse_encoding_ahead(text, config.parser, counter, encode_ahead)
    return chunk_document(document, config, counter, doc_id=doc_id, source_uri=source_uri, offsets=offsets)


def chunk_document(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    offsets: TokenOffsets | None = None,
) -> list[Chunk]:
    """Chunk an already parsed document with an already loaded tokenizer (what pipeline workers call).

    The strategy chunks to ``config.max_tokens`` less the document's reserve for the context each chunk's
    ``embed_text`` adds (:mod:`chunkline.embed_text`). ``replaced_bytes`` lists ``(char_offset,
    byte_length)`` for each U+FFFD that stands for invalid bytes of the file, so that byte offsets still
    point into the file's bytes. ``offsets``, the token offsets of the whole text when they were encoded
    beforehand (:mod:`chunkline.encode_ahead`), saves encoding the text again; the chunks are the same."""
    strategy = get_strategy(config.strategy)
    sections = sections_by_pattern(document, config.section_pattern) if config.section_pattern else None
    embedding, reserve = _embedding_and_reserve(document, config, counter, strategy, sections, doc_id, offsets)
    context = _strategy_context(document, config, counter, strategy, reserve, embedding.offsets)
    spans = strategy.run(context)
    if not spans:
        spans = [ChunkSpan(0, len(document.text))]
    if strategy.merges_fragments and config.effective_min_tokens:
        spans = merge_fragments(context, spans, config.effective_min_tokens, sections, strategy.size_target)
    if embedding.offsets is None:
        embedding.offsets = vars(context).get("offsets")  # the strategy's, when it encoded them
    return build_chunks(
        document,
        spans,
        config.strategy,
        counter,
        doc_id=doc_id,
        source_uri=source_uri,
        replaced_bytes=replaced_bytes,
        sections=sections,
        embedding=embedding,
    )


def span_budget(
    document: MarkdownDocument, config: ChunkConfig, counter: TokenCounter | None = None, *, doc_id: str = ""
) -> int:
    """The token budget the strategy chunks the document ``doc_id`` to: ``config.max_tokens`` less the reserve
    for the context of each chunk's ``embed_text`` (``config.max_tokens`` itself with ``embed_context: none``
    and no split table)."""
    counter = counter or counter_for(config)
    strategy = get_strategy(config.strategy)
    sections = sections_by_pattern(document, config.section_pattern) if config.section_pattern else None
    return config.max_tokens - _embedding_and_reserve(document, config, counter, strategy, sections, doc_id)[1]


def _embedding_and_reserve(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    strategy: Strategy,
    sections: tuple[Section, ...] | None,
    doc_id: str = "",
    offsets: TokenOffsets | None = None,
) -> tuple[EmbedText, int]:
    embedding = embed_text_for(document, config, counter, doc_id)
    embedding.offsets = offsets
    section_chars = [section.end_char - section.start_char for section in document.sections]
    if sections is not None and sections is not document.sections:
        section_chars += [section.end_char - section.start_char for section in sections]
    return embedding, embedding.reserve(
        heading_paths_of(sections, document), strategy.keeps_blocks_whole, section_chars
    )


def _strategy_context(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    strategy: Strategy,
    reserve: int,
    offsets: TokenOffsets | None,
) -> ChunkContext:
    """The strategy's context, with the budget ``config.max_tokens - reserve``. A strategy of the document,
    config and counter reads its budget from the config: it gets a config with that ``max_tokens``, or the
    whole budget when such a config is not valid for it (the chunks' context lines are then shortened)."""
    if not reserve:
        return ChunkContext(document, config, counter, offsets=offsets)
    budget = config.max_tokens - reserve
    if strategy.chunk_in_context is not None:
        return ChunkContext(document, config, counter, max_tokens=budget, offsets=offsets)
    return ChunkContext(document, _with_budget(config, budget), counter, offsets=offsets)


def _with_budget(config: ChunkConfig, max_tokens: int) -> ChunkConfig:
    try:
        return _cached_with_budget(config, max_tokens)
    except TypeError:  # parameters that cannot be hashed
        return _config_with_budget(config, max_tokens)


@functools.lru_cache(maxsize=256)
def _cached_with_budget(config: ChunkConfig, max_tokens: int) -> ChunkConfig:
    return _config_with_budget(config, max_tokens)


def _config_with_budget(config: ChunkConfig, max_tokens: int) -> ChunkConfig:
    try:
        return dataclasses.replace(config, max_tokens=max_tokens)
    except ConfigError:
        return config


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
    embedding: EmbedText | None = None,
) -> list[Chunk]:
    """Chunk records for ``spans``: ids, positions in characters, bytes and lines, token counts, hashes,
    and what to embed.

    ``section_index`` (and the heading path of spans without one) refer to ``sections``, the document's
    markdown sections by default. ``embedding`` makes each chunk's ``embed_text``; without one it is the
    chunk's text without front matter, with no context line and no token limit."""
    text = document.text
    index = document.index
    byte_at = index.byte_offsets(position for span in spans for position in (span.start_char, span.end_char))
    if replaced_bytes:
        byte_at = _file_byte_offsets(byte_at, replaced_bytes)
    if sections is None:
        sections = document.sections
    if embedding is None:
        embedding = EmbedText(document, counter, None, NO_CONTEXT)
    title = embedding.title
    section_starts = [section.start_char for section in sections]
    paths = section_paths(sections)
    length = len(text)
    starts, ends, texts, heading_paths, token_counts, section_indexes = [], [], [], [], [], []
    for span in spans:
        start, end = span.start_char, span.end_char
        if not 0 <= start <= end <= length:
            raise ValueError(f"strategy {strategy_name!r} returned an invalid span {start}..{end}")
        chunk_text = text[start:end]
        section_index = max(bisect_right(section_starts, start) - 1, 0)
        starts.append(start)
        ends.append(end)
        texts.append(chunk_text)
        section_indexes.append(section_index)
        heading_paths.append(paths[section_index] if span.heading_path is None else tuple(span.heading_path))
        token_counts.append(span.token_count if span.token_count is not None else counter.count(chunk_text))
    embedded = embedding.embed_many(starts, ends, heading_paths, token_counts, texts)
    chunks = []
    for chunk_index, span in enumerate(spans):
        start, end, chunk_text = starts[chunk_index], ends[chunk_index], texts[chunk_index]
        start_line, start_column = index.line_column(start)
        end_line, end_column = index.line_column(end - 1) if end > start else (start_line, start_column)
        chunk_id = f"{doc_id}#{chunk_index}"
        embed_text, embed_token_count = embedded[chunk_index]
        # Positional arguments, in the order of Chunk's fields: half the cost of keywords per chunk.
        chunks.append(
            Chunk(
                chunk_id,
                chunk_uuid(chunk_id),
                doc_id,
                source_uri,
                chunk_index,
                chunk_text,
                start,
                end,
                byte_at[start],
                byte_at[end],
                start_line,
                start_column,
                end_line,
                end_column,
                heading_paths[chunk_index],
                section_indexes[chunk_index],
                token_counts[chunk_index],
                end - start,
                span.is_sub_split,
                strategy_name,
                hashlib.sha256(chunk_text.encode("utf-8", "surrogatepass")).hexdigest(),
                title,
                embed_text,
                embed_token_count,
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
