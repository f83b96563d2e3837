"""Faults in the worker processes of ``chunkline run --workers 2`` (see :mod:`.worker_faults`): the run
fails within seconds with one line naming the process and how it ended, publishes nothing, leaves the
previous dataset as it was and releases the output's lock, so that the next run publishes; and a driver
killed outright leaves nothing of its run in the temporary folder once the next run has started."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPOSITORY, all_file_digests, manifest, run
from .worker_faults import WorkerFaultRun

pytestmark = pytest.mark.timeout(900)

FAULT_BOUND_SECONDS = 30
"""How soon after the fault the run must have ended (a run that hangs never does)."""


def _copies_of_sample_corpus(root: Path, copies: int) -> Path:
    for copy in range(copies):
        shutil.copytree(REPOSITORY / "sample_corpus", root / f"copy{copy}")
    return root


@pytest.fixture
def published_output(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A corpus of about 1.2 MB (two workers chunk it for a second or more) and an output that holds a
    snapshot of it; returns the corpus, the output and the output's file digests."""
    corpus = _copies_of_sample_corpus(tmp_path / "corpus", 6)
    output = tmp_path / "out"
    run([corpus], output, "run.workers=0")
    return corpus, output, all_file_digests(output)


def _assert_failed_cleanly(
    fault_run: WorkerFaultRun, status: int | None, seconds: float, output: Path, before: dict[str, str], what: str
) -> None:
    log = fault_run.output()
    assert status is not None, f"still running {FAULT_BOUND_SECONDS + 30} s after the fault:\n{log}"
    assert status == 1, log
    assert seconds < FAULT_BOUND_SECONDS, log
    errors = [line for line in log.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, log
    assert re.match(f"chunkline: error: {what} while the pipeline ran; .*published nothing", errors[0]), log
    assert "Traceback" not in log
    # Nothing published, nothing of the run left, the lock released.
    assert all_file_digests(output) == before


def _next_run_publishes(corpus: Path, output: Path, log: Path, environment: dict[str, str] | None = None) -> None:
    snapshot = manifest(output)["snapshot"]
    finished = subprocess.run(
        [sys.executable, "-m", "chunkline.pipelines.cli", "run", str(corpus), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(environment or {})},
    )
    assert finished.returncode == 0, finished.stderr
    assert manifest(output)["snapshot"] != snapshot


@pytest.mark.slow
def test_a_worker_killed_at_random_moments_fails_the_run_within_seconds_and_unlocks(published_output, tmp_path):
    corpus, output, before = published_output
    moments = random.Random(5)
    seconds_to_exit = []
    for trial in range(20):
        fault_run = WorkerFaultRun(corpus, output, tmp_path / f"trial{trial}.log")
        workers = fault_run.wait_for_workers()
        time.sleep(moments.uniform(0, 0.5))  # early: while both workers still have documents to chunk
        victim = moments.choice(workers)
        fault_run.kill_worker(victim)
        status, seconds = fault_run.wait(FAULT_BOUND_SECONDS + 30)
        _assert_failed_cleanly(
            fault_run, status, seconds, output, before, f"worker process {victim} was killed by signal SIGKILL"
        )
        seconds_to_exit.append(seconds)
    print(f"seconds from the kill to the exit: max {max(seconds_to_exit):.1f}, each {seconds_to_exit}")
    _next_run_publishes(corpus, output, tmp_path / "next.log")


@pytest.mark.slow
def test_a_worker_that_exits_with_an_error_status_fails_the_run(published_output, tmp_path):
    corpus, output, before = published_output
    fault_run = WorkerFaultRun(
        corpus, output, tmp_path / "exit.log", exit_on_document="copy3/guide/configuration.md", exit_status=3
    )
    status, _ = fault_run.wait(FAULT_BOUND_SECONDS + 120)
    _assert_failed_cleanly(fault_run, status, 0.0, output, before, r"worker process \d+ exited with status 3")
    _next_run_publishes(corpus, output, tmp_path / "next.log")


@pytest.mark.slow
def test_a_killed_fork_server_fails_the_run(published_output, tmp_path):
    corpus, output, before = published_output
    fault_run = WorkerFaultRun(corpus, output, tmp_path / "server.log")
    fault_run.wait_for_workers()
    server = fault_run.kill_fork_server()
    status, seconds = fault_run.wait(FAULT_BOUND_SECONDS + 30)
    _assert_failed_cleanly(
        fault_run, status, seconds, output, before, f"fork server {server} was killed by signal SIGKILL"
    )
    _next_run_publishes(corpus, output, tmp_path / "next.log")


@pytest.mark.slow
@pytest.mark.parametrize("with_fork_server", [False, True], ids=["driver", "driver-and-fork-server"])
def test_a_killed_driver_leaves_nothing_in_the_temporary_folder_after_the_next_run(
    published_output, tmp_path, with_fork_server
):
    corpus, output, _ = published_output
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    environment = {"TMPDIR": str(temporary)}
    fault_run = WorkerFaultRun(corpus, output, tmp_path / "killed.log", environment=environment)
    fault_run.wait_for_workers()
    left_by_run = {entry.name for entry in temporary.iterdir()}
    assert any(name.startswith(("chunkline-", "beam-pipeline-temp")) for name in left_by_run), left_by_run
    fault_run.kill_driver(with_fork_server=with_fork_server)
    status, _ = fault_run.wait(FAULT_BOUND_SECONDS)
    assert status == -9

    _next_run_publishes(corpus, output, tmp_path / "next.log", environment)
    remaining = {entry.name for entry in temporary.iterdir()}
    assert not remaining & left_by_run
    assert not [name for name in remaining if name.startswith(("chunkline-", "beam-pipeline-temp"))]
    # Nor any of its processes: workers, the runner's worker commands, the fork server.
    deadline = time.monotonic() + FAULT_BOUND_SECONDS
    while leftovers := fault_run.leftover_processes([str(corpus), *left_by_run]):
        assert time.monotonic() < deadline, leftovers
        time.sleep(0.1)
