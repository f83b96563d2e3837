"""Arrow schema of the ``chunks`` table: one row per chunk, the columns of :class:`chunkline.Chunk`.

Column names are a contract (PRODUCT.md): columns are added, never renamed. Every field carries a
``description`` in its metadata, and the schema carries ``chunkline.schema_version``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from chunkline.record import Chunk

__all__ = ["CHUNKS_SCHEMA", "SCHEMA_VERSION", "chunks_to_table"]

#: Bumped when a column is added or its meaning changes.
SCHEMA_VERSION = "1"


def _field(name: str, arrow_type: pa.DataType, description: str, nullable: bool = False) -> pa.Field:
    return pa.field(name, arrow_type, nullable=nullable, metadata={"description": description})


CHUNKS_SCHEMA = pa.schema(
    [
        _field("chunk_id", pa.string(), "<doc_id>#<chunk_index>: stable id of the chunk for upserts."),
        _field("chunk_uuid", pa.string(), "UUIDv5 of chunk_id, for vector stores whose ids must be UUIDs."),
        _field("doc_id", pa.string(), "POSIX path of the document relative to the input root."),
        _field("source_uri", pa.string(), "URL or path the document was read from."),
        _field("chunk_index", pa.int32(), "0-based position of the chunk in its document."),
        _field("text", pa.large_string(), "The chunk's text: the verbatim slice document[start_char:end_char]."),
        _field("start_char", pa.int64(), "Offset of the chunk's first character in the decoded document."),
        _field("end_char", pa.int64(), "Offset just past the chunk's last character (half-open)."),
        _field("start_byte", pa.int64(), "start_char as a byte offset into the document's UTF-8 bytes."),
        _field("end_byte", pa.int64(), "end_char as a byte offset into the document's UTF-8 bytes."),
        _field("start_line", pa.int32(), "1-based line of the first character (\\n, \\r\\n and \\r end lines)."),
        _field("start_column", pa.int32(), "1-based column of the first character, in characters."),
        _field("end_line", pa.int32(), "1-based line of the last character (of the first for an empty chunk)."),
        _field("end_column", pa.int32(), "1-based column of the last character (of the first for an empty chunk)."),
        _field("heading_path", pa.list_(pa.string()), "Texts of the headings the chunk sits under, outermost first."),
        _field("section_index", pa.int32(), "Index of the document section (preamble, then one per heading) the chunk starts in."),
        _field("token_count", pa.int32(), "Exact number of tokens of text in the configured tokenizer."),
        _field("char_count", pa.int32(), "Number of characters of text."),
        _field("is_sub_split", pa.bool_(), "True when the chunk is one of several pieces of a section over the token limit."),
        _field("strategy", pa.string(), "Name of the chunking strategy that made the chunk."),
        _field("content_sha256", pa.string(), "SHA-256 of text in UTF-8, hex."),
    ],
    metadata={"chunkline.table": "chunks", "chunkline.schema_version": SCHEMA_VERSION},
)


def chunks_to_table(chunks: Iterable[Chunk]) -> pa.Table:
    """The chunks as an Arrow table with :data:`CHUNKS_SCHEMA`."""
    columns: dict[str, list] = {field.name: [] for field in CHUNKS_SCHEMA}
    for chunk in chunks:
        for name, values in columns.items():
            value = getattr(chunk, name)
            values.append(list(value) if name == "heading_path" else value)
    return pa.table(columns, schema=CHUNKS_SCHEMA)
