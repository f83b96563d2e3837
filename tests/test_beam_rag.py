"""chunkline in Beam's RAG package: ``ChunklineChunker`` and ``WordLlamaTextEmbeddings`` under ``MLTransform``,
written by Beam's own Qdrant writer into a local Qdrant store, and read back.

Everything runs offline on the in-process FnApiRunner: the markdown is written here, the embedding model is
the one the wordllama wheel ships, and Qdrant is qdrant-client's embedded store in ``tmp_path``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.rag.ingestion.base import VectorDatabaseWriteTransform
from apache_beam.ml.rag.ingestion.qdrant import QdrantConnectionParameters, QdrantWriteConfig
from apache_beam.ml.rag.types import Chunk as BeamChunk
from apache_beam.ml.transforms.base import MLTransform
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from qdrant_client import QdrantClient, models

import chunkline
from chunkline import ChunkConfig
from chunkline.evaluation.retrieval import load_wordllama_embedder
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.rag import ChunklineChunker, DocumentChunkingError, WordLlamaTextEmbeddings

pytestmark = pytest.mark.timeout(300)

UPLOADS = """\
---
title: Uploading archives
owner: storage-team
---
# Uploading archives

The archive service accepts tarballs and zip files from build machines and keeps them for ninety days.

## Chunked uploads

Files larger than 64 MiB are sent in parts. The client opens an upload session, sends each part with its
sequence number and closes the session once every part has been acknowledged by the server.

## Retrying failed uploads

When a part fails because the network drops or the server answers 503, the client retries that part up to
five times, waiting with exponential backoff: one second, then two, four, eight and sixteen seconds.
After the fifth failed retry the whole upload is abandoned and reported as failed.

## Limits

| limit              | value   |
| ------------------ | ------- |
| largest archive    | 20 GiB  |
| parts per upload   | 10,000  |
| sessions per token | 8       |

## Example

```python
from archives import Client

client = Client(token="...")
client.upload("build-1234.tar.gz", part_size=64 * 2**20)
```
"""

MONITORING = """\
This page is maintained by the on-call rotation; edit it when an alert changes.

# Monitoring

Every service exports Prometheus metrics on port 9100, scraped every fifteen seconds.

## Alerts

A page goes to the on-call engineer when the error rate stays above two percent for ten minutes, or when
disk usage on a database host passes ninety percent.

## Dashboards

Grafana shows latency percentiles, request rates and saturation for each service, one row per region.
"""

GLOSSARY = """\
---
title: Glossary
---
# Glossary

- **Berth**: the place along the quay where a ship is moored.
- **Manifest**: the list of containers a ship carries, sent to the port before arrival.
- **Draft**: how deep the hull sits below the waterline, which decides which berths a ship can use.
"""

DOCUMENTS = {"guides/uploads.md": UPLOADS, "ops/monitoring.md": MONITORING, "glossary.md": GLOSSARY}
SOURCES = {"guides/uploads.md": "wiki", "ops/monitoring.md": "runbook", "glossary.md": "wiki"}

#: Small chunks, so that each document gives several and a question has one right answer.
CONFIG = ChunkConfig(max_tokens=96, min_tokens=0)

#: What the payload of every point holds beside the input's own metadata fields.
CHUNK_COLUMNS_IN_METADATA = (
    "chunk_id",
    "doc_id",
    "source_uri",
    "chunk_index",
    "text",
    "start_char",
    "end_char",
    "start_byte",
    "end_byte",
    "start_line",
    "start_column",
    "end_line",
    "end_column",
    "heading_path",
    "section_index",
    "token_count",
    "char_count",
    "is_sub_split",
    "strategy",
    "content_sha256",
    "title",
    "embed_token_count",
    "section_id",
)


def input_elements(documents: dict[str, str] = DOCUMENTS) -> list[dict[str, str]]:
    return [{"doc_id": doc_id, "text": text, "source": SOURCES.get(doc_id, "")} for doc_id, text in documents.items()]


def expected_records(documents: dict[str, str] = DOCUMENTS) -> list[chunkline.Chunk]:
    return [
        chunk for doc_id, text in documents.items() for chunk in chunkline.chunk_markdown(text, CONFIG, doc_id=doc_id)
    ]


def expected_metadata(record: chunkline.Chunk) -> dict:
    row = record.to_dict()
    return {**{name: row[name] for name in CHUNK_COLUMNS_IN_METADATA}, "source": SOURCES[record.doc_id]}


def in_process_runner(*beam_args: str) -> tuple[fn_runner.FnApiRunner, PipelineOptions]:
    """Beam's in-process FnApiRunner, as ``chunkline run`` builds it (never the default DirectRunner)."""
    arguments = ["--direct_running_mode=in_memory", "--direct_num_workers=1", *beam_args]
    return fn_runner.FnApiRunner(), PipelineOptions(arguments)


def create_collection(store: Path, name: str) -> None:
    """Beam's Qdrant writer upserts into an existing collection; the dense vector is named ``dense``."""
    client = QdrantClient(path=str(store))
    try:
        client.create_collection(
            name,
            vectors_config={
                "dense": models.VectorParams(
                    size=WordLlamaTextEmbeddings.vector_size(), distance=models.Distance.COSINE
                )
            },
        )
    finally:
        client.close()


def index_into_qdrant(elements: list[dict], artifacts: Path, store: Path, collection: str) -> None:
    runner, options = in_process_runner()
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        _ = (
            pipeline
            | beam.Create(elements)
            | MLTransform(write_artifact_location=str(artifacts))
            .with_transform(ChunklineChunker(CONFIG, metadata_fields=["source"]))
            .with_transform(WordLlamaTextEmbeddings())
            | VectorDatabaseWriteTransform(QdrantWriteConfig(QdrantConnectionParameters.local(str(store)), collection))
        )


def read_points(store: Path, collection: str) -> list[models.Record]:
    client = QdrantClient(path=str(store))
    try:
        points, next_page = client.scroll(collection, limit=10_000, with_payload=True, with_vectors=True)
        assert next_page is None
        return points
    finally:
        client.close()


# --------------------------------------------------------------------------------------------------
# The provider alone
# --------------------------------------------------------------------------------------------------


def split(chunker: ChunklineChunker, elements: list) -> list[BeamChunk]:
    """The chunker's DoFn run as one bundle, without a runner."""
    return list(apply_in_process(chunker.get_splitter_transform().fn, elements))


def test_each_beam_chunk_is_one_chunkline_chunk_with_its_uuid_embed_text_and_positions():
    chunks = split(ChunklineChunker(CONFIG, metadata_fields=["source"]), input_elements())
    records = expected_records()
    assert len(records) > len(DOCUMENTS)  # several chunks per document at 96 tokens
    assert [chunk.id for chunk in chunks] == [record.chunk_uuid for record in records]
    assert [chunk.index for chunk in chunks] == [record.chunk_index for record in records]
    assert [chunk.content.text for chunk in chunks] == [record.embed_text for record in records]
    assert [chunk.metadata for chunk in chunks] == [expected_metadata(record) for record in records]
    assert all(chunk.embedding is None for chunk in chunks)
    # embed_text carries the title and heading path as context; the verbatim text stays in the metadata.
    retry = next(chunk for chunk in chunks if chunk.metadata["heading_path"][-1:] == ["Retrying failed uploads"])
    assert retry.content.text.startswith("Uploading archives > Retrying failed uploads")
    assert retry.metadata["text"] == UPLOADS[retry.metadata["start_char"] : retry.metadata["end_char"]]
    assert retry.metadata["title"] == "Uploading archives"


def test_a_preamble_chunk_has_an_empty_heading_path_and_rows_work_like_dicts():
    """The text before the first heading sits under no heading: its ``heading_path`` is ``[]`` (a store that
    refuses empty lists needs it dropped). A ``beam.Row`` input chunks exactly as a dict does."""
    rows = [beam.Row(doc_id="ops/monitoring.md", text=MONITORING, source="runbook")]
    chunks = split(ChunklineChunker(CONFIG, metadata_fields=["source"]), rows)
    first = chunks[0]
    assert first.metadata["text"].startswith("This page is maintained")
    assert first.metadata["heading_path"] == []
    assert all(chunk.metadata["heading_path"] for chunk in chunks[1:])
    from_dicts = split(
        ChunklineChunker(CONFIG, metadata_fields=["source"]), input_elements({"ops/monitoring.md": MONITORING})
    )
    assert [(chunk.id, chunk.content, chunk.metadata) for chunk in chunks] == [
        (chunk.id, chunk.content, chunk.metadata) for chunk in from_dicts
    ]


def test_other_field_names_and_a_chunk_without_embed_text():
    """``text_field``/``doc_id_field`` name the element's fields. With ``embed_context: none`` and no packing,
    the front matter is a chunk of its own whose ``embed_text`` is empty (front matter is not content):
    Beam's embedding managers refuse empty text, so its content is its verbatim text; every other chunk's
    content is its ``embed_text``, the text without front matter."""
    config = ChunkConfig(max_tokens=96, min_tokens=0, embed_context="none")
    chunker = ChunklineChunker(config, text_field="content", doc_id_field="path")
    chunks = split(chunker, [{"path": "glossary.md", "content": GLOSSARY}])
    records = chunkline.chunk_markdown(GLOSSARY, config, doc_id="glossary.md")
    assert len(chunks) == len(records) >= 2
    assert records[0].embed_text == "" and records[0].text == "---\ntitle: Glossary\n---\n"
    assert chunks[0].content.text == records[0].text
    assert [chunk.content.text for chunk in chunks[1:]] == [record.embed_text for record in records[1:]]
    assert all(record.embed_text for record in records[1:])
    assert {chunk.metadata["doc_id"] for chunk in chunks} == {"glossary.md"}


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ({"doc_id": "notes.md"}, r"document 'notes.md': its field 'text' is missing"),
        ({"doc_id": "notes.md", "text": b"# Notes\n"}, r"is bytes, expected the markdown text as a str; decode"),
        ({"text": "# Notes\n"}, r"no document id: its field 'doc_id' is None"),
        ({"doc_id": "", "text": "# Notes\n"}, r"no document id: its field 'doc_id' is ''"),
        (
            {"doc_id": "broken.md", "text": "---\ntitle: [unclosed\n---\n# Notes\n"},
            r"document 'broken.md': invalid front matter",
        ),
    ],
    ids=["text-missing", "text-is-bytes", "doc-id-missing", "doc-id-empty", "front-matter-invalid"],
)
def test_a_document_that_cannot_be_chunked_raises_naming_it(element, message):
    with pytest.raises(DocumentChunkingError, match=message):
        split(ChunklineChunker(CONFIG), [element])


def test_a_missing_metadata_field_names_the_document():
    with pytest.raises(DocumentChunkingError, match=r"document 'glossary.md': the metadata fields \['team'\]"):
        split(ChunklineChunker(CONFIG, metadata_fields=["team"]), [{"doc_id": "glossary.md", "text": GLOSSARY}])


def test_arguments_are_checked_when_the_chunker_is_built():
    with pytest.raises(ValueError, match=r"metadata_fields \['title'\] are named like chunk columns"):
        ChunklineChunker(CONFIG, metadata_fields=["title", "source"])
    with pytest.raises(TypeError, match="list of field names"):
        ChunklineChunker(CONFIG, metadata_fields="source")
    with pytest.raises(TypeError, match="chunkline.ChunkConfig"):
        ChunklineChunker({"max_tokens": 96})
    with pytest.raises(ValueError, match="text_field"):
        ChunklineChunker(CONFIG, text_field="")


# --------------------------------------------------------------------------------------------------
# In a pipeline
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_chunkline_to_wordllama_to_beams_qdrant_writer_and_back(tmp_path):
    """The whole offline path: one point per chunkline chunk, its id the chunk's uuid, its payload the
    chunk's metadata, its vector wordllama's embedding of ``embed_text``; a question finds its passage."""
    store, collection = tmp_path / "qdrant", "handbook"
    create_collection(store, collection)
    started = time.perf_counter()
    index_into_qdrant(input_elements(), tmp_path / "artifacts", store, collection)
    pipeline_seconds = time.perf_counter() - started
    assert pipeline_seconds < 60

    points = {point.id: point for point in read_points(store, collection)}
    records = expected_records()
    assert len(points) == len(records)
    assert set(points) == {record.chunk_uuid for record in records}
    model = load_wordllama_embedder()
    expected_vectors = model.embed([record.embed_text for record in records])
    for record, expected_vector in zip(records, expected_vectors):
        point = points[record.chunk_uuid]
        assert point.payload == expected_metadata(record)
        vector = np.asarray(point.vector["dense"])
        assert vector.shape == (WordLlamaTextEmbeddings.vector_size(),) == expected_vector.shape
        np.testing.assert_allclose(vector, expected_vector, rtol=1e-5, atol=1e-6)

    question = "How many times does the client retry a failed part, and how long does it wait between retries?"
    client = QdrantClient(path=str(store))
    try:
        hits = client.query_points(collection, query=model.embed([question])[0].tolist(), using="dense", limit=1).points
    finally:
        client.close()
    (best,) = hits
    assert best.payload["doc_id"] == "guides/uploads.md"
    assert best.payload["heading_path"] == ["Uploading archives", "Retrying failed uploads"]
    assert "exponential backoff" in best.payload["text"]


@pytest.mark.slow
def test_writing_the_same_documents_again_upserts_the_same_points(tmp_path):
    """The ids are chunk_uuid, not Beam's random uuid4: a second run (or a retried bundle) overwrites."""
    store, collection = tmp_path / "qdrant", "handbook"
    create_collection(store, collection)
    elements = input_elements({"ops/monitoring.md": MONITORING, "glossary.md": GLOSSARY})
    index_into_qdrant(elements, tmp_path / "first", store, collection)
    first = {point.id: point.payload for point in read_points(store, collection)}
    index_into_qdrant(elements, tmp_path / "second", store, collection)
    second = {point.id: point.payload for point in read_points(store, collection)}
    assert second == first
    assert len(first) == len(expected_records({"ops/monitoring.md": MONITORING, "glossary.md": GLOSSARY}))


def write_json_lines(pcollection: beam.PCollection, path: Path) -> None:
    """Write the elements as JSON lines into one file (DoFns are pickled: a list in the test cannot collect)."""
    _ = pcollection | f"Write {path.name}" >> (
        beam.Map(json.dumps) | beam.io.WriteToText(str(path), shard_name_template="")
    )


def read_json_lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_mltransform_with_exception_handling_sends_a_bad_document_to_its_error_output(tmp_path):
    """The bad document is in MLTransform's error output with its message; the good one is chunked and
    embedded. (Beam 2.77's MLTransform gives each transform's error mapping the same label: with two
    transforms the pipeline needs ``--auto_unique_labels``.)"""
    elements = [*input_elements({"glossary.md": GLOSSARY}), {"doc_id": "broken.md", "text": None, "source": "wiki"}]
    runner, options = in_process_runner("--auto_unique_labels")
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        chunks, errors = (
            pipeline
            | beam.Create(elements)
            | MLTransform(write_artifact_location=str(tmp_path / "artifacts"))
            .with_transform(ChunklineChunker(CONFIG, metadata_fields=["source"]))
            .with_transform(WordLlamaTextEmbeddings())
            .with_exception_handling()
        )
        write_json_lines(chunks | beam.Map(lambda chunk: [chunk.id, len(chunk.dense_embedding)]), tmp_path / "good")
        write_json_lines(errors | beam.Map(lambda row: [row.element["doc_id"], row.msg]), tmp_path / "bad")
    expected = [
        [record.chunk_uuid, WordLlamaTextEmbeddings.vector_size()]
        for record in expected_records({"glossary.md": GLOSSARY})
    ]
    assert sorted(read_json_lines(tmp_path / "good")) == sorted(expected)
    ((doc_id, message),) = read_json_lines(tmp_path / "bad")
    assert doc_id == "broken.md"
    assert "document 'broken.md': its field 'text' is missing" in message


def test_without_exception_handling_a_bad_document_fails_the_run_with_its_doc_id(tmp_path):
    elements = [*input_elements({"glossary.md": GLOSSARY}), {"doc_id": "broken.md", "text": b"# Notes\n"}]
    runner, options = in_process_runner()
    with pytest.raises(Exception, match=r"document 'broken.md': its field 'text' is bytes"):
        with beam.Pipeline(runner=runner, options=options) as pipeline:
            _ = (
                pipeline
                | beam.Create(elements)
                | MLTransform(write_artifact_location=str(tmp_path / "artifacts")).with_transform(
                    ChunklineChunker(CONFIG)
                )
            )


@pytest.mark.slow
def test_artifacts_mltransform_wrote_chunk_and_embed_the_same_in_read_mode(tmp_path):
    """MLTransform saves its transforms (jsonpickle) in write mode; read mode rebuilds them from there, so the
    chunker and the embedding manager must survive that round trip with their config."""
    artifacts = tmp_path / "artifacts"
    for mode in ("write", "read"):
        runner, options = in_process_runner()
        with beam.Pipeline(runner=runner, options=options) as pipeline:
            if mode == "write":
                transform = (
                    MLTransform(write_artifact_location=str(artifacts))
                    .with_transform(ChunklineChunker(CONFIG, metadata_fields=["source"]))
                    .with_transform(WordLlamaTextEmbeddings())
                )
            else:
                transform = MLTransform(read_artifact_location=str(artifacts))
            chunks = pipeline | beam.Create(input_elements()) | transform
            summary = chunks | beam.Map(lambda chunk: [chunk.id, chunk.metadata, chunk.dense_embedding])
            write_json_lines(summary, tmp_path / mode)
    assert (artifacts / "attributes.json").is_file()
    produced, consumed = read_json_lines(tmp_path / "write"), read_json_lines(tmp_path / "read")
    records = expected_records()
    assert sorted(chunk_id for chunk_id, _, _ in produced) == sorted(record.chunk_uuid for record in records)
    assert sorted(consumed) == sorted(produced)
