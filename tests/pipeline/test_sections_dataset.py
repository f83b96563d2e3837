"""The ``sections`` table of a published dataset: its rows, its ``changes/`` delta, and joins with chunks.

An incremental run that sees one heading edited must publish exactly the delta a store of sections (and
one of chunks) needs: the sections whose rows changed as upserts, none deleted, and the edited document's
other sections and the untouched document's rows carried over as they were.
"""

from __future__ import annotations

import duckdb
import pytest

from chunkline import ChunkConfig, chunk_markdown_with_sections
from chunkline.dataset.publish import read_dataset
from chunkline.record import chunk_uuid
from chunkline.schemas import SECTION_COLUMNS

from .conftest import rows, run, write_files

pytestmark = pytest.mark.timeout(300)

HARBOUR = (
    b"# Harbour\n\nThe harbour runs around the clock.\n\n"
    b"## Tides\n\nThe gauge on the north quay reports the water level every minute.\n\n"
    b"## Configuration\n\nSet the port before the first start; the collector reads it once.\n\n"
    b"### Ports\n\nThe dashboard listens on 8443 and the collector on 9100.\n"
)
CRANES = b"# Cranes\n\nWind limits are checked before each lift.\n\n## Limits\n\nAbove 20 m/s no crane moves.\n"
SETTINGS = ("max_tokens=40", "overlap_tokens=0")


def ids(table: list[dict], column: str) -> list[str]:
    return sorted(row[column] for row in table)


@pytest.mark.slow
def test_one_heading_edit_is_exactly_the_section_and_chunk_delta(tmp_path):
    corpus = write_files(tmp_path / "corpus", {"harbour.md": HARBOUR, "cranes.md": CRANES})
    output = tmp_path / "out"
    run([corpus], output, *SETTINGS)
    before = {row["section_id"]: row for row in rows(output, "sections")}
    chunks_before = {row["chunk_id"]: row for row in rows(output, "chunks")}
    assert ids(rows(output, "changes/section_upserts"), "section_id") == sorted(before)

    (corpus / "harbour.md").write_bytes(HARBOUR.replace(b"## Configuration", b"## Settings"))
    summary = run([corpus], output, *SETTINGS)
    assert summary.rebuild["mode"] == "incremental" and summary.rebuild["documents_carried_over"] == 1

    after = {row["section_id"]: row for row in rows(output, "sections")}
    assert sorted(after) == sorted(before)
    upserts = {row["section_id"]: row for row in rows(output, "changes/section_upserts")}
    # The edited heading's section, the subtree under it (its heading path moved), and the sections holding
    # it (their text changed). The section before the edit, and the other document, are unchanged.
    assert sorted(upserts) == ["harbour.md#s0", "harbour.md#s1", "harbour.md#s3", "harbour.md#s4"]
    assert rows(output, "changes/section_deletes") == []
    assert after["harbour.md#s2"] == before["harbour.md#s2"]
    assert {key: row for key, row in after.items() if key.startswith("cranes")} == {
        key: row for key, row in before.items() if key.startswith("cranes")
    }
    assert after["harbour.md#s3"]["heading"] == "Settings"
    assert after["harbour.md#s4"]["heading_path"] == ["Harbour", "Settings", "Ports"]
    # What must be embedded again: every upserted section whose embed_text changed. The root and the H1
    # are over max_tokens, with no embed_text before or after: nothing to embed.
    assert {key: row["embedding_changed"] for key, row in upserts.items()} == {
        "harbour.md#s0": False,
        "harbour.md#s1": False,
        "harbour.md#s3": True,
        "harbour.md#s4": True,
    }
    assert before["harbour.md#s0"]["embed_text"] is None and after["harbour.md#s1"]["embed_text"] is None

    # The chunks: the edited section's and its subsection's (their heading path) are upserted; the first
    # chunk (the H1 and Tides, merged) is not.
    chunks_after = {row["chunk_id"]: row for row in rows(output, "chunks")}
    chunk_upserts = ids(rows(output, "changes/upserts"), "chunk_id")
    assert chunk_upserts == sorted(
        chunk_id for chunk_id, row in chunks_after.items() if chunks_before.get(chunk_id) != row
    )
    assert chunk_upserts == ["harbour.md#1", "harbour.md#2"]
    assert [chunks_after[chunk_id]["section_id"] for chunk_id in chunk_upserts] == ["harbour.md#s3", "harbour.md#s4"]
    assert rows(output, "changes/deletes") == []

    # A store of sections that applies both deltas holds the new table.
    store = {row["section_uuid"]: row for row in before.values()}
    for row in rows(output, "changes/section_deletes"):
        store.pop(row["section_uuid"])
    for row in upserts.values():
        store[row["section_uuid"]] = {name: row[name] for name in SECTION_COLUMNS}
    assert store == {row["section_uuid"]: row for row in after.values()}


def test_a_removed_heading_deletes_the_last_section_ids(tmp_path):
    corpus = write_files(tmp_path / "corpus", {"harbour.md": HARBOUR})
    output = tmp_path / "out"
    run([corpus], output, *SETTINGS)
    (corpus / "harbour.md").write_bytes(HARBOUR.replace(b"## Tides\n\n", b""))
    run([corpus], output, *SETTINGS)
    # Ordinals follow document order: the section ids after the removed heading move up by one.
    assert rows(output, "changes/section_deletes") == [
        {
            "doc_id": "harbour.md",
            "section_id": "harbour.md#s4",
            "section_uuid": chunk_uuid("harbour.md#s4"),
        }
    ]
    assert ids(rows(output, "changes/section_upserts"), "section_id") == [f"harbour.md#s{n}" for n in range(4)]


def test_the_sections_table_is_the_engines_sections(tmp_path):
    corpus = write_files(tmp_path / "corpus", {"harbour.md": HARBOUR, "cranes.md": CRANES})
    output = tmp_path / "out"
    run([corpus], output, *SETTINGS)
    config = ChunkConfig(max_tokens=40, overlap_tokens=0)
    expected = []
    for name in ("cranes.md", "harbour.md"):
        result = chunk_markdown_with_sections(
            (corpus / name).read_text(), config, doc_id=name, source_uri=str(corpus / name)
        )
        expected += [{column: getattr(section, column) for column in SECTION_COLUMNS} for section in result.sections]
    found = rows(output, "sections")
    for row in found:
        row["heading_path"] = tuple(row["heading_path"])
        row["source_uri"] = row["source_uri"].removeprefix("file://")
    assert found == expected


def test_duckdb_joins_chunks_to_their_sections(tmp_path):
    corpus = write_files(tmp_path / "corpus", {"harbour.md": HARBOUR, "cranes.md": CRANES})
    output = tmp_path / "out"
    run([corpus], output, *SETTINGS)
    connection = duckdb.connect()
    connection.register("chunks", read_dataset(str(output), "chunks"))
    connection.register("sections", read_dataset(str(output), "sections"))
    joined = connection.execute(
        """
        select c.chunk_id, s.section_id, s.heading, s.start_char <= c.start_char and c.start_char < s.end_char
        from chunks c join sections s on c.section_id = s.section_id
        order by c.doc_id, c.chunk_index
        """
    ).fetchall()
    assert len(joined) == len(rows(output, "chunks"))
    assert all(inside for *_, inside in joined)
    # Every chunk under a section: its own section or one of the sections around it, as chunk_count says.
    counts = connection.execute(
        """
        select s.section_id, s.chunk_count, count(c.chunk_id)
        from sections s left join chunks c
          on c.section_id = s.section_id or list_contains(c.parent_section_ids, s.section_id)
        group by s.section_id, s.chunk_count
        """
    ).fetchall()
    assert counts and all(expected == found for _, expected, found in counts)
    # A chunk's neighbours are in the same table.
    neighbours = connection.execute(
        """
        select count(*) from chunks c join chunks n on c.next_chunk_id = n.chunk_id
        where n.prev_chunk_id = c.chunk_id and n.chunk_index = c.chunk_index + 1
        """
    ).fetchone()[0]
    assert neighbours == len(joined) - 2  # one last chunk per document


def test_sections_read_with_pandas_and_polars(tmp_path):
    import polars as pl

    corpus = write_files(tmp_path / "corpus", {"harbour.md": HARBOUR})
    output = tmp_path / "out"
    run([corpus], output, *SETTINGS)
    frame = read_dataset(str(output), "sections", as_pandas=True)
    assert list(frame.columns) == list(SECTION_COLUMNS)
    assert frame["heading_path"].tolist()[4] == ["Harbour", "Configuration", "Ports"]
    table = pl.from_arrow(read_dataset(str(output), "sections"))
    assert table.filter(pl.col("level") == 2)["heading"].to_list() == ["Tides", "Configuration"]
