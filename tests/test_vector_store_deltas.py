"""The loader examples kept in step with a dataset that is rebuilt: ``sync`` and ``apply_changes`` of
``examples/load_lancedb.py``, ``examples/load_qdrant.py`` and ``examples/load_chroma.py``, run for real on
embedded LanceDB, Qdrant's local mode and Chroma's persistent client.

A small corpus goes through three runs of the pipeline on one output: the first publishes every document, the
second adds a document and edits one, the third edits a document in its middle, adds one and deletes one.
After a sync, a store must hold exactly the latest snapshot's chunks (the same ids, the same fields, each
vector the embedding of its text) however far behind it was, and a delta must only write what changed and
embed only what it must: a front-matter edit that moves every offset of a document costs no embedding.
No test here may reach the network.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest
from conftest import import_example, qdrant_points
from pipeline.conftest import run, write_corpus, write_files
from qdrant_client import QdrantClient, models

from chunkline.dataset.publish import list_snapshots, read_dataset, read_manifest

pytestmark = pytest.mark.timeout(300)


embedder = import_example("hashing_embedder")
load_lancedb = import_example("load_lancedb")
load_qdrant = import_example("load_qdrant")
load_chroma = import_example("load_chroma")
HASHING = embedder.HashingEmbedder()


class CountingEmbedder:
    """The hashing embedder, recording every text it is asked to embed."""

    def __init__(self):
        self.name = HASHING.name
        self.texts: list[str] = []

    def embed(self, texts):
        texts = list(texts)
        self.texts.extend(texts)
        return HASHING.embed(texts)


# Small chunks, so that an edit in the middle of a document leaves the chunks before it as they were.
SETTINGS = ("max_tokens=64", "overlap_tokens=0")

TROUBLESHOOTING = "guide/troubleshooting.md"
EDITED, ADDED, DELETED = "guide/installation.md", "guide/faq.md", "CHANGELOG.md"
FAQ_QUESTION = (
    "Why is the tide reading late on the dashboard? The gauge reports every minute; the dashboard refreshes every five."
)
FAQ = f"# FAQ\n\n## Late readings\n\n{FAQ_QUESTION}\n".encode()
CHANGELOG_PASSAGE = "The berth radar reports occupancy in percent."


def add_troubleshooting_and_edit_the_readme(corpus: Path) -> None:
    write_files(
        corpus, {TROUBLESHOOTING: b"# Troubleshooting\n\n## No readings\n\nCheck the USB cable of the gateway first.\n"}
    )
    readme = corpus / "README.md"
    readme.write_bytes(
        readme.read_bytes().replace(b"for the full text.", b"for the full text. Third-party notices are in `NOTICE`.")
    )


def edit_one_in_its_middle_add_one_delete_one(corpus: Path) -> None:
    path = corpus / EDITED
    text = path.read_bytes()
    assert b"## Configuration" in text
    path.write_bytes(
        text.replace(b"## Configuration", b"## Configuration\n\nSet `HT_PORT` before the first start.\n", 1)
    )
    write_files(corpus, {ADDED: FAQ})
    (corpus / DELETED).unlink()


# --------------------------------------------------------------------------------------------------
# The stores, read back in full
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One stored chunk: its id, the fields stored with it, its vector, and whether it still carries the
    mark ``Store.mark_every_row`` gave it."""

    chunk_uuid: str
    fields: dict[str, Any]
    vector: tuple[float, ...]
    marked: bool


MARK = "#delta-test-mark"


def lancedb_rows(target: Path) -> list[Stored]:
    rows = lancedb.connect(str(target)).open_table("chunks").to_arrow().to_pylist()
    stored = []
    for row in rows:
        vector = tuple(np.asarray(row.pop("vector"), dtype=np.float64))
        # The mark is a suffix on source_uri: a row written again gets the chunk's own source_uri back.
        marked = row["source_uri"].endswith(MARK)
        row["source_uri"] = row["source_uri"].removesuffix(MARK)
        stored.append(Stored(row["chunk_uuid"], row, vector, marked))
    return sorted(stored, key=lambda row: row.chunk_uuid)


def lancedb_mark(target: Path) -> None:
    table = lancedb.connect(str(target)).open_table("chunks")
    data = table.to_arrow()
    marked = pa.array([uri + MARK for uri in data.column("source_uri").to_pylist()], pa.string())
    data = data.set_column(data.schema.get_field_index("source_uri"), data.schema.field("source_uri"), marked)
    table.merge_insert("chunk_uuid").when_matched_update_all().execute(data)


def qdrant_rows(target: Path) -> list[Stored]:
    points = qdrant_points(target)
    stored = []
    for point in points:
        payload = dict(point.payload)
        # The mark is an extra payload key: an upsert replaces the whole payload, so a point written again loses it.
        marked = payload.pop(MARK, False)
        stored.append(Stored(str(point.id), payload, tuple(np.asarray(point.vector, dtype=np.float64)), marked))
    return sorted(stored, key=lambda row: row.chunk_uuid)


def qdrant_mark(target: Path) -> None:
    client = QdrantClient(path=str(target))
    try:
        client.set_payload(
            "chunks", payload={MARK: True}, points=models.FilterSelector(filter=models.Filter()), wait=True
        )
    finally:
        client.close()


def chroma_rows(target: Path) -> list[Stored]:
    found = (
        load_chroma.client_for(target)
        .get_collection("chunks", embedding_function=None)
        .get(include=["embeddings", "metadatas", "documents"])
    )
    stored = []
    for uuid, vector, metadata, text in zip(found["ids"], found["embeddings"], found["metadatas"], found["documents"]):
        fields = {**metadata, "heading_path": metadata.get("heading_path", []), "text": text}
        # The mark is a suffix on chunk_id (Chroma merges metadata on upsert, so an extra key would stay).
        marked = fields["chunk_id"].endswith(MARK)
        fields["chunk_id"] = fields["chunk_id"].removesuffix(MARK)
        stored.append(Stored(uuid, fields, tuple(np.asarray(vector, dtype=np.float64)), marked))
    return sorted(stored, key=lambda row: row.chunk_uuid)


def chroma_mark(target: Path) -> None:
    records = load_chroma.client_for(target).get_collection("chunks", embedding_function=None)
    found = records.get(include=["metadatas"])
    marked = [{"chunk_id": metadata["chunk_id"] + MARK} for metadata in found["metadatas"]]
    records.update(ids=found["ids"], metadatas=marked)


def lancedb_remove(target: Path, chunk_uuid: str) -> None:
    lancedb.connect(str(target)).open_table("chunks").delete(f"chunk_uuid = '{chunk_uuid}'")


def qdrant_remove(target: Path, chunk_uuid: str) -> None:
    client = QdrantClient(path=str(target))
    try:
        client.delete("chunks", points_selector=models.PointIdsList(points=[chunk_uuid]), wait=True)
    finally:
        client.close()


def chroma_remove(target: Path, chunk_uuid: str) -> None:
    load_chroma.client_for(target).get_collection("chunks", embedding_function=None).delete(ids=[chunk_uuid])


@dataclass(frozen=True)
class Store:
    module: ModuleType
    rows: Callable[[Path], list[Stored]]
    mark_every_row: Callable[[Path], None]
    expected_fields: Callable[[dict[str, Any]], dict[str, Any]]
    """What the store keeps of a chunk row besides its vector."""
    remove: Callable[[Path, str], None]
    """Deletes one chunk from the store behind the loader's back."""
    exact_search: bool
    """Whether ``search`` compares the query with every vector (LanceDB without an index, Qdrant's local
    mode). Chroma searches an HNSW graph, which after deletes and upserts can leave a live record out of
    every result (chroma-core/chroma#7758, seen on 1.5.9), so its first hit is not checked."""


STORES = {
    "lancedb": Store(load_lancedb, lancedb_rows, lancedb_mark, lambda chunk: chunk, lancedb_remove, True),
    "qdrant": Store(
        load_qdrant,
        qdrant_rows,
        qdrant_mark,
        lambda chunk: {name: chunk[name] for name in load_qdrant.PAYLOAD_COLUMNS},
        qdrant_remove,
        True,
    ),
    "chroma": Store(
        load_chroma,
        chroma_rows,
        chroma_mark,
        lambda chunk: {name: chunk[name] for name in [*load_chroma.METADATA_COLUMNS, "text"]},
        chroma_remove,
        False,
    ),
}


def assert_holds_exactly(store: Store, target: Path, dataset_url: str, snapshot: str) -> list[Stored]:
    """The store holds one row per chunk of ``snapshot``, under its chunk_uuid, with the chunk's fields and
    the embedding of its text, and records that it is synced to ``snapshot``; returns its rows."""
    chunks = {row["chunk_uuid"]: row for row in read_dataset(dataset_url, "chunks", snapshot=snapshot).to_pylist()}
    stored = store.rows(target)
    assert [row.chunk_uuid for row in stored] == sorted(chunks), "the store's ids are not the snapshot's chunk_uuids"
    for row in stored:
        chunk = chunks[row.chunk_uuid]
        assert row.fields == store.expected_fields(chunk), chunk["chunk_id"]
        assert np.allclose(row.vector, embedder.embed([chunk["embed_text"]])[0], atol=1e-6), chunk["chunk_id"]
    assert store.module.synced_snapshot(str(target)) == snapshot
    return stored


def assert_found_first(store: Store, target: Path, stored: list[Stored], query: str, doc_id: str) -> None:
    """Of the vectors ``stored`` holds, one of ``doc_id``'s is the nearest to ``query``; a store that searches
    exactly returns that chunk first, and no store returns an id it does not hold."""
    query_vector = np.asarray(embedder.embed([query])[0], dtype=np.float64)
    nearest = max(stored, key=lambda row: float(np.dot(row.vector, query_vector)))
    assert nearest.fields["doc_id"] == doc_id and query in nearest.fields["text"]
    hits = store.module.search(str(target), query, k=3, embedder=HASHING)
    # LanceDB gives the row (its chunk_uuid column), Qdrant and Chroma the record's id.
    found = [str(hit["chunk_uuid"] if "chunk_uuid" in hit else hit["id"]) for hit in hits]
    assert len(found) == 3 and set(found) <= {row.chunk_uuid for row in stored}
    if store.exact_search:
        assert found[0] == nearest.chunk_uuid


# --------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    url: str
    snapshots: tuple[str, str, str]
    """The first run's snapshot, the one with the addition and the README edit, and the latest one (edit in
    the middle, addition, deletion)."""


@pytest.fixture(scope="module", autouse=True)
def offline(network_blocked):
    """No network from the pipeline run to the last search (autouse: set up before the module's other
    fixtures, so the pipeline runs are covered too)."""
    return network_blocked


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    """Three snapshots of one output, every one kept; the second and third built incrementally."""
    root = tmp_path_factory.mktemp("deltas")
    corpus = write_corpus(root / "corpus")
    output = root / "dataset"
    first = run([corpus], output, *SETTINGS)
    add_troubleshooting_and_edit_the_readme(corpus)
    second = run([corpus], output, *SETTINGS)
    edit_one_in_its_middle_add_one_delete_one(corpus)
    third = run([corpus], output, *SETTINGS)
    for summary, previous in ((second, first), (third, second)):
        assert summary.rebuild["mode"] == "incremental" and summary.rebuild["previous_snapshot"] == previous.run_id
    assert list_snapshots(str(output)) == [first.run_id, second.run_id, third.run_id]
    return History(str(output), (first.run_id, second.run_id, third.run_id))


@pytest.fixture(scope="module")
def stores_left_behind_by_keep_one(tmp_path_factory) -> tuple[str, dict[str, Path], str]:
    """(dataset URL, a store of each kind synced to its first snapshot, that snapshot) after two more runs
    with ``output.keep=1``: the second snapshot, whose delta the stores would need first, is gone."""
    root = tmp_path_factory.mktemp("keep-one")
    corpus = write_corpus(root / "corpus")
    output = root / "dataset"
    first = run([corpus], output, *SETTINGS, "output.keep=1")
    targets = {name: root / name for name in STORES}
    for name, target in targets.items():
        assert STORES[name].module.sync(str(output), str(target), embedder=HASHING) == ("load", [first.run_id])
    add_troubleshooting_and_edit_the_readme(corpus)
    run([corpus], output, *SETTINGS, "output.keep=1")
    edit_one_in_its_middle_add_one_delete_one(corpus)
    latest = run([corpus], output, *SETTINGS, "output.keep=1")
    assert list_snapshots(str(output)) == [latest.run_id]
    return str(output), targets, first.run_id


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_an_empty_store_is_loaded_in_full_from_the_latest_snapshot(name, history, tmp_path):
    store, target = STORES[name], tmp_path / "store"
    assert store.module.synced_snapshot(str(target)) is None
    counting = CountingEmbedder()
    assert store.module.sync(history.url, str(target), embedder=counting) == ("load", [history.snapshots[2]])
    stored = assert_holds_exactly(store, target, history.url, history.snapshots[2])
    # A full load embeds every chunk, once.
    assert len(counting.texts) == len(stored)


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_one_snapshot_behind_sync_applies_the_delta_and_writes_only_what_changed(name, history, tmp_path):
    store, target = STORES[name], tmp_path / "store"
    previous, latest = history.snapshots[1:]
    store.module.load(history.url, str(target), snapshot=previous, embedder=HASHING)
    before = assert_holds_exactly(store, target, history.url, previous)
    assert any(row.fields["doc_id"] == DELETED for row in before)
    store.mark_every_row(target)

    counting = CountingEmbedder()
    assert store.module.sync(history.url, str(target), embedder=counting) == ("changes", [latest])
    after = assert_holds_exactly(store, target, history.url, latest)
    # Embedded: the upserts whose embed_text is new, and no others (the edit shifted chunks to new indexes).
    delta = read_dataset(history.url, "changes/upserts", snapshot=latest).to_pylist()
    assert sorted(counting.texts) == sorted(row["embed_text"] for row in delta if row["embedding_changed"])

    # Only the delta's upserts were written; every other chunk kept its stored vector and fields untouched.
    upserted = {row["chunk_uuid"] for row in read_dataset(history.url, "changes/upserts", snapshot=latest).to_pylist()}
    assert {row.chunk_uuid for row in after if not row.marked} == upserted
    edited = [row for row in after if row.fields["doc_id"] == EDITED]
    assert any(row.marked for row in edited) and not all(row.marked for row in edited)
    assert {row.fields["doc_id"] for row in after if not row.marked} == {EDITED, ADDED}

    # The added document is found, and nothing of the deleted one is left.
    assert_found_first(store, target, after, FAQ_QUESTION, ADDED)
    assert not any(row.fields["doc_id"] == DELETED for row in after)
    assert all(
        hit["doc_id"] != DELETED for hit in store.module.search(str(target), CHANGELOG_PASSAGE, k=10, embedder=HASHING)
    )

    # Up to date: a sync has nothing to do.
    assert store.module.sync(history.url, str(target), embedder=HASHING) == ("changes", [])
    assert store.rows(target) == after


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_applying_the_same_delta_again_changes_nothing(name, history, tmp_path):
    store, target = STORES[name], tmp_path / "store"
    previous, latest = history.snapshots[1:]
    store.module.load(history.url, str(target), snapshot=previous, embedder=HASHING)
    store.module.apply_changes(history.url, str(target), snapshot=latest, embedder=HASHING)
    once = assert_holds_exactly(store, target, history.url, latest)
    count = store.module.apply_changes(history.url, str(target), snapshot=latest, embedder=HASHING)
    assert count == len(once)
    assert store.rows(target) == once
    assert store.module.synced_snapshot(str(target)) == latest


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_two_snapshots_behind_applies_both_deltas_in_order(name, history, tmp_path):
    store, target = STORES[name], tmp_path / "store"
    first, second, latest = history.snapshots
    store.module.load(history.url, str(target), snapshot=first, embedder=HASHING)
    assert not any(row.fields["doc_id"] in (TROUBLESHOOTING, ADDED) for row in store.rows(target))
    store.mark_every_row(target)

    assert store.module.sync(history.url, str(target), embedder=HASHING) == ("changes", [second, latest])
    after = assert_holds_exactly(store, target, history.url, latest)
    # Delta by delta: chunks neither snapshot touched were never written again.
    touched = {
        row["chunk_uuid"]
        for snapshot in (second, latest)
        for row in read_dataset(history.url, "changes/upserts", snapshot=snapshot).to_pylist()
    }
    assert {row.chunk_uuid for row in after if not row.marked} == touched & {row.chunk_uuid for row in after}
    assert any(row.marked for row in after)


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_whose_next_snapshot_was_dropped_is_reloaded_in_full_and_ends_exact(
    name, stores_left_behind_by_keep_one
):
    dataset_url, targets, first = stores_left_behind_by_keep_one
    store, target = STORES[name], targets[name]
    assert store.module.synced_snapshot(str(target)) == first
    assert any(row.fields["doc_id"] == DELETED for row in store.rows(target))
    latest = read_manifest(dataset_url)["snapshot"]

    assert store.module.snapshots_after(dataset_url, first) is None
    assert store.module.sync(dataset_url, str(target), embedder=HASHING) == ("load", [latest])
    # The full reload also removed what is no longer in the dataset, which no delta it applied listed.
    after = assert_holds_exactly(store, target, dataset_url, latest)
    assert not any(row.fields["doc_id"] == DELETED for row in after)
    assert_found_first(store, target, after, FAQ_QUESTION, ADDED)


# --------------------------------------------------------------------------------------------------
# Damaged outputs
# --------------------------------------------------------------------------------------------------


def _flip_a_bit_in_the_largest_chunks_part(output: Path, snapshot: str) -> None:
    parts = sorted(
        (output / "snapshots" / snapshot / "chunks").glob("part-*.parquet"), key=lambda path: -path.stat().st_size
    )
    data = bytearray(parts[0].read_bytes())
    data[len(data) // 2] ^= 0x10
    parts[0].write_bytes(bytes(data))


@pytest.fixture(scope="module")
def stores_behind_a_damaged_output(tmp_path_factory) -> tuple[str, dict[str, Path], Path, list[str]]:
    """(dataset URL, a store of each kind synced to the first snapshot, the corpus, the snapshot ids) after a
    second run, with a document deleted and one edited, whose chunks then lost a bit."""
    root = tmp_path_factory.mktemp("damaged")
    corpus = write_corpus(root / "corpus")
    output = root / "dataset"
    first = run([corpus], output, *SETTINGS)
    targets = {name: root / name for name in STORES}
    for name, target in targets.items():
        assert STORES[name].module.sync(str(output), str(target), embedder=HASHING) == ("load", [first.run_id])
    edit_one_in_its_middle_add_one_delete_one(corpus)
    second = run([corpus], output, *SETTINGS)
    _flip_a_bit_in_the_largest_chunks_part(output, second.run_id)
    return str(output), targets, corpus, [first.run_id, second.run_id]


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_behind_a_damaged_snapshot_gets_the_repair_runs_delta_against_the_snapshot_it_holds(
    name, stores_behind_a_damaged_output, tmp_path
):
    dataset_url, targets, corpus, (first, damaged) = stores_behind_a_damaged_output
    output = tmp_path / "dataset"
    shutil.copytree(dataset_url, output)
    target = tmp_path / "store"
    shutil.copytree(targets[name], target)
    store = STORES[name]
    repaired = run([corpus], output, *SETTINGS)
    assert repaired.rebuild["previous_snapshot"] == first
    assert damaged not in list_snapshots(str(output))

    assert store.module.sync(str(output), str(target), embedder=HASHING) == ("changes", [repaired.run_id])
    after = assert_holds_exactly(store, target, str(output), repaired.run_id)
    assert not any(row.fields["doc_id"] == DELETED for row in after)


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_is_reloaded_in_full_when_the_repair_run_found_no_snapshot_to_compare_with(
    name, stores_behind_a_damaged_output, tmp_path
):
    dataset_url, targets, corpus, (first, damaged) = stores_behind_a_damaged_output
    output = tmp_path / "dataset"
    shutil.copytree(dataset_url, output)
    _flip_a_bit_in_the_largest_chunks_part(output, first)
    target = tmp_path / "store"
    shutil.copytree(targets[name], target)
    store = STORES[name]
    repaired = run([corpus], output, *SETTINGS)
    assert read_manifest(str(output))["full_reload"] is True

    assert store.module.snapshots_after(str(output), first) is None
    assert store.module.sync(str(output), str(target), embedder=HASHING) == ("load", [repaired.run_id])
    # A delta of "every document added" would have left the deleted document's chunks; the reload did not.
    after = assert_holds_exactly(store, target, str(output), repaired.run_id)
    assert not any(row.fields["doc_id"] == DELETED for row in after)


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_delta_that_fails_verification_is_not_applied_and_the_store_is_reloaded(name, history, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(history.url, output)
    first, second, latest = history.snapshots
    upserts = sorted((output / "snapshots" / second / "changes" / "upserts").glob("part-*.parquet"))
    upserts[0].write_bytes(upserts[0].read_bytes()[:-8])
    store, target = STORES[name], tmp_path / "store"
    store.module.load(str(output), str(target), snapshot=first, embedder=HASHING)

    assert store.module.sync(str(output), str(target), embedder=HASHING) == ("load", [latest])
    assert_holds_exactly(store, target, str(output), latest)


# --------------------------------------------------------------------------------------------------
# A front-matter edit: every offset moves, no embedding changes
# --------------------------------------------------------------------------------------------------

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
#: A real document of the sample corpus with front matter: 12 chunks at the default settings.
LONG_DOCUMENT = "reference/cli.md"
FRONT_MATTER_LINE = b"reviewed: 2026-11-30\n"


@pytest.fixture(scope="module")
def front_matter_edit(tmp_path_factory) -> History:
    """Two snapshots at the default settings: a corpus with the sample corpus's CLI reference, then the same
    corpus with one line added to that document's front matter."""
    root = tmp_path_factory.mktemp("front-matter")
    corpus = root / "corpus"
    for relative in (LONG_DOCUMENT, "README.md", "reference/glossary.md"):
        write_files(corpus, {relative: (SAMPLE_CORPUS / relative).read_bytes()})
    output = root / "dataset"
    first = run([corpus], output)
    document = corpus / LONG_DOCUMENT
    data = document.read_bytes()
    assert data.startswith(b"---\n") and b"\n---\n" in data
    document.write_bytes(data.replace(b"\n---\n", b"\n" + FRONT_MATTER_LINE + b"---\n", 1))
    second = run([corpus], output)
    assert second.rebuild["mode"] == "incremental"
    return History(str(output), (first.run_id, second.run_id, second.run_id))


def test_a_front_matter_edit_upserts_every_chunk_of_the_document_and_flags_none_for_embedding(front_matter_edit):
    first, latest = front_matter_edit.snapshots[:2]
    before = {
        row["chunk_id"]: row
        for row in read_dataset(front_matter_edit.url, "chunks", snapshot=first).to_pylist()
        if row["doc_id"] == LONG_DOCUMENT
    }
    upserts = read_dataset(front_matter_edit.url, "changes/upserts", snapshot=latest).to_pylist()
    assert len(before) >= 10
    assert sorted(row["chunk_id"] for row in upserts) == sorted(before)
    # Every chunk ends further down the file; only the first one starts where it did (at the front matter).
    for row in upserts:
        old = before[row["chunk_id"]]
        assert (row["end_char"], row["end_line"]) == (old["end_char"] + len(FRONT_MATTER_LINE), old["end_line"] + 1)
        assert row["embed_text"] == old["embed_text"] and not row["embedding_changed"]
    documents = read_dataset(front_matter_edit.url, "changes/documents", snapshot=latest).to_pylist()
    counts = {row["doc_id"]: (row["chunks_upserted"], row["chunks_reembedded"]) for row in documents}
    assert counts[LONG_DOCUMENT] == (len(before), 0)


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_front_matter_edit_costs_no_embedding_and_the_store_holds_the_new_offsets(name, front_matter_edit, tmp_path):
    store, target = STORES[name], tmp_path / "store"
    first, latest = front_matter_edit.snapshots[:2]
    store.module.load(front_matter_edit.url, str(target), snapshot=first, embedder=HASHING)
    vectors_before = {row.chunk_uuid: row.vector for row in store.rows(target)}
    store.mark_every_row(target)

    counting = CountingEmbedder()
    assert store.module.sync(front_matter_edit.url, str(target), embedder=counting) == ("changes", [latest])
    assert counting.texts == [], f"{len(counting.texts)} chunks embedded again after a front-matter edit"

    # Read back: each chunk of the document has its new offsets and lines, and the vector it had.
    after = assert_holds_exactly(store, target, front_matter_edit.url, latest)
    chunks = {
        row["chunk_uuid"]: row for row in read_dataset(front_matter_edit.url, "chunks", snapshot=latest).to_pylist()
    }
    edited = [row for row in after if row.fields["doc_id"] == LONG_DOCUMENT]
    assert len(edited) >= 10 and not any(row.marked for row in edited)
    assert all(row.marked for row in after if row.fields["doc_id"] != LONG_DOCUMENT)
    for row in edited:
        assert (row.fields["start_char"], row.fields["end_char"], row.fields["end_line"]) == (
            chunks[row.chunk_uuid]["start_char"],
            chunks[row.chunk_uuid]["end_char"],
            chunks[row.chunk_uuid]["end_line"],
        )
        # The vector it had (Chroma normalises a vector it is given again: its last float32 bit may move).
        assert np.allclose(row.vector, vectors_before[row.chunk_uuid], rtol=0, atol=1e-6)
    hit = store.module.search(str(target), "tidewater calibrate fit", k=1, embedder=HASHING)[0]
    assert (
        hit["doc_id"] == LONG_DOCUMENT
        and hit["end_char"] == chunks[hit["chunk_uuid"] if name == "lancedb" else hit["id"]]["end_char"]
    )


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_an_upsert_that_keeps_its_embedding_is_embedded_when_the_store_lost_its_vector(
    name, front_matter_edit, tmp_path
):
    store, target = STORES[name], tmp_path / "store"
    first, latest = front_matter_edit.snapshots[:2]
    store.module.load(front_matter_edit.url, str(target), snapshot=first, embedder=HASHING)
    upserts = read_dataset(front_matter_edit.url, "changes/upserts", snapshot=latest).to_pylist()
    lost = upserts[len(upserts) // 2]
    assert not lost["embedding_changed"]
    store.remove(target, lost["chunk_uuid"])

    counting = CountingEmbedder()
    assert store.module.sync(front_matter_edit.url, str(target), embedder=counting) == ("changes", [latest])
    # The one chunk with no stored vector to keep is embedded; the store ends exact.
    assert counting.texts == [lost["embed_text"]]
    assert_holds_exactly(store, target, front_matter_edit.url, latest)
