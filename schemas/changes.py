"""Arrow schemas of a snapshot's ``changes/`` tables: what changed since the previous snapshot.

A vector-store loader applies a snapshot's delta instead of reloading the corpus:

- ``changes/documents``: one row per document of either snapshot, with its change (``added``, ``changed``,
  ``deleted`` or ``unchanged``) and how many chunk rows it upserts and deletes;
- ``changes/upserts``: the chunk rows to insert or overwrite (columns of the ``chunks`` table, then
  ``embedding_changed``), keyed by ``chunk_uuid``: every chunk that is new or whose row differs from the
  previous snapshot's row. ``embedding_changed`` is false when only positions or other columns moved and
  ``embed_text`` is what it was (a front-matter edit that shifts every offset of a document): a loader keeps
  the stored vector and rewrites the payload, and embeds only the rows where it is true;
- ``changes/deletes``: the chunks of the previous snapshot that are gone (their ``chunk_id`` and
  ``chunk_uuid``);
- ``changes/section_upserts`` and ``changes/section_deletes``: the same for the ``sections`` table, keyed
  by ``section_uuid`` (``embedding_changed`` compares the sections' ``embed_text``), so that a store of
  sections syncs as a store of chunks does.

Upserting and deleting by ``chunk_uuid`` (``section_uuid``) are idempotent: applying a delta twice changes
nothing. On the first snapshot of an output every document is ``added`` and every chunk an upsert.
"""

from __future__ import annotations

import pyarrow as pa

from chunkline.schemas.chunks import CHUNKS_SCHEMA, SCHEMA_VERSION, field
from chunkline.schemas.sections import SECTIONS_SCHEMA

__all__ = [
    "CHANGE_KINDS",
    "CHANGED_DOCUMENTS_SCHEMA",
    "CHUNK_DELETES_SCHEMA",
    "CHUNK_UPSERTS_SCHEMA",
    "EMBEDDING_CHANGED_FIELD",
    "SECTION_DELETES_SCHEMA",
    "SECTION_EMBEDDING_CHANGED_FIELD",
    "SECTION_UPSERTS_SCHEMA",
    "upserts_schema",
]

#: ``added``: new doc_id; ``deleted``: gone from the input; ``changed``: its bytes or its chunk rows differ;
#: ``unchanged``: same bytes and the same rows.
CHANGE_KINDS = ("added", "changed", "deleted", "unchanged")

CHANGED_DOCUMENTS_SCHEMA = pa.schema(
    [
        field("doc_id", pa.string(), "POSIX path of the document relative to the input root."),
        field("change", pa.string(), "added, changed, deleted or unchanged, relative to the previous snapshot."),
        field(
            "content_sha256",
            pa.string(),
            "SHA-256 of the document's bytes in this snapshot; null if deleted or unreadable.",
            nullable=True,
        ),
        field(
            "previous_content_sha256",
            pa.string(),
            "SHA-256 of the document's bytes in the previous snapshot; null if added or unreadable then.",
            nullable=True,
        ),
        field("chunks_upserted", pa.int32(), "Rows of changes/upserts for this document."),
        field("chunks_deleted", pa.int32(), "Rows of changes/deletes for this document."),
        field(
            "chunks_reembedded",
            pa.int32(),
            "Rows of changes/upserts for this document whose embedding_changed is true: the embeddings a "
            "loader computes for it.",
        ),
    ],
    metadata={
        "chunkline.table": "changes/documents",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": "One row per document of this snapshot or the previous one: how it changed and how many chunk rows it upserts and deletes.",
    },
)

EMBEDDING_CHANGED_FIELD = field(
    "embedding_changed",
    pa.bool_(),
    "True when what gets embedded changed: the chunk is new (no row of the previous snapshot has its "
    "chunk_uuid) or its embed_text differs from that row's. False when only positions, text outside embed_text "
    "(front matter) or other columns moved: the stored vector stays valid and only the payload is rewritten.",
)


def upserts_schema(chunks_schema: pa.Schema) -> pa.Schema:
    """The schema of ``changes/upserts`` for rows of ``chunks_schema``: its columns, then ``embedding_changed``."""
    return chunks_schema.append(EMBEDDING_CHANGED_FIELD).with_metadata(
        {
            "chunkline.table": "changes/upserts",
            "chunkline.schema_version": SCHEMA_VERSION,
            "description": (
                "The chunk rows to insert or overwrite since the previous snapshot (columns of chunks), keyed by "
                "chunk_uuid, each saying whether its embedding must be computed again (embedding_changed)."
            ),
        }
    )


CHUNK_UPSERTS_SCHEMA = upserts_schema(CHUNKS_SCHEMA)

CHUNK_DELETES_SCHEMA = pa.schema(
    [
        field("doc_id", pa.string(), "POSIX path of the document the chunk belonged to."),
        field("chunk_id", pa.string(), "Id of the chunk to delete: <doc_id>#<chunk_index> in the previous snapshot."),
        field("chunk_uuid", pa.string(), "UUIDv5 of chunk_id: the point id to delete in stores keyed by UUID."),
    ],
    metadata={
        "chunkline.table": "changes/deletes",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": "The chunks of the previous snapshot that are gone: delete them by chunk_uuid (or chunk_id).",
    },
)

SECTION_EMBEDDING_CHANGED_FIELD = field(
    "embedding_changed",
    pa.bool_(),
    "True when what gets embedded changed: the section is new (no row of the previous snapshot has its "
    "section_uuid) or its embed_text differs from that row's (null included). False when only positions, "
    "counts or other columns moved.",
)

SECTION_UPSERTS_SCHEMA = SECTIONS_SCHEMA.append(SECTION_EMBEDDING_CHANGED_FIELD).with_metadata(
    {
        "chunkline.table": "changes/section_upserts",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": (
            "The section rows to insert or overwrite since the previous snapshot (columns of sections), keyed "
            "by section_uuid, each saying whether its embedding must be computed again (embedding_changed)."
        ),
    }
)

SECTION_DELETES_SCHEMA = pa.schema(
    [
        field("doc_id", pa.string(), "POSIX path of the document the section belonged to."),
        field(
            "section_id",
            pa.string(),
            "Id of the section to delete: <doc_id>#s<section_ordinal> in the previous snapshot.",
        ),
        field("section_uuid", pa.string(), "UUIDv5 of section_id: the point id to delete in stores keyed by UUID."),
    ],
    metadata={
        "chunkline.table": "changes/section_deletes",
        "chunkline.schema_version": SCHEMA_VERSION,
        "description": "The sections of the previous snapshot that are gone: delete them by section_uuid (or section_id).",
    },
)
