"""A run on a local output hashes the published snapshot's parts on a thread of its own while it lists its
inputs, before it takes the output's lock; the check under the lock (``verify_output``) then reads only the
footers of the parts whose files have not changed since, and reads every other part whole, as before.

What that must not change: a part damaged at any time before the check under the lock is caught, however
it was changed (in place with its modification time given back, replaced by another file, damaged before
it was hashed ahead); an unchanged rerun builds the same dataset; outputs elsewhere than on the local disk
are checked as before; and a run that fails before it takes the lock leaves no thread hashing behind.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from damage_matrix import _flip_bit

import chunkline.dataset.publish as publish
import chunkline.pipelines.run as run_module
from chunkline.dataset.publish import PartsHashedAhead, local_file_identity, read_manifest, verify_output
from chunkline.pipelines.cli import main
from chunkline.schemas import ROW_TABLES

from .conftest import run, table_digests, write_corpus

pytestmark = pytest.mark.timeout(300)

HASHING_THREAD = "chunkline-hash-parts"


@pytest.fixture
def published(tmp_path) -> tuple[Path, Path]:
    """(corpus, output): the corpus published in three shards."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    run([corpus], output, "output.shards=3")
    return corpus, output


def row_table_parts(output: Path) -> list[Path]:
    """The published snapshot's parts of the tables a run reads, carries over or copies."""
    manifest = read_manifest(str(output))
    return [output / name for table in ROW_TABLES for name in manifest["tables"][table]["files"]]


@pytest.fixture
def whole_reads(monkeypatch) -> list[str]:
    """The parts ``verify_output`` reads whole, by file name."""
    read_part = publish._read_part
    names: list[str] = []

    def counted(fs, path):
        names.append(Path(path).name)
        return read_part(fs, path)

    monkeypatch.setattr(publish, "_read_part", counted)
    return names


def test_every_row_table_part_is_hashed_ahead_and_not_read_again_under_the_lock(published, whole_reads):
    _, output = published
    parts = row_table_parts(output)
    hashed = PartsHashedAhead(str(output)).hashed()
    assert {name for name, _ in hashed.values()} == {part.name for part in parts}
    assert set(hashed) == {local_file_identity(part.stat()) for part in parts}

    state = verify_output(str(output), repair=False, hashed_ahead=hashed)
    assert state.latest_trusted and not state.damage
    assert whole_reads == []
    # What the run carries over later trusts the same files as a check that read every byte.
    assert state.verified_parts == verify_output(str(output), repair=False).verified_parts
    assert sorted(whole_reads) == sorted(part.name for part in parts)


def test_a_part_written_after_it_was_hashed_ahead_is_caught_although_its_modification_time_was_given_back(
    published, whole_reads
):
    _, output = published
    hashed = PartsHashedAhead(str(output)).hashed()
    part = max(
        (part for part in row_table_parts(output) if "/chunks/" in part.as_posix()), key=lambda p: p.stat().st_size
    )
    status = part.stat()
    _flip_bit(part)
    os.utime(part, ns=(status.st_atime_ns, status.st_mtime_ns))  # what `touch -d` does: only ctime tells
    assert local_file_identity(part.stat()) in hashed

    state = verify_output(str(output), repair=False, hashed_ahead=hashed)
    assert not state.latest_trusted
    assert any(part.name in line and "does not match the hash" in line for line in state.damage)
    assert part.name in whole_reads


def test_a_part_replaced_by_another_file_after_it_was_hashed_ahead_is_read_whole(published, whole_reads):
    _, output = published
    hashed = PartsHashedAhead(str(output)).hashed()
    part = row_table_parts(output)[0]
    replacement = part.with_name(part.name + ".copy")
    shutil.copy2(part, replacement)
    os.replace(replacement, part)  # the same bytes in a new inode

    state = verify_output(str(output), repair=False, hashed_ahead=hashed)
    assert state.latest_trusted and not state.damage
    assert whole_reads == [part.name]


def test_a_part_damaged_before_it_was_hashed_ahead_is_left_out_and_reported_by_the_check(published, whole_reads):
    _, output = published
    part = row_table_parts(output)[-1]
    _flip_bit(part)
    hashed = PartsHashedAhead(str(output)).hashed()
    assert part.name not in {name for name, _ in hashed.values()}
    assert len(hashed) == len(row_table_parts(output)) - 1

    state = verify_output(str(output), repair=False, hashed_ahead=hashed)
    assert not state.latest_trusted
    assert any(part.name in line for line in state.damage)


def test_an_unchanged_rerun_reads_no_part_whole_under_the_lock_and_builds_the_same_dataset(
    published, whole_reads, tmp_path, monkeypatch
):
    corpus, output = published
    verify = run_module.verify_output
    read_while_checking: list[str] = []

    def checked(*args, **kwargs):
        before = len(whole_reads)
        state = verify(*args, **kwargs)
        read_while_checking.extend(whole_reads[before:])
        return state

    monkeypatch.setattr(run_module, "verify_output", checked)
    summary = run([corpus], output, "output.shards=3")
    assert summary.rebuild["mode"] == "incremental"
    assert read_while_checking == []
    clean = tmp_path / "clean"
    run([corpus], clean, "output.shards=3")
    assert table_digests(output, ROW_TABLES) == table_digests(clean, ROW_TABLES)


def test_a_damaged_part_is_caught_by_the_next_run_which_rebuilds_in_full(published, tmp_path):
    corpus, output = published
    _flip_bit(row_table_parts(output)[0])
    summary = run([corpus], output, "output.shards=3")
    assert summary.rebuild["mode"] == "full"
    clean = tmp_path / "clean"
    run([corpus], clean, "output.shards=3")
    assert table_digests(output, ROW_TABLES) == table_digests(clean, ROW_TABLES)


@pytest.mark.parametrize("where", ["memory", "new"])
def test_outputs_off_the_local_disk_or_not_yet_published_start_no_thread(published, tmp_path, where):
    _, output = published
    # memory://: the same path holds a published dataset on the local disk, which it must not read.
    url = f"memory://{output}" if where == "memory" else str(tmp_path / "new-output")
    ahead = PartsHashedAhead(url)
    assert HASHING_THREAD not in {thread.name for thread in threading.enumerate()}
    assert ahead.hashed() == {}


def test_a_run_that_fails_listing_its_inputs_leaves_no_thread_hashing(published, tmp_path, monkeypatch):
    _, output = published
    started = threading.Event()
    hash_part = PartsHashedAhead._hash_part

    def slow_hash_part(self, path, file_name, buffer):
        started.set()
        self._stop.wait(30)  # hashing that would outlast the listing
        return hash_part(self, path, file_name, buffer)

    monkeypatch.setattr(PartsHashedAhead, "_hash_part", slow_hash_part)
    list_inputs = run_module.list_inputs

    def list_once_hashing_started(config):
        assert started.wait(30)
        return list_inputs(config)  # the input folder is missing: this raises

    monkeypatch.setattr(run_module, "list_inputs", list_once_hashing_started)
    before = read_manifest(str(output))
    assert main(["run", str(tmp_path / "no-such-folder"), "--output", str(output)]) != 0
    assert HASHING_THREAD not in {thread.name for thread in threading.enumerate()}
    assert read_manifest(str(output)) == before
