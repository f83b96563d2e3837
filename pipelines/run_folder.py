"""A run's own folder in the temporary folder, for what the driver keeps on local disk while a pipeline
runs: the fork server's socket, Beam's ``local_tempdir``.

A driver killed outright (SIGKILL, a lost machine) removes nothing, so each folder records its owner (the
driver's process id and that process's start time, which tells a live owner from a later process that got
the same id). A new run first removes the folders of owners that are gone; a live run's folder, or one whose
owner it cannot tell, is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["RUN_FOLDER_PREFIXES", "RunFolder", "process_start_time", "remove_abandoned_run_folders", "write_owner"]

RUN_FOLDER_PREFIX = "chunkline-run-"
RUN_FOLDER_PREFIXES = (RUN_FOLDER_PREFIX, "chunkline-workers-")
"""Prefixes of the folders runs make in the temporary folder (``chunkline-workers-`` for a fork server's
own folder)."""
_OWNER_FILE = "owner.json"


def process_start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux's /proc), None where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(owner: dict) -> bool:
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True  # an owner it cannot tell: kept
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    recorded = owner.get("start_time")
    current = process_start_time(pid)
    return recorded is None or current is None or recorded == current


def write_owner(folder: str, pid: int | None = None) -> None:
    """Record process ``pid`` (this one by default) as the owner of ``folder``."""
    pid = os.getpid() if pid is None else pid
    Path(folder, _OWNER_FILE).write_text(json.dumps({"pid": pid, "start_time": process_start_time(pid)}))


def remove_abandoned_run_folders(parent: str | None = None) -> list[str]:
    """Remove the run folders in ``parent`` (the temporary folder by default) whose owner process is gone;
    returns their paths."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(RUN_FOLDER_PREFIXES) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            owner = json.loads(Path(entry.path, _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # no owner recorded (yet, or by an older chunkline): not ours to judge
        if isinstance(owner, dict) and not _alive(owner):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


class RunFolder:
    """A folder only this user can open, owned by this process, removed by :meth:`close` (or as a context
    manager)."""

    def __init__(self, prefix: str = RUN_FOLDER_PREFIX) -> None:
        self.path = tempfile.mkdtemp(prefix=prefix)
        write_owner(self.path)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
