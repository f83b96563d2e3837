"""The rebuild plan of a rerun reads the previous snapshot's documents table as pyarrow would convert it,
without pyarrow's own conversion of zoned timestamps, which imports pandas to see whether it is installed."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from chunkline.dataset.publish import read_dataset
from chunkline.dataset.rebuild import _PLANNED_COLUMNS, _previous_rows

from .conftest import CORPUS, run, write_corpus

pytestmark = pytest.mark.timeout(300)

EDITED = "guide/installation.md"

# Lists the corpus, reads the published documents table and plans the rerun, in a fresh interpreter; reports
# the plan and whether pandas was imported on the way.
PLAN_PROBE = """
import json, sys
from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.rebuild import list_inputs, plan_rebuild
from chunkline.dataset.settings import load_run_config
config = load_run_config(None, [], environ={}, inputs=[sys.argv[1]], output=sys.argv[2])
documents = read_dataset(sys.argv[2], "documents", columns=["doc_id", "source_uri", "status", "content_sha256", "modified_time"])
plan = plan_rebuild(config, read_manifest(sys.argv[2]), documents, list_inputs(config))
print(json.dumps({"mode": plan.mode, "to_chunk": [doc_id for doc_id, _ in plan.to_chunk], "carried": len(plan.carried),
                  "pandas": "pandas" in sys.modules}))
"""


@pytest.fixture
def published(tmp_path):
    """(corpus, output) after a full run of the corpus."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([corpus], output)
    return corpus, output


def test_the_previous_rows_are_those_pyarrow_converts(published):
    _, output = published
    documents = read_dataset(str(output), "documents")
    expected = documents.select(list(_PLANNED_COLUMNS)).to_pylist()
    assert _previous_rows(documents) == expected
    assert all(row["modified_time"].utcoffset().total_seconds() == 0 for row in _previous_rows(documents))
    # A storage that reports no modification time leaves it null.
    position = documents.schema.get_field_index("modified_time")
    times = documents.column("modified_time").to_pylist()
    unknown = documents.set_column(
        position, documents.schema.field(position), pa.array([None, *times[1:]], documents.schema.field(position).type)
    )
    rows = _previous_rows(unknown)
    assert rows[0]["modified_time"] is None and rows == unknown.select(list(_PLANNED_COLUMNS)).to_pylist()


def test_planning_a_rerun_imports_no_pandas(published):
    corpus, output = published
    (corpus / EDITED).write_bytes(CORPUS[EDITED] + b"\n\nOne more paragraph to chunk.\n")
    completed = subprocess.run(
        [sys.executable, "-c", PLAN_PROBE, str(corpus), str(output)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    plan = json.loads(completed.stdout.strip().splitlines()[-1])
    assert (plan["mode"], plan["to_chunk"]) == ("incremental", [EDITED])
    assert plan["carried"] == read_dataset(str(output), "documents").num_rows - 1
    assert not plan["pandas"], "planning the rerun imported pandas"
