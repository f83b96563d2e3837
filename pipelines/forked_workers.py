"""Worker processes for the FnApiRunner, forked from the driver, which has imported Beam and chunkline
already.

Beam's multi-processing mode starts each worker as ``python -m apache_beam.runners.worker.sdk_worker_main``:
every worker imports Beam, pyarrow and chunkline again (about 1.4 s of CPU, 2 to 3 s of wall time on a
busy machine) before it reads its first document, on the run's critical path. Here the driver forks a
fork server just before the pipeline runs; the runner's worker command is a relay of a few lines (the
standard library only, ``python -S``) that hands its environment (the control and logging endpoints, the
pipeline options) to the server over a Unix socket (in a folder only this user can open), and exits with
the status of the worker the server forked for it, as the runner expects of the process it started. A
forked worker runs Beam's SDK harness as ``sdk_worker_main`` does, in a copy of the driver's memory.

The driver forks before it opens any gRPC channel or server, so each worker is the first of its line to
start gRPC. The server stops when the driver closes it or exits.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

__all__ = ["WorkerForkServer", "start_fork_server"]

_RELAY = """
import json, os, socket, sys, time
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
deadline = time.monotonic() + 120
while True:
    try:
        client.connect(sys.argv[1])
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
client.sendall(json.dumps(dict(os.environ)).encode() + b"\\n")
answer = client.makefile("rb").readline().strip()
sys.exit(int(answer) if answer.lstrip(b"-").isdigit() else 1)
"""


class WorkerForkServer:
    """The fork server of one pipeline run: forked when built, stopped by :meth:`close` (or as a context
    manager); :attr:`worker_command` is the command line the runner starts for each worker."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="chunkline-workers-")
        self.socket_path = os.path.join(self._directory, "fork.sock")
        driver_pid = os.getpid()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.socket_path)
        server.listen(64)
        self._pid = os.fork()
        if self._pid == 0:  # the fork server: a copy of this process, which imported Beam and chunkline
            status = 0
            try:
                _serve(server, driver_pid)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        server.close()

    @property
    def worker_command(self) -> str:
        return " ".join(shlex.quote(part) for part in (sys.executable, "-S", "-c", _RELAY, self.socket_path))

    def close(self) -> None:
        """Stop the server (the workers it forked stop when the runner closes their control channel)."""
        if self._pid:
            try:
                os.kill(self._pid, signal.SIGTERM)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._pid = 0
        shutil.rmtree(self._directory, ignore_errors=True)

    def __enter__(self) -> WorkerForkServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _InMemoryModeNotice(logging.Filter):
    """Drops the FnApiRunner's warning that several workers want its multi-processing mode: with the fork
    server's environment its in_memory mode does start worker processes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("If direct_num_workers is not equal to 1")


_IN_MEMORY_MODE_NOTICE = _InMemoryModeNotice()


def start_fork_server() -> WorkerForkServer | None:
    """A fork server for a run's workers, or None where there is none to be had (not Linux, or no Unix
    socket in the temporary folder): the runner then starts its workers as Beam does."""
    if not sys.platform.startswith("linux"):
        return None
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").addFilter(_IN_MEMORY_MODE_NOTICE)
    try:
        return WorkerForkServer()
    except OSError:
        return None


class _Stop(Exception):
    """The driver asked the server to stop."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def _serve(server: socket.socket, driver_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the driver, which stops the server
    signal.signal(signal.SIGTERM, _stop)
    try:
        # The harness's own modules; the driver imported Beam and the transforms' DoFns already.
        import apache_beam.runners.worker.sdk_worker_main  # noqa: F401

        server.settimeout(1.0)
        while os.getppid() == driver_pid:  # else the driver is gone
            _reap(block_seconds=0)
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _run_worker(connection)  # never returns
            connection.close()
    except _Stop:
        pass
    # The workers have stopped or are stopping (the runner closed their control channels): reaped here,
    # their CPU time counts as the run's.
    _reap(block_seconds=10)


def _reap(block_seconds: float) -> None:
    deadline = time.monotonic() + block_seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _run_worker(connection: socket.socket) -> None:
    status = 1
    try:
        connection.settimeout(None)
        environment = json.loads(connection.makefile("rb").readline())
        os.environ.clear()
        os.environ.update(environment)
        # The driver's log handlers print to its stderr; a worker's records go to the runner only (the
        # handler the harness adds), which logs them in the driver, as with Beam's own worker processes.
        root_logger = logging.getLogger()
        for handler in list(root_logger.handlers):
            root_logger.removeHandler(handler)
        from apache_beam.runners.worker import sdk_worker_main

        sdk_worker_main.main(sys.argv)
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # on the worker's stderr, as Beam's own worker process would print it
        traceback.print_exc()
        status = 1
    finally:
        try:
            connection.sendall(f"{status}\n".encode())
        finally:
            os._exit(status)
