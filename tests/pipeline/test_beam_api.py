"""chunkline's transforms in a pipeline of one's own: the example's dataset is ``chunkline run``'s, byte for byte.

``examples/beam_pipeline.py`` (read -> chunk -> a step of the user's -> write and publish) runs as a user runs
it, in a process of its own, on the in-process FnApiRunner and on the DaskRunner over a two-process local
cluster; every part file of every table must have the name and bytes of ``chunkline run``'s on the same
input and config. The chunk rows are schema'd (``beam.Select``, ``to_dataframe``), error rows come out on
their own, a row type follows a chunks schema with more columns, and the publish step refuses to publish
when another run published after the pipeline was built or holds the lock, when the snapshot would delete
most documents, or when the pipeline failed; with a plan it carries unchanged documents over.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.dataframe.convert import to_dataframe, to_pcollection
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from chunkline.dataset.publish import acquire_output_lock, read_dataset, read_manifest
from chunkline.dataset.rebuild import plan_rebuild
from chunkline.dataset.settings import InputConfig, load_run_config
from chunkline.schemas import CHUNKS_SCHEMA
from chunkline.schemas.chunks import field
from chunkline.transforms import (
    ChunkMarkdown,
    ChunkRow,
    ErrorRow,
    ReadMarkdown,
    WriteChunkDataset,
    chunk_row_type,
    row_type_for,
)

from .conftest import CORPUS, manifest, rows, run, table_digests, write_corpus, write_files

pytestmark = pytest.mark.timeout(600)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "beam_pipeline.py"
OVERRIDES = ("max_tokens=96", "overlap_tokens=16", "output.shards=4")
ALL_TABLES = ("chunks", "documents", "errors", "changes/documents", "changes/upserts", "changes/deletes")
LATIN1 = "# Café\n\nNaïve.\n".encode("latin-1")


@pytest.fixture(scope="module")
def corpus_and_reference(tmp_path_factory):
    """The corpus with one file in error, and the dataset ``chunkline run`` publishes from it."""
    base = tmp_path_factory.mktemp("beam_api")
    root = write_corpus(base / "corpus")
    write_files(root, {"legacy/latin1.md": LATIN1})
    output = base / "reference"
    summary = run([root], output, *OVERRIDES)
    assert summary.documents_ok == len(CORPUS) and summary.documents_error == 1
    digests = table_digests(output, ALL_TABLES)
    # Worth comparing: several chunk parts, and an errors part with a row in it.
    assert sum(name.startswith("chunks/") for name in digests) >= 3
    assert rows(output, "errors")
    return root, output, digests


def config_for(root: Path, output: Path, *overrides: str):
    return load_run_config(None, list(OVERRIDES + overrides), environ={}, inputs=[str(root)], output=str(output))


def run_example(root: Path, output: Path, *beam_args: str) -> subprocess.CompletedProcess:
    settings = [argument for override in OVERRIDES for argument in ("--set", override)]
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(root), str(output), *settings, *beam_args],
        capture_output=True,
        text=True,
        timeout=500,
    )


def assert_same_parts(output: Path, expected: dict[str, str]) -> None:
    actual = table_digests(output, ALL_TABLES)
    assert sorted(actual) == sorted(expected), "different part file names"
    changed = sorted(name for name in expected if actual[name] != expected[name])
    assert changed == [], f"different bytes in {changed}"


@pytest.mark.slow
def test_example_on_fn_api_runner_publishes_chunkline_runs_dataset(corpus_and_reference, tmp_path):
    root, reference, expected = corpus_and_reference
    output = tmp_path / "example"
    finished = run_example(root, output)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_same_parts(output, expected)
    # The example's own log lines print: tokens per document from its branch, and the error row's warning.
    tokens: dict[str, int] = {}
    for chunk in rows(output, "chunks"):
        tokens[chunk["doc_id"]] = tokens.get(chunk["doc_id"], 0) + chunk["token_count"]
    logged = finished.stderr.splitlines()
    assert sorted(line for line in logged if line.endswith(" tokens")) == sorted(
        f"{doc_id}: {count} tokens" for doc_id, count in tokens.items()
    )
    [error] = rows(output, "errors")
    assert f"{error['doc_id']} [{error['error_type']}] {error['message']}" in logged
    published = manifest(output)
    assert published["run_id"] != manifest(reference)["run_id"]
    assert published["counts"] == manifest(reference)["counts"]
    assert published["full_reload"] is True
    # Run again on its own output: a new snapshot, its changes/ against the first, which is kept.
    again = run_example(root, output)
    assert again.returncode == 0, again.stderr[-3000:]
    second = manifest(output)
    assert second["snapshots"] == [published["run_id"], second["run_id"]]
    assert second["rebuild"]["previous_snapshot"] == published["run_id"]
    assert second["changes"]["unchanged"] == len(CORPUS) + 1 and second["changes"]["chunks_upserted"] == 0
    assert table_digests(output, ("chunks", "documents", "errors")) == {
        name: digest for name, digest in expected.items() if not name.startswith("changes/")
    }
    # And chunkline run builds on the example's snapshot incrementally: nothing to chunk, everything carried.
    summary = run([root], output, *OVERRIDES)
    assert summary.rebuild["mode"] == "incremental"
    assert summary.rebuild["documents_carried_over"] == len(CORPUS)


@pytest.mark.slow
def test_example_on_dask_runner_publishes_chunkline_runs_dataset(corpus_and_reference, tmp_path):
    from dask.distributed import LocalCluster

    root, _, expected = corpus_and_reference
    output = tmp_path / "dask"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        finished = run_example(
            root,
            output,
            "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={cluster.scheduler_address}",
        )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_same_parts(output, expected)


def chunkline_pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner())


@pytest.mark.slow
def test_chunk_rows_work_with_select_and_to_dataframe(corpus_and_reference):
    root, reference, _ = corpus_and_reference
    tokens_per_document: dict[str, int] = {}
    for chunk in rows(reference, "chunks"):
        tokens_per_document[chunk["doc_id"]] = tokens_per_document.get(chunk["doc_id"], 0) + chunk["token_count"]
    expected = sorted(tokens_per_document.items())
    config = config_for(root, Path("unused"))
    with chunkline_pipeline() as pipeline:
        chunks = (pipeline | ReadMarkdown(config) | ChunkMarkdown(config)).chunks
        assert chunks.element_type is ChunkRow
        selected = (
            chunks
            | beam.Select("doc_id", "token_count")
            | beam.GroupBy("doc_id").aggregate_field("token_count", sum, "tokens")
            | "SelectedPairs" >> beam.Map(lambda row: (row.doc_id, row.tokens))
        )
        assert_that(selected, equal_to(expected), label="ByBeamSelect")
        frame = to_dataframe(chunks)
        summed = to_pcollection(frame.groupby("doc_id")[["token_count"]].sum(), include_indexes=True)
        pairs = summed | "FramePairs" >> beam.Map(lambda row: (row.doc_id, int(row.token_count)))
        assert_that(pairs, equal_to(expected), label="ByDataFrame")


@pytest.mark.slow
def test_error_rows_come_out_on_their_own(corpus_and_reference):
    root, _, _ = corpus_and_reference
    config = config_for(root, Path("unused"))
    with chunkline_pipeline() as pipeline:
        chunked = pipeline | ReadMarkdown(config) | ChunkMarkdown(config)
        assert chunked.errors is chunked["errors"] and chunked.errors.element_type is ErrorRow
        with pytest.raises(TypeError, match="apply your step to result.chunks"):
            _ = chunked | beam.Map(print)
        errors = chunked.errors | "Errors" >> beam.Map(lambda row: (row.doc_id, row.stage, row.error_type))
        assert_that(errors, equal_to([("legacy/latin1.md", "decode", "InvalidUtf8")]), label="Errors")
        statuses = chunked.documents | "Statuses" >> beam.Map(lambda row: (row.doc_id, row.status))
        expected = [(doc_id, "ok") for doc_id in CORPUS] + [("legacy/latin1.md", "error")]
        assert_that(statuses, equal_to(expected), label="Statuses")
        in_error = chunked.chunks | beam.Filter(lambda chunk: chunk.doc_id == "legacy/latin1.md")
        assert_that(in_error, equal_to([]), label="NoChunksOfTheErrorDocument")


def test_read_markdown_reads_a_pcollection_of_urls(corpus_and_reference):
    root, _, _ = corpus_and_reference
    with chunkline_pipeline() as pipeline:
        sources = pipeline | beam.Create([str(root / "guide"), str(root / "README.md")]) | ReadMarkdown(InputConfig())
        found = sources | beam.Map(lambda source: (source.doc_id, source.data))
        expected = [
            ("installation.md", CORPUS["guide/installation.md"]),
            ("advanced/tuning.md", CORPUS["guide/advanced/tuning.md"]),
            ("empty.md", b""),
            ("README.md", CORPUS["README.md"]),
        ]
        assert_that(found, equal_to(expected))


def test_a_row_type_follows_a_chunks_schema_with_more_columns():
    schema = CHUNKS_SCHEMA.append(field("team", pa.string(), "Owner from front matter.", nullable=True))
    TeamChunkRow = row_type_for(schema, "TeamChunkRow")
    assert TeamChunkRow._fields == tuple(schema.names)
    coder = beam.coders.registry.get_coder(TeamChunkRow)
    assert isinstance(coder, beam.coders.RowCoder)
    values = {name: None for name in schema.names}
    values.update(
        chunk_id="a.md#0", chunk_uuid="u", doc_id="a.md", source_uri="a.md", chunk_index=0, text="# A",
        start_char=0, end_char=3, start_byte=0, end_byte=3, start_line=1, start_column=1, end_line=1,
        end_column=3, heading_path=["A"], section_index=1, token_count=2, char_count=3, is_sub_split=False,
        strategy="headings", content_sha256="h", title="A", embed_text="A\n\n# A", embed_token_count=5,
        section_id="a.md#s1", prev_chunk_id=None, next_chunk_id="a.md#1", parent_section_ids=["a.md#s0"], team="docs",
    )  # fmt: skip
    row = TeamChunkRow(**values)
    decoded = coder.decode(coder.encode(row))
    assert decoded._asdict() == row._asdict()
    assert pa.Table.from_pylist([decoded._asdict()], schema=schema).column("team").to_pylist() == ["docs"]
    # One class per set of columns: the steps of a pipeline agree on it; the default schema's is ChunkRow.
    assert chunk_row_type(schema) is chunk_row_type(schema) and chunk_row_type(schema)._fields[-1] == "team"
    assert chunk_row_type(CHUNKS_SCHEMA) is ChunkRow
    with pytest.raises(TypeError, match="column 'when'"):
        row_type_for(pa.schema([pa.field("when", pa.duration("s"))]), "Unsupported")


@pytest.mark.slow
def test_publish_refuses_when_another_run_published_after_the_pipeline_was_built(corpus_and_reference, tmp_path):
    root, _, _ = corpus_and_reference
    output = tmp_path / "contested"
    config = config_for(root, output)
    pipeline = chunkline_pipeline()
    _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | WriteChunkDataset(config)
    # Built against an empty output; chunkline run publishes there before the pipeline runs.
    run([root], output, *OVERRIDES)
    published = manifest(output)
    before = table_digests(output, ALL_TABLES)
    with pytest.raises(Exception, match="another run published snapshot"):
        pipeline.run().wait_until_finish()
    assert manifest(output)["run_id"] == published["run_id"]
    assert table_digests(output, ALL_TABLES) == before
    assert not (output / "_lock.json").exists()


@pytest.mark.slow
def test_a_failed_pipeline_publishes_nothing(corpus_and_reference, tmp_path):
    root, reference, _ = corpus_and_reference
    output = tmp_path / "failed"
    run([root], output, *OVERRIDES)
    published = manifest(output)
    config = config_for(root, output)

    def fail_on_the_glossary(chunk):
        if chunk.doc_id == "reference/glossary.md":
            raise RuntimeError("a user's step failed")
        return chunk

    pipeline = chunkline_pipeline()
    chunked = pipeline | ReadMarkdown(config) | ChunkMarkdown(config)
    checked = chunked.chunks | beam.Map(fail_on_the_glossary).with_output_types(ChunkRow)
    _ = chunked.with_chunks(checked) | WriteChunkDataset(config)
    with pytest.raises(Exception, match="a user's step failed"):
        pipeline.run().wait_until_finish()
    assert manifest(output)["run_id"] == published["run_id"]
    assert manifest(output)["snapshots"] == [published["run_id"]]


@pytest.mark.slow
def test_with_a_plan_the_pipeline_carries_unchanged_documents_over(corpus_and_reference, tmp_path):
    root, _, _ = corpus_and_reference
    corpus = tmp_path / "corpus"
    shutil.copytree(root, corpus)
    output = tmp_path / "incremental"
    run([corpus], output, *OVERRIDES)
    first = manifest(output)["run_id"]
    edited = CORPUS["reference/glossary.md"] + b"\nbollard\n: a post on the quay.\n"
    (corpus / "reference" / "glossary.md").write_bytes(edited)

    config = config_for(corpus, output)
    plan = plan_rebuild(config, read_manifest(str(output)), read_dataset(str(output), "documents"))
    # The edited document, and the one in error (never carried over), go through the chunker.
    chunked_ids = [doc_id for doc_id, _ in plan.to_chunk]
    assert plan.incremental and chunked_ids == ["legacy/latin1.md", "reference/glossary.md"]
    with chunkline_pipeline() as pipeline:
        chunked = pipeline | ReadMarkdown(config, matched=plan.to_chunk) | ChunkMarkdown(config)
        _ = chunked | WriteChunkDataset(config, plan=plan)

    published = manifest(output)
    assert published["rebuild"]["mode"] == "incremental" and published["rebuild"]["previous_snapshot"] == first
    assert published["rebuild"]["documents_carried_over"] == len(CORPUS) - 1
    assert published["changes"]["changed"] == 1 and published["changes"]["unchanged"] == len(CORPUS)
    # Row for row and byte for byte what a full rebuild of the edited corpus writes.
    rebuilt = tmp_path / "rebuilt"
    run([corpus], rebuilt, *OVERRIDES)
    tables = ("chunks", "documents", "errors")
    assert table_digests(output, tables) == table_digests(rebuilt, tables)


def test_the_docs_show_the_examples_pipeline_file_itself():
    """The guide includes examples/beam_pipeline.py when the site is built (pymdownx.snippets), so what it
    shows is the file this module runs."""
    guide = (EXAMPLE.parents[1] / "docs" / "guides" / "beam-pipeline.md").read_text(encoding="utf-8")
    assert '--8<-- "examples/beam_pipeline.py"' in guide
    assert (EXAMPLE.parents[1] / "examples" / "beam_pipeline.py") == EXAMPLE


@pytest.mark.slow
def test_publish_fails_while_another_run_holds_the_lock(corpus_and_reference, tmp_path):
    root, _, _ = corpus_and_reference
    output = tmp_path / "locked"
    run([root], output, *OVERRIDES)
    published = manifest(output)
    config = config_for(root, output)
    pipeline = chunkline_pipeline()
    _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | WriteChunkDataset(config)
    holder = acquire_output_lock(str(output), "20261201T000000.000000Z-a1b2c3")  # a live run, this process
    try:
        with pytest.raises(Exception, match=r"another chunkline run \(20261201T000000.000000Z-a1b2c3"):
            pipeline.run().wait_until_finish()
    finally:
        holder.release()
    assert manifest(output)["run_id"] == published["run_id"]


@pytest.mark.slow
def test_publish_refuses_a_snapshot_that_deletes_most_documents(corpus_and_reference, tmp_path):
    root, _, _ = corpus_and_reference
    output = tmp_path / "shrunk"
    run([root], output, *OVERRIDES)
    published = manifest(output)
    only_guide = load_run_config(None, list(OVERRIDES), environ={}, inputs=[str(root / "guide")], output=str(output))
    pipeline = chunkline_pipeline()
    _ = pipeline | ReadMarkdown(only_guide) | ChunkMarkdown(only_guide) | WriteChunkDataset(only_guide)
    with pytest.raises(Exception, match="more than output.max_deleted_fraction"):
        pipeline.run().wait_until_finish()
    assert manifest(output)["run_id"] == published["run_id"]
    assert not (output / "_lock.json").exists()


@pytest.mark.slow
def test_a_retried_publish_step_finds_its_run_published_and_publishes_nothing_more(corpus_and_reference, tmp_path):
    from chunkline.transforms.dataset import _PublishRunFn
    from chunkline.transforms.in_process import apply_in_process

    root, _, _ = corpus_and_reference
    output = tmp_path / "retried"
    config = config_for(root, output)
    write = WriteChunkDataset(config)
    with chunkline_pipeline() as pipeline:
        published_ids = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | write
        assert_that(published_ids, equal_to([write.run_id]))
    published = manifest(output)
    files = table_digests(output, ALL_TABLES)
    # The step's bundle runs again (its worker was lost after the commit): same run, nothing new.
    again = list(apply_in_process(_PublishRunFn(config, write.run_id, write.plan, None), [None], parts=[]))
    assert again == [write.run_id]
    assert manifest(output) == published and table_digests(output, ALL_TABLES) == files


RELEASE_NOTES = """---
title: Release notes
tags: [ingest, storage]
version: "2.4"
---

# Release notes

## Storage

Parts are written once and named by the hash of their bytes, so a retried bundle cannot leave a second copy.

## Ingest

Every document keeps its byte offsets, and the chunker reports one error row per document it cannot read.
"""

UPGRADE_GUIDE = """---
title: Upgrading
tags: ingest
version: 3
---

# Upgrading

Rebuild once after the upgrade: the chunking version changed, so every document is chunked again.
"""


@pytest.mark.slow
def test_example_with_front_matter_columns_publishes_chunkline_runs_dataset(corpus_and_reference, tmp_path):
    """The config's promoted front-matter columns reach the example's row type and its parts, as in
    ``chunkline run``: the same part files, with typed ``tags`` and ``version`` columns."""
    root = write_corpus(tmp_path / "corpus")
    write_files(root, {"notes/release.md": RELEASE_NOTES.encode(), "notes/upgrade.md": UPGRADE_GUIDE.encode()})
    columns = ("output.front_matter_columns.tags=list<string>", "output.front_matter_columns.version=string")
    reference = tmp_path / "reference"
    run([root], reference, *OVERRIDES, *columns)
    expected = table_digests(reference, ALL_TABLES)
    output = tmp_path / "example"
    finished = run_example(root, output, *[argument for column in columns for argument in ("--set", column)])
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_same_parts(output, expected)
    chunks = read_dataset(str(output), "chunks").to_pylist()
    by_doc = {row["doc_id"]: row for row in chunks}
    assert by_doc["notes/release.md"]["tags"] == ["ingest", "storage"]
    assert by_doc["notes/release.md"]["version"] == "2.4"
    assert by_doc["notes/upgrade.md"]["tags"] == ["ingest"]
    # version: 3 is an integer in YAML, not a string: null, and one errors row names it.
    assert by_doc["notes/upgrade.md"]["version"] is None
    assert by_doc["README.md"]["tags"] == ["sensors", "operations"]
    assert by_doc["CHANGELOG.md"]["tags"] is None  # no such key: null
    mismatches = [row for row in read_dataset(str(output), "errors").to_pylist() if row["doc_id"] == "notes/upgrade.md"]
    assert [row["error_type"] for row in mismatches] == ["FrontMatterTypeMismatch"]
