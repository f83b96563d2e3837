"""Arrow schema of the ``documents`` table: one row per input document, whatever became of it."""

from __future__ import annotations

import pyarrow as pa

from chunkline.schemas.chunks import SCHEMA_VERSION, field

__all__ = ["DOCUMENTS_SCHEMA", "DOCUMENT_STATUSES"]

#: ``ok``: chunked; ``error``: see the ``errors`` table; ``skipped``: matched but deliberately not chunked.
DOCUMENT_STATUSES = ("ok", "error", "skipped")

DOCUMENTS_SCHEMA = pa.schema(
    [
        field("doc_id", pa.string(), "POSIX path of the document relative to the input root."),
        field("source_uri", pa.string(), "URL or path the document was read from."),
        field("status", pa.string(), "ok (chunked), error (see the errors table) or skipped (not chunked on purpose)."),
        field("size_bytes", pa.int64(), "Size of the file in bytes.", nullable=True),
        field(
            "content_sha256",
            pa.string(),
            "SHA-256 of the file's bytes, hex; null when it could not be read.",
            nullable=True,
        ),
        field(
            "modified_time",
            pa.timestamp("us", tz="UTC"),
            "Last modification time reported by the storage, UTC; null when the storage reports none.",
            nullable=True,
        ),
        field(
            "encoding",
            pa.string(),
            "How the bytes were decoded: utf-8, or utf-8 (replaced) when invalid bytes became U+FFFD.",
            nullable=True,
        ),
        field("chunk_count", pa.int32(), "Number of chunks of the document (0 unless status is ok)."),
        field("token_count", pa.int64(), "Sum of the token counts of the document's chunks."),
        field("title", pa.string(), "Front matter title, else the first level-1 heading.", nullable=True),
        field("front_matter", pa.string(), "The document's front matter as JSON text, if it has any.", nullable=True),
        field("message", pa.string(), "Why the document is in error or skipped; null when ok.", nullable=True),
        field(
            "source_mtime_ns",
            pa.int64(),
            "Modification time the storage listed for the file, in nanoseconds since the epoch (a local file's "
            "st_mtime_ns; another store's time at its own precision); null when it reports none or is not "
            "trusted. With size_bytes, source_etag and source_version it decides whether a rerun reads the file.",
            nullable=True,
        ),
        field(
            "source_etag",
            pa.string(),
            "Entity tag the storage listed for the file (S3 ETag, GCS or Azure etag), as given; null when none.",
            nullable=True,
        ),
        field(
            "source_version",
            pa.string(),
            "Object version the storage listed for the file (GCS generation, S3 VersionId, Azure version_id); "
            "null when none.",
            nullable=True,
        ),
    ],
    metadata={
        "chunkline.table": "documents",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": "One row per input document, whatever became of it: chunked (ok), failed (error) or not chunked on purpose (skipped).",
    },
)
