"""The output lock: one run writes an output at a time (no Beam here).

:func:`acquire_output_lock` takes ``URL/_lock.json``, created exclusively (``O_EXCL`` on a local disk, a
conditional write on S3 and Azure; written and read back on stores with neither), and refuses with a clear
message while another live run holds it. A lock left by a killed run on this machine, or older than
``output.lock_expiry_seconds``, is taken over.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.pipelines.files import make_parent_folder, scrub_secrets, storage_call, storage_url, write_file_atomically

__all__ = [
    "LOCK_NAME",
    "ConcurrentRunError",
    "OutputLock",
    "acquire_output_lock",
]

logger = logging.getLogger("chunkline")

LOCK_NAME = "_lock.json"


class ConcurrentRunError(RuntimeError):
    """Another run is writing the same output."""


@dataclass
class OutputLock:
    """The lock a run holds on its output while it writes it."""

    fs: Any
    path: str
    run_id: str
    secrets: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return storage_url(self.fs, self.path)

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock (None: nobody; ``{}``: a lock a killed run left half-written)."""
        try:
            data = storage_call(lambda: self.fs.cat_file(self.path), self.url, "read", self.secrets)
        except FileNotFoundError:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return {}

    def verify(self) -> None:
        """Raise :class:`ConcurrentRunError` unless this run still holds the lock."""
        holder = self.holder()
        if not holder or holder.get("run_id") != self.run_id:
            raise ConcurrentRunError(
                f"run {self.run_id} lost the lock on {self.url} to "
                f"{(holder or {}).get('run_id', 'nobody')}; it publishes nothing"
            )

    def remove(self) -> None:
        storage_call(lambda: self.fs.rm(self.path), self.url, "delete", self.secrets)

    def release(self) -> None:
        """Remove the lock if this run holds it. A failure is logged, never raised: it must not hide the
        run's own outcome, and the lock is taken over once it expires."""
        try:
            holder = self.holder()
            if holder is not None and holder.get("run_id") == self.run_id:
                self.remove()
        except Exception as error:
            logger.warning(
                "chunkline: could not remove the lock %s (%s); remove it by hand, or runs from other hosts "
                "wait for output.lock_expiry_seconds",
                self.url,
                scrub_secrets(str(error), self.secrets),
            )


def _lock_is_stale(holder: dict[str, Any], expiry_seconds: float) -> bool:
    if not holder:
        return True
    started = holder.get("started_at_epoch", 0)
    if time.time() - float(started) > expiry_seconds:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder.get("pid", 0)), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError, OSError):
            return False
    return False


def acquire_output_lock(
    output_url: str,
    run_id: str,
    storage_options: dict[str, Any] | None = None,
    *,
    expiry_seconds: float = 86_400,
    secrets: tuple[str, ...] = (),
) -> OutputLock:
    """Take the output's ``_lock.json`` for ``run_id``, or raise :class:`ConcurrentRunError` naming the run
    that holds it. Storage calls are retried; a permanent failure (no such bucket, access denied) raises a
    :class:`StorageError` naming the lock's URL before anything is written."""
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    lock = OutputLock(fs, posixpath.join(root, LOCK_NAME), run_id, secrets)
    content = json.dumps(
        {
            "run_id": run_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "started_at_epoch": time.time(),
        },
        sort_keys=True,
    ).encode()
    for _attempt in range(3):
        holder = lock.holder()
        if holder is not None:
            if holder.get("run_id") == run_id:
                return lock  # our own create, whose answer was lost and retried
            if not _lock_is_stale(holder, expiry_seconds):
                raise ConcurrentRunError(
                    f"another chunkline run ({holder.get('run_id')}, pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {holder.get('started_at')}) is writing {output_url}; wait "
                    f"for it to finish, or remove {lock.url} if that run is no longer alive"
                )
            lock.remove()
        created = _create_exclusively(fs, lock.path, content, secrets)
        if created is None:
            # A store with no exclusive create: the last writer wins, and the loser sees it when it reads back.
            write_file_atomically(fs, lock.path, content, secrets=secrets)
            time.sleep(0.05)
            lock.verify()
            return lock
        if created:
            return lock
        # Another run created it between our look and our create: look again.
    raise ConcurrentRunError(f"another chunkline run took the lock on {output_url} as this one tried to; try again")


def _create_exclusively(fs, path: str, content: bytes, secrets: tuple[str, ...]) -> bool | None:
    """Create ``path`` holding ``content`` only if it does not exist: True if created, False if it existed,
    None if the filesystem cannot create exclusively. A local disk creates with ``O_EXCL``; s3fs and adlfs
    open mode ``xb`` as a conditional write (``If-None-Match: *``)."""
    if isinstance(fs, LocalFileSystem):
        make_parent_folder(fs, path, secrets=secrets)
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        return True

    def create() -> bool | None:
        try:
            with fs.open(path, "xb") as handle:
                handle.write(content)
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):  # no mode "xb" on this filesystem
            return None
        return True

    # Any other failure (no such bucket, access denied) ends the run with an error naming the lock's URL.
    return storage_call(create, storage_url(fs, path), "create", secrets)
