"""Run folders in the temporary folder: a new run removes those whose owner process is gone, and never
one whose owner lives or cannot be told."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from chunkline.pipelines.run_folder import RunFolder, remove_abandoned_run_folders, write_owner


def _folder(parent: Path, name: str, owner: dict | None) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "fork.sock").write_bytes(b"")
    if owner is not None:
        (folder / "owner.json").write_text(json.dumps(owner))
    return folder


def _ended_process_id() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def test_only_folders_of_owners_that_are_gone_are_removed(tmp_path):
    live = tmp_path / "chunkline-run-live"
    live.mkdir()
    write_owner(str(live))
    gone = _folder(tmp_path, "chunkline-workers-gone", {"pid": _ended_process_id(), "start_time": "1"})
    # The id of this live process, recorded with another start time: a process that had the id before.
    reused = _folder(tmp_path, "chunkline-run-reused", {"pid": os.getpid(), "start_time": "-1"})
    unknown = _folder(tmp_path, "chunkline-run-unknown", None)
    other = _folder(tmp_path, "someone-else", {"pid": _ended_process_id(), "start_time": "1"})

    removed = remove_abandoned_run_folders(str(tmp_path))

    assert sorted(removed) == sorted([str(gone), str(reused)])
    assert live.exists() and unknown.exists() and other.exists()
    assert not gone.exists() and not reused.exists()


def test_a_run_folder_records_its_owner_and_goes_when_closed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with RunFolder() as folder:
        assert Path(folder.path).parent == tmp_path
        assert json.loads(Path(folder.path, "owner.json").read_text())["pid"] == os.getpid()
        assert remove_abandoned_run_folders() == []  # its owner lives
    assert not Path(folder.path).exists()
