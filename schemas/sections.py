"""Arrow schema of the ``sections`` table: one row per document root and per heading subtree.

A document's sections nest: the root (``<doc_id>#s0``) spans the whole document, and each heading's
section runs from its heading line to the next heading of the same or a higher level, its subsections
inside it. Each chunk's ``section_id`` names the innermost section it starts in, and
``parent_section_ids`` the ones around that, so the two tables join on ``section_id``.

The rows carry positions, counts and, for a section that fits ``max_tokens``, the text to embed; not the
section's text, which would store each document once per level of nesting (it is
``document[start_char:end_char]``, or the chunks from ``first_chunk_index`` to ``last_chunk_index``).
"""

from __future__ import annotations

import pyarrow as pa

from chunkline.schemas.chunks import SCHEMA_VERSION, field

__all__ = ["SECTIONS_SCHEMA", "SECTION_COLUMNS"]

SECTIONS_SCHEMA = pa.schema(
    [
        field(
            "section_id",
            pa.string(),
            "<doc_id>#s<section_ordinal>: #s0 is the document root, #s1, #s2, ... its headings in document "
            "order. Stable for the same bytes and config.",
        ),
        field("section_uuid", pa.string(), "UUIDv5 of section_id (the namespace of chunk_uuid)."),
        field(
            "parent_section_id",
            pa.string(),
            "section_id of the enclosing section (the root for a top-level heading); null for the root.",
            nullable=True,
        ),
        field("doc_id", pa.string(), "POSIX path of the document relative to the input root."),
        field("source_uri", pa.string(), "URL or path the document was read from."),
        field(
            "section_ordinal",
            pa.int32(),
            "0 for the document root, then 1, 2, ... for the headings in document order.",
        ),
        field(
            "level",
            pa.int32(),
            "The heading's level (1 to 6, or a chunking.section_pattern's level indicator); 0 for the root.",
        ),
        field("heading", pa.string(), "The heading's text; null for the root.", nullable=True),
        field(
            "heading_path",
            pa.list_(pa.string()),
            "Texts of the headings from the outermost down to this one; empty for the root.",
        ),
        field(
            "start_char",
            pa.int64(),
            "Offset of the section's first character in the decoded document: its heading line's start (the "
            "document's start for the root, and for a first heading preceded by whitespace only).",
        ),
        field(
            "end_char",
            pa.int64(),
            "Offset just past the section (half-open): the start of the next heading of the same or a higher "
            "level, else the document's length.",
        ),
        field("start_byte", pa.int64(), "start_char as a byte offset into the document's file."),
        field("end_byte", pa.int64(), "end_char as a byte offset into the document's file."),
        field("start_line", pa.int32(), "1-based line of the section's first character."),
        field("end_line", pa.int32(), "1-based line of the section's last character (of the first when empty)."),
        field(
            "token_count",
            pa.int32(),
            "Exact number of tokens of document[start_char:end_char] in the configured tokenizer.",
        ),
        field("char_count", pa.int64(), "Number of characters of the section: end_char - start_char."),
        field(
            "chunk_count",
            pa.int32(),
            "Chunks that start inside the section, its subsections' included (the root: all the document's).",
        ),
        field(
            "first_chunk_index",
            pa.int32(),
            "Smallest chunk_index of those chunks; null when none starts inside the section.",
            nullable=True,
        ),
        field(
            "last_chunk_index",
            pa.int32(),
            "Largest chunk_index of those chunks; null when none starts inside the section.",
            nullable=True,
        ),
        field("title", pa.string(), "The document's title, as on its chunks."),
        field(
            "embed_text",
            pa.large_string(),
            "The section as a chunk's embed_text would be (context line of the title and heading path, then "
            "the section's text without front matter) when that fits max_tokens; null otherwise.",
            nullable=True,
        ),
        field(
            "embed_token_count",
            pa.int32(),
            "Exact number of tokens of embed_text; null when embed_text is.",
            nullable=True,
        ),
        field("content_sha256", pa.string(), "SHA-256 of the section's text in UTF-8, hex."),
    ],
    metadata={
        "chunkline.table": "sections",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": (
            "One row per document root and per heading subtree: exact spans, the parent section, token and "
            "chunk counts, and the text to embed when the section fits max_tokens. Chunks join on section_id."
        ),
    },
)

#: The columns of a ``sections`` row (a :class:`chunkline.record.SectionRecord` without its ``text``).
SECTION_COLUMNS = tuple(SECTIONS_SCHEMA.names)
