"""Faults injected into the worker processes of ``chunkline run --workers 2``, run as a process of its own.

:class:`WorkerFaultRun` starts the command, finds its processes in Linux's /proc (the fork server is the
driver's child that is not a runner's worker command; the workers are the fork server's children) and
injects one fault:

* :meth:`~WorkerFaultRun.kill_worker`: a worker killed by a signal (SIGKILL: no cleanup of any kind);
* ``exit_status`` with ``exit_on_document``: a worker that exits with that status when it reaches that
  document (the command runs through a wrapper that patches the chunking step before the workers are
  forked, so they inherit it);
* :meth:`~WorkerFaultRun.kill_fork_server`: the process the workers are forked from, killed;
* :meth:`~WorkerFaultRun.kill_driver`: the driver itself, or the driver and its fork server at once.

A worker that hangs is not among them: a hang is told from slow work only by a deadline, and chunkline sets
none on a worker's work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_WRAPPER = """
import os, sys

exit_on_document, exit_status, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if exit_on_document:
    import chunkline.dataset.document_rows as document_rows

    driver_pid = os.getpid()
    process = document_rows.DocumentChunker.process

    def process_or_exit(self, element):
        sources = element if isinstance(element, list) else [element]  # a batch of documents, or one
        if os.getpid() != driver_pid and any(source.doc_id == exit_on_document for source in sources):
            os._exit(exit_status)
        return process(self, element)

    document_rows.DocumentChunker.process = process_or_exit

from chunkline.pipelines.cli import console_main
sys.argv = ["chunkline", *argv]
console_main()  # as the chunkline program runs, which forks its workers
"""


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return children
    for task in tasks:
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return children


def _is_live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone before or while it was read
        return False
    return state != "Z"


def _is_worker_command(pid: int) -> bool:
    """Whether ``pid`` runs a runner's worker command (the shell or the relay it starts)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return command[0].endswith(b"sh") or b"-S" in command


class WorkerFaultRun:
    """One ``chunkline run CORPUS --output OUTPUT --workers 2 --reindex``, its output in ``log``."""

    def __init__(
        self,
        corpus: Path,
        output: Path,
        log: Path,
        *,
        exit_on_document: str = "",
        exit_status: int = 3,
        environment: dict[str, str] | None = None,
    ):
        self.log = log
        # --reindex: over a published output, every document is chunked again, on the workers
        arguments = ["run", str(corpus), "--output", str(output), "--workers", "2", "--reindex"]
        with open(log, "wb") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WRAPPER, exit_on_document, str(exit_status), *arguments],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(environment or {})},
            )
        self.killed_at: float | None = None

    def fork_server(self) -> int | None:
        for child in _children(self.process.pid):
            if _is_live(child) and not _is_worker_command(child):
                return child
        return None

    def workers(self) -> list[int]:
        server = self.fork_server()
        return [pid for pid in _children(server) if _is_live(pid)] if server else []

    def wait_for_workers(self, count: int = 2, timeout_seconds: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout_seconds
        while True:
            workers = self.workers()
            if len(workers) >= count:
                return workers
            assert self.process.poll() is None, f"the run ended before its workers started:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {count} workers within {timeout_seconds} s:\n{self.output()}"
            time.sleep(0.02)

    def _kill(self, pid: int, signum: int = signal.SIGKILL) -> None:
        os.kill(pid, signum)
        self.killed_at = time.monotonic()

    def kill_worker(self, pid: int, signum: int = signal.SIGKILL) -> None:
        self._kill(pid, signum)

    def kill_fork_server(self) -> int:
        server = self.fork_server()
        assert server is not None, self.output()
        self._kill(server)
        return server

    def kill_driver(self, *, with_fork_server: bool = False) -> None:
        server = self.fork_server() if with_fork_server else None
        if server is not None:  # as the kernel's OOM killer or a container's stop might take both
            os.kill(server, signal.SIGSTOP)
        self._kill(self.process.pid)
        if server is not None:
            os.kill(server, signal.SIGKILL)

    def wait(self, timeout_seconds: float) -> tuple[int | None, float]:
        """The exit status (None if the run was still running after ``timeout_seconds``, when it is killed
        with all its processes) and the seconds from the fault to the exit."""
        try:
            status = self.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            self._kill_everything()
            status = None
        return status, time.monotonic() - (self.killed_at or time.monotonic())

    def _kill_everything(self) -> None:
        def tree(pid: int) -> list[int]:
            return [pid] + [grandchild for child in _children(pid) for grandchild in tree(child)]

        for pid in reversed(tree(self.process.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def leftover_processes(self, marks: list[str]) -> list[str]:
        """The command lines of live processes other than this one's that hold any of ``marks`` (a
        corpus's path, a run folder's name): what a killed run may have left running."""
        leftovers = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if _is_live(int(entry.name)) and any(mark in command for mark in marks):
                leftovers.append(f"{entry.name}: {command[:200]}")
        return leftovers

    def output(self) -> str:
        return self.log.read_text(errors="replace")
