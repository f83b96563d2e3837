"""Reading a local file with the operating system's calls alone gives what reading it through fsspec gives:
the same bytes, the same too-large problem, the same error rows for what cannot be read."""

from __future__ import annotations

import os

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset import inputs
from chunkline.dataset.inputs import SourceFile, read_source


class ThroughFsspec(LocalFileSystem):
    """A local filesystem read through fsspec's own open (not the plain-call path, which takes exactly
    LocalFileSystem)."""


def source_for(path, size_bytes=None) -> SourceFile:
    return SourceFile("doc.md", f"file://{path}", 0, str(path), size_bytes, None)


def both(path, limit, size_bytes=None):
    fast = read_source(source_for(path, size_bytes), fsspec.filesystem("file"), limit, ())
    slow = read_source(source_for(path, size_bytes), ThroughFsspec(), limit, ())
    return fast, slow


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000), limit=st.integers(min_value=0, max_value=3500), listed=st.booleans())
def test_the_plain_read_gives_fsspecs_bytes_or_its_too_large_problem(tmp_path_factory, data, limit, listed):
    path = tmp_path_factory.mktemp("reads") / "doc.md"
    path.write_bytes(data)
    fast, slow = both(path, limit, len(data) if listed else None)
    assert fast == slow
    if len(data) <= limit:
        assert fast.data == data and fast.size_bytes == len(data)
    else:
        assert fast.problem is not None and fast.problem.error_type == "FileTooLarge"


@pytest.mark.parametrize("kind", ["missing", "folder", "unreadable"])
def test_what_cannot_be_read_is_the_same_error_row(tmp_path, kind):
    path = tmp_path / "doc.md"
    if kind == "folder":
        path.mkdir()
    elif kind == "unreadable":
        path.write_text("# secret")
        path.chmod(0)
        if os.access(path, os.R_OK):  # running as root: any file can be read
            path.chmod(0o644)
            path.unlink()
            path.mkdir()
    fast, slow = both(path, 1000)
    assert fast.problem is not None and fast == slow


def test_a_pipe_in_a_files_place_is_not_read_with_plain_calls(tmp_path):
    path = tmp_path / "doc.md"
    os.mkfifo(path)
    assert inputs._read_local_file(str(path), 1000) is None  # and it returns at once: opened without blocking


def test_a_file_that_grows_past_its_listed_size_is_read_to_its_end(tmp_path, monkeypatch):
    path = tmp_path / "doc.md"
    path.write_bytes(b"x" * 100)
    real_fstat = os.fstat

    def stale_fstat(descriptor):  # the size fstat reported before the file grew
        status = real_fstat(descriptor)
        return os.stat_result((status.st_mode, *status[1:6], 40, *status[7:]))

    monkeypatch.setattr(inputs.os, "fstat", stale_fstat)
    assert inputs._read_local_file(str(path), 1000) == b"x" * 100
    assert len(inputs._read_local_file(str(path), 70)) == 71  # over the limit: one byte past it
