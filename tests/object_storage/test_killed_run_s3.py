"""``chunkline run`` to S3 killed with SIGKILL after the run's parts are in the bucket and before the
dataset's manifest is replaced: readers still get the previous dataset exactly, and the next run publishes
the new one and removes everything the killed run left.

As in ``tests/pipeline/test_killed_run.py`` the moment is chosen, not guessed: the killed process has
s3fs's request wrapper patched to write a marker file and wait when the PUT of the output's
``_manifest.json`` is about to be sent, and the test kills it as soon as the marker appears.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from chunkline.dataset.publish import MANIFEST_NAME

from .conftest import (
    assert_only_published_objects,
    clean_environment,
    comparable_rows,
    corpus_files,
    edited_corpus,
    part_names,
    published_manifest,
    run,
)

pytestmark = pytest.mark.timeout(300)

# `chunkline ARGV` with the PUT of one object key held back until the process is killed.
STALLED_RUN = """
import sys, time
from pathlib import Path
import s3fs.core

marker, held_key, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
send = s3fs.core._error_wrapper

async def hold_back(func, *, args=(), kwargs=None, retries):
    if func.__name__ == "put_object" and (kwargs or {}).get("Key") == held_key:
        marker.write_text("stalled")
        time.sleep(600)
    return await send(func, args=args, kwargs=kwargs, retries=retries)

s3fs.core._error_wrapper = hold_back
from chunkline.pipelines.cli import main
raise SystemExit(main(argv))
"""


@pytest.mark.slow
def test_a_run_killed_before_the_manifest_leaves_the_previous_dataset_and_the_next_run_cleans_up(
    s3_bucket, local_rows, tmp_path
):
    files = corpus_files()
    s3_bucket.upload_corpus(files)
    options = s3_bucket.storage_options
    source, output = s3_bucket.url("docs/**/*.md"), s3_bucket.url("out/")
    run([source], output, input_options=options, output_options=options)
    first = published_manifest(s3_bucket, "out")
    before = s3_bucket.objects("out/")
    edited = edited_corpus(files)
    s3_bucket.upload_corpus(edited)

    marker, log = tmp_path / "stalled", tmp_path / "killed.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-c", STALLED_RUN, str(marker), f"out/{MANIFEST_NAME}", "run", source, "--output", output],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=clean_environment(**s3_bucket.environment),
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert process.poll() is None, f"the run ended before its manifest was written:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the run never got to its manifest:\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL

    # The killed run had written its parts: objects no published manifest names.
    after_kill = s3_bucket.objects("out/")
    orphans = {name for name in after_kill if name.endswith(".parquet")} - part_names(first, "out")
    assert orphans, sorted(after_kill)
    # Readers get the previous dataset, every object of it untouched.
    assert published_manifest(s3_bucket, "out") == first
    assert {name: after_kill.get(name) for name in before} == before
    assert comparable_rows(output, options) == local_rows(files)

    run([source], output, input_options=options, output_options=options)
    assert comparable_rows(output, options) == local_rows(edited)
    assert_only_published_objects(s3_bucket, "out", [first, published_manifest(s3_bucket, "out")])
    assert not orphans & set(s3_bucket.objects("out/"))
