"""Commands that need no runner start without importing Apache Beam: ``chunkline --help``, ``chunk``,
``inspect``, a ``run`` that chunks in this process without any Beam argument (full or incremental), and
one whose incremental plan is small enough to chunk in process. A run given a Beam argument builds a Beam
pipeline and does import it (so the probe below can tell the two apart).

Each command runs in a fresh interpreter, which reports the modules it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from chunkline.dataset.publish import read_manifest

from .conftest import CORPUS, rows_by_doc, write_corpus

pytestmark = pytest.mark.timeout(300)

# Runs chunkline's command line, then writes its exit status, the apache_beam modules it imported, how
# many tiktoken encodings it built, and which of pyarrow, fsspec, tiktoken and the engine it imported.
PROBE = """
import json, os, sys
from chunkline.pipelines.cli import main
report, argv = sys.argv[1], sys.argv[2:]
try:
    status = main(argv)
except SystemExit as exit_request:
    status = exit_request.code
beam = sorted(name for name in sys.modules if name == "apache_beam" or name.startswith("apache_beam."))
heavy = [name for name in ("pyarrow", "fsspec", "tiktoken", "chunkline.engine") if name in sys.modules]
tokenizers = sys.modules.get("chunkline.tokenizers")
encodings = tokenizers.load_encoding.cache_info().currsize if tokenizers else 0
with open(report, "w") as handle:
    json.dump({"status": status, "beam_modules": beam, "encodings_built": encodings, "heavy": heavy}, handle)
sys.stdout.flush()
os._exit(0)
"""


class Probed(NamedTuple):
    status: int
    beam_modules: list[str]
    """The apache_beam modules the command imported."""
    encodings_built: int
    """How many tiktoken encodings it built."""
    stderr: str
    heavy: list[str]
    """Which of pyarrow, fsspec, tiktoken and chunkline.engine it imported."""


def probe(tmp_path: Path, *argv: str) -> Probed:
    """``chunkline ARGV`` in a fresh interpreter."""
    report = tmp_path / f"probe-{len(list(tmp_path.glob('probe-*')))}.json"
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *argv], capture_output=True, text=True, timeout=240, check=False
    )
    assert report.exists(), f"the probe did not report:\n{completed.stderr[-3000:]}"
    result = json.loads(report.read_text())
    return Probed(
        result["status"], result["beam_modules"], result["encodings_built"], completed.stderr, result["heavy"]
    )


@pytest.mark.slow
def test_help_and_chunk_do_not_import_beam(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    help_probe = probe(tmp_path, "--help")
    assert help_probe.status == 0 and help_probe.beam_modules == []
    assert help_probe.heavy == [], "--help imported what only a command needs"
    mistake = probe(tmp_path, "run", str(corpus), "--output")
    assert mistake.status == 2 and "--output" in mistake.stderr and mistake.heavy == []
    status, beam, encodings, stderr, _ = probe(tmp_path, "chunk", str(corpus / "README.md"), str(corpus / "guide"))
    assert status == 0, stderr
    assert beam == []


@pytest.mark.slow
def test_runs_in_process_without_a_beam_argument_do_not_import_beam_and_inspect_neither(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"

    # A full run of a small corpus: run.workers auto chooses this process, and no runner is started.
    status, beam, encodings, stderr, _ = probe(tmp_path, "run", str(corpus), "--output", str(output))
    assert status == 0, stderr
    assert beam == [], f"a full run in process imported {beam[:5]}"
    assert encodings == 1
    rebuild = read_manifest(str(output))["rebuild"]
    assert (rebuild["mode"], rebuild["in_process"], rebuild["runner"]) == ("full", True, "none")
    assert "chunkline: running in-process without Beam (auto: " in stderr
    assert sorted(rows_by_doc(output, "chunks")) == sorted(CORPUS)

    # So does --workers 0, and --reindex makes it a full run again.
    status, beam, _, stderr, _ = probe(
        tmp_path, "run", str(corpus), "--output", str(output), "--workers", "0", "--reindex"
    )
    assert status == 0, stderr
    assert beam == []
    assert "chunkline: running in-process without Beam (run.workers is 0)" in stderr
    assert read_manifest(str(output))["rebuild"]["mode"] == "full"

    edited = corpus / "guide" / "installation.md"
    edited.write_bytes(CORPUS["guide/installation.md"] + b"\n## Reinstalling\n\nRun the installer again.\n")
    status, beam, encodings, stderr, _ = probe(tmp_path, "run", str(corpus), "--output", str(output))
    assert status == 0, stderr
    assert beam == [], f"an incremental run chunked in process imported {beam[:5]}"
    assert encodings == 1
    rebuild = read_manifest(str(output))["rebuild"]
    assert (rebuild["mode"], rebuild["in_process"], rebuild["documents_chunked"]) == ("incremental", True, 1)
    assert (
        rows_by_doc(output, "chunks")["guide/installation.md"][-1]["text"].rstrip().endswith("Run the installer again.")
    )

    status, beam, encodings, stderr, _ = probe(tmp_path, "run", str(corpus), "--output", str(output))
    assert status == 0, stderr
    assert beam == [], "an unchanged rerun imported Beam"
    assert encodings == 0, "an unchanged rerun, with nothing to chunk, built the tokenizer"
    assert read_manifest(str(output))["rebuild"]["documents_chunked"] == 0

    status, beam, encodings, stderr, _ = probe(tmp_path, "inspect", str(output))
    assert status == 0, stderr
    assert beam == []


@pytest.mark.parametrize(
    "beam_argument",
    [["--runner", "FnApiRunner"], ["--direct_running_mode=in_memory"]],
    ids=["runner", "another-beam-option"],
)
@pytest.mark.slow
def test_a_run_given_a_beam_argument_runs_a_beam_pipeline(tmp_path, beam_argument):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    status, beam, _, stderr, _ = probe(tmp_path, "run", str(corpus), "--output", str(output), *beam_argument)
    assert status == 0, stderr
    assert "apache_beam" in beam, "a run given a Beam argument builds a Beam pipeline"
    rebuild = read_manifest(str(output))["rebuild"]
    assert (rebuild["mode"], rebuild["in_process"], rebuild["runner"]) == ("full", False, "FnApiRunner")
    assert sorted(rows_by_doc(output, "chunks")) == sorted(CORPUS)


@pytest.mark.slow
def test_a_run_with_a_beam_option_still_has_it_checked_by_beam(tmp_path):
    """Beam's option parser is skipped only when every option is chunkline's own: a misspelt Beam option
    on an incremental run is still refused."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    status, _, _, stderr, _ = probe(tmp_path, "run", str(corpus), "--output", str(output), "--direct_num_workerz=2")
    assert status == 2
    assert "--direct_num_workerz" in stderr
    assert not output.exists()
