"""A run killed midway (SIGKILL: no cleanup of any kind) leaves the previous dataset readable and
unchanged, and the next run publishes the same files as an uninterrupted run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import all_file_digests, manifest, rebuild_documents, table_digests, write_corpus


def _grow(corpus: Path, copies: int) -> Path:
    """``copies`` copies of the small corpus under different folders: a run of a few seconds."""
    for number in range(copies):
        shutil.copytree(corpus, corpus.parent / "big" / f"copy-{number:02d}", dirs_exist_ok=True)
    return corpus.parent / "big"


def _start_run(corpus: Path, output: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "chunkline.pipelines.cli", "run", str(corpus), "--output", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.timeout(300)
def test_a_killed_run_leaves_the_previous_dataset_and_the_rerun_matches(tmp_path):
    corpus = _grow(write_corpus(tmp_path / "small"), 60)
    output = tmp_path / "out"
    finished = _start_run(corpus, output)
    assert finished.wait(timeout=240) == 0, finished.stderr.read().decode()
    before = all_file_digests(output)
    manifest_before = manifest(output)

    killed = _start_run(corpus, output)
    # Kill it once it is chunking: after Beam has started and the run has announced itself.
    deadline = time.monotonic() + 120
    announced = b""
    while b"reading" not in announced and time.monotonic() < deadline:
        announced += killed.stderr.readline()
    time.sleep(1.0)
    assert killed.poll() is None, "the run finished before it could be killed; the corpus is too small"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)

    # Readers still get the previous dataset, byte for byte, through its manifest.
    assert manifest(output) == manifest_before
    after_kill = all_file_digests(output)
    published = {name: digest for name, digest in after_kill.items() if not name.startswith("_staging/")}
    assert published == before
    assert rebuild_documents(output)

    rerun = _start_run(corpus, output)
    assert rerun.wait(timeout=240) == 0, rerun.stderr.read().decode()
    assert table_digests(output) == {
        name: digest for name, digest in before.items() if name.split("/")[0] in ("chunks", "documents")
    }
    assert not (output / "_staging").exists()
