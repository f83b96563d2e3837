"""The driver's listing reaches the pipeline as a staged file, not inside the job's graph: the file gives back
every listed field, and the graph stays the same size however many documents the run reads."""

from __future__ import annotations

import gc
import weakref
from datetime import datetime, timezone
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.listing import largest_first, read_listing, read_listing_range, write_listing
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


def test_a_built_pipeline_holds_none_of_the_listed_rows(tmp_path):
    """Once staged, the listing's rows are the driver's to let go: no transform of the pipeline keeps them
    (the sink keeps the plan's shards, not its read list), however long the pipeline runs."""
    corpus = write_files(tmp_path / "corpus", {f"part-{number}/page.md": b"# Page\n\nText.\n" for number in range(5)})
    config = load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(tmp_path / "out"))
    plan = RebuildPlan("full", "no published snapshot", to_chunk=list_inputs(config).groups(), listed=True)
    rows = weakref.ref(plan.to_chunk)
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    build_pipeline(pipeline, config, "run-1", plan)
    write = pipeline.transforms_stack[0].parts[-1].transform
    assert len(write.plan.to_chunk) == 5
    del plan
    gc.collect()
    assert rows() is None


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


def _varied_corpus(root: Path) -> Path:
    """Pages of many sizes under names of many scripts, and one that is not UTF-8 (an errors row)."""
    folders, titles = ("guide", "notes", "café", "日本語"), ("page", "Seite", "ページ")
    files = {}
    for number in range(48):
        title = titles[number % 3]
        words = "Words of a page. " * (number * 37 % 400)
        files[f"{folders[number % 4]}/{title}-{number:02d}.md"] = f"# {title} {number}\n\n{words}".encode()
    files["legacy/latin1.md"] = "# Caf\xe9\n".encode("latin-1")
    return write_files(root, files)


def test_a_listing_read_in_many_ranges_makes_the_same_dataset(tmp_path, monkeypatch):
    from chunkline.transforms import read as read_module

    corpus = _varied_corpus(tmp_path / "corpus")
    on_the_runner = ["--runner", "FnApiRunner"]
    whole = run([corpus], tmp_path / "one-range", "run.workers=0", beam_args=on_the_runner)

    ranges: list[tuple[int, int]] = []
    listing_sizes: list[int] = []

    def recorded(url, start_byte, stop_byte, *arguments):
        ranges.append((start_byte, stop_byte))
        listing_sizes.append(Path(url).stat().st_size)
        return read_listing_range(url, start_byte, stop_byte, *arguments)

    monkeypatch.setattr(read_module, "RANGE_BYTES", 2_000)
    monkeypatch.setattr(read_module, "read_listing_range", recorded)
    split = run([corpus], tmp_path / "many-ranges", "run.workers=0", beam_args=on_the_runner)

    # The runner split the listing (49 documents, about 19 kB) into ranges that tile it, each read once.
    assert len(ranges) >= 8
    ranges.sort()
    assert ranges[0][0] == 0 and ranges[-1][1] == listing_sizes[0]
    assert all(previous[1] == following[0] for previous, following in zip(ranges, ranges[1:]))
    assert whole.documents_ok == split.documents_ok == 48 and split.documents_error == 1
    tables = ("chunks", "documents", "errors", "changes/upserts", "changes/deletes", "changes/documents")
    assert table_digests(tmp_path / "many-ranges", tables) == table_digests(tmp_path / "one-range", tables)


@pytest.mark.slow
def test_worker_processes_reading_a_listing_in_many_ranges_make_the_same_dataset(tmp_path, monkeypatch):
    from chunkline.transforms import read as read_module

    corpus = _varied_corpus(tmp_path / "corpus")
    in_process = run([corpus], tmp_path / "in-process", "run.workers=0")
    # The range size travels inside the pickled DoFn to the worker processes.
    monkeypatch.setattr(read_module, "RANGE_BYTES", 2_000)
    two_workers = run([corpus], tmp_path / "two-workers", "run.workers=2")
    assert in_process.documents_ok == two_workers.documents_ok == 48
    tables = ("chunks", "documents", "errors", "changes/upserts", "changes/deletes", "changes/documents")
    assert table_digests(tmp_path / "two-workers", tables) == table_digests(tmp_path / "in-process", tables)
