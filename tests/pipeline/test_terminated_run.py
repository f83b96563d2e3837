"""A run stopped with SIGTERM (what ``timeout``, systemd, Kubernetes and Airflow send) unwinds as one stopped
with Ctrl-C: it exits with status 143, removes what it staged, stops its worker processes and releases the
output's lock, so that the next run, from any host, can write the output at once; the published dataset
stays as it was, byte for byte.

As in ``test_killed_run.py``, ``chunkline run`` is a separate process stopped at a chosen point rather than
after a guessed delay: a wrapper patches the step that chunks documents to write a marker file and wait
after the first document, in the driver (``--workers 0``) or in a forked worker process (``--workers 2``),
and the test sends SIGTERM once the marker and the output's lock exist: to the driver, or to every process
of the run (the worker processes and their fork server ignore it; the driver, unwinding, stops them).

Only the ``chunkline`` program's :func:`~chunkline.pipelines.cli.main` handles SIGTERM, and only while it
runs: a program that calls it gets its own handling back, or keeps it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chunkline.pipelines import cli

from .conftest import write_corpus

pytestmark = pytest.mark.timeout(300)

# Runs the ``chunkline`` program with the chunking step patched to wait after its first document.
STALLED_RUN = """
import sys, time
from pathlib import Path

marker, argv = Path(sys.argv[1]), sys.argv[2:]

import chunkline.dataset.document_rows as rows_module
chunk = rows_module.DocumentChunker.process

def process(self, source):
    yield from chunk(self, source)
    marker.write_text("stalled")
    time.sleep(600)

rows_module.DocumentChunker.process = process

from chunkline.pipelines.cli import console_main
sys.argv = ["chunkline", *argv]
console_main()
"""


def _descendants(pid: int) -> set[tuple[int, str]]:
    """The processes below ``pid``, each with its start time (so that a later process given the same id is
    not taken for it)."""
    found: set[tuple[int, str]] = set()
    parents = [pid]
    while parents:
        parent = parents.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:  # the thread or process ended meanwhile
                continue
            for child in map(int, children):
                start_time = _start_time(child)
                if start_time is not None:
                    found.add((child, start_time))
                    parents.append(child)
    return found


def _start_time(pid: int) -> str | None:
    """The process's start time, or None once it has ended (or is a zombie, ended but not reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _alive(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    return {(pid, start_time) for pid, start_time in processes if _start_time(pid) == start_time}


@pytest.mark.parametrize(
    ("workers", "to_group"),
    [
        pytest.param("0", False, id="in-process"),
        pytest.param("2", False, id="workers", marks=pytest.mark.slow),
        # As `timeout`, systemd and Airflow send it: to every process of the run at once.
        pytest.param("2", True, id="workers-process-group", marks=pytest.mark.slow),
    ],
)
def test_a_run_stopped_with_sigterm_releases_the_lock_and_leaves_the_published_dataset(tmp_path, workers, to_group):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    first = subprocess.run(
        [sys.executable, "-m", "chunkline", "run", str(corpus), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert first.returncode == 0, first.stderr
    manifest_before = (output / "_manifest.json").read_bytes()
    marker = tmp_path / "stalled"
    log = tmp_path / "stopped.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-c", STALLED_RUN, str(marker), "run", str(corpus), "--output", str(output)]
            + ["--reindex", "--workers", workers],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=to_group,
        )
    try:
        deadline = time.monotonic() + 180
        while not (marker.exists() and (output / "_lock.json").exists()):
            assert process.poll() is None, f"the run ended before chunking:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the run never chunked a document:\n{log.read_text()}"
            time.sleep(0.05)
        children = _descendants(process.pid)
        if workers != "0":
            assert len(children) >= 3, children  # the fork server and its two workers at least
        if to_group:
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = log.read_text()
    assert status == 143, stderr
    assert stderr.rstrip().endswith("chunkline: stopped by SIGTERM (exit status 143)"), stderr
    assert "Traceback" not in stderr
    assert not (output / "_lock.json").exists()
    assert not (output / "_staging").exists()
    assert (output / "_manifest.json").read_bytes() == manifest_before
    # The workers end as their fork server stops, which the driver waited for; allow for the kernel's pace.
    deadline = time.monotonic() + 60
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(children)

    # Nothing is left to wait for: the next run publishes at once.
    rerun = subprocess.run(
        [sys.executable, "-m", "chunkline", "run", str(corpus), "--output", str(output), "--reindex"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert (output / "_manifest.json").read_bytes() != manifest_before


@pytest.fixture
def sigterm_default():
    """SIGTERM with its default action for the test, whatever the test runner set; restored after."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def _handler_seen_by_a_command(monkeypatch) -> list[object]:
    """The SIGTERM handler in place while ``chunkline strategies`` runs, recorded by the command."""
    seen: list[object] = []

    def strategies_command(arguments):
        seen.append(signal.getsignal(signal.SIGTERM))
        return 0

    monkeypatch.setattr(cli, "_strategies_command", strategies_command)
    return seen


def test_main_handles_sigterm_only_while_it_runs(monkeypatch, sigterm_default):
    seen = _handler_seen_by_a_command(monkeypatch)
    assert cli.main(["strategies"]) == 0
    assert seen[0] is not signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_while_main_runs_raises_terminated_and_main_restores_the_handler(monkeypatch, sigterm_default):
    def strategies_command(arguments):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else the signal would end the tests
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # the handler raises in this thread as soon as the signal arrives
        return 0

    monkeypatch.setattr(cli, "_strategies_command", strategies_command)
    with pytest.raises(cli.Terminated):
        cli.main(["strategies"])
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_main_keeps_a_program_s_own_sigterm_handler(monkeypatch):
    def programs_handler(signum, frame):
        raise AssertionError("not called")

    seen = _handler_seen_by_a_command(monkeypatch)
    previous = signal.signal(signal.SIGTERM, programs_handler)
    try:
        assert cli.main(["strategies"]) == 0
        assert signal.getsignal(signal.SIGTERM) is programs_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [programs_handler]


def test_main_in_another_thread_leaves_sigterm_alone(monkeypatch, sigterm_default):
    seen = _handler_seen_by_a_command(monkeypatch)
    statuses: list[int] = []
    thread = threading.Thread(target=lambda: statuses.append(cli.main(["strategies"])))
    thread.start()
    thread.join(timeout=60)
    assert statuses == [0]
    assert seen == [signal.SIG_DFL]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
