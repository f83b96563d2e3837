"""A run killed midway (SIGKILL: no cleanup of any kind) leaves the previous dataset readable and
unchanged, and the next run publishes the same files as an uninterrupted run.

``chunkline run`` is started as a separate process and killed at a chosen point rather than after a guessed
delay (a small corpus is chunked in about a second, so a timed kill is a race): a wrapper patches one
function of the run to write a marker file and then wait, and the test kills the process as soon as the
marker appears. Two points are covered:

* ``pipeline``: while the pipeline runs, after the first shard has been merged into part files of the run's
  snapshot folder and while other shards are still spill files;
* ``publish``: while publishing, after every part of the snapshot is written and before the root manifest,
  the pointer to the latest snapshot, is replaced (the commit point).

The killed run leaves its lock, its staging area and its unpublished snapshot folder behind; the next run
takes the lock over (its holder is dead), publishes, and removes them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import (
    all_file_digests,
    manifest,
    rebuild_documents,
    rows,
    table_digests,
    write_corpus,
    write_files,
)

pytestmark = pytest.mark.timeout(300)

# Runs ``chunkline run`` with one function patched to stop the run at a chosen point.
STALLED_RUN = """
import sys, time
from pathlib import Path

stall_at, marker, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]

def stall():
    marker.write_text("stalled")
    time.sleep(600)

if stall_at == "pipeline":
    import chunkline.dataset.sink as sink_module
    merge = sink_module.MergeShard.process

    def process(self, element, spills_done=()):
        yield from merge(self, element, spills_done)
        stall()

    sink_module.MergeShard.process = process
elif stall_at == "publish":
    import chunkline.dataset.publish as publish_module
    write = publish_module.write_file_atomically

    def write_file_atomically(fs, path, data, **keywords):
        if path.endswith("_manifest.json"):
            stall()
        return write(fs, path, data, **keywords)

    publish_module.write_file_atomically = write_file_atomically
else:
    raise SystemExit(f"unknown stall point {stall_at}")

from chunkline.pipelines.cli import main
raise SystemExit(main(argv))
"""


def _cli(*arguments: str, log: Path) -> subprocess.Popen:
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, *arguments],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def _run(corpus: Path, output: Path, log: Path) -> None:
    process = _cli("-m", "chunkline.pipelines.cli", "run", str(corpus), "--output", str(output), log=log)
    assert process.wait(timeout=240) == 0, log.read_text()


def _run_and_kill(corpus: Path, output: Path, stall_at: str, tmp_path: Path) -> None:
    marker = tmp_path / f"stalled-{stall_at}"
    log = tmp_path / f"killed-{stall_at}.log"
    process = _cli("-c", STALLED_RUN, stall_at, str(marker), "run", str(corpus), "--output", str(output), log=log)
    deadline = time.monotonic() + 180
    while not marker.exists():
        assert process.poll() is None, f"the run ended before reaching {stall_at}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the run never reached {stall_at}:\n{log.read_text()}"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.parametrize("stall_at", ["pipeline", "publish"])
@pytest.mark.slow
def test_a_killed_run_leaves_the_previous_dataset_and_the_rerun_matches(tmp_path, stall_at):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    _run(corpus, output, tmp_path / "first.log")
    before = all_file_digests(output)
    manifest_before = manifest(output)
    rows_before = {table: rows(output, table) for table in ("chunks", "documents", "errors")}
    # The killed run has something new to publish.
    write_files(corpus, {"guide/faq.md": b"# FAQ\n\n## Why is the tide late?\n\nThe gauge reports every minute.\n"})

    _run_and_kill(corpus, output, stall_at, tmp_path)

    # The killed run got as far as it should have: parts in its own snapshot folder, which nothing names.
    after_kill = all_file_digests(output)
    new_files = set(after_kill) - set(before)
    killed_snapshots = {name.split("/")[1] for name in new_files if name.startswith("snapshots/")}
    assert len(killed_snapshots) == 1, sorted(new_files)
    killed_snapshot = killed_snapshots.pop()
    assert any(name.endswith(".parquet") for name in new_files if name.startswith(f"snapshots/{killed_snapshot}/"))
    assert all(name.startswith(("_staging/", f"snapshots/{killed_snapshot}/", "_lock.json")) for name in new_files)
    assert "_lock.json" in after_kill
    # Readers still get the previous dataset, byte for byte, through its manifest.
    assert manifest(output) == manifest_before
    assert {table: rows(output, table) for table in rows_before} == rows_before
    assert {name: after_kill[name] for name in before} == before
    assert rebuild_documents(output)

    _run(corpus, output, tmp_path / "rerun.log")
    _run(corpus, tmp_path / "uninterrupted", tmp_path / "uninterrupted.log")
    assert table_digests(output, ("chunks", "documents", "errors")) == table_digests(
        tmp_path / "uninterrupted", ("chunks", "documents", "errors")
    )
    assert not (output / "_staging").exists()
    assert not (output / "snapshots" / killed_snapshot).exists()
    assert not (output / "_lock.json").exists()
    assert "guide/faq.md" in {row["doc_id"] for row in rows(output, "documents")}
