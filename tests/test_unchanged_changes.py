"""A shard where nothing changed writes its ``changes/documents`` column by column: the same rows, and the
same part bytes, as the row-by-row comparison of the shard's documents with themselves."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset.merge import documents_changes, unchanged_documents_changes
from chunkline.dataset.storage import parquet_bytes

DOC_IDS = st.sampled_from(
    ["a.md", "b/c.md", "caf\u00e9.md", "z.md", "\u00e9t\u00e9/x.md", "A.md", "b.md", "\U0001f600.md"]
)
ROWS = st.lists(
    st.tuples(
        DOC_IDS,
        st.sampled_from(["ok", "error", "skipped"]),
        st.one_of(st.none(), st.text("0123456789abcdef", min_size=64, max_size=64)),
    ),
    max_size=12,
)


def documents_table(rows: list[tuple[str, str, str | None]]) -> pa.Table:
    doc_ids, statuses, hashes = zip(*rows) if rows else ((), (), ())
    return pa.table(
        {
            "doc_id": pa.array(doc_ids, pa.string()),
            "status": pa.array(statuses, pa.string()),
            "content_sha256": pa.array(hashes, pa.string()),
        }
    )


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_unchanged_changes_are_the_row_by_row_comparisons(rows):
    documents = documents_table(rows)
    expected = documents_changes(documents, documents, {}, {})
    found = unchanged_documents_changes(documents)
    assert found.schema == expected.schema
    assert found.to_pylist() == expected.to_pylist()
    if expected.num_rows:
        assert parquet_bytes(found, 1000, "zstd") == parquet_bytes(expected, 1000, "zstd")


def test_a_document_without_a_content_hash_counts_as_changed():
    documents = documents_table([("b.md", "ok", "0" * 64), ("a.md", "error", None)])
    found = unchanged_documents_changes(documents).to_pylist()
    assert [(row["doc_id"], row["change"]) for row in found] == [("a.md", "changed"), ("b.md", "unchanged")]
