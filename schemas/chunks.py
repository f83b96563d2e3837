"""Arrow schema of the ``chunks`` table: one row per chunk, the columns of the engine's ``Chunk``.

Column names are a contract (PRODUCT.md): columns are added, never renamed. Every field carries a
``description`` in its metadata, and the schema carries ``chunkline.schema_version``.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["CHUNKS_SCHEMA", "SCHEMA_VERSION", "field"]

#: Bumped when a column is added or its meaning changes.
SCHEMA_VERSION = "3"


def field(name: str, arrow_type: pa.DataType, description: str, nullable: bool = False) -> pa.Field:
    """An Arrow field with its ``description`` in the field metadata."""
    return pa.field(name, arrow_type, nullable=nullable, metadata={"description": description})


CHUNKS_SCHEMA = pa.schema(
    [
        field("chunk_id", pa.string(), "<doc_id>#<chunk_index>: stable id of the chunk for upserts."),
        field("chunk_uuid", pa.string(), "UUIDv5 of chunk_id, for vector stores whose ids must be UUIDs."),
        field("doc_id", pa.string(), "POSIX path of the document relative to the input root."),
        field("source_uri", pa.string(), "URL or path the document was read from."),
        field("chunk_index", pa.int32(), "0-based position of the chunk in its document."),
        field("text", pa.large_string(), "The chunk's text: the verbatim slice document[start_char:end_char]."),
        field("start_char", pa.int64(), "Offset of the chunk's first character in the decoded document."),
        field("end_char", pa.int64(), "Offset just past the chunk's last character (half-open)."),
        field("start_byte", pa.int64(), "start_char as a byte offset into the document's UTF-8 bytes."),
        field("end_byte", pa.int64(), "end_char as a byte offset into the document's UTF-8 bytes."),
        field("start_line", pa.int32(), "1-based line of the first character (\\n, \\r\\n and \\r end lines)."),
        field("start_column", pa.int32(), "1-based column of the first character, in characters."),
        field("end_line", pa.int32(), "1-based line of the last character (of the first for an empty chunk)."),
        field("end_column", pa.int32(), "1-based column of the last character (of the first for an empty chunk)."),
        field("heading_path", pa.list_(pa.string()), "Texts of the headings the chunk sits under, outermost first."),
        field(
            "section_index",
            pa.int32(),
            "Index of the document section (preamble, then one per heading) the chunk starts in.",
        ),
        field("token_count", pa.int32(), "Exact number of tokens of text in the configured tokenizer."),
        field("char_count", pa.int32(), "Number of characters of text."),
        field(
            "is_sub_split",
            pa.bool_(),
            "True when the chunk is one of several pieces of a section over the token limit.",
        ),
        field("strategy", pa.string(), "Name of the chunking strategy that made the chunk."),
        field("content_sha256", pa.string(), "SHA-256 of text in UTF-8, hex."),
        field(
            "title",
            pa.string(),
            "The document's title: its front matter's title when that is a non-empty string, else the text of "
            "its first level-1 heading, else empty.",
        ),
        field(
            "embed_text",
            pa.large_string(),
            "What the embedding model should see: a context line of the title and heading path "
            "(chunking.embed_context), the table's header and delimiter rows when the chunk starts inside a "
            "table, then text without its front matter.",
        ),
        field(
            "embed_token_count",
            pa.int32(),
            "Exact number of tokens of embed_text in the configured tokenizer; never over max_tokens (unless "
            "token_count is, for a strategy's one atomic unit).",
        ),
    ],
    metadata={
        "chunkline.table": "chunks",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": (
            "One row per chunk: its text, exact positions in the source document, heading path and token "
            "count, and the text to embed."
        ),
    },
)
