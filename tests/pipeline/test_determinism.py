"""Same bytes + same config -> the same files, on every runner (PRODUCT invariant 5).

The corpus, written once for the module, is published by the in-process FnApiRunner; every other run (a
second and third in-process run, the multi-processing DirectRunner with two workers, the DaskRunner on a
two-process local cluster) must produce table folders with the same file names and the same bytes.
A small ``max_tokens`` and four shards make many chunks per file, so row order inside a file matters.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import CORPUS, manifest, rows_by_doc, run, table_digests, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)

OVERRIDES = ("max_tokens=96", "overlap_tokens=16", "output.shards=4")
TABLES = ("chunks", "documents", "errors", "sections")


@pytest.fixture(scope="module")
def corpus_and_reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("determinism")
    root = write_corpus(base / "corpus")
    # One error row too, so the errors table is compared with content in it.
    write_files(root, {"legacy/latin1.md": "# Café\n\nNaïve.\n".encode("latin-1")})
    output = base / "reference"
    summary = run([root], output, *OVERRIDES)
    assert summary.documents_ok == len(CORPUS) and summary.documents_error == 1
    # The default (run.workers: auto) runs a corpus this small in-process: the runs below compare with it.
    assert manifest(output)["config"]["run"]["workers"] == 0
    digests = table_digests(output, TABLES)
    # The reference is worth comparing with: several shards, many chunks, sub-split documents.
    assert sum(name.startswith("chunks/") for name in digests) >= 3
    assert sum(name.startswith("sections/") for name in digests) >= 3
    assert summary.chunks > 2 * len(CORPUS)
    assert any(row["is_sub_split"] for group in rows_by_doc(output, "chunks").values() for row in group)
    return root, output, digests


def assert_same_files(output, expected: dict[str, str]) -> None:
    actual = table_digests(output, TABLES)
    assert sorted(actual) == sorted(expected), "different file names"
    changed = sorted(name for name in expected if actual[name] != expected[name])
    assert changed == [], f"different bytes in {changed}"


def test_in_process_runs_are_byte_identical(corpus_and_reference, tmp_path):
    root, reference_output, expected = corpus_and_reference
    run([root], tmp_path / "again", *OVERRIDES)
    assert_same_files(tmp_path / "again", expected)
    # A rebuild over the published dataset keeps it byte-identical, under a new run id.
    before = manifest(tmp_path / "again")["run_id"]
    run([root], tmp_path / "again", *OVERRIDES)
    assert_same_files(tmp_path / "again", expected)
    assert manifest(tmp_path / "again")["run_id"] != before


@pytest.mark.slow
def test_multi_processing_runner_with_two_workers_is_byte_identical(corpus_and_reference, tmp_path, caplog):
    """Called from a program (this test process, which has run pipelines and holds their threads), the run
    never forks: Beam starts the two worker processes."""
    root, _, expected = corpus_and_reference
    output = tmp_path / "workers"
    already_running = set(child_processes())  # the session's own servers (Azurite, moto) among them
    with caplog.at_level(logging.INFO, logger="chunkline"):
        summary = run([root], output, *OVERRIDES, "run.workers=2")
    assert "chunkline: worker processes started by Beam" in caplog.messages
    assert summary.documents_ok == len(CORPUS)
    assert manifest(output)["config"]["run"]["workers"] == 2
    assert_same_files(output, expected)
    # Beam's worker processes exit once the runner closes their control channels.
    deadline = time.monotonic() + 30
    while set(child_processes()) - already_running and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(child_processes()) - already_running == set()


@pytest.mark.slow
def test_chunkline_command_with_two_forked_workers_is_byte_identical(corpus_and_reference, tmp_path):
    """The ``chunkline`` program forks its two workers from itself, and their files are the in-process run's."""
    root, _, expected = corpus_and_reference
    output = tmp_path / "forked"
    settings = [argument for override in OVERRIDES for argument in ("--set", override)]
    finished = subprocess.run(
        [
            str(Path(sys.executable).with_name("chunkline")),
            "run",
            str(root),
            "--output",
            str(output),
            "--workers",
            "2",
            *settings,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "chunkline: worker processes forked from this process" in finished.stderr
    assert manifest(output)["config"]["run"]["workers"] == 2
    assert_same_files(output, expected)


def child_processes() -> list[int]:
    """This process's live child processes (Linux's /proc; zombies, already exited, are left out)."""
    children = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:  # exited and reaped meanwhile
                continue
            if state != "Z":
                children.append(int(pid))
    return children


@pytest.mark.slow
def test_dask_runner_on_a_local_cluster_is_byte_identical(corpus_and_reference, tmp_path):
    from dask.distributed import LocalCluster, default_client

    root, _, expected = corpus_and_reference
    output = tmp_path / "dask"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        try:
            summary = run(
                [root],
                output,
                *OVERRIDES,
                beam_args=[
                    "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                    f"--dask_client_address={cluster.scheduler_address}",
                ],
            )
            # The run went through the cluster: the DaskRunner's client is connected to its scheduler.
            client = default_client()
            assert client.scheduler.address == cluster.scheduler_address
            assert len(client.scheduler_info()["workers"]) == 2
        finally:
            # Beam's DaskRunner leaves its client open; close it before the cluster goes away.
            try:
                default_client().close()
            except ValueError:
                pass
    assert summary.documents_ok == len(CORPUS)
    assert_same_files(output, expected)
