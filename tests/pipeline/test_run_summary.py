"""The run summary's figures count what the run did: bytes are the bytes it read, not the sizes it listed."""

from __future__ import annotations

import pytest

from .conftest import CORPUS, documents, manifest, run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)


def test_input_bytes_leave_out_a_file_too_large_to_read(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    limit = max(len(data) for data in CORPUS.values())
    huge = b"# Export\n\n" + b"A line of an exported log that nobody split up.\n" * 2_000
    write_files(corpus, {"exports/huge.md": huge})
    output = tmp_path / "out"
    summary = run([corpus], output, f"input.max_file_bytes={limit}")
    assert documents(output)["exports/huge.md"]["size_bytes"] == len(huge)  # still recorded on its row
    read = sum(len(data) for data in CORPUS.values())
    assert summary.input_bytes == read == manifest(output)["counts"]["input_bytes"]
    assert f"{read / 1e6:.2f} MB in" in summary.describe()


def test_input_bytes_of_an_incremental_run_equal_a_full_runs(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    full = run([corpus], output)
    again = run([corpus], output)
    assert again.rebuild["mode"] == "incremental"
    assert again.input_bytes == full.input_bytes == sum(len(data) for data in CORPUS.values())
