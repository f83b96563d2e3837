"""A rerun's driver, around its merge, imports no pandas: the rebuild plan works on the previous snapshot's
documents table and the listing as Arrow columns (built from their buffers, compared with Arrow scalars),
and the staged files are counted without Python values in pyarrow's calls (any would import pandas, which
pyarrow does to see whether a value is a pandas one)."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.rebuild import PLANNED_COLUMNS, _planned_columns

from .conftest import CORPUS, run, write_corpus

pytestmark = pytest.mark.timeout(300)

EDITED = "guide/installation.md"

# The steps the driver of a rerun runs around its merge, in a fresh interpreter: the lock, the check of the
# published snapshot, reading its documents, listing, hashing and planning, the shard plans, and counting a
# snapshot's staged files for its manifest (the published one stands in for the staged one). Reports the
# plan, the counts and whether pandas was imported on the way.
DRIVER_PROBE = """
import json, sys
from chunkline.dataset.layout import staging_url
from chunkline.dataset.publish import acquire_output_lock, read_dataset, read_manifest, verify_output
from chunkline.dataset.rebuild import PLANNED_COLUMNS, list_inputs, plan_rebuild, write_shard_plans
from chunkline.dataset.settings import load_run_config
from chunkline.dataset.staged import change_counts, run_manifest_fields, staged_counts
config = load_run_config(None, [], environ={}, inputs=[sys.argv[1]], output=sys.argv[2])
lock = acquire_output_lock(sys.argv[2], "probe-run", {})
state = verify_output(sys.argv[2])
documents = read_dataset(sys.argv[2], "documents", columns=list(PLANNED_COLUMNS))
plan = plan_rebuild(config, state.manifest, documents, list_inputs(config))
write_shard_plans(plan, config, staging_url(sys.argv[2], "probe-run"))
published = read_manifest(sys.argv[2])["snapshot"]
counts = staged_counts(sys.argv[2], published, config)
changes = change_counts(sys.argv[2], published, config)
run_manifest_fields(config, plan, in_process=True, pipeline_seconds=0.0, counts=counts, changes=changes)
lock.verify()
lock.release()
print(json.dumps({"mode": plan.mode, "to_chunk": [doc_id for doc_id, _ in plan.to_chunk], "carried": len(plan.carried),
                  "counts": counts, "changes": changes, "pandas": "pandas" in sys.modules}))
"""


def _run_probe(probe: str, corpus, output) -> dict:
    """Run ``probe`` over ``corpus`` and ``output`` in a fresh interpreter; the JSON report it prints last."""
    completed = subprocess.run(
        [sys.executable, "-c", probe, str(corpus), str(output)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture
def published(tmp_path):
    """(corpus, output) after a full run of the corpus."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([corpus], output)
    return corpus, output


def test_the_plan_reads_the_previous_times_in_microseconds_and_a_missing_metadata_column_as_nulls(published):
    _, output = published
    documents = read_dataset(str(output), "documents")
    planned = _planned_columns(documents)
    assert planned.column_names == list(PLANNED_COLUMNS)
    times = documents.column("modified_time").to_pylist()
    assert [value // 1_000_000 for value in planned.column("modified_time").to_pylist()] == [
        int(time.timestamp()) for time in times
    ]
    assert all(value is not None for value in planned.column("source_mtime_ns").to_pylist())
    # A table written before the metadata columns existed: they read as nulls, the rest as before.
    older = documents.drop_columns(["source_mtime_ns", "source_etag", "source_version"])
    planned_older = _planned_columns(older)
    assert planned_older.column("source_mtime_ns").null_count == documents.num_rows
    assert planned_older.column("source_etag").null_count == documents.num_rows
    assert planned_older.drop_columns(["source_mtime_ns"]).equals(planned.drop_columns(["source_mtime_ns"]))
    # A storage that reports no modification time leaves it null.
    position = documents.schema.get_field_index("modified_time")
    unknown = documents.set_column(
        position, documents.schema.field(position), pa.array([None, *times[1:]], documents.schema.field(position).type)
    )
    assert _planned_columns(unknown).column("modified_time").to_pylist()[0] is None


@pytest.mark.slow
def test_the_driver_steps_of_a_rerun_import_no_pandas(published):
    corpus, output = published
    (corpus / EDITED).write_bytes(CORPUS[EDITED] + b"\n\nOne more paragraph to chunk.\n")
    report = _run_probe(DRIVER_PROBE, corpus, output)
    assert (report["mode"], report["to_chunk"]) == ("incremental", [EDITED])
    documents = read_dataset(str(output), "documents")
    assert report["carried"] == documents.num_rows - 1
    manifest = read_manifest(str(output))
    assert report["counts"] == manifest["counts"] and report["changes"] == manifest["changes"]
    assert not report["pandas"], "a step of the rerun's driver imported pandas"


# A whole ``chunkline run`` in a fresh interpreter, as the command runs it in its own process; reports its
# exit code, whether pandas was imported and the rebuild it made.
UNCHANGED_RERUN_PROBE = """
import json, sys
from chunkline.pipelines.cli import main
code = main(["run", sys.argv[1], "--output", sys.argv[2], "--workers", "0"])
print(json.dumps({"code": code, "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.slow
def test_an_unchanged_rerun_imports_no_pandas(published):
    corpus, output = published
    before = read_manifest(str(output))["snapshot"]
    report = _run_probe(UNCHANGED_RERUN_PROBE, corpus, output)
    manifest = read_manifest(str(output))
    assert report["code"] == 0 and manifest["snapshot"] != before
    assert (
        manifest["rebuild"]["mode"] == "incremental"
        and manifest["changes"]["unchanged"]
        == manifest["counts"]["documents_ok"]
        + manifest["counts"]["documents_error"]
        + manifest["counts"]["documents_skipped"]
    )
    assert not report["pandas"], "an unchanged rerun imported pandas"
