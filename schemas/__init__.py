"""Arrow schemas of the tables chunkline writes, each field described, with a schema version.

``TABLE_SCHEMAS`` maps each table of the output dataset to its schema and the columns its rows are
sorted by: the chunker's ``ROW_TABLES`` and the ``CHANGE_TABLES`` derived from them.
"""

from collections.abc import Iterable

import pyarrow as pa

from chunkline.schemas.changes import (
    CHANGE_KINDS,
    CHANGED_DOCUMENTS_SCHEMA,
    CHUNK_DELETES_SCHEMA,
    CHUNK_UPSERTS_SCHEMA,
    EMBEDDING_CHANGED_FIELD,
    SECTION_DELETES_SCHEMA,
    SECTION_UPSERTS_SCHEMA,
    upserts_schema,
)
from chunkline.schemas.chunks import (
    CHUNKS_SCHEMA,
    DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES,
    FRONT_MATTER_TYPES,
    SCHEMA_VERSION,
    FrontMatterColumn,
    chunks_schema,
    with_front_matter_columns,
)
from chunkline.schemas.documents import DOCUMENT_STATUSES, DOCUMENTS_SCHEMA
from chunkline.schemas.errors import ERROR_STAGES, ERRORS_SCHEMA
from chunkline.schemas.sections import SECTION_COLUMNS, SECTIONS_SCHEMA

#: table name -> (schema, sort and uniqueness key)
TABLE_SCHEMAS = {
    "chunks": (CHUNKS_SCHEMA, ("doc_id", "chunk_index")),
    "documents": (DOCUMENTS_SCHEMA, ("doc_id", "source_uri")),
    "errors": (ERRORS_SCHEMA, ("doc_id", "source_uri", "stage", "error_type", "message")),
    "sections": (SECTIONS_SCHEMA, ("doc_id", "section_ordinal")),
    "changes/documents": (CHANGED_DOCUMENTS_SCHEMA, ("doc_id",)),
    "changes/upserts": (CHUNK_UPSERTS_SCHEMA, ("doc_id", "chunk_index")),
    "changes/deletes": (CHUNK_DELETES_SCHEMA, ("doc_id", "chunk_id")),
    "changes/section_upserts": (SECTION_UPSERTS_SCHEMA, ("doc_id", "section_ordinal")),
    "changes/section_deletes": (SECTION_DELETES_SCHEMA, ("doc_id", "section_id")),
}

#: The tables whose columns include the promoted front-matter keys (``output.front_matter_columns``).
FRONT_MATTER_TABLES = ("chunks", "changes/upserts")


def table_schemas(
    front_matter_columns: Iterable[FrontMatterColumn] = (),
) -> dict[str, tuple[pa.Schema, tuple[str, ...]]]:
    """``TABLE_SCHEMAS`` of a run that promotes ``front_matter_columns``: ``chunks`` and ``changes/upserts``
    with those columns appended (``TABLE_SCHEMAS`` itself when there are none)."""
    columns = tuple(front_matter_columns)
    if not columns:
        return TABLE_SCHEMAS
    return {
        table: (with_front_matter_columns(schema, columns), key) if table in FRONT_MATTER_TABLES else (schema, key)
        for table, (schema, key) in TABLE_SCHEMAS.items()
    }


#: The tables the chunker's rows fill; the ``changes/`` tables are derived from them and the previous snapshot.
ROW_TABLES = ("chunks", "documents", "errors", "sections")
CHANGE_TABLES = (
    "changes/documents",
    "changes/upserts",
    "changes/deletes",
    "changes/section_upserts",
    "changes/section_deletes",
)

__all__ = [
    "CHANGE_KINDS",
    "CHANGE_TABLES",
    "CHANGED_DOCUMENTS_SCHEMA",
    "CHUNK_DELETES_SCHEMA",
    "CHUNK_UPSERTS_SCHEMA",
    "ROW_TABLES",
    "SECTION_COLUMNS",
    "SECTION_DELETES_SCHEMA",
    "SECTION_UPSERTS_SCHEMA",
    "SECTIONS_SCHEMA",
    "CHUNKS_SCHEMA",
    "DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES",
    "FRONT_MATTER_TABLES",
    "FRONT_MATTER_TYPES",
    "FrontMatterColumn",
    "chunks_schema",
    "table_schemas",
    "DOCUMENTS_SCHEMA",
    "DOCUMENT_STATUSES",
    "EMBEDDING_CHANGED_FIELD",
    "ERRORS_SCHEMA",
    "ERROR_STAGES",
    "SCHEMA_VERSION",
    "TABLE_SCHEMAS",
    "upserts_schema",
]
