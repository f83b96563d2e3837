"""``chunk_markdown`` and ``reconstruct``: the engine's entry points. No Beam here."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate

from chunkline.config import ChunkConfig, ConfigError
from chunkline.context import ChunkContext
from chunkline.embed_text import NO_CONTEXT, EmbedText, embed_text_for, heading_paths_of
from chunkline.encode_ahead import encode_ahead_default, parse_encoding_ahead
from chunkline.fragments import merge_fragments
from chunkline.record import (
    ROOT_SECTION_ORDINAL,
    Chunk,
    ChunkedDocument,
    ChunkSpan,
    SectionRecord,
    chunk_uuid,
    section_id_of,
)
from chunkline.registry import Strategy, get_strategy
from chunkline.structure import MarkdownDocument, Section, section_paths, sections_by_pattern
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter, counter_for

__all__ = [
    "CHUNKING_VERSION",
    "build_sections",
    "chunk_document",
    "chunk_document_with_section_rows",
    "chunk_document_with_sections",
    "chunk_markdown",
    "chunk_markdown_with_sections",
    "reconstruct",
    "ReconstructionError",
    "section_rows",
    "span_budget",
]

#: Raised whenever the same bytes and config would give different chunks than before, so that incremental
#: rebuilds know that chunks made by an older chunkline cannot be reused.
CHUNKING_VERSION = "6"


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


def chunk_markdown_with_sections(
    text: str,
    config: ChunkConfig | None = None,
    *,
    doc_id: str = "",
    source_uri: str = "",
    encode_ahead: bool | None = None,
) -> ChunkedDocument:
    """:func:`chunk_markdown`'s chunks (the same list) and the document's sections: one
    :class:`~chunkline.record.SectionRecord` for the document root, then one per heading subtree, from the
    structure the chunks were made from (the document is parsed once)."""
    config = config or ChunkConfig()
    counter = counter_for(config)
    if encode_ahead is None:
        encode_ahead = encode_ahead_default()
    document, offsets = parse_encoding_ahead(text, config.parser, counter, encode_ahead)
    return chunk_document_with_sections(
        document, config, counter, doc_id=doc_id, source_uri=source_uri, offsets=offsets
    )


def chunk_document_with_sections(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    offsets: TokenOffsets | None = None,
) -> ChunkedDocument:
    """:func:`chunk_document`'s chunks and the document's sections (see
    :func:`chunk_markdown_with_sections`), for an already parsed document."""
    chunks, rows = chunk_document_with_section_rows(
        document, config, counter, doc_id=doc_id, source_uri=source_uri, replaced_bytes=replaced_bytes, offsets=offsets
    )
    return ChunkedDocument(chunks, _section_records(document.text, rows))


def chunk_document_with_section_rows(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    offsets: TokenOffsets | None = None,
) -> tuple[list[Chunk], list[tuple]]:
    """:func:`chunk_document_with_sections` for a writer of the ``sections`` table: the chunks, and the
    sections as the table's rows (:func:`section_rows`) rather than records holding each section's text."""
    chunks, sections, embedding = _chunked(
        document, config, counter, doc_id=doc_id, source_uri=source_uri, replaced_bytes=replaced_bytes, offsets=offsets
    )
    rows = section_rows(
        document,
        sections,
        chunks,
        counter,
        doc_id=doc_id,
        source_uri=source_uri,
        replaced_bytes=replaced_bytes,
        embedding=embedding,
    )
    return chunks, rows


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
    return _chunked(
        document, config, counter, doc_id=doc_id, source_uri=source_uri, replaced_bytes=replaced_bytes, offsets=offsets
    )[0]


def _chunked(
    document: MarkdownDocument,
    config: ChunkConfig,
    counter: TokenCounter,
    *,
    doc_id: str,
    source_uri: str,
    replaced_bytes: Sequence[tuple[int, int]],
    offsets: TokenOffsets | None,
) -> tuple[list[Chunk], tuple[Section, ...], EmbedText]:
    """The chunks, the sections they were placed in, and what made their ``embed_text``."""
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
    if sections is None:
        sections = document.sections
    chunks = build_chunks(
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
    return chunks, sections, embedding


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
    section_ids, parent_section_ids = _section_links(sections, doc_id)
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
    chunk_ids = [f"{doc_id}#{chunk_index}" for chunk_index in range(len(spans))]
    last_index = len(spans) - 1
    chunks = []
    for chunk_index, span in enumerate(spans):
        start, end, chunk_text = starts[chunk_index], ends[chunk_index], texts[chunk_index]
        start_line, start_column = index.line_column(start)
        end_line, end_column = index.line_column(end - 1) if end > start else (start_line, start_column)
        chunk_id = chunk_ids[chunk_index]
        embed_text, embed_token_count = embedded[chunk_index]
        section_index = section_indexes[chunk_index]
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
                section_index,
                token_counts[chunk_index],
                end - start,
                span.is_sub_split,
                strategy_name,
                hashlib.sha256(chunk_text.encode("utf-8", "surrogatepass")).hexdigest(),
                title,
                embed_text,
                embed_token_count,
                section_ids[section_index],
                chunk_ids[chunk_index - 1] if chunk_index else None,
                chunk_ids[chunk_index + 1] if chunk_index < last_index else None,
                parent_section_ids[section_index],
            )
        )
    return chunks


def _section_ordinals(sections: Sequence[Section]) -> list[int]:
    """Each of the engine's sections' ordinal in the ``sections`` table: the preamble is the document root
    (0), and the headings are numbered 1, 2, ... in document order."""
    first_heading = 1 if sections and sections[0].heading is None else 0
    return [
        ROOT_SECTION_ORDINAL if section.heading is None else number - first_heading + 1
        for number, section in enumerate(sections)
    ]


def _section_links(sections: Sequence[Section], doc_id: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """For each of the engine's sections: its ``section_id`` (the root's for the preamble), and the ids of
    the sections enclosing it, outermost first (the root, then the headings above it)."""
    root_id = section_id_of(doc_id, ROOT_SECTION_ORDINAL)
    ids: list[str] = []
    enclosing: list[tuple[str, ...]] = []
    for section, ordinal in zip(sections, _section_ordinals(sections)):
        if section.heading is None:
            ids.append(root_id)
            enclosing.append(())
            continue
        ids.append(section_id_of(doc_id, ordinal))
        parent = section.parent
        enclosing.append((root_id,) if parent is None else (*enclosing[parent], ids[parent]))
    return ids, enclosing


def _section_token_counts(
    offsets: TokenOffsets, sections: Sequence[Section], subtree_end: list[int], length: int
) -> list[int]:
    """The exact token counts of the root, then of each heading's subtree, in the order of ``sections``.

    A subtree is a run of the engine's sections; its count is the sum of theirs when every boundary
    inside it is a clean cut of the encoding (:mod:`chunkline.token_offsets`), as heading lines nearly
    always are, and is counted on its own otherwise."""
    cuts = [section.start_char for section in sections]
    if not cuts or cuts[0] != 0:
        cuts.insert(0, 0)
    cuts.append(length)
    # Adjacent equal cuts (empty sections) count 0 and are clean.
    clean, flat_counts = offsets.clean_cuts_and_counts(cuts)
    total_before = [0, *accumulate(flat_counts)]
    unclean_before = [0, *accumulate(not is_clean for is_clean in clean[:-1])]
    cut_slot = {cut: slot for slot, cut in reversed(list(enumerate(cuts)))}  # the first slot of each cut

    def count(start: int, end: int) -> int:
        first, last = cut_slot[start], cut_slot[end]
        # The cuts strictly inside (first, last) must all be clean for the counts to add up.
        if unclean_before[last] - unclean_before[first + 1] == 0:
            return total_before[last] - total_before[first]
        return offsets.count(start, end)

    counts = [count(0, length)]
    for number, section in enumerate(sections):
        if section.heading is not None:
            counts.append(count(section.start_char, subtree_end[number]))
    return counts


def build_sections(
    document: MarkdownDocument,
    sections: Sequence[Section],
    chunks: Sequence[Chunk],
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    embedding: EmbedText | None = None,
) -> tuple[SectionRecord, ...]:
    """The ``sections`` rows of a document as :class:`~chunkline.record.SectionRecord` (with each section's
    ``text``): its root, then one per heading subtree, from ``sections`` (the engine's sections the
    ``chunks`` were placed in: each chunk's ``section_index`` is an index into them). See
    :func:`section_rows`."""
    rows = section_rows(
        document,
        sections,
        chunks,
        counter,
        doc_id=doc_id,
        source_uri=source_uri,
        replaced_bytes=replaced_bytes,
        embedding=embedding,
    )
    return _section_records(document.text, rows)


def _section_records(text: str, rows: Sequence[tuple]) -> tuple[SectionRecord, ...]:
    """The :class:`SectionRecord` of each of :func:`section_rows`' rows: the fields before the text,
    ``heading_path`` as the record's tuple, the section's text, then the rest (``SECTION_ROW_FIELDS``)."""
    return tuple(SectionRecord(*row[:8], tuple(row[8]), text[row[9] : row[10]], *row[9:]) for row in rows)


def section_rows(
    document: MarkdownDocument,
    sections: Sequence[Section],
    chunks: Sequence[Chunk],
    counter: TokenCounter,
    *,
    doc_id: str = "",
    source_uri: str = "",
    replaced_bytes: Sequence[tuple[int, int]] = (),
    embedding: EmbedText | None = None,
) -> list[tuple]:
    """The ``sections`` table's rows of a document, each a tuple of the values of
    :data:`~chunkline.record.SECTION_ROW_FIELDS` (``heading_path`` a list): the document's root, then one per
    heading subtree, from ``sections`` (the engine's sections the ``chunks`` were placed in: each chunk's
    ``section_index`` is an index into them).

    Nothing is parsed again, and no section's text is copied out of the document unless it is embedded:
    token counts come from the document's token offsets (one encoding of the whole text, the chunking's own
    when it made one), exact at the section boundaries; ``embedding`` (the chunks' own) makes each
    section's ``embed_text`` when it fits its ``max_tokens``; each section's hash is of its range of the
    document's UTF-8 bytes, encoded once."""
    text = document.text
    index = document.index
    length = len(text)
    if embedding is None:
        embedding = EmbedText(document, counter, None, NO_CONTEXT)
    offsets = embedding.offsets
    if offsets is None:
        offsets = embedding.offsets = TokenOffsets(text, 0, length, counter)
    # The heading sections' subtrees: from the heading to the next heading of the same or a higher level.
    subtree_end = [length] * len(sections)
    open_sections: list[int] = []
    for number, section in enumerate(sections):
        if section.heading is None:
            continue
        while open_sections and sections[open_sections[-1]].level >= section.level:
            subtree_end[open_sections.pop()] = section.start_char
        open_sections.append(number)
    ordinals = _section_ordinals(sections)
    paths = section_paths(tuple(sections))
    # Each chunk counts in the section it starts in, and every section enclosing that one: counted per
    # section, then added up the tree (a child comes after its parent in document order).
    counts = [0] * len(sections)
    firsts: list[int | None] = [None] * len(sections)
    lasts: list[int | None] = [None] * len(sections)
    for chunk in chunks:
        number, chunk_index = chunk.section_index, chunk.chunk_index
        counts[number] += 1
        first = firsts[number]
        if first is None or chunk_index < first:
            firsts[number] = chunk_index
        last = lasts[number]
        if last is None or chunk_index > last:
            lasts[number] = chunk_index
    for number in range(len(sections) - 1, -1, -1):
        parent = sections[number].parent
        if parent is None or not counts[number]:
            continue
        counts[parent] += counts[number]
        if firsts[parent] is None or firsts[number] < firsts[parent]:
            firsts[parent] = firsts[number]
        if lasts[parent] is None or lasts[number] > lasts[parent]:
            lasts[parent] = lasts[number]
    chunk_indexes = [chunk.chunk_index for chunk in chunks]
    root_count = len(chunks)
    root_first = min(chunk_indexes) if chunk_indexes else None
    root_last = max(chunk_indexes) if chunk_indexes else None
    # (ordinal, level, heading, heading path, start, end, parent ordinal, chunk count, first, last)
    spans = [(ROOT_SECTION_ORDINAL, 0, None, (), 0, length, None, root_count, root_first, root_last)]
    for number, section in enumerate(sections):
        if section.heading is None:
            continue
        parent = ROOT_SECTION_ORDINAL if section.parent is None else ordinals[section.parent]
        spans.append(
            (
                ordinals[number],
                section.level,
                section.heading,
                paths[number],
                section.start_char,
                subtree_end[number],
                parent,
                counts[number],
                firsts[number],
                lasts[number],
            )
        )
    token_counts = _section_token_counts(offsets, sections, subtree_end, length)
    text_byte_at = index.byte_offsets(position for span in spans for position in (span[4], span[5]))
    byte_at = _file_byte_offsets(text_byte_at, replaced_bytes) if replaced_bytes else text_byte_at
    # A section's text in UTF-8 is its range of the whole text's bytes: one encoding, hashed through views.
    text_bytes = memoryview(text.encode("utf-8", "surrogatepass"))
    sha256 = hashlib.sha256
    # The root is ordinal 0 and the headings follow in order: a section's ordinal is its position.
    section_ids = [section_id_of(doc_id, ordinal) for ordinal in range(len(spans))]
    max_tokens = embedding.max_tokens
    front_matter_end = document.front_matter.end_char if document.front_matter is not None else 0
    title = embedding.title
    line_starts = index.line_starts
    rows = []
    for (ordinal, level, heading, path, start, end, parent, chunk_count, first, last), token_count in zip(
        spans, token_counts
    ):
        body_count = token_count if start >= front_matter_end else offsets.count(front_matter_end, end)
        embed_text: str | None = None
        embed_token_count: int | None = None
        if max_tokens is None or body_count <= max_tokens:
            embed_text, embed_token_count = embedding.embed(start, end, path, token_count)
            if max_tokens is not None and embed_token_count > max_tokens:
                embed_text = embed_token_count = None
        section_id = section_ids[ordinal]
        start_line = bisect_right(line_starts, start)
        rows.append(
            (
                section_id,
                chunk_uuid(section_id),
                None if parent is None else section_ids[parent],
                doc_id,
                source_uri,
                ordinal,
                level,
                heading,
                list(path),
                start,
                end,
                byte_at[start],
                byte_at[end],
                start_line,
                bisect_right(line_starts, end - 1) if end > start else start_line,
                token_count,
                end - start,
                chunk_count,
                first,
                last,
                title,
                embed_text,
                embed_token_count,
                sha256(text_bytes[text_byte_at[start] : text_byte_at[end]]).hexdigest(),
            )
        )
    return rows


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
