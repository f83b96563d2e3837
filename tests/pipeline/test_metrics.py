"""The pipeline's Beam metrics (namespace ``chunkline``) are the dataset's counts, and the run summary shows them.

On the FnApiRunner (``--runner FnApiRunner``: without a Beam argument an in-process run starts no runner),
over a corpus with documents in error (invalid UTF-8, a binary file) and a skipped one (a
second input holding the same doc_id): the counters equal the published dataset's documents by status, its
chunk rows, the sum of their token counts and the bytes read, in a full run and in an incremental run whose
merges carry most documents over; the distributions agree with them; ``chunkline run``'s summary is those
figures. A run without a runner (in process, full or incremental) has no metrics, and its summary still holds.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
from apache_beam.metrics.metric import MetricsFilter

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.pipelines import run as run_module

from .conftest import CORPUS, run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)

OVERRIDES = ("max_tokens=96", "overlap_tokens=16", "output.shards=4")
ON_THE_RUNNER = ["--runner", "FnApiRunner"]


@pytest.fixture
def inputs_with_bad_and_duplicate_documents(tmp_path):
    """Two inputs: the corpus with an invalid UTF-8 and a binary file, and a folder that holds a README.md of
    its own (the corpus's is read, this one is skipped)."""
    root = write_corpus(tmp_path / "corpus")
    write_files(root, {"legacy/latin1.md": "# Café\n\nNaïve.\n".encode("latin-1")})
    write_files(root, {"assets/logo.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))})
    second = write_files(tmp_path / "mirror", {"README.md": b"# A copy\n\nOf the readme.\n"})
    return root, second


@pytest.fixture
def pipeline_results(monkeypatch):
    """Every PipelineResult whose metrics ``chunkline run`` read, in order."""
    results = []
    real_run_counts = run_module.run_counts

    def recording(result):
        results.append(result)
        return real_run_counts(result)

    monkeypatch.setattr(run_module, "run_counts", recording)
    return results


def dataset_counts(output) -> dict[str, int]:
    """What the published dataset holds, counted from its tables."""
    documents = read_dataset(str(output), "documents")
    chunks = read_dataset(str(output), "chunks")
    status = documents.column("status")
    read = pc.is_valid(documents.column("content_sha256"))
    return {
        "documents_ok": pc.sum(pc.equal(status, "ok")).as_py(),
        "documents_error": pc.sum(pc.equal(status, "error")).as_py(),
        "documents_skipped": pc.sum(pc.equal(status, "skipped")).as_py(),
        "chunks": chunks.num_rows,
        "tokens": pc.sum(chunks.column("token_count")).as_py(),
        "input_bytes": pc.sum(pc.if_else(read, documents.column("size_bytes"), 0)).as_py(),
    }


def chunkline_metrics(result) -> tuple[dict[str, int], dict[str, object]]:
    """(counters, distributions) of the ``chunkline`` namespace, summed over steps, committed values."""
    queried = result.metrics().query(MetricsFilter().with_namespace("chunkline"))
    counters: dict[str, int] = {}
    for counter in queried["counters"]:
        counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + counter.committed
    distributions = {item.key.metric.name: item.committed for item in queried["distributions"]}
    return counters, distributions


def summary_counts(summary) -> dict[str, int]:
    names = ("documents_ok", "documents_error", "documents_skipped", "chunks", "tokens", "input_bytes")
    return {name: getattr(summary, name) for name in names}


@pytest.mark.slow
def test_metrics_equal_the_datasets_counts_in_full_and_incremental_runs(
    inputs_with_bad_and_duplicate_documents, pipeline_results, tmp_path, caplog
):
    root, second = inputs_with_bad_and_duplicate_documents
    output = tmp_path / "out"
    summary = run([root, second], output, *OVERRIDES, beam_args=ON_THE_RUNNER)
    expected = dataset_counts(output)
    # The input is what the test says: bad documents and a skipped one, many chunks.
    assert expected["documents_ok"] == len(CORPUS)
    assert expected["documents_error"] == 2 and expected["documents_skipped"] == 1
    assert expected["chunks"] > 2 * len(CORPUS)
    (result,) = pipeline_results
    counters, distributions = chunkline_metrics(result)
    assert {name: counters[name] for name in expected} == expected
    assert counters.get("documents_carried_over", 0) == 0
    assert summary_counts(summary) == expected
    # Distributions: one value per chunked ok document, and one per chunk.
    assert distributions["document_chunks"].count == expected["documents_ok"]
    assert distributions["document_chunks"].sum == expected["chunks"]
    assert distributions["chunk_tokens"].count == expected["chunks"]
    assert distributions["chunk_tokens"].sum == expected["tokens"]
    assert distributions["chunk_tokens"].max <= 96

    # Incremental, on the runner: one document edited, the others carried over by the merges.
    (root / "guide" / "installation.md").write_bytes(CORPUS["guide/installation.md"] + b"\n## More\n\nA new section.\n")
    summary = run([root, second], output, *OVERRIDES, "run.in_process_max_documents=0", beam_args=ON_THE_RUNNER)
    assert summary.rebuild["mode"] == "incremental"
    expected = dataset_counts(output)
    counters, _ = chunkline_metrics(pipeline_results[-1])
    assert {name: counters[name] for name in expected} == expected
    assert counters["documents_carried_over"] == summary.rebuild["documents_carried_over"] > 0
    assert summary_counts(summary) == expected
    assert "disagree" not in caplog.text  # the summary showed the metrics themselves


def test_an_in_process_run_without_metrics_still_sums_up_the_dataset(
    inputs_with_bad_and_duplicate_documents, pipeline_results, tmp_path
):
    root, second = inputs_with_bad_and_duplicate_documents
    output = tmp_path / "out"
    # A full run in this process, without a Beam argument, starts no runner either.
    summary = run([root, second], output, *OVERRIDES)
    rebuild = read_manifest(str(output))["rebuild"]
    assert (rebuild["mode"], rebuild["in_process"], rebuild["runner"]) == ("full", True, "none")
    assert summary_counts(summary) == dataset_counts(output)
    assert summary.documents_error == 2 and summary.documents_skipped == 1
    (root / "reference" / "glossary.md").write_bytes(CORPUS["reference/glossary.md"] + b"\nberth\n: a mooring.\n")
    summary = run([root, second], output, *OVERRIDES)
    rebuild = read_manifest(str(output))["rebuild"]
    assert (rebuild["mode"], rebuild["in_process"], rebuild["runner"]) == ("incremental", True, "none")
    assert pipeline_results == []  # no runner, no metrics: the summary counted the staged files
    assert summary_counts(summary) == dataset_counts(output)
