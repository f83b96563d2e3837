"""The publish guard of ``chunkline run``, through the public transforms: ``ReadMarkdown | ChunkMarkdown |
WriteChunkDataset`` in a pipeline of one's own refuses every case ``chunkline run`` refuses, with the same
error naming the input, and leaves the output byte for byte as it was.

And one transform writes one snapshot: running the same pipeline a second time fails before it writes
anything, so a published snapshot folder never changes. A second run after a first that failed before its
merge publishes what a fresh run of the inputs publishes: the first run's spilled rows are not its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from fsspec.implementations.memory import MemoryFileSystem

import chunkline.dataset.sink as sink_module
from chunkline.dataset.publish import read_dataset, verify_output, verify_snapshot
from chunkline.dataset.rebuild import PublishRefusedError
from chunkline.dataset.settings import InputConfig, load_run_config
from chunkline.pipelines.cli import main
from chunkline.transforms import ChunkMarkdown, ReadMarkdown, WriteChunkDataset

from .conftest import (
    CORPUS,
    all_file_digests,
    documents,
    manifest,
    rows,
    rows_by_doc,
    run,
    table_digests,
    write_corpus,
    write_files,
)
from .test_publish_guard import deny_listing, write_files_to_memory

pytestmark = pytest.mark.timeout(300)

#: A second input folder beside the corpus: 2 documents of the 9 the two inputs hold.
EXTRA = {
    "faq.md": b"# FAQ\n\n## Who moors first?\n\nAsk the harbour master; the berth plan is posted at dawn.\n",
    "berths/north.md": b"# North quay\n\nBerths 1 to 6, radar on the third bollard.\n\n## Depth\n\n12 m at low tide.\n",
}
GONE = ["README.md", "CHANGELOG.md", "guide/installation.md", "guide/advanced/tuning.md", "guide/empty.md"]


def publish_with_transforms(inputs: list[str], output: Path, *overrides: str) -> None:
    """``ReadMarkdown | ChunkMarkdown | WriteChunkDataset`` on the in-process runner."""
    config = load_run_config(None, list(overrides), environ={}, inputs=inputs, output=str(output))
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | WriteChunkDataset(config)
    pipeline.run().wait_until_finish()


@dataclass(frozen=True)
class Inputs:
    corpus: Path
    extra: Path
    memory_fs: MemoryFileSystem

    def extra_glob(self) -> str:
        return f"{self.extra}/**/*.md"


@dataclass(frozen=True)
class GuardCase:
    """An input the publish guard refuses: how the inputs are named, what befalls them after the first
    publish, and what the refusal must say."""

    inputs: Callable[[Inputs], list[str]]
    damage: Callable[[Inputs, pytest.MonkeyPatch], None]
    says: Callable[[Inputs], list[str]]
    overrides: tuple[str, ...] = ()
    """Settings of the refused run (both the pipeline's and chunkline run's)."""
    run_overrides: tuple[str, ...] = ()
    """More settings for chunkline run alone (to make it the full rebuild a pipeline without a plan is)."""


def remove_extra(inputs: Inputs, _: pytest.MonkeyPatch) -> None:
    shutil.rmtree(inputs.extra)


def unmount_extra(inputs: Inputs, _: pytest.MonkeyPatch) -> None:
    """An unmounted disk leaves its empty mount point behind."""
    shutil.rmtree(inputs.extra)
    inputs.extra.mkdir()


def deny_extra(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    deny_listing(monkeypatch, inputs.extra)


def deny_guide(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    deny_listing(monkeypatch, inputs.corpus / "guide")


def delete_most_documents(inputs: Inputs, _: pytest.MonkeyPatch) -> None:
    for doc_id in GONE:
        (inputs.corpus / doc_id).unlink()


def nothing(inputs: Inputs, _: pytest.MonkeyPatch) -> None:
    pass


def object_store_unreachable(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    find = MemoryFileSystem.find

    def unreachable(self, path, *args, **kwargs):
        if "extra" in path:
            raise ConnectionError(f"connection reset while listing {path}")
        return find(self, path, *args, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "find", unreachable)


def local_folders(inputs: Inputs) -> list[str]:
    return [str(inputs.corpus), str(inputs.extra)]


def memory_folders(inputs: Inputs) -> list[str]:
    """The corpus and the second folder, written to memory:// (an object store's listing)."""
    write_files_to_memory(inputs.memory_fs, "/docs", CORPUS)
    write_files_to_memory(inputs.memory_fs, "/extra", EXTRA)
    return ["memory://docs", "memory://extra"]


GUARD_CASES = {
    "one of two input folders removed": GuardCase(
        local_folders, remove_extra, lambda inputs: [f"input {inputs.extra} does not exist"]
    ),
    "an input folder left empty by an unmounted disk": GuardCase(
        local_folders,
        unmount_extra,
        lambda inputs: [f"input {inputs.extra} matches no file (names ending in .md, .markdown)"],
    ),
    "a glob that matches no file any more": GuardCase(
        lambda inputs: [str(inputs.corpus), inputs.extra_glob()],
        unmount_extra,
        lambda inputs: [f"input {inputs.extra_glob()} matches no file"],
    ),
    "include patterns that leave out every file of an input": GuardCase(
        local_folders,
        nothing,
        lambda inputs: [f"input {inputs.extra} matches no file (input.include/exclude and names ending in .md"],
        overrides=("input.include=['guide/*']",),
    ),
    "an input root that cannot be listed": GuardCase(
        local_folders, deny_extra, lambda inputs: [f"cannot list input {inputs.extra} (PermissionError"]
    ),
    "an object store listing that keeps failing": GuardCase(
        memory_folders,
        object_store_unreachable,
        lambda inputs: ["cannot list memory://extra", "still failing after 5 attempts"],
    ),
    "a run that would delete most documents": GuardCase(
        local_folders,
        delete_most_documents,
        lambda inputs: ["would delete 5 of the 9 documents", "more than output.max_deleted_fraction (0.5)"],
    ),
    "a folder below an input that cannot be listed, in a full rebuild": GuardCase(
        local_folders,
        deny_guide,
        lambda inputs: [
            f"folder {(inputs.corpus / 'guide').as_uri()} could not be listed (PermissionError",
            "cannot keep the 3 document(s) published from it",
        ],
        run_overrides=("run.reindex=true",),
    ),
}


@pytest.mark.parametrize(
    "case",
    [
        # The object store's listing is tried 5 times, with backoff, by each of the two runs.
        pytest.param(case, id=name, marks=[pytest.mark.slow] if "object store" in name else [])
        for name, case in GUARD_CASES.items()
    ],
)
def test_the_public_transforms_refuse_what_chunkline_run_refuses(case, tmp_path, memory_fs, monkeypatch):
    inputs = Inputs(write_corpus(tmp_path / "corpus"), write_files(tmp_path / "extra", EXTRA), memory_fs)
    urls = case.inputs(inputs)
    output = tmp_path / "out"
    publish_with_transforms(urls, output)
    assert len(rows(output, "documents")) == len(CORPUS) + len(EXTRA)
    before = all_file_digests(output)

    case.damage(inputs, monkeypatch)
    with pytest.raises(PublishRefusedError) as refused:
        publish_with_transforms(urls, output, *case.overrides)
    message = str(refused.value)
    assert "\n" not in message and "nothing was published" in message
    for fragment in case.says(inputs):
        assert fragment in message
    assert all_file_digests(output) == before, "the refused pipeline changed the output"

    # chunkline run on the same inputs refuses with the same words.
    with pytest.raises(PublishRefusedError) as run_refused:
        run(urls, output, *case.overrides, *case.run_overrides)
    for fragment in case.says(inputs):
        assert fragment in str(run_refused.value)
    assert all_file_digests(output) == before


# --------------------------------------------------------------------------------------------------
# One pipeline, run twice
# --------------------------------------------------------------------------------------------------

OVERRIDES = ("max_tokens=96", "overlap_tokens=16", "output.shards=4")


def build(config) -> tuple[beam.Pipeline, WriteChunkDataset]:
    pipeline = beam.Pipeline(runner=FnApiRunner())
    write = WriteChunkDataset(config)
    _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | write
    return pipeline, write


def assert_every_kept_snapshot_verifies(output: Path) -> None:
    state = verify_output(str(output), repair=False)
    assert state.damage == () and state.latest_trusted
    for snapshot in manifest(output)["snapshots"]:
        own = read_dataset_manifest(output, snapshot)
        verify_snapshot(str(output), own)
        # What a glob of the folder reads is what the manifest names: one row per chunk id.
        chunk_ids = pq.read_table(output / "snapshots" / snapshot / "chunks", columns=["chunk_id"]).column(0)
        assert len(chunk_ids) == len(set(chunk_ids.to_pylist())) == own["tables"]["chunks"]["rows"]


def read_dataset_manifest(output: Path, snapshot: str) -> dict:
    return json.loads((output / "snapshots" / snapshot / "_manifest.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_a_second_run_of_one_pipeline_fails_before_writing_and_a_rebuilt_pipeline_publishes(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    config = load_run_config(None, list(OVERRIDES), environ={}, inputs=[str(corpus)], output=str(output))
    pipeline, write = build(config)
    pipeline.run().wait_until_finish()
    first = manifest(output)
    assert first["snapshot"] == write.run_id

    glossary = corpus / "reference" / "glossary.md"
    glossary.write_bytes(CORPUS["reference/glossary.md"] + b"\nBollard\n: a post on the quay to moor ships to.\n")
    before = all_file_digests(output)
    with pytest.raises(
        PublishRefusedError, match=f"run {write.run_id} has written to .*snapshots/{write.run_id} already"
    ):
        pipeline.run().wait_until_finish()
    assert all_file_digests(output) == before, "the second run wrote into the output"
    assert_every_kept_snapshot_verifies(output)
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    assert "damaged" not in capsys.readouterr().out

    # The way out the error names: the pipeline built again, a new run id, a new snapshot.
    rebuilt, rewrite = build(config)
    rebuilt.run().wait_until_finish()
    second = manifest(output)
    assert second["snapshot"] == rewrite.run_id != write.run_id
    assert second["snapshots"] == [first["snapshot"], second["snapshot"]]
    assert second["changes"]["changed"] == 1 and second["changes"]["unchanged"] == len(CORPUS) - 1
    assert_every_kept_snapshot_verifies(output)
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    assert "damaged" not in capsys.readouterr().out

    fresh = tmp_path / "fresh"
    run([corpus], fresh, *OVERRIDES)
    tables = ("chunks", "documents", "errors")
    assert table_digests(output, tables) == table_digests(fresh, tables)
    assert read_dataset(str(output), "chunks").to_pylist() == read_dataset(str(fresh), "chunks").to_pylist()


def shorten_tuning(corpus: Path) -> None:
    """A document of several chunks rewritten into one: the chunks past its first are gone from its rows."""
    (corpus / "guide" / "advanced" / "tuning.md").write_bytes(
        b"# Tuning the collector\n\nThe defaults suit most ports.\n"
    )


def delete_tuning(corpus: Path) -> None:
    (corpus / "guide" / "advanced" / "tuning.md").unlink()


@contextlib.contextmanager
def on_fn_api_runner() -> Iterator[beam.Pipeline]:
    yield beam.Pipeline(runner=FnApiRunner())


@contextlib.contextmanager
def on_dask_runner() -> Iterator[beam.Pipeline]:
    """Beam's DaskRunner over a cluster of two single-thread workers in this process (so that a fault the
    test injects reaches them); it computes a side input in every task that reads it."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        runner = "--runner=apache_beam.runners.dask.dask_runner.DaskRunner"
        yield beam.Pipeline(options=PipelineOptions([runner, f"--dask_client_address={cluster.scheduler_address}"]))


@pytest.mark.slow
@pytest.mark.parametrize("runner", [on_fn_api_runner, on_dask_runner], ids=["fn_api", "dask"])
@pytest.mark.parametrize("change", [shorten_tuning, delete_tuning], ids=["edited", "deleted"])
def test_a_second_run_after_a_run_that_failed_before_its_merge_publishes_what_a_fresh_run_publishes(
    tmp_path, monkeypatch, change, runner
):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    run([corpus], output, *OVERRIDES)
    config = load_run_config(None, list(OVERRIDES), environ={}, inputs=[str(corpus)], output=str(output))
    with runner() as pipeline:
        write = WriteChunkDataset(config)
        _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | write
        run_twice_with_a_failed_merge_first(pipeline, write, corpus, output, monkeypatch, change)
    fresh = tmp_path / "fresh"
    run([corpus], fresh, *OVERRIDES)
    tables = ("chunks", "documents", "errors", "sections")
    assert table_digests(output, tables) == table_digests(fresh, tables)
    assert read_dataset(str(output), "chunks").to_pylist() == read_dataset(str(fresh), "chunks").to_pylist()
    assert set(documents(output)) == set(documents(fresh))
    assert_every_kept_snapshot_verifies(output)
    assert not (output / "_staging").exists()


def run_twice_with_a_failed_merge_first(
    pipeline: beam.Pipeline,
    write: WriteChunkDataset,
    corpus: Path,
    output: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Path], None],
) -> None:
    tuning = "guide/advanced/tuning.md"
    assert len(rows_by_doc(output, "chunks")[tuning]) > 1
    before = all_file_digests(output)

    # The first run spills every document's rows, then its merge fails.
    def merge_fails(self, element, spills_done=()):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(sink_module.MergeShard, "process", merge_fails)
        with pytest.raises(Exception, match="No space left on device"):
            run_to_the_end(pipeline)
    assert all_file_digests(output).keys() - before.keys(), "the failed run spilled nothing"
    assert {name: digest for name, digest in all_file_digests(output).items() if name in before} == before
    assert not (output / "snapshots" / write.run_id).exists()

    # The same pipeline runs again over the changed input: its dataset must be a fresh run's, with no row
    # read by the failed run.
    change(corpus)
    run_to_the_end(pipeline)
    assert manifest(output)["snapshot"] == write.run_id


def run_to_the_end(pipeline: beam.Pipeline) -> None:
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the DaskRunner's, closed before its cluster is
        if client is not None:
            client.close()


def test_read_markdown_refuses_a_missing_url_in_a_pcollection_of_urls(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    missing = tmp_path / "unmounted"
    with pytest.raises(PublishRefusedError, match=f"input {missing} does not exist; nothing was published"):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = pipeline | beam.Create([str(corpus / "guide"), str(missing)]) | ReadMarkdown(InputConfig())
