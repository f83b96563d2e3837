"""Arrow schemas of the tables chunkline writes, each field described, with a schema version.

``TABLE_SCHEMAS`` maps each table of the output dataset to its schema and the columns its rows are
sorted by: the chunker's ``ROW_TABLES`` and the ``CHANGE_TABLES`` derived from them.
"""

from chunkline.schemas.changes import (
    CHANGE_KINDS,
    CHANGED_DOCUMENTS_SCHEMA,
    CHUNK_DELETES_SCHEMA,
    CHUNK_UPSERTS_SCHEMA,
    EMBEDDING_CHANGED_FIELD,
    upserts_schema,
)
from chunkline.schemas.chunks import CHUNKS_SCHEMA, SCHEMA_VERSION
from chunkline.schemas.documents import DOCUMENT_STATUSES, DOCUMENTS_SCHEMA
from chunkline.schemas.errors import ERROR_STAGES, ERRORS_SCHEMA

#: table name -> (schema, sort and uniqueness key)
TABLE_SCHEMAS = {
    "chunks": (CHUNKS_SCHEMA, ("doc_id", "chunk_index")),
    "documents": (DOCUMENTS_SCHEMA, ("doc_id", "source_uri")),
    "errors": (ERRORS_SCHEMA, ("doc_id", "source_uri", "stage", "error_type", "message")),
    "changes/documents": (CHANGED_DOCUMENTS_SCHEMA, ("doc_id",)),
    "changes/upserts": (CHUNK_UPSERTS_SCHEMA, ("doc_id", "chunk_index")),
    "changes/deletes": (CHUNK_DELETES_SCHEMA, ("doc_id", "chunk_id")),
}

#: The tables the chunker's rows fill; the ``changes/`` tables are derived from them and the previous snapshot.
ROW_TABLES = ("chunks", "documents", "errors")
CHANGE_TABLES = ("changes/documents", "changes/upserts", "changes/deletes")

__all__ = [
    "CHANGE_KINDS",
    "CHANGE_TABLES",
    "CHANGED_DOCUMENTS_SCHEMA",
    "CHUNK_DELETES_SCHEMA",
    "CHUNK_UPSERTS_SCHEMA",
    "ROW_TABLES",
    "CHUNKS_SCHEMA",
    "DOCUMENTS_SCHEMA",
    "DOCUMENT_STATUSES",
    "EMBEDDING_CHANGED_FIELD",
    "ERRORS_SCHEMA",
    "ERROR_STAGES",
    "SCHEMA_VERSION",
    "TABLE_SCHEMAS",
    "upserts_schema",
]
