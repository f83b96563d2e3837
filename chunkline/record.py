"""The chunk record: one row of the ``chunks`` table, and the span a strategy produces before it."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

__all__ = ["Chunk", "ChunkSpan", "CHUNK_UUID_NAMESPACE", "chunk_uuid"]

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

    def to_dict(self) -> dict:
        """The chunk as a plain dict, ``heading_path`` as a list."""
        row = {name: getattr(self, name) for name in self.__slots__}
        row["heading_path"] = list(self.heading_path)
        return row
