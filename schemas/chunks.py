"""Arrow schema of the ``chunks`` table: one row per chunk, the columns of the engine's ``Chunk``.

Column names are a contract (PRODUCT.md): columns are added, never renamed. Every field carries a
``description`` in its metadata, and the schema carries ``chunkline.schema_version``.

``CHUNKS_SCHEMA`` is the table with no front-matter columns; a run with ``output.front_matter_columns``
writes :func:`chunks_schema` of them: the same columns, then one typed column per promoted front-matter key
(:class:`FrontMatterColumn`), in the order they are given (the config's parser sorts them by name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "CHUNKS_SCHEMA",
    "DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES",
    "FRONT_MATTER_TYPES",
    "FrontMatterColumn",
    "SCHEMA_VERSION",
    "chunks_schema",
    "field",
    "with_front_matter_columns",
]

#: Bumped when a column is added or its meaning changes.
SCHEMA_VERSION = "4"


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
        field(
            "section_id",
            pa.string(),
            "section_id (in the sections table) of the innermost section the chunk starts in: the heading "
            "subtree holding start_char, or the document root <doc_id>#s0 before the first heading.",
        ),
        field(
            "prev_chunk_id",
            pa.string(),
            "chunk_id of the document's previous chunk (chunk_index - 1); null for its first chunk.",
            nullable=True,
        ),
        field(
            "next_chunk_id",
            pa.string(),
            "chunk_id of the document's next chunk (chunk_index + 1); null for its last chunk.",
            nullable=True,
        ),
        field(
            "parent_section_ids",
            pa.list_(pa.string()),
            "section_id of each section enclosing section_id, outermost first: the root, then the headings "
            "above; section_id itself not included (empty for a chunk in the root).",
        ),
    ],
    metadata={
        "chunkline.table": "chunks",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": (
            "One row per chunk: its text, exact positions in the source document, heading path and token "
            "count, the text to embed, the section it starts in and its neighbours."
        ),
    },
)


#: Bytes of a promoted front-matter value (its JSON text, in UTF-8) past which its column is null, by default.
DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES = 65_536

#: The types a promoted front-matter key can have, by the name ``output.front_matter_columns`` gives them.
FRONT_MATTER_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "list<string>": pa.list_(pa.string()),
    "integer": pa.int64(),
    "float": pa.float64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}

_WHAT_FITS = {
    "string": "a string (a date YAML reads unquoted counts, as its ISO 8601 text)",
    "list<string>": "a list of strings (a single string is a list of one)",
    "integer": "a whole number within 64 bits",
    "float": "a number (a whole number becomes a float when it is exact as one)",
    "boolean": "true or false",
    "timestamp": "a date or a date and time in ISO 8601, in UTC (a date is its midnight; a time without an "
    "offset is taken as UTC)",
}


@dataclass(frozen=True)
class FrontMatterColumn:
    """One front-matter key promoted to a typed ``chunks`` column (``output.front_matter_columns``)."""

    key: str
    """The top-level key of the document's front matter."""
    type: str
    """A name of :data:`FRONT_MATTER_TYPES`."""
    column: str
    """The column's name in ``chunks`` (and ``changes/upserts``)."""
    max_value_bytes: int = DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES
    """A larger value (its JSON text, in UTF-8) is null in the column (``output.front_matter_max_value_bytes``):
    every chunk of the document carries the value, so its size is paid once per chunk."""

    def arrow_field(self) -> pa.Field:
        """The column as an Arrow field, nullable, with its description."""
        return field(
            self.column,
            FRONT_MATTER_TYPES[self.type],
            f"Front matter {self.key!r} of the chunk's document, as {self.type} (output.front_matter_columns): "
            f"{_WHAT_FITS[self.type]}. Null when the front matter has no such key, or a value that does not fit "
            "(the errors table then holds a FrontMatterTypeMismatch row naming the key and the value) or is "
            "over output.front_matter_max_value_bytes (a FrontMatterValueTooLarge row).",
            nullable=True,
        )


def with_front_matter_columns(schema: pa.Schema, front_matter_columns: Iterable[FrontMatterColumn]) -> pa.Schema:
    """``schema`` with one field per promoted front-matter key appended, its metadata kept."""
    extra = [column.arrow_field() for column in front_matter_columns]
    if not extra:
        return schema
    return pa.schema([*schema, *extra], metadata=schema.metadata)


def chunks_schema(front_matter_columns: Iterable[FrontMatterColumn] = ()) -> pa.Schema:
    """The ``chunks`` table of a run that promotes ``front_matter_columns``: ``CHUNKS_SCHEMA`` when none."""
    return with_front_matter_columns(CHUNKS_SCHEMA, front_matter_columns)
