"""Scheduled rebuilds: incremental runs, the ``changes/`` delta, snapshots and the output lock.

A second run on an output carries over the rows of every document whose bytes and settings are unchanged
and chunks only the others; its tables must be exactly a full rebuild's. Its ``changes/`` tables are the
delta a vector-store loader applies: applying it to the previous snapshot's chunks gives the new chunks,
and applying it twice changes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import chunkline.dataset.document_rows as document_rows_module
from chunkline.dataset.publish import (
    ConcurrentRunError,
    DatasetNotFoundError,
    list_snapshots,
    read_dataset,
    read_manifest,
)
from chunkline.schemas import ROW_TABLES

from .conftest import CORPUS, assert_document_chunks, rows, rows_by_doc, run, table_digests, write_files
from .test_killed_run import STALLED_RUN

pytestmark = pytest.mark.timeout(300)

EDITED, ADDED, DELETED = "guide/installation.md", "guide/faq.md", "CHANGELOG.md"
FAQ = b"# FAQ\n\n## Why is the tide late?\n\nThe gauge reports every minute; the dashboard every five.\n"


@pytest.fixture
def chunked_documents(monkeypatch) -> list[str]:
    """doc_ids of the documents that went through the chunker (in this process)."""
    seen: list[str] = []
    original = document_rows_module.chunk_document_with_section_rows

    def counting(document, config, *args, **kwargs):
        seen.append(kwargs.get("doc_id", ""))
        return original(document, config, *args, **kwargs)

    monkeypatch.setattr(document_rows_module, "chunk_document_with_section_rows", counting)
    return seen


def _edit(root: Path) -> None:
    """One document edited in its middle section, one added, one deleted."""
    path = root / EDITED
    text = path.read_bytes()
    marker = b"## Configuration"
    assert marker in text
    path.write_bytes(text.replace(marker, b"## Configuration\n\nSet `HT_PORT` before the first start.\n", 1))
    write_files(root, {ADDED: FAQ})
    (root / DELETED).unlink()


def _changes(output: Path) -> dict[str, dict]:
    return {row["doc_id"]: row for row in rows(output, "changes/documents")}


def _apply(store: dict[str, dict], output: Path, *, snapshot: str | None = None) -> None:
    """What a vector-store loader does with a snapshot's delta: upsert by chunk_uuid, delete by chunk_uuid."""
    for row in read_dataset(str(output), "changes/deletes", snapshot=snapshot).to_pylist():
        store.pop(row["chunk_uuid"], None)
    for row in read_dataset(str(output), "changes/upserts", snapshot=snapshot).to_pylist():
        store[row["chunk_uuid"]] = chunk_columns(row)


def chunk_columns(upsert: dict) -> dict:
    """An upsert row without ``embedding_changed``: the chunk row a store holds."""
    return {name: value for name, value in upsert.items() if name != "embedding_changed"}


def test_an_unchanged_corpus_chunks_nothing_and_every_document_is_unchanged(corpus, tmp_path, chunked_documents):
    output = tmp_path / "out"
    first = run([corpus], output)
    assert first.rebuild["mode"] == "full" and len(chunked_documents) == len(CORPUS)
    assert set(_changes(output)) == set(CORPUS)
    assert {row["change"] for row in _changes(output).values()} == {"added"}
    before = table_digests(output, ROW_TABLES)
    chunked_documents.clear()

    second = run([corpus], output)
    assert chunked_documents == [], "an unchanged document went through the chunker"
    assert second.rebuild == {
        "mode": "incremental",
        "reason": f"0 of {len(CORPUS)} documents to chunk, {len(CORPUS)} carried over, 0 gone",
        "documents_chunked": 0,
        "documents_carried_over": len(CORPUS),
        "documents_read_to_compare": 0,
        "previous_snapshot": first.run_id,
    }
    assert {doc_id: row["change"] for doc_id, row in _changes(output).items()} == {
        doc_id: "unchanged" for doc_id in CORPUS
    }
    assert rows(output, "changes/upserts") == [] and rows(output, "changes/deletes") == []
    assert second.changes == {
        "added": 0,
        "changed": 0,
        "deleted": 0,
        "unchanged": len(CORPUS),
        "chunks_upserted": 0,
        "chunks_reembedded": 0,
        "chunks_deleted": 0,
    }
    # The same part files, byte for byte, in a new snapshot.
    assert table_digests(output, ROW_TABLES) == before
    assert read_manifest(str(output))["snapshot"] == second.run_id != first.run_id


def test_one_edit_one_addition_one_deletion_are_exactly_the_delta(corpus, tmp_path, chunked_documents):
    output = tmp_path / "out"
    run([corpus], output, "max_tokens=64", "overlap_tokens=0")
    previous_chunks = {row["chunk_id"]: row for row in rows(output, "chunks")}
    store: dict[str, dict] = {}
    _apply(store, output)
    assert store == {row["chunk_uuid"]: row for row in previous_chunks.values()}
    _edit(corpus)
    chunked_documents.clear()

    summary = run([corpus], output, "max_tokens=64", "overlap_tokens=0")
    assert sorted(chunked_documents) == sorted([EDITED, ADDED])
    changes = _changes(output)
    assert {doc_id: row["change"] for doc_id, row in changes.items() if row["change"] != "unchanged"} == {
        EDITED: "changed",
        ADDED: "added",
        DELETED: "deleted",
    }
    assert changes[DELETED]["content_sha256"] is None and changes[ADDED]["previous_content_sha256"] is None
    assert changes[EDITED]["content_sha256"] != changes[EDITED]["previous_content_sha256"]

    new_chunks = {row["chunk_id"]: row for row in rows(output, "chunks")}
    upserts = rows(output, "changes/upserts")
    deletes = rows(output, "changes/deletes")
    # Upserts: every chunk of the new document, and the edited document's chunks that are new or differ.
    assert {row["chunk_id"] for row in upserts} == {
        chunk_id for chunk_id, row in new_chunks.items() if previous_chunks.get(chunk_id) != row
    }
    assert {row["doc_id"] for row in upserts} == {EDITED, ADDED}
    assert all(chunk_columns(row) == new_chunks[row["chunk_id"]] for row in upserts)
    # A new embedding exactly where embed_text is new: the paragraph shifts the chunks after it by one index,
    # so each of them holds the embed_text another chunk_id had; nothing before the edit is embedded again.
    for row in upserts:
        before = previous_chunks.get(row["chunk_id"])
        assert row["embedding_changed"] == (before is None or before["embed_text"] != row["embed_text"]), row[
            "chunk_id"
        ]
    assert all(row["embedding_changed"] for row in upserts if row["doc_id"] == ADDED)
    # The edit inserts a paragraph mid-document: the edited document's first chunks are not upserted again.
    assert (
        0
        < sum(row["doc_id"] == EDITED for row in upserts)
        < sum(row["doc_id"] == EDITED for row in new_chunks.values())
    )
    # Deletes: every chunk of the deleted document, and the edited document's chunk ids that are gone.
    assert {row["chunk_id"] for row in deletes} == set(previous_chunks) - set(new_chunks)
    assert {row["chunk_id"] for row in deletes} >= {
        chunk_id for chunk_id in previous_chunks if chunk_id.startswith(f"{DELETED}#")
    }
    for doc_id, row in changes.items():
        assert row["chunks_upserted"] == sum(upsert["doc_id"] == doc_id for upsert in upserts), doc_id
        assert row["chunks_deleted"] == sum(delete["doc_id"] == doc_id for delete in deletes), doc_id
        assert row["chunks_reembedded"] == sum(
            upsert["doc_id"] == doc_id and upsert["embedding_changed"] for upsert in upserts
        ), doc_id
    assert summary.changes == {
        "added": 1,
        "changed": 1,
        "deleted": 1,
        "unchanged": len(CORPUS) - 2,
        "chunks_upserted": len(upserts),
        "chunks_reembedded": sum(row["embedding_changed"] for row in upserts),
        "chunks_deleted": len(deletes),
    }

    # Applying the delta to the previous chunks gives the new chunks; applying it again changes nothing.
    _apply(store, output)
    expected = {row["chunk_uuid"]: row for row in new_chunks.values()}
    assert store == expected
    _apply(store, output)
    assert store == expected
    assert_document_chunks(rows_by_doc(output, "chunks")[EDITED], (corpus / EDITED).read_bytes())


@pytest.mark.slow
def test_a_front_matter_edit_moves_every_offset_but_changes_no_embedding_unless_it_changes_the_title(corpus, tmp_path):
    output = tmp_path / "out"
    run([corpus], output, "max_tokens=64", "overlap_tokens=0")
    before = {row["chunk_id"]: row for row in rows(output, "chunks") if row["doc_id"] == "README.md"}
    readme = corpus / "README.md"
    readme.write_bytes(readme.read_bytes().replace(b"updated: 2024-05-01\n", b"updated: 2024-05-01\nreviewed: yes\n"))

    summary = run([corpus], output, "max_tokens=64", "overlap_tokens=0")
    upserts = rows(output, "changes/upserts")
    # Every chunk of the document ends one line further down (the first one, holding the front matter, still
    # starts on line 1) and is upserted; none needs a new embedding.
    assert sorted(row["chunk_id"] for row in upserts) == sorted(before) and len(before) > 5
    for row in upserts:
        old = before[row["chunk_id"]]
        assert (row["end_line"], row["end_char"]) == (old["end_line"] + 1, old["end_char"] + len("reviewed: yes\n"))
        assert row["start_line"] == (1 if row["chunk_index"] == 0 else old["start_line"] + 1)
    assert all(row["embed_text"] == before[row["chunk_id"]]["embed_text"] for row in upserts)
    assert not any(row["embedding_changed"] for row in upserts)
    assert summary.changes["chunks_upserted"] == len(before) and summary.changes["chunks_reembedded"] == 0
    assert _changes(output)["README.md"]["chunks_reembedded"] == 0
    assert "(0 to embed)" in summary.describe()

    # The title is in every chunk's context line: a new title is a new embedding for each of them.
    readme.write_bytes(readme.read_bytes().replace(b"title: Harbour Telemetry\n", b"title: Quay Telemetry\n"))
    run([corpus], output, "max_tokens=64", "overlap_tokens=0")
    upserts = rows(output, "changes/upserts")
    assert sorted(row["chunk_id"] for row in upserts) == sorted(before)
    assert all(row["embedding_changed"] and "Quay Telemetry" in row["embed_text"] for row in upserts)
    assert _changes(output)["README.md"]["chunks_reembedded"] == len(before)


@pytest.mark.parametrize(
    "in_process_max_documents, beam_args", [(256, None), (0, ["--runner", "FnApiRunner"])], ids=["in-process", "runner"]
)
@pytest.mark.slow
def test_the_incremental_result_equals_a_full_rebuild_of_the_same_corpus(
    corpus, tmp_path, in_process_max_documents, beam_args
):
    output = tmp_path / "out"
    settings = ("output.shards=3", f"run.in_process_max_documents={in_process_max_documents}")
    run([corpus], output, *settings, beam_args=beam_args)
    _edit(corpus)
    # Only a modification time moves for another document: its documents row follows, its chunks carry over.
    os.utime(corpus / "README.md", (1_700_000_000, 1_700_000_000))
    summary = run([corpus], output, *settings, beam_args=beam_args)
    assert summary.rebuild["mode"] == "incremental" and summary.rebuild["documents_chunked"] == 2
    assert read_manifest(str(output))["rebuild"]["runner"] == ("FnApiRunner" if beam_args else "none")
    fresh = run([corpus], tmp_path / "fresh", *settings, beam_args=beam_args)
    assert fresh.rebuild["mode"] == "full"
    for table in ROW_TABLES:
        assert read_dataset(str(output), table).equals(read_dataset(str(tmp_path / "fresh"), table)), table
    # Row for row and byte for byte: the same part files under the same names.
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)
    readme = {row["doc_id"]: row for row in rows(output, "documents")}["README.md"]
    assert readme["modified_time"].timestamp() == 1_700_000_000


@pytest.mark.slow
def test_a_changed_chunking_config_rebuilds_everything_by_itself(corpus, tmp_path, chunked_documents):
    output = tmp_path / "out"
    run([corpus], output, "max_tokens=256")
    chunked_documents.clear()
    summary = run([corpus], output, "max_tokens=96")
    assert summary.rebuild["mode"] == "full"
    assert "settings differ" in summary.rebuild["reason"]
    assert sorted(chunked_documents) == sorted(CORPUS)
    assert max(row["token_count"] for row in rows(output, "chunks")) <= 96
    # The delta replaces every chunk whose row changed; documents whose chunks all changed are "changed".
    changes = _changes(output)
    assert any(row["change"] == "changed" for row in changes.values())
    assert all(row["change"] in ("changed", "unchanged") for row in changes.values())
    assert all(row["chunks_upserted"] > 0 for row in changes.values() if row["change"] == "changed")


@pytest.mark.slow
def test_a_changed_row_group_byte_cap_rebuilds_everything_into_the_new_row_groups(corpus, tmp_path, chunked_documents):
    """``output.row_group_bytes`` decides the part files (not the rows): changing it rebuilds in full, the
    same rows in other row groups, so that an incremental run after it still writes a full rebuild's files."""
    import pyarrow.parquet as pq

    output = tmp_path / "out"
    run([corpus], output)
    before = {table: read_dataset(str(output), table) for table in ROW_TABLES}
    chunked_documents.clear()
    summary = run([corpus], output, "output.row_group_bytes=4000")
    assert summary.rebuild["mode"] == "full" and "settings differ" in summary.rebuild["reason"]
    assert sorted(chunked_documents) == sorted(CORPUS)
    for table in ROW_TABLES:
        assert read_dataset(str(output), table).equals(before[table]), table
    parts = [output / name for name in read_manifest(str(output))["tables"]["chunks"]["files"]]
    groups = [pq.ParquetFile(part).metadata.num_row_groups for part in parts]
    assert parts and max(groups) > 1, groups
    assert all(change["change"] == "unchanged" for change in _changes(output).values())
    chunked_documents.clear()
    again = run([corpus], output, "output.row_group_bytes=4000")
    assert again.rebuild["mode"] == "incremental" and chunked_documents == []


@pytest.mark.slow
def test_reindex_chunks_everything_and_finds_nothing_changed(corpus, tmp_path, chunked_documents, capsys):
    from chunkline.pipelines.cli import main

    output = tmp_path / "out"
    run([corpus], output)
    before = table_digests(output, ROW_TABLES)
    chunked_documents.clear()
    assert main(["run", str(corpus), "--output", str(output), "--reindex"]) == 0
    assert sorted(chunked_documents) == sorted(CORPUS)
    assert "full rebuild: reindex requested" in capsys.readouterr().out
    assert table_digests(output, ROW_TABLES) == before
    assert {row["change"] for row in _changes(output).values()} == {"unchanged"}


def test_inspect_shows_the_rebuild_and_the_change_counts(corpus, tmp_path, capsys):
    from chunkline.pipelines.cli import main

    output = tmp_path / "out"
    run([corpus], output)
    _edit(corpus)
    summary = run([corpus], output)
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    text = capsys.readouterr().out
    assert f"rebuild: incremental from snapshot {summary.rebuild['previous_snapshot']}: 2 documents chunked" in text
    assert f"changes: 1 added, 1 changed, 1 deleted, {len(CORPUS) - 2} unchanged" in text
    assert f"{summary.run_id} (latest)" in text


@pytest.mark.slow
def test_snapshots_beyond_keep_are_removed_after_the_new_one_is_published(corpus, tmp_path):
    output = tmp_path / "out"
    run_ids = []
    for number in range(4):
        write_files(corpus, {f"notes/day-{number}.md": f"# Day {number}\n\nTide at {number + 6}:00.\n".encode()})
        run_ids.append(run([corpus], output, "output.keep=2").run_id)
    assert list_snapshots(str(output)) == run_ids[-2:]
    assert sorted(path.name for path in (output / "snapshots").iterdir()) == run_ids[-2:]
    assert read_manifest(str(output))["snapshot"] == run_ids[-1]
    # A kept snapshot stays readable whole: its own manifest names its parts.
    older = {row["doc_id"] for row in read_dataset(str(output), "documents", snapshot=run_ids[-2]).to_pylist()}
    assert "notes/day-2.md" in older and "notes/day-3.md" not in older
    with pytest.raises(DatasetNotFoundError, match=run_ids[0]):
        read_dataset(str(output), "documents", snapshot=run_ids[0])
    # Each snapshot's delta is relative to the one before it.
    day_three = _changes(output)["notes/day-3.md"]
    assert day_three["change"] == "added"


def test_a_run_refuses_an_output_whose_lock_a_live_run_holds(corpus, tmp_path):
    output = tmp_path / "out"
    run([corpus], output)
    published = (output / "_manifest.json").read_bytes()
    holder = {
        "run_id": "20261130T000000Z-abcdef",
        "host": socket.gethostname(),
        "pid": os.getpid(),  # alive
        "started_at": "2026-11-30T00:00:00+00:00",
        "started_at_epoch": time.time(),
    }
    (output / "_lock.json").write_text(json.dumps(holder))
    with pytest.raises(
        ConcurrentRunError, match=r"another chunkline run \(20261130T000000Z-abcdef, pid \d+ on .+\) is writing"
    ):
        run([corpus], output)
    assert (output / "_manifest.json").read_bytes() == published
    assert json.loads((output / "_lock.json").read_text()) == holder
    # A lock older than output.lock_expiry_seconds is taken over.
    holder["started_at_epoch"] = time.time() - 7200
    (output / "_lock.json").write_text(json.dumps(holder))
    run([corpus], output, "output.lock_expiry_seconds=3600")
    assert not (output / "_lock.json").exists()


@pytest.mark.slow
def test_two_rebuilds_at_once_only_one_publishes_and_the_next_run_takes_over_a_dead_runs_lock(corpus, tmp_path):
    output = tmp_path / "out"
    run([corpus], output)
    published = read_manifest(str(output))
    write_files(corpus, {ADDED: FAQ})
    marker, log = tmp_path / "stalled", tmp_path / "stalled.log"
    with open(log, "wb") as handle:
        stalled = subprocess.Popen(
            [sys.executable, "-c", STALLED_RUN, "pipeline", str(marker), "run", str(corpus), "--output", str(output)],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert stalled.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        # The first rebuild is mid-pipeline: a second one started now fails at once, clearly, from the CLI.
        second = subprocess.run(
            [sys.executable, "-m", "chunkline.pipelines.cli", "run", str(corpus), "--output", str(output)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        assert f"pid {stalled.pid}" in second.stderr and "is writing" in second.stderr
        assert read_manifest(str(output)) == published
    finally:
        stalled.send_signal(signal.SIGKILL)
        stalled.wait(timeout=30)
    # The stalled run died holding the lock; the next run sees its process is gone and takes the lock over.
    summary = run([corpus], output)
    assert summary.rebuild["mode"] == "incremental" and summary.changes["added"] == 1
    assert not (output / "_lock.json").exists()
    assert list_snapshots(str(output)) == [published["snapshot"], summary.run_id]


def test_a_chunk_row_is_upserted_when_any_column_differs_even_an_empty_heading_or_a_null():
    import pyarrow as pa
    import pyarrow.compute as pc

    from chunkline.dataset.merge import same_rows

    new = pa.table(
        {
            "chunk_id": ["a#0", "a#1", "a#2", "a#3", "a#4"],
            "heading_path": [[], ["Setup"], ["Setup", "Ports"], [""], ["Setup"]],
            "section_index": [0, 1, 2, 3, None],
        }
    )
    old = pa.table(
        {
            "chunk_id": ["a#1", "a#2", "a#3", "a#0", "a#4"],
            "heading_path": [["Setup"], ["Setup", "Ports"], [], [""], ["Setup"]],
            "section_index": [1, 5, 3, 0, None],
        }
    )
    position = pc.index_in(new.column("chunk_id"), value_set=old.column("chunk_id"))
    # a#0: [] is not [""]; a#2: another section; a#3: [""] is not []; a#1 and a#4 (null = null) are equal.
    assert same_rows(new, old, position).to_pylist() == [False, True, False, False, True]
    unmatched = pc.index_in(pa.array(["b#0"]), value_set=old.column("chunk_id"))
    assert same_rows(new.slice(0, 1), old, unmatched).to_pylist() == [False]


def test_an_embedding_changes_with_embed_text_alone_not_with_text_or_positions():
    import pyarrow as pa
    import pyarrow.compute as pc

    from chunkline.dataset.merge import embedding_changed

    old = pa.table(
        {
            "chunk_id": ["a#0", "a#1", "a#2"],
            "text": ["---\ntags: [x]\n---\n# Setup\n", "Set the port.", "Restart."],
            "embed_text": ["Setup", "Setup\n\nSet the port.", "Setup\n\nRestart."],
            "start_char": [0, 30, 44],
        }
    )
    new = pa.table(
        {
            "chunk_id": ["a#0", "a#1", "a#2", "a#3"],
            # a#0: only the front matter in text changed; a#1: moved; a#2: same text, new context; a#3: new.
            "text": ["---\ntags: [x, y]\n---\n# Setup\n", "Set the port.", "Restart.", "Check the log."],
            "embed_text": ["Setup", "Setup\n\nSet the port.", "Setup > Ports\n\nRestart.", "Setup\n\nCheck the log."],
            "start_char": [0, 33, 47, 56],
        }
    )
    position = pc.index_in(new.column("chunk_id"), value_set=old.column("chunk_id"))
    assert embedding_changed(new, old, position).to_pylist() == [False, False, True, True]
    unmatched = pc.index_in(pa.array(["b#0"]), value_set=old.column("chunk_id"))
    assert embedding_changed(new.slice(0, 1), old, unmatched).to_pylist() == [True]
