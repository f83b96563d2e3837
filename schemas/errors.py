"""Arrow schema of the ``errors`` table: one row per problem met while reading or chunking a document."""

from __future__ import annotations

import pyarrow as pa

from chunkline.schemas.chunks import SCHEMA_VERSION, field

__all__ = ["ERRORS_SCHEMA", "ERROR_STAGES"]

#: Where a problem happened: finding files, reading bytes, decoding text, parsing or chunking.
ERROR_STAGES = ("match", "read", "decode", "parse", "chunk")

ERRORS_SCHEMA = pa.schema(
    [
        field(
            "doc_id",
            pa.string(),
            "POSIX path of the document relative to the input root (the input itself for match errors).",
        ),
        field("source_uri", pa.string(), "URL or path of the document or input."),
        field("stage", pa.string(), "Where it failed: match, read, decode, parse or chunk."),
        field(
            "error_type", pa.string(), "Kind of problem, e.g. InvalidUtf8, BinaryFile, FileTooLarge, FileNotFoundError."
        ),
        field("message", pa.string(), "What went wrong and what to do about it; never contains credentials."),
    ],
    metadata={
        "chunkline.table": "errors",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": "One row per problem met while finding, reading, decoding, parsing or chunking a document; the run goes on.",
    },
)
