"""The loader examples in ``examples/``, run for real: the sample corpus's dataset loaded into embedded
LanceDB, Qdrant's local mode and Chroma's persistent client, loaded twice, and searched.

Each store must hold exactly one row per chunk under the chunk's id, keep it unchanged when the same
dataset is loaded again, and answer a passage copied from the sample corpus with the chunk that holds it,
carrying positions that point at that passage in the source file. Most tests embed with the hashing
embedder; the loaders' default, wordllama, is loaded from its wheel and searched with for real at the end.
No test here may reach the network.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest
from conftest import import_example, qdrant_points
from qdrant_client import QdrantClient

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import run_pipeline

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "sample_corpus"
EXAMPLES = REPO / "examples"


embedder = import_example("hashing_embedder")
load_lancedb = import_example("load_lancedb")
load_qdrant = import_example("load_qdrant")
load_chroma = import_example("load_chroma")
HASHING = embedder.HashingEmbedder()


@dataclass(frozen=True)
class KnownPassage:
    """A passage copied from the sample corpus, and where a reader of that file finds it."""

    query: str
    doc_id: str
    heading_path: list[str]


PASSAGES = {
    "heading-in-inline-code": KnownPassage(
        query="SDI-12 is slow; a single measurement can take over a second, so do not schedule more than two "
        "devices on the same bus at a one-second interval.",
        doc_id="guide/sensors-and-calibration.md",
        heading_path=["Sensors and calibration", "How drivers work", "Built-in drivers", "sdi12_level"],
    ),
    "crlf-file": KnownPassage(
        query="Windows Update restarts the computer when it sees fit.",
        doc_id="operations/windows-install.md",
        heading_path=["Installing Tidewater on Windows", "Things that are different on Windows", "Updates and reboots"],
    ),
}


# --------------------------------------------------------------------------------------------------
# The stores, read back in full
# --------------------------------------------------------------------------------------------------


def lancedb_rows(target: Path) -> list[dict[str, Any]]:
    """Every row of the LanceDB table, vector included, by chunk_uuid."""
    table = lancedb.connect(str(target)).open_table("chunks")
    return sorted(table.to_arrow().to_pylist(), key=lambda row: row["chunk_uuid"])


def qdrant_rows(target: Path) -> list[dict[str, Any]]:
    """Every point of the Qdrant collection as ``{"id", "vector", **payload}``, by id."""
    points = qdrant_points(target)
    return sorted(
        ({"id": point.id, "vector": point.vector, **point.payload} for point in points), key=lambda row: row["id"]
    )


def chroma_rows(target: Path) -> list[dict[str, Any]]:
    """Every record of the Chroma collection as ``{"id", "vector", **metadata, "text"}``, by id; a chunk
    stored without a heading_path key (Chroma refuses an empty list) reads as ``[]``."""
    records = load_chroma.client_for(target).get_collection("chunks", embedding_function=None)
    found = records.get(include=["embeddings", "metadatas", "documents"])
    rows = [
        {"id": uuid, "vector": list(vector), **metadata, "heading_path": metadata.get("heading_path", []), "text": text}
        for uuid, vector, metadata, text in zip(
            found["ids"], found["embeddings"], found["metadatas"], found["documents"]
        )
    ]
    return sorted(rows, key=lambda row: row["id"])


STORES = {
    "lancedb": (load_lancedb, lancedb_rows),
    "qdrant": (load_qdrant, qdrant_rows),
    "chroma": (load_chroma, chroma_rows),
}

#: What each store keeps of a chunk row besides its vector.
STORED_COLUMNS = {
    "lancedb": None,  # every column
    "qdrant": load_qdrant.PAYLOAD_COLUMNS,
    "chroma": [*load_chroma.METADATA_COLUMNS, "text"],
}


# --------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_dataset(tmp_path_factory) -> str:
    """The dataset of ``sample_corpus/``, published once on the in-process runner; its URL. Its small
    sections stay chunks of their own (``min_tokens`` 32), so that the hashing embedder finds each of
    :data:`PASSAGES` in a chunk of its section."""
    return _sample_dataset(tmp_path_factory, ["min_tokens=32"])


@pytest.fixture(scope="module")
def packed_dataset(tmp_path_factory) -> str:
    """The dataset of ``sample_corpus/`` at the default settings, small sections packed together."""
    return _sample_dataset(tmp_path_factory, [])


def _sample_dataset(tmp_path_factory, settings: list[str]) -> str:
    output = tmp_path_factory.mktemp("vector-stores") / "sample-dataset"
    config = load_run_config(None, settings, environ={}, inputs=[str(SAMPLE_CORPUS)], output=str(output))
    run_pipeline(config)
    return str(output)


@pytest.fixture(scope="module")
def sample_chunks(sample_dataset) -> dict[str, dict[str, Any]]:
    """chunk_uuid -> chunk row of the sample dataset."""
    rows = read_dataset(sample_dataset, "chunks").to_pylist()
    assert len(rows) == read_manifest(sample_dataset)["tables"]["chunks"]["rows"]
    return {row["chunk_uuid"]: row for row in rows}


@pytest.fixture(scope="module", params=list(STORES))
def loaded_store(request, sample_dataset, tmp_path_factory):
    """(store name, its folder, the count the first load returned, its rows after the first load)."""
    module, read_rows = STORES[request.param]
    target = tmp_path_factory.mktemp(request.param) / "store"
    count = module.load(sample_dataset, str(target), embedder=HASHING)
    return request.param, target, count, read_rows(target)


@pytest.fixture(scope="module", autouse=True)
def offline(network_blocked):
    """No network from the pipeline run to the last search (autouse: set up before the module's other
    fixtures, so the pipeline runs are covered too)."""
    return network_blocked


# --------------------------------------------------------------------------------------------------
# The embedding
# --------------------------------------------------------------------------------------------------


def test_embedding_is_normalised_float32_and_the_same_in_another_process():
    texts = ["How do I calibrate a tide gauge?", "Le café du port est à côté du poste 3.", ""]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, embedder.DIMENSION)
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0) and not vectors[2].any()
    # Another process with another string-hash seed must give the same bytes: stored vectors stay valid.
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from hashing_embedder import embed; "
        f"sys.stdout.buffer.write(embed({texts!r}).tobytes())"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(EXAMPLES)],
        capture_output=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert result.stdout == vectors.tobytes()


@pytest.mark.slow
def test_embedding_ranks_a_passage_nearest_to_its_own_text_among_the_sample_chunks(sample_chunks):
    rows = list(sample_chunks.values())
    vectors = embedder.embed(row["text"] for row in rows)
    for passage in PASSAGES.values():
        best = rows[int(np.argmax(vectors @ embedder.embed([passage.query])[0]))]
        assert best["doc_id"] == passage.doc_id and best["heading_path"] == passage.heading_path


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_store_holds_one_row_per_chunk_under_its_uuid_with_its_fields_and_vector(loaded_store, sample_chunks):
    name, _, count, stored = loaded_store
    assert count == len(stored) == len(sample_chunks)
    id_column = "chunk_uuid" if name == "lancedb" else "id"
    assert [row[id_column] for row in stored] == sorted(sample_chunks)
    columns = STORED_COLUMNS[name]
    for row in stored:
        chunk = sample_chunks[row[id_column]]
        expected = chunk if columns is None else {column: chunk[column] for column in columns}
        assert {key: value for key, value in row.items() if key not in ("id", "vector")} == expected
        assert np.allclose(row["vector"], embedder.embed([chunk["embed_text"]])[0], atol=1e-6)


@pytest.mark.slow
def test_second_load_leaves_the_store_unchanged(loaded_store, sample_dataset, sample_chunks):
    name, target, _, first = loaded_store
    module, read_rows = STORES[name]
    assert module.load(sample_dataset, str(target), embedder=HASHING) == len(sample_chunks)
    assert read_rows(target) == first


def test_qdrant_loads_into_a_client_it_is_given_and_leaves_it_open(sample_dataset, sample_chunks):
    client = QdrantClient(":memory:")
    assert load_qdrant.load(sample_dataset, client, embedder=HASHING) == len(sample_chunks)
    hits = load_qdrant.search(client, PASSAGES["crlf-file"].query, k=1, embedder=HASHING)
    assert [hit["doc_id"] for hit in hits] == [PASSAGES["crlf-file"].doc_id]
    assert hits[0]["id"] == next(uuid for uuid, row in sample_chunks.items() if row["chunk_id"] == hits[0]["chunk_id"])
    client.close()


# --------------------------------------------------------------------------------------------------
# Searching
# --------------------------------------------------------------------------------------------------


def line_of(document: str, offset: int) -> int:
    """1-based line of the character at ``offset``: \\r\\n, \\r and \\n end lines, and both characters of a
    \\r\\n sit on the line they end."""
    return 1 + sum(1 for match in re.finditer(r"\r\n|\r|\n", document) if match.end() <= offset)


def source_lines(document: str) -> list[str]:
    """The document's lines, each with its line ending."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", document)


@pytest.mark.parametrize("passage_name", list(PASSAGES))
def test_search_returns_the_chunk_holding_the_passage_with_its_source_position(
    loaded_store, sample_chunks, passage_name
):
    name, target, *_ = loaded_store
    module, _ = STORES[name]
    passage = PASSAGES[passage_name]
    hits = module.search(str(target), passage.query, k=3, embedder=HASHING)
    assert len(hits) == 3
    top = hits[0]
    chunk = next(row for row in sample_chunks.values() if row["chunk_id"] == top["chunk_id"])
    assert (top["doc_id"], top["heading_path"]) == (passage.doc_id, passage.heading_path)
    assert (top["start_line"], top["end_line"], top["text"]) == (chunk["start_line"], chunk["end_line"], chunk["text"])
    assert " ".join(passage.query.split()) in " ".join(top["text"].split())

    document = (SAMPLE_CORPUS / passage.doc_id).read_bytes().decode("utf-8")
    assert document[top["start_char"] : top["end_char"]] == top["text"]
    assert (line_of(document, top["start_char"]), line_of(document, top["end_char"] - 1)) == (
        top["start_line"],
        top["end_line"],
    )
    lines = source_lines(document)[top["start_line"] - 1 : top["end_line"]]
    assert top["text"] in "".join(lines)
    # The chunk opens with the heading it is filed under.
    assert lines[0].lstrip("#").strip().strip("`") == passage.heading_path[-1]


@pytest.mark.slow
def test_a_chunk_with_no_heading_is_stored_in_chroma_and_read_back_with_an_empty_heading_path(
    sample_dataset, sample_chunks, tmp_path
):
    preamble = [row for row in sample_chunks.values() if row["heading_path"] == []]
    assert preamble, "the sample corpus has chunks before any heading"
    target = tmp_path / "chroma"
    load_chroma.load(sample_dataset, str(target), embedder=HASHING)
    records = load_chroma.client_for(target).get_collection("chunks", embedding_function=None)
    stored = records.get(ids=[row["chunk_uuid"] for row in preamble], include=["metadatas"])
    assert len(stored["ids"]) == len(preamble)
    assert all("heading_path" not in metadata for metadata in stored["metadatas"])
    hit = load_chroma.search(str(target), preamble[0]["text"], k=1, embedder=HASHING)[0]
    assert hit["id"] == preamble[0]["chunk_uuid"] and hit["heading_path"] == []


# --------------------------------------------------------------------------------------------------
# The default embedder: wordllama, loaded from its wheel
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wordllama():
    """The loaders' default embedder, loaded as they load it."""
    return import_example("embedders").load_embedder()


def test_the_default_embedder_is_wordllama_from_its_wheel(wordllama):
    assert wordllama.name.startswith("wordllama-")
    vectors = wordllama.embed(["How do I calibrate a tide gauge?", "Calibrating the tide gauge"])
    assert vectors.shape == (2, 256) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ wordllama.embed(["Windows Update reboots"])[0])


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_loaded_with_the_default_embedder_finds_each_passage(
    name, sample_dataset, sample_chunks, wordllama, tmp_path
):
    module, read_rows = STORES[name]
    target = tmp_path / "store"
    # No embedder given: the loader's default, wordllama, embeds every chunk.
    assert module.load(sample_dataset, str(target)) == len(sample_chunks)
    assert module.synced_embedder(str(target)) == wordllama.name
    stored = read_rows(target)
    some = stored[:: max(1, len(stored) // 10)]
    id_column = "chunk_uuid" if name == "lancedb" else "id"
    expected = wordllama.embed([sample_chunks[row[id_column]]["embed_text"] for row in some])
    assert np.allclose([row["vector"] for row in some], expected, atol=1e-5)
    for passage in PASSAGES.values():
        top = module.search(str(target), passage.query, k=1)[0]
        assert (top["doc_id"], top["heading_path"]) == (passage.doc_id, passage.heading_path)
        assert " ".join(passage.query.split()) in " ".join(top["text"].split())


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.slow
def test_a_store_embedded_by_another_model_is_reloaded_from_scratch(
    name, sample_dataset, sample_chunks, wordllama, tmp_path
):
    module, read_rows = STORES[name]
    target = tmp_path / "store"
    module.load(sample_dataset, str(target), embedder=HASHING)
    # Up to date, but its vectors are the hashing embedder's: a sync with wordllama loads it again.
    assert module.sync(sample_dataset, str(target), embedder=wordllama)[0] == "load"
    assert module.synced_embedder(str(target)) == wordllama.name
    stored = read_rows(target)
    assert len(stored) == len(sample_chunks) and {len(row["vector"]) for row in stored} == {256}


# --------------------------------------------------------------------------------------------------
# The scripts, as the README runs them
# --------------------------------------------------------------------------------------------------

#: Runs an example script with every socket connection refused, so a download attempt fails the run.
OFFLINE_SCRIPT = """
import runpy, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network access attempted by an example script")
socket.socket.connect = socket.socket.connect_ex = socket.create_connection = socket.getaddrinfo = refuse
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("name", list(STORES))
@pytest.mark.parametrize("embedder_args", [[], ["--embedder", "hashing"]], ids=["wordllama", "hashing"])
@pytest.mark.slow
def test_the_script_syncs_then_finds_the_passage_offline_and_a_second_run_is_up_to_date(
    name, embedder_args, sample_dataset, sample_chunks, tmp_path
):
    passage = PASSAGES["crlf-file"]
    folder = tmp_path / "store"
    command = [sys.executable, "-c", OFFLINE_SCRIPT, str(EXAMPLES / f"load_{name}.py"), sample_dataset, str(folder)]
    command += [*passage.query.split(), *embedder_args]

    def run_script() -> list[str]:
        result = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    first = run_script()
    snapshot = read_manifest(sample_dataset)["snapshot"]
    assert first[0] == f"load: {snapshot}; {len(sample_chunks)} chunks in {folder}"
    # The nearest chunk is printed first, as doc_id:lines and its heading path.
    assert f"{passage.doc_id}:" in first[1] and first[1].endswith(" > ".join(passage.heading_path))
    again = run_script()
    assert again[0] == f"changes: already up to date; {len(sample_chunks)} chunks in {folder}"
    assert again[1:] == first[1:]


# --------------------------------------------------------------------------------------------------
# Small to big: chunks searched in LanceDB, sections handed out (examples/small_to_big_lancedb.py)
# --------------------------------------------------------------------------------------------------

small_to_big = import_example("small_to_big_lancedb")


@pytest.fixture(scope="module")
def small_to_big_store(sample_dataset, tmp_path_factory) -> str:
    """The sample dataset's chunks (hashing vectors) and sections in one LanceDB database; its folder."""
    target = str(tmp_path_factory.mktemp("small-to-big") / "store")
    load_lancedb.sync(sample_dataset, target, embedder=HASHING)
    small_to_big.load_sections(sample_dataset, target)
    return target


def _sample_sections(sample_dataset) -> dict[str, dict[str, Any]]:
    return {row["section_id"]: row for row in read_dataset(sample_dataset, "sections").to_pylist()}


@pytest.mark.parametrize("max_section_tokens", [128, 512, 4096])
def test_small_to_big_hands_out_the_largest_section_around_each_hit_with_its_exact_text(
    small_to_big_store, sample_dataset, sample_chunks, max_section_tokens
):
    passage = PASSAGES["crlf-file"]
    results = small_to_big.search_sections(
        small_to_big_store, passage.query, k=5, max_section_tokens=max_section_tokens, embedder=HASHING
    )
    sections = _sample_sections(sample_dataset)
    chunks_by_id = {row["chunk_id"]: row for row in sample_chunks.values()}
    hits = load_lancedb.search(small_to_big_store, passage.query, k=5, embedder=HASHING)
    # Every hit is answered once, by the first result that holds it.
    assert sorted(chunk_id for result in results for chunk_id in result["chunk_ids"]) == sorted(
        hit["chunk_id"] for hit in hits
    )
    assert results[0]["chunk_ids"][0] == hits[0]["chunk_id"] and results[0]["doc_id"] == passage.doc_id
    for result in results:
        document = (SAMPLE_CORPUS / result["doc_id"]).read_bytes().decode("utf-8")
        assert result["text"] == document[result["start_char"] : result["end_char"]]
        for chunk_id in result["chunk_ids"]:
            chunk = chunks_by_id[chunk_id]
            assert result["start_char"] <= chunk["start_char"] and chunk["end_char"] <= result["end_char"]
        if result["section_id"] is None:
            continue
        section = sections[result["section_id"]]
        assert (result["start_char"], result["end_char"]) == (section["start_char"], section["end_char"])
        assert result["token_count"] == section["token_count"] <= max_section_tokens
        # The largest: the section enclosing it holds the chunk too, so it is over the limit (or there is none).
        parent = sections.get(section["parent_section_id"])
        assert parent is None or parent["token_count"] > max_section_tokens
    spans = sorted((r["doc_id"], r["start_char"], r["end_char"]) for r in results)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(spans, spans[1:]))  # nothing handed out twice
    assert any(result["section_id"] for result in results)


def test_small_to_big_joins_a_section_with_a_packed_chunk_that_overlaps_it(packed_dataset, tmp_path):
    # Packed chunks cross section ends: the section around one hit and the chunk of another overlap, and
    # are handed out as one range, never twice.
    target = str(tmp_path / "packed")
    load_lancedb.load(packed_dataset, target, embedder=HASHING)
    small_to_big.load_sections(packed_dataset, target)
    passage = PASSAGES["crlf-file"]
    results = small_to_big.search_sections(target, passage.query, k=5, max_section_tokens=512, embedder=HASHING)
    hits = load_lancedb.search(target, passage.query, k=5, embedder=HASHING)
    assert sorted(chunk_id for result in results for chunk_id in result["chunk_ids"]) == sorted(
        hit["chunk_id"] for hit in hits
    )
    spans = sorted((r["doc_id"], r["start_char"], r["end_char"]) for r in results)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(spans, spans[1:]))
    joined = [result for result in results if result["token_count"] is None]
    assert joined and all(result["section_id"] is None and len(result["chunk_ids"]) > 1 for result in joined)
    chunks = {row["chunk_id"]: row for row in read_dataset(packed_dataset, "chunks").to_pylist()}
    for result in joined:
        document = (SAMPLE_CORPUS / result["doc_id"]).read_bytes().decode("utf-8")
        assert result["text"] == document[result["start_char"] : result["end_char"]]
        assert (result["start_line"], result["end_line"]) == (
            line_of(document, result["start_char"]),
            line_of(document, result["end_char"] - 1),
        )
        for chunk_id in result["chunk_ids"]:
            assert (
                result["start_char"]
                <= chunks[chunk_id]["start_char"]
                < chunks[chunk_id]["end_char"]
                <= result["end_char"]
            )


def test_small_to_big_with_no_section_small_enough_hands_out_the_hits(small_to_big_store):
    query = PASSAGES["heading-in-inline-code"].query
    results = small_to_big.search_sections(small_to_big_store, query, k=4, max_section_tokens=0, embedder=HASHING)
    hits = load_lancedb.search(small_to_big_store, query, k=4, embedder=HASHING)
    assert [(r["chunk_ids"], r["section_id"], r["text"]) for r in results] == [
        ([hit["chunk_id"]], None, hit["text"]) for hit in hits
    ]


@pytest.mark.slow
def test_the_small_to_big_script_syncs_both_tables_then_prints_sections_offline(sample_dataset, tmp_path):
    passage = PASSAGES["crlf-file"]
    folder = tmp_path / "store"
    script = EXAMPLES / "small_to_big_lancedb.py"
    command = [sys.executable, "-c", OFFLINE_SCRIPT, str(script), sample_dataset, str(folder), *passage.query.split()]
    command += ["--embedder", "hashing"]

    def run_script() -> list[str]:
        result = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    first = run_script()
    snapshot = read_manifest(sample_dataset)["snapshot"]
    sections = read_manifest(sample_dataset)["tables"]["sections"]["rows"]
    assert first[0] == f"load: {snapshot}; {sections} sections in {folder}"
    assert first[1].split()[1].startswith(f"{passage.doc_id}:")
    again = run_script()
    assert again[0] == f"changes: already up to date; {sections} sections in {folder}"
    assert again[1:] == first[1:]
