"""The output lock: one run writes an output at a time (no Beam here).

A run takes ``URL/_lock.json`` before it writes anything and gives it up when it ends::

    URL/_lock.json                            the holder: run id, host, pid, start time
    URL/_lock.json.takeover-<run id>.<n>      a run replacing that stale holder (there for a moment)
    URL/_lock.json.tmp-<random>               a local disk's lock content, there for a moment before it
                                              is linked into place

**Taking a free lock** is one exclusive create that carries the lock's content, so no run ever sees a lock
half-written by another: on a local disk the content goes to a temporary file beside the lock and is
hard-linked into place (``os.link`` fails if the lock exists); on S3 and Azure a conditional write
(``If-None-Match: *``, fsspec mode ``xb``) is one request holding the content. Stores with neither are
written and read back: the last writer wins and the others see it.

**A held lock** refuses the run with :class:`ConcurrentRunError` naming the holder's run id, pid and host.
A holder is stale — its run is dead — when its pid no longer exists on this host, or when it is older than
``output.lock_expiry_seconds``. A lock that cannot be parsed is never stale by itself: on a store without
atomic visibility it may be a write in progress. It counts as held until the store's modification time
says it is older than :data:`UNREADABLE_LOCK_GRACE_SECONDS` (a write of a few hundred bytes is whole long
before), and on a store that reports no modification time it stays held and the message says to remove it.

**A stale lock is replaced conditionally**: of several runs that see the same stale holder, exactly one
replaces it. Each creates, exclusively, a claim named after the stale holder
(``_lock.json.takeover-<run id>.0``); the one that created it reads the lock again, and only if the same
holder (the same bytes) is still there removes it and creates its own lock exclusively, then removes its
claim. The others wait a moment and look again: they see the new holder, alive, and are refused by name. A run
that reads the lock after the replacement creates the claim (the winner removed it), reads a holder that is
not the stale one, and backs off. A claim is itself a small holder: when its run is dead (its pid gone on this
host, or older than :data:`TAKEOVER_CLAIM_EXPIRY_SECONDS` by the clocks of the hosts, which must agree to well
within that bound) the next run claims the next generation (``.1``, ``.2``, ...), exclusively again, so a run
killed in the middle of a takeover never wedges the output. What remains possible: a claimant *alive but
stalled* for longer than that bound between its second read and its replace (a suspended VM) can replace the
lock of the run that broke its claim, and when a run whose lock expired is still running, its release can fall
between a claimant's second read and its replace, and the claimant then removes the lock a third run took in
between; in both cases two runs believe they hold it, and :meth:`OutputLock.verify` at the commit point lets
at most the one whose lock is in place publish. The run that holds the lock removes the claims other takeovers
left (those naming a holder other than itself) and old temporary files when it releases the lock.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import posixpath
import re
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from chunkline.dataset.storage import (
    make_parent_folder,
    scrub_secrets,
    storage_call,
    storage_url,
    write_file_atomically,
)

__all__ = [
    "LOCK_NAME",
    "TAKEOVER_CLAIM_EXPIRY_SECONDS",
    "UNREADABLE_LOCK_GRACE_SECONDS",
    "ConcurrentRunError",
    "OutputLock",
    "acquire_output_lock",
]

logger = logging.getLogger("chunkline")

LOCK_NAME = "_lock.json"
#: A lock that cannot be parsed counts as held until it is this old by the store's modification time.
UNREADABLE_LOCK_GRACE_SECONDS = 60.0
#: A takeover claim older than this may be broken: its run takes a few storage calls to finish with it.
TAKEOVER_CLAIM_EXPIRY_SECONDS = 120.0
#: How long a run waits for another run's takeover, or for an unreadable lock to become whole, before it
#: gives up with a message.
_BUSY_WAIT_SECONDS = 5.0
#: Claim generations one takeover goes through at most (each one a claim whose run died).
_MAX_CLAIM_GENERATIONS = 16
_CLAIM_MARK = ".takeover-"
_TEMPORARY_MARK = ".tmp-"
# A run id that can name a claim as it is; any other holder is named by a hash of its bytes.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Errors of ``os.link`` on filesystems without hard links (FAT, some network shares).
_NO_HARD_LINKS = frozenset(
    getattr(errno, name) for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EMLINK") if hasattr(errno, name)
)


class ConcurrentRunError(RuntimeError):
    """Another run is writing the same output."""


@dataclass(frozen=True)
class _Seen:
    """One read of a lock or claim: its bytes, and its holder when they parse as one."""

    data: bytes
    holder: dict[str, Any] | None

    @property
    def key(self) -> str:
        """The name a takeover claim of this holder carries: its run id, or a hash of its bytes."""
        run_id = (self.holder or {}).get("run_id")
        if isinstance(run_id, str) and _PLAIN_NAME.fullmatch(run_id):
            return run_id
        return f"sha256-{hashlib.sha256(self.data).hexdigest()[:16]}"


def _parse(data: bytes) -> _Seen:
    try:
        holder = json.loads(data)
    except ValueError:
        holder = None
    return _Seen(data, holder if isinstance(holder, dict) and holder else None)


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
        """Who holds the lock (None: nobody; ``{}``: a lock that cannot be parsed)."""
        seen = self._read(self.path)
        if seen is None:
            return None
        return seen.holder or {}

    def verify(self) -> None:
        """Raise :class:`ConcurrentRunError` unless this run still holds the lock."""
        holder = self.holder()
        if not holder or holder.get("run_id") != self.run_id:
            raise ConcurrentRunError(
                f"run {self.run_id} lost the lock on {self.url} to "
                f"{(holder or {}).get('run_id', 'nobody')}; it publishes nothing"
            )

    def remove(self) -> None:
        storage_call(lambda: self.fs.rm_file(self.path), self.url, "delete", self.secrets)

    def release(self) -> None:
        """Remove what other takeovers left beside the lock, then the lock if this run holds it. A failure is
        logged, never raised: it must not hide the run's own outcome, and the lock is taken over once it
        expires."""
        try:
            holder = self.holder()
            if holder is not None and holder.get("run_id") == self.run_id:
                try:
                    self._remove_leftovers()
                except Exception as error:  # leftovers wait for the next run; the lock must still go
                    logger.warning(
                        "chunkline: could not remove leftover takeover claims beside %s (%s); the next run "
                        "that holds the lock removes them",
                        self.url,
                        scrub_secrets(str(error), self.secrets),
                    )
                self.remove()
        except Exception as error:
            logger.warning(
                "chunkline: could not remove the lock %s (%s); remove it by hand, or runs from other hosts "
                "wait for output.lock_expiry_seconds",
                self.url,
                scrub_secrets(str(error), self.secrets),
            )

    # -- reading -----------------------------------------------------------------------------------

    def _read(self, path: str) -> _Seen | None:
        try:
            url = storage_url(self.fs, path)
            data = storage_call(lambda: self.fs.cat_file(path), url, "read", self.secrets)
        except FileNotFoundError:
            return None
        return _parse(data)

    def _age_seconds(self, path: str) -> float | None:
        """How long ago the store last modified ``path`` (None: it cannot say, or ``path`` is gone)."""
        try:
            self.fs.invalidate_cache(posixpath.dirname(path))
            url = storage_url(self.fs, path)
            info = storage_call(lambda: self.fs.info(path), url, "look up", self.secrets)
        except FileNotFoundError:
            return None
        modified = _modified_epoch(info)
        return None if modified is None else time.time() - modified

    def _is_stale(self, path: str, seen: _Seen, expiry_seconds: float) -> bool:
        if seen.holder is not None:
            return _lock_is_stale(seen.holder, expiry_seconds)
        age_seconds = self._age_seconds(path)
        return age_seconds is not None and age_seconds > UNREADABLE_LOCK_GRACE_SECONDS

    # -- taking over a stale holder ----------------------------------------------------------------

    def _take_over(self, stale: _Seen, content: bytes) -> tuple[str, dict[str, Any]]:
        """Replace the ``stale`` holder by this run, if no other run does: ``"taken"``, ``"busy"`` (another
        live run is replacing it; its claim's holder comes with it), ``"gone"`` (it is no longer the holder:
        look again) or ``"unsupported"`` (the store has no exclusive create)."""
        claims: list[str] = []
        generation = 0
        looks = 0
        try:
            while generation < _MAX_CLAIM_GENERATIONS and looks < 4 * _MAX_CLAIM_GENERATIONS:
                looks += 1
                claim = f"{self.path}{_CLAIM_MARK}{stale.key}.{generation}"
                created = _create_exclusively(self.fs, claim, content, self.secrets)
                if created is None:
                    return "unsupported", {}
                if not created:
                    claimant = self._read(claim)
                    if claimant is None:
                        continue  # its run finished with it just now: claim it again
                    if (claimant.holder or {}).get("run_id") != self.run_id:  # not our own create, retried
                        if not self._is_stale(claim, claimant, TAKEOVER_CLAIM_EXPIRY_SECONDS):
                            return "busy", claimant.holder or {}
                        generation += 1  # its run died: claim the next generation
                        continue
                claims.append(claim)
                # The claim is ours: no other live run replaces this holder until it is removed.
                current = self._read(self.path)
                if current is None or current.data != stale.data:
                    return "gone", {}
                try:
                    self.remove()
                except FileNotFoundError:
                    pass  # its run removed it itself: the lock is free all the same
                if not _create_exclusively(self.fs, self.path, content, self.secrets):
                    return "gone", {}  # a run that found no lock created it first (or our create was retried)
                return "taken", {}
            raise ConcurrentRunError(
                f"{generation} takeovers of the stale lock {self.url} were abandoned; remove "
                f"{self.url}{_CLAIM_MARK}{stale.key}.* and {self.url} if no chunkline run is writing there"
            )
        finally:
            for claim in claims:
                self._remove_quietly(claim)

    def _remove_quietly(self, path: str) -> None:
        try:
            storage_call(lambda: self.fs.rm_file(path), storage_url(self.fs, path), "delete", self.secrets)
        except FileNotFoundError:
            pass
        except Exception as error:  # a claim left behind is broken once its run is gone
            logger.warning(
                "chunkline: could not remove %s (%s); the next run that holds the lock removes it",
                storage_url(self.fs, path),
                scrub_secrets(str(error), self.secrets),
            )

    def _remove_leftovers(self) -> None:
        """Remove the claims of takeovers that are over (every claim not naming this run as the stale
        holder) and the temporary files of local creates killed before they were linked."""
        folder = posixpath.dirname(self.path)
        self.fs.invalidate_cache(folder)
        try:
            url = storage_url(self.fs, folder)
            names = storage_call(lambda: self.fs.ls(folder, detail=False), url, "list", self.secrets)
        except FileNotFoundError:
            return
        for name in names:
            base = posixpath.basename(name.rstrip("/"))
            if base.startswith(LOCK_NAME + _CLAIM_MARK):
                stale_key = base[len(LOCK_NAME + _CLAIM_MARK) :].rsplit(".", 1)[0]
                if stale_key != self.run_id:  # a run deciding this run is stale is still at work
                    self._remove_quietly(_join(folder, base))
            elif base.startswith(LOCK_NAME + _TEMPORARY_MARK):
                age_seconds = self._age_seconds(_join(folder, base))
                if age_seconds is not None and age_seconds > UNREADABLE_LOCK_GRACE_SECONDS:
                    self._remove_quietly(_join(folder, base))


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder.rstrip("/"), name)


def _modified_epoch(info: dict[str, Any]) -> float | None:
    """The modification time in an fsspec ``info`` entry, as seconds since the epoch: local disks say
    ``mtime``, s3fs ``LastModified``, adlfs ``last_modified``, gcsfs ``updated``, memory ``created``."""
    for name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(name)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _lock_is_stale(holder: dict[str, Any], expiry_seconds: float) -> bool:
    """Whether the run that wrote ``holder`` is dead: its pid is gone from this host, or it started more
    than ``expiry_seconds`` ago. A holder that cannot be parsed (``{}``) is never stale by itself: see
    :data:`UNREADABLE_LOCK_GRACE_SECONDS`."""
    if not holder:
        return False
    try:
        started = float(holder.get("started_at_epoch", 0))
    except (TypeError, ValueError):
        started = 0.0
    if time.time() - started > expiry_seconds:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder.get("pid", 0)), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError, TypeError, OSError):
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
    that holds it. A stale holder is replaced by exactly one of the runs that see it (see the module's
    guide). Storage calls are retried; a permanent failure (no such bucket, access denied) raises a
    :class:`StorageError` naming the lock's URL before anything is written."""
    fs, root = url_to_fs(output_url, **(storage_options or {}))
    root = root.rstrip("/")
    lock = OutputLock(fs, _join(root, LOCK_NAME), run_id, secrets)
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
    deadline = time.monotonic() + _BUSY_WAIT_SECONDS
    pause_seconds = 0.01
    while True:
        # Why this run would give up if the time runs out now.
        waiting_for = f"another chunkline run took the lock on {output_url} as this one tried to; try again"
        seen = lock._read(lock.path)
        if seen is None:
            created = _create_exclusively(fs, lock.path, content, secrets)
            if created is None:
                return _write_and_read_back(lock, content)
            if created:
                return lock
            if time.monotonic() > deadline:
                raise ConcurrentRunError(waiting_for)
            continue  # another run created it between our look and our create: look again
        holder = seen.holder
        if holder is not None and holder.get("run_id") == run_id:
            return lock  # our own create, whose answer was lost and retried
        if not lock._is_stale(lock.path, seen, expiry_seconds):
            if holder is not None:
                raise ConcurrentRunError(
                    f"another chunkline run ({holder.get('run_id')}, pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {holder.get('started_at')}) is writing {output_url}; "
                    f"wait for it to finish, or remove {lock.url} if that run is no longer alive"
                )
            waiting_for = (
                f"the lock {lock.url} cannot be read (a run may be writing it); if no chunkline run is "
                f"writing {output_url}, remove it"
            )
        else:
            outcome, claimant = lock._take_over(seen, content)
            if outcome == "taken":
                return lock
            if outcome == "unsupported":
                try:
                    lock.remove()
                except FileNotFoundError:
                    pass
                return _write_and_read_back(lock, content)
            if outcome == "busy":
                waiting_for = (
                    f"another chunkline run ({claimant.get('run_id')}, pid {claimant.get('pid')} on "
                    f"{claimant.get('host')}) is taking over the stale lock {lock.url}; try again, or remove "
                    f"{lock.url}{_CLAIM_MARK}* if no chunkline run is writing {output_url}"
                )
            elif time.monotonic() <= deadline:
                continue  # the holder changed: look again at once
        if time.monotonic() > deadline:
            raise ConcurrentRunError(waiting_for)
        time.sleep(pause_seconds)
        pause_seconds = min(pause_seconds * 2, 0.5)


def _write_and_read_back(lock: OutputLock, content: bytes) -> OutputLock:
    """Take the lock on a store with no exclusive create: the last writer wins, and the loser sees it when it
    reads back."""
    write_file_atomically(lock.fs, lock.path, content, secrets=lock.secrets)
    time.sleep(0.05)
    lock.verify()
    return lock


def _create_exclusively(fs, path: str, content: bytes, secrets: tuple[str, ...]) -> bool | None:
    """Create ``path`` holding ``content`` only if it does not exist, in the one step that makes it visible:
    True if created, False if it existed, None if the filesystem cannot create exclusively.

    A local disk writes a temporary file beside ``path`` and hard-links it into place (on a filesystem
    without hard links, ``O_EXCL`` then a write: the file is empty for a moment, which readers of an
    unparseable lock allow for); s3fs and adlfs open mode ``xb`` as one conditional write
    (``If-None-Match: *``)."""
    url = storage_url(fs, path)
    if isinstance(fs, LocalFileSystem):
        make_parent_folder(fs, path, secrets=secrets)
        return storage_call(lambda: _link_exclusively(path, content), url, "create", secrets)

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
    return storage_call(create, url, "create", secrets)


def _link_exclusively(path: str, content: bytes) -> bool:
    temporary = f"{path}{_TEMPORARY_MARK}{uuid.uuid4().hex}"
    with open(temporary, "xb") as handle:
        handle.write(content)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno not in _NO_HARD_LINKS:
            raise
        return _open_exclusively(path, content)
    finally:
        os.unlink(temporary)
    return True


def _open_exclusively(path: str, content: bytes) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return True
