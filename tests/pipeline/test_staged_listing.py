"""The driver's listing reaches the pipeline as a staged file, not inside the job's graph: the file gives back
every listed field, and the graph stays the same size however many documents the run reads."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.listing import largest_first, read_listing, write_listing
from chunkline.dataset.rebuild import RebuildPlan, list_inputs
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import build_pipeline

from .conftest import run, table_digests, write_files

pytestmark = pytest.mark.timeout(300)


def listed(doc_id: str, size: int | None, **fields) -> tuple[str, list[SourceFile]]:
    source = SourceFile(
        doc_id=doc_id,
        source_uri=fields.pop("source_uri", f"file:///corpus/{doc_id}"),
        input_index=fields.pop("input_index", 0),
        path=f"/corpus/{doc_id}",
        size_bytes=size,
        modified_time=fields.pop("modified_time", datetime(2026, 11, 30, 8, 15, 2, 123456, tzinfo=timezone.utc)),
        **fields,
    )
    return doc_id, [source]


def test_a_staged_listing_reads_back_every_field_largest_first(tmp_path):
    matched = [
        listed("guide/intro.md", 1_200),
        listed("caf\udce9.md", 90_000, source_uri="file:///corpus/caf%E9.md"),
        listed("notes/unsized.md", None, modified_time=None),
        listed("huge.md", 5_000_000, problem=FileProblem("read", "FileTooLarge", "over input.max_file_bytes")),
        ("twice.md", [listed("twice.md", 10)[1][0], listed("twice.md", 12, input_index=1)[1][0]]),
    ]
    url = write_listing(str(tmp_path / "_staging" / "run-1"), matched)

    assert Path(url).is_file() and Path(url).is_relative_to(tmp_path / "_staging" / "run-1")
    assert read_listing(url) == largest_first(matched)
    assert [doc_id for doc_id, _ in read_listing(url)] == [
        "huge.md",
        "caf\udce9.md",
        "guide/intro.md",
        "twice.md",
        "notes/unsized.md",
    ]


def test_a_staged_listing_is_json_lines_not_a_pickle(tmp_path):
    url = write_listing(str(tmp_path), [listed("a.md", 3), listed("b.md", 4)])
    lines = Path(url).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all(line.startswith('["') for line in lines)


def _graph_bytes(tmp_path: Path, documents: int) -> int:
    """The size of the job graph of a full run over ``documents`` listed files."""
    corpus = write_files(
        tmp_path / f"corpus-{documents}",
        {
            f"section-{number % 17}/page-{number:05d}.md": f"# Page {number}\n\nText.\n".encode()
            for number in range(documents)
        },
    )
    config = load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(tmp_path / f"out-{documents}"))
    listing = list_inputs(config)
    plan = RebuildPlan("full", "no published snapshot", to_chunk=listing.groups(), listed=True)
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    build_pipeline(pipeline, config, f"run-{documents}", plan)
    return len(pipeline.to_runner_api().SerializeToString())


@pytest.mark.slow
def test_the_job_graph_does_not_grow_with_the_documents_read(tmp_path):
    small, large = _graph_bytes(tmp_path, 10), _graph_bytes(tmp_path, 3_000)
    assert large - small < 1_000, f"{small:,} bytes for 10 documents, {large:,} for 3,000"


@pytest.mark.slow
def test_a_run_reading_a_staged_listing_leaves_no_staging_behind(tmp_path):
    corpus = write_files(
        tmp_path / "corpus",
        {
            f"chapter-{number}.md": f"# Chapter {number}\n\n{'Words and more words. ' * 40}\n".encode()
            for number in range(40)
        },
    )
    in_process = run([corpus], tmp_path / "in-process", "run.workers=0")
    two_workers = run([corpus], tmp_path / "two-workers", "run.workers=2")
    assert in_process.documents_ok == two_workers.documents_ok == 40
    for output in (tmp_path / "in-process", tmp_path / "two-workers"):
        assert not list(output.glob("_staging/*")), "the staging area (and its listing) is removed on publish"
    tables = ("chunks", "documents", "errors", "changes/upserts", "changes/deletes", "changes/documents")
    assert table_digests(tmp_path / "in-process", tables) == table_digests(tmp_path / "two-workers", tables)
