"""Arrow schemas of the tables chunkline writes, each field described, with a schema version.

``TABLE_SCHEMAS`` maps each table of the output dataset to its schema and the columns its rows are
sorted by.
"""

from chunkline.schemas.chunks import CHUNKS_SCHEMA, SCHEMA_VERSION, chunks_to_table
from chunkline.schemas.documents import DOCUMENT_STATUSES, DOCUMENTS_SCHEMA
from chunkline.schemas.errors import ERROR_STAGES, ERRORS_SCHEMA

#: table name -> (schema, sort and uniqueness key)
TABLE_SCHEMAS = {
    "chunks": (CHUNKS_SCHEMA, ("doc_id", "chunk_index")),
    "documents": (DOCUMENTS_SCHEMA, ("doc_id", "source_uri")),
    "errors": (ERRORS_SCHEMA, ("doc_id", "source_uri", "stage", "error_type", "message")),
}

__all__ = [
    "CHUNKS_SCHEMA",
    "DOCUMENTS_SCHEMA",
    "DOCUMENT_STATUSES",
    "ERRORS_SCHEMA",
    "ERROR_STAGES",
    "SCHEMA_VERSION",
    "TABLE_SCHEMAS",
    "chunks_to_table",
]
