"""On a local disk, a shard where nothing changed is carried into the new snapshot as hard links to the
previous snapshot's verified parts: no bytes are written, and each kept snapshot still names its own files.

What that must not change: the dataset verifies and is file for file a full rebuild's; removing the older
snapshot leaves the new one whole; a part that does not verify is never linked into a published snapshot;
where no link can be made the bytes are written as before; and a part damaged after it was linked (so in
every snapshot that names it) is caught by the next run, which rebuilds in full.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from damage_matrix import Damage, Snapshots, _flip_bit, check_rerun, reference_rows
from fsspec.implementations.local import LocalFileSystem

import chunkline.dataset.publish as publish_module
import chunkline.dataset.sink as sink_module
from chunkline.dataset.publish import (
    DamagedDatasetError,
    local_file_identity,
    read_manifest,
    read_verified_part,
    verify_local_part,
    verify_output,
    verify_snapshot,
)
from chunkline.pipelines.cli import main
from chunkline.schemas import ROW_TABLES

from .conftest import run, table_digests, write_corpus

pytestmark = pytest.mark.timeout(300)


def snapshot_parts(output: Path, snapshot: str, table: str) -> dict[str, os.stat_result]:
    """Part file name -> its ``stat`` in ``snapshot``'s ``table`` folder."""
    folder = output / "snapshots" / snapshot / table
    return {path.name: path.stat() for path in folder.glob("part-*.parquet")}


@pytest.fixture
def linked(tmp_path) -> tuple[Path, Path, Snapshots]:
    """(corpus, output, snapshots): a full run, then an unchanged rerun that links every row table's part."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    older = run([corpus], output, "output.shards=2")
    latest = run([corpus], output, "output.shards=2")
    assert latest.rebuild["mode"] == "incremental"
    return corpus, output, Snapshots(older.run_id, latest.run_id)


def test_an_unchanged_reruns_parts_share_the_previous_snapshots_files_and_the_dataset_verifies(linked, tmp_path):
    corpus, output, snapshots = linked
    for table in ROW_TABLES:
        older = snapshot_parts(output, snapshots.older, table)
        latest = snapshot_parts(output, snapshots.latest, table)
        assert latest and set(latest) == set(older), table
        for name, status in latest.items():
            assert (status.st_ino, status.st_dev) == (older[name].st_ino, older[name].st_dev), (table, name)
            assert status.st_nlink == 2, (table, name)
    verify_snapshot(str(output), read_manifest(str(output)))
    state = verify_output(str(output), repair=False)
    assert state.latest_trusted and not state.damage
    clean = tmp_path / "clean"
    run([corpus], clean, "output.shards=2")
    assert table_digests(output, ROW_TABLES) == table_digests(clean, ROW_TABLES)


def test_removing_the_older_snapshot_leaves_the_linked_one_whole(linked, tmp_path):
    corpus, output, snapshots = linked
    before = reference_rows(str(output))
    third = run([corpus], output, "output.shards=2", "output.keep=1")
    assert not (output / "snapshots" / snapshots.older).exists()
    assert not (output / "snapshots" / snapshots.latest).exists()
    for table in ROW_TABLES:
        for name, status in snapshot_parts(output, third.run_id, table).items():
            assert status.st_nlink == 1, (table, name)  # the only name left
    verify_snapshot(str(output), read_manifest(str(output)))
    assert reference_rows(str(output)) == before
    assert main(["inspect", str(output)]) == 0


def test_a_part_damaged_after_it_was_linked_is_caught_in_both_snapshots_and_the_next_run_rebuilds_in_full(
    linked, tmp_path, caplog
):
    corpus, output, snapshots = linked
    clean = tmp_path / "clean"
    run([corpus], clean, "output.shards=2")
    chunks = snapshot_parts(output, snapshots.latest, "chunks")
    largest = max(chunks, key=lambda name: chunks[name].st_size)
    # One write through the latest snapshot's name damages the older snapshot's part too: one file.
    _flip_bit(output / "snapshots" / snapshots.latest / "chunks" / largest)
    state = verify_output(str(output), repair=False)
    assert not state.latest_trusted and state.manifest is None
    assert set(state.damaged_snapshots) == {snapshots.latest, snapshots.older}
    for arguments in (["inspect", str(output)], ["inspect", str(output), "--snapshot", snapshots.older]):
        assert main(arguments) == 2
    with caplog.at_level(logging.WARNING, logger="chunkline"):
        summary = run([corpus], output, "output.shards=2")
    assert summary.rebuild["mode"] == "full"
    assert any("no kept snapshot verifies" in record.getMessage() for record in caplog.records)
    damage = Damage("a linked chunks part bit-flipped", lambda *_: None, "none", ("latest", "older"))
    check_rerun(str(output), reference_rows(str(clean)), snapshots, damage)
    assert table_digests(output, ROW_TABLES) == table_digests(clean, ROW_TABLES)


def test_a_part_that_changes_before_it_is_linked_fails_the_run_and_is_not_linked(linked, monkeypatch):
    corpus, output, snapshots = linked
    published = read_manifest(str(output))
    link_file = sink_module.link_file
    linked_names: list[str] = []

    def damage_then_link(fs, source: str, destination: str) -> bool:
        if "/chunks/" in source and not linked_names:
            _flip_bit(Path(source))  # after the run verified the output, before the part is carried
        made = link_file(fs, source, destination)
        linked_names.append(destination)
        return made

    monkeypatch.setattr(sink_module, "link_file", damage_then_link)
    with pytest.raises(DamagedDatasetError, match="do not match the hash in its name"):
        run([corpus], output, "output.shards=2")
    assert linked_names and not any(Path(name).exists() for name in linked_names)
    assert read_manifest(str(output)) == published  # nothing was published
    kept = sorted(path.name for path in (output / "snapshots").iterdir())
    assert kept == sorted([snapshots.older, snapshots.latest])


def test_where_no_link_can_be_made_the_verified_bytes_are_written(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    older = run([corpus], output, "output.shards=2")

    real_link = os.link

    def no_hard_links(source, destination, **options):
        if str(destination).endswith(".parquet"):  # a part on another device (the output lock still links)
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_link(source, destination, **options)

    monkeypatch.setattr(os, "link", no_hard_links)
    latest = run([corpus], output, "output.shards=2")
    assert latest.rebuild["mode"] == "incremental"
    for table in ROW_TABLES:
        older_parts = snapshot_parts(output, older.run_id, table)
        latest_parts = snapshot_parts(output, latest.run_id, table)
        assert latest_parts and set(latest_parts) == set(older_parts)
        for name, status in latest_parts.items():
            assert status.st_ino != older_parts[name].st_ino and status.st_nlink == 1, (table, name)
            old_bytes = (output / "snapshots" / older.run_id / table / name).read_bytes()
            assert (output / "snapshots" / latest.run_id / table / name).read_bytes() == old_bytes
    verify_snapshot(str(output), read_manifest(str(output)))


def test_verifying_the_output_records_each_local_part_it_hashed_by_its_files_identity(linked):
    _, output, snapshots = linked
    state = verify_output(str(output), repair=False)
    expected = {}
    for table in ROW_TABLES:
        for name, status in snapshot_parts(output, snapshots.latest, table).items():
            expected[local_file_identity(status)] = (name, status.st_ctime_ns)
    assert state.verified_parts == expected


def test_a_carried_link_to_a_part_hashed_while_verifying_is_not_read_again_unless_its_file_changed(linked):
    _, output, snapshots = linked
    state = verify_output(str(output), repair=False)
    name, status = max(snapshot_parts(output, snapshots.latest, "chunks").items(), key=lambda item: item[1].st_size)
    path = output / "snapshots" / snapshots.latest / "chunks" / name
    url = f"snapshots/{snapshots.latest}/chunks/{name}"
    # Its bytes changed and its time put back, as no writer does: the identity still matches, so the bytes
    # are taken as the ones hashed, which shows that they are not read again.
    _flip_bit(path)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    verify_local_part(url, str(path), verified=state.verified_parts)
    with pytest.raises(DamagedDatasetError):  # without the record, or under another name, it is read
        verify_local_part(url, str(path))
    with pytest.raises(DamagedDatasetError):
        verify_local_part(
            url.replace(name, "part-00000-0000000000000000.parquet"), str(path), verified=state.verified_parts
        )
    _flip_bit(path)  # written again, its time now: read and hashed, and it verifies once more
    verify_local_part(url, str(path), verified=state.verified_parts)
    _flip_bit(path)
    with pytest.raises(DamagedDatasetError):
        verify_local_part(url, str(path), verified=state.verified_parts)


def test_a_previous_part_a_merge_reads_is_not_hashed_again_unless_its_file_changed(linked, monkeypatch):
    """A merge writes the rows it reads into a new part whose name carries their new hash: a part changed since
    the check must be caught as it is read, even written in place with its modification time put back."""
    _, output, snapshots = linked
    state = verify_output(str(output), repair=False)
    name, status = max(snapshot_parts(output, snapshots.latest, "chunks").items(), key=lambda item: item[1].st_size)
    path = output / "snapshots" / snapshots.latest / "chunks" / name
    fs = LocalFileSystem()
    hashed: list[str] = []
    verify_part = publish_module.verify_part
    monkeypatch.setattr(publish_module, "verify_part", lambda url, data: hashed.append(url) or verify_part(url, data))
    assert read_verified_part(fs, str(path), verified=state.verified_parts) == path.read_bytes()
    assert hashed == []  # the file the check hashed, unchanged since
    assert read_verified_part(fs, str(path)) == path.read_bytes()  # without the record it is hashed
    assert len(hashed) == 1
    _flip_bit(path)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))  # identity as before: the change time tells
    with pytest.raises(DamagedDatasetError):
        read_verified_part(fs, str(path), verified=state.verified_parts)
    _flip_bit(path)  # its bytes back, its change time new: hashed, and it verifies once more
    assert read_verified_part(fs, str(path), verified=state.verified_parts) == path.read_bytes()
    assert len(hashed) == 3


def test_a_memory_outputs_parts_are_read_whenever_carried(memory_fs):
    pages = {"/corpus/a.md": b"# A\n\ntext\n", "/corpus/b.md": b"# B\n\nmore text\n"}
    for path, data in pages.items():
        memory_fs.pipe(path, data)
    run(["memory:///corpus"], "memory:///out")
    run(["memory:///corpus"], "memory:///out")
    assert verify_output("memory:///out", repair=False).verified_parts == {}


def test_parts_are_checked_two_at_a_time_and_the_first_damaged_one_in_the_manifests_order_is_named(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    run([corpus], output, "output.shards=4")
    names = read_manifest(str(output))["tables"]["chunks"]["files"]
    assert len(names) >= 3
    for name in (names[-1], names[1]):
        _flip_bit(output / name)
    state = verify_output(str(output), repair=False)
    assert not state.latest_trusted and state.verified_parts == {}
    assert f"part {names[1]} does not match the hash in its name" in state.damage[0]
    assert names[-1] not in " ".join(state.damage)
