"""The chunk record: one row of the ``chunks`` table, and the span a strategy produces before it."""

from __future__ import annotations

import hashlib
import operator
import uuid
from dataclasses import dataclass

__all__ = [
    "Chunk",
    "ChunkSpan",
    "ChunkedDocument",
    "CHUNK_UUID_NAMESPACE",
    "ROOT_SECTION_ORDINAL",
    "SECTION_ROW_FIELDS",
    "SectionRecord",
    "chunk_uuid",
    "section_id_of",
]

#: Namespace of ``chunk_uuid``: ``uuid5(CHUNK_UUID_NAMESPACE, chunk_id)``.
CHUNK_UUID_NAMESPACE = uuid.UUID("5b0f7a52-3c1e-5d4b-9a61-6c68756e6b6c")


_NAMESPACE_BYTES = CHUNK_UUID_NAMESPACE.bytes


def chunk_uuid(chunk_id: str) -> str:
    """The UUIDv5 of ``chunk_id``, for vector stores whose ids must be UUIDs.

    Equal to ``str(uuid.uuid5(CHUNK_UUID_NAMESPACE, chunk_id))``, formatted without building UUID objects.
    """
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + chunk_id.encode("utf-8", "surrogatepass")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    hex_digits = digest.hex()
    return f"{hex_digits[:8]}-{hex_digits[8:12]}-{hex_digits[12:16]}-{hex_digits[16:20]}-{hex_digits[20:]}"


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """What a strategy decides: a character range of the document and what it belongs to."""

    start_char: int
    end_char: int
    heading_path: tuple[str, ...] | None = None
    """The headings the span sits under; ``None`` takes the path of the section the span starts in."""
    is_sub_split: bool = False
    token_count: int | None = None
    """The exact token count when the strategy already knows it; counted by the engine otherwise."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of one document, with exact positions. Field names are the ``chunks`` table's columns."""

    chunk_id: str
    """``<doc_id>#<chunk_index>``."""
    chunk_uuid: str
    """UUIDv5 of ``chunk_id`` (namespace :data:`CHUNK_UUID_NAMESPACE`)."""
    doc_id: str
    """The document's POSIX path relative to the input root."""
    source_uri: str
    """Where the document was read from."""
    chunk_index: int
    """0-based position of the chunk in its document."""
    text: str
    """The verbatim slice ``document[start_char:end_char]``."""
    start_char: int
    """Offset of the first character, in characters of the decoded document."""
    end_char: int
    """Offset just past the last character (half-open)."""
    start_byte: int
    """``start_char`` in bytes of the UTF-8 document."""
    end_byte: int
    """``end_char`` in bytes of the UTF-8 document."""
    start_line: int
    """1-based line of the first character (lines end at ``\\n``, ``\\r\\n`` or ``\\r``)."""
    start_column: int
    """1-based column of the first character, in characters."""
    end_line: int
    """1-based line of the last character (of the first, for an empty chunk)."""
    end_column: int
    """1-based column of the last character (of the first, for an empty chunk)."""
    heading_path: tuple[str, ...]
    """Texts of the headings the chunk sits under, outermost first."""
    section_index: int
    """Index of the document section (preamble, then one per heading) the chunk starts in."""
    token_count: int
    """Exact number of tokens of ``text`` in the configured tokenizer."""
    char_count: int
    """Number of characters of ``text``."""
    is_sub_split: bool
    """True when the chunk is one of several pieces of a section that was over the token limit."""
    strategy: str
    """Name of the strategy that made the chunk."""
    content_sha256: str
    """SHA-256 of ``text`` in UTF-8, hex."""
    title: str = ""
    """The document's title: its front matter's ``title`` when that is a non-empty string, else the text of
    its first level-1 heading, else empty."""
    embed_text: str = ""
    """What the embedding model should see (:mod:`chunkline.embed_text`): a context line of the title and
    heading path, the table header when the chunk starts inside a table, then ``text`` without front
    matter."""
    embed_token_count: int = 0
    """Exact number of tokens of ``embed_text`` in the configured tokenizer; at most ``max_tokens``."""
    section_id: str = ""
    """``section_id`` of the innermost section the chunk starts in (a row of the ``sections`` table): the
    heading section holding ``start_char``, or the document root (``<doc_id>#s0``) before the first
    heading and in a document without headings."""
    prev_chunk_id: str | None = None
    """``chunk_id`` of the document's previous chunk; ``None`` for the first."""
    next_chunk_id: str | None = None
    """``chunk_id`` of the document's next chunk; ``None`` for the last."""
    parent_section_ids: tuple[str, ...] = ()
    """``section_id`` of each section enclosing the chunk's section, outermost first: the root first, the
    chunk's own ``section_id`` not included (empty for a chunk in the root itself)."""

    def to_dict(self) -> dict:
        """The chunk as a plain dict, ``heading_path`` and ``parent_section_ids`` as lists."""
        row = dict(zip(_CHUNK_FIELDS, _chunk_values(self)))
        row["heading_path"] = list(self.heading_path)
        row["parent_section_ids"] = list(self.parent_section_ids)
        return row


_CHUNK_FIELDS = Chunk.__slots__
_chunk_values = operator.attrgetter(*_CHUNK_FIELDS)
"""The values of a chunk's fields in their order: one call per row of the ``chunks`` table."""


#: The ordinal of a document's root section: its id is ``<doc_id>#s0``.
ROOT_SECTION_ORDINAL = 0


def section_id_of(doc_id: str, ordinal: int) -> str:
    """The ``section_id`` of a document's section: ``<doc_id>#s<ordinal>``, where the root is ordinal 0 and
    the headings are 1, 2, ... in document order."""
    return f"{doc_id}#s{ordinal}"


@dataclass(frozen=True, slots=True)
class SectionRecord:
    """One section of one document: the whole document (its root), or a heading's subtree. Field names are
    the ``sections`` table's columns.

    A heading's subtree runs from its heading line to the next heading of the same or a higher level (a
    smaller number), or to the end of the document; it holds its subsections. When only whitespace comes
    before a document's first heading, that heading's section starts at the document's start (as the
    engine's sections do, so that each chunk's ``section_id``, ``section_index`` and ``heading_path`` agree).
    """

    section_id: str
    """``<doc_id>#s<ordinal>``: ``#s0`` for the document root, then ``#s1``, ``#s2``, ... for the headings in
    document order. Deterministic: same bytes and config, same ids."""
    section_uuid: str
    """UUIDv5 of ``section_id`` (the namespace of ``chunk_uuid``), for stores whose ids must be UUIDs."""
    parent_section_id: str | None
    """``section_id`` of the enclosing section (the root for a top-level heading); ``None`` for the root."""
    doc_id: str
    """The document's POSIX path relative to the input root."""
    source_uri: str
    """Where the document was read from."""
    section_ordinal: int
    """0 for the root, then 1, 2, ... for the headings in document order (the number in ``section_id``)."""
    level: int
    """The heading's level (1..6; a custom ``section_pattern``'s level indicator); 0 for the root."""
    heading: str | None
    """The heading's text; ``None`` for the root."""
    heading_path: tuple[str, ...]
    """Texts of the headings from the outermost down to this one; empty for the root."""
    text: str
    """The verbatim slice ``document[start_char:end_char]``."""
    start_char: int
    """Offset of the section's first character (of its heading line; 0 for the root)."""
    end_char: int
    """Offset just past the section's last character (half-open): where the next heading of the same or a
    higher level starts, else the document's length."""
    start_byte: int
    """``start_char`` in bytes of the document's file."""
    end_byte: int
    """``end_char`` in bytes of the document's file."""
    start_line: int
    """1-based line of the first character."""
    end_line: int
    """1-based line of the last character (of the first, for an empty section)."""
    token_count: int
    """Exact number of tokens of ``text`` in the configured tokenizer."""
    char_count: int
    """Number of characters of ``text``."""
    chunk_count: int
    """Number of chunks that start inside the section (in ``[start_char, end_char)``, or at its end when
    that is the end of the document), its subsections' included."""
    first_chunk_index: int | None
    """Smallest ``chunk_index`` of those chunks; ``None`` when there are none."""
    last_chunk_index: int | None
    """Largest ``chunk_index`` of those chunks; ``None`` when there are none."""
    title: str
    """The document's title, as on its chunks."""
    embed_text: str | None
    """The section as a chunk's ``embed_text`` would be (context line of title and heading path, then the
    text without front matter, built by the same code), when that fits ``max_tokens``; else ``None``."""
    embed_token_count: int | None
    """Exact number of tokens of ``embed_text``; ``None`` when ``embed_text`` is."""
    content_sha256: str
    """SHA-256 of ``text`` in UTF-8, hex."""

    def to_dict(self) -> dict:
        """The section as a plain dict, ``heading_path`` as a list."""
        row = {name: getattr(self, name) for name in self.__slots__}
        row["heading_path"] = list(self.heading_path)
        return row


#: The fields of a ``sections`` table row, in the table's column order: those of :class:`SectionRecord` but
#: ``text`` (see :func:`chunkline.engine.section_rows`).
SECTION_ROW_FIELDS = tuple(name for name in SectionRecord.__slots__ if name != "text")


@dataclass(frozen=True, slots=True)
class ChunkedDocument:
    """A document's chunks and its sections (:func:`chunkline.chunk_markdown_with_sections`)."""

    chunks: list[Chunk]
    """The chunks, as :func:`chunkline.chunk_markdown` returns them."""
    sections: tuple[SectionRecord, ...]
    """The root first, then one per heading in document order (``section_ordinal`` 0, 1, 2, ...)."""
