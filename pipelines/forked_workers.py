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
start gRPC. The server stops when the driver closes it; when the driver is gone without closing it (killed),
the server kills its workers and removes its folder. It reports every worker that ends with a signal or a
non-zero status while it serves, which is how the driver learns that a worker died (see
:mod:`chunkline.pipelines.worker_watchdog`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import select
import shlex
import shutil
import signal
import socket
import sys
import time
import traceback
from typing import NamedTuple

from chunkline.pipelines.run_folder import RunFolder, process_start_time

__all__ = ["WorkerDeath", "WorkerForkServer", "start_fork_server"]

_RELAY = """
import json, os, signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the driver stops the run on its process group's SIGTERM
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
try:
    client.sendall(json.dumps(dict(os.environ)).encode() + b"\\n")
    answer = client.makefile("rb").readline().strip()
except OSError:  # the fork server is gone: the driver's watchdog says so, in the run's one error line
    sys.exit(1)
sys.exit(int(answer) if answer.lstrip(b"-").isdigit() else 1)
"""


class WorkerDeath(NamedTuple):
    """A worker process (or the fork server) that ended while the run needed it."""

    pid: int
    wait_status: int
    """As ``os.waitpid`` reports it."""
    role: str = "worker process"

    def describe(self) -> str:
        """Which process ended and how: ``worker process 4242 was killed by signal SIGKILL``."""
        if os.WIFSIGNALED(self.wait_status):
            number = os.WTERMSIG(self.wait_status)
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = str(number)
            how = f"was killed by signal {name}"
        elif os.WIFEXITED(self.wait_status):
            how = f"exited with status {os.WEXITSTATUS(self.wait_status)}"
        else:
            how = "ended"
        return f"{self.role} {self.pid} {how}"


class WorkerForkServer:
    """The fork server of one pipeline run: forked when built, stopped by :meth:`close` (or as a context
    manager); :attr:`worker_command` is the command line the runner starts for each worker.

    Its socket lives in ``directory`` (a folder of its own when None), which the server removes if the
    driver dies before closing it. The server reports each worker that ends with a signal or a non-zero
    status while it serves (:meth:`worker_deaths`); :meth:`abort` kills the workers and stops it."""

    def __init__(self, directory: str | None = None) -> None:
        self._own_folder = RunFolder(prefix="chunkline-workers-") if directory is None else None
        self._directory = directory or self._own_folder.path
        self.socket_path = os.path.join(self._directory, "fork.sock")
        driver_pid = os.getpid()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(self.socket_path)
            server.listen(64)
        except OSError:
            server.close()
            if self._own_folder is not None:
                self._own_folder.close()
            raise
        deaths_read, deaths_write = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the fork server: a copy of this process, which imported Beam and chunkline
            status = 0
            try:
                os.close(deaths_read)
                _serve(server, driver_pid, deaths_write, self._directory)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        server.close()
        os.close(deaths_write)
        self._deaths = deaths_read
        self._deaths_pending = b""
        self._workers: dict[int, str | None] = {}
        """The live workers the server reported, by process id, with their start times."""

    @property
    def worker_command(self) -> str:
        # The runner starts it through a shell: ``exec`` leaves no shell between the runner and the relay,
        # which ignores a SIGTERM sent to the whole process group.
        command = " ".join(shlex.quote(part) for part in (sys.executable, "-S", "-c", _RELAY, self.socket_path))
        return f"exec {command}"

    def worker_deaths(self, timeout_seconds: float) -> list[WorkerDeath]:
        """The workers that ended with a signal or a non-zero status since the last call, waiting up to
        ``timeout_seconds`` for news from the server; the server itself once it has ended (it stops only
        when closed)."""
        if self._deaths < 0:
            return []
        readable, _, _ = select.select([self._deaths], [], [], timeout_seconds)
        if not readable:
            return []
        data = os.read(self._deaths, 4096)
        if not data:  # every copy of the pipe's writing end is closed: the server is gone
            os.close(self._deaths)
            self._deaths = -1
            return [WorkerDeath(self._pid, self._server_status(), "fork server")]
        *lines, self._deaths_pending = (self._deaths_pending + data).split(b"\n")
        deaths = []
        for line in lines:
            event, pid, value = line.decode().split()
            if event == "start":
                self._workers[int(pid)] = value
                continue
            self._workers.pop(int(pid), None)
            if int(value):
                deaths.append(WorkerDeath(int(pid), int(value)))
        return deaths

    def _server_status(self) -> int:
        deadline = time.monotonic() + 1.0
        while self._pid:
            try:
                pid, status = os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self._pid = 0
                return status
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return 0

    def abort(self) -> None:
        """Kill the workers and stop the server (a run that cannot finish)."""
        if self._pid:
            try:
                os.kill(self._pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        # Also from here: a server that was killed has left its workers running, with no one to stop them.
        for pid, start_time in self._workers.items():
            if process_start_time(pid) == start_time:  # the worker, not a later process with its id
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def close(self) -> None:
        """Stop the server (the workers it forked stop when the runner closes their control channel)."""
        if self._pid:
            try:
                os.kill(self._pid, _STOP_SIGNAL)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._pid = 0
        if self._deaths >= 0:
            os.close(self._deaths)
            self._deaths = -1
        if self._own_folder is not None:
            self._own_folder.close()
        else:
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass

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


def start_fork_server(directory: str | None = None) -> WorkerForkServer | None:
    """A fork server for a run's workers, its socket in ``directory`` (a folder of its own when None), or
    None where there is none to be had (not Linux, or no Unix socket in the temporary folder): the runner
    then starts its workers as Beam does."""
    if not sys.platform.startswith("linux"):
        return None
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").addFilter(_IN_MEMORY_MODE_NOTICE)
    try:
        return WorkerForkServer(directory)
    except OSError:
        return None


_STOP_SIGNAL = signal.SIGUSR2
"""How the driver stops the server. Not SIGTERM: ``timeout``, systemd and Airflow send SIGTERM to the whole
process group (or cgroup), and the server and its workers then keep going until the driver, unwinding from
its own SIGTERM, stops them, instead of ending under the run and making it look like a crash."""


class _Stop(Exception):
    """The driver asked the server to stop."""


class _Abort(Exception):
    """The driver asked the server to kill its workers and stop."""


def _stop(signum: int, frame: object) -> None:
    raise _Abort if signum == signal.SIGUSR1 else _Stop


def _serve(server: socket.socket, driver_pid: int, deaths_fd: int, directory: str) -> None:
    # A Ctrl-C or a SIGTERM to the process group reaches the driver, which stops the server; the workers
    # inherit both dispositions.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    driver_signals = {_STOP_SIGNAL, signal.SIGUSR1}  # stop; kill the workers and stop
    for signum in driver_signals:
        signal.signal(signum, _stop)
    workers: set[int] = set()
    try:
        # The harness's own modules; the driver imported Beam and the transforms' DoFns already.
        import apache_beam.runners.worker.sdk_worker_main  # noqa: F401

        server.settimeout(0.2)
        while os.getppid() == driver_pid:  # else the driver is gone
            _reap(workers, deaths_fd)
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            # A stop between the fork and the bookkeeping would miss the new worker.
            signal.pthread_sigmask(signal.SIG_BLOCK, driver_signals)
            server_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                _die_with(server_pid)
                server.close()
                os.close(deaths_fd)
                for signum in driver_signals:
                    signal.signal(signum, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, driver_signals)
                _run_worker(connection)  # never returns
            workers.add(pid)
            _tell(deaths_fd, f"start {pid} {process_start_time(pid)}")
            signal.pthread_sigmask(signal.SIG_UNBLOCK, driver_signals)
            connection.close()
        # The driver is gone, killed before it could close the server: its workers have no runner, and
        # its folder (with whatever else the run kept there) no owner.
        _kill(workers)
        _reap(workers, None, block_seconds=10)
        shutil.rmtree(directory, ignore_errors=True)
        return
    except _Abort:
        _kill(workers)
    except _Stop:
        pass
    # The workers have stopped or are stopping (the runner closed their control channels, or they were
    # killed): reaped here, their CPU time counts as the run's.
    _reap(workers, None, block_seconds=10)


_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> None:
    """Have the kernel kill this worker when its parent, the fork server, ends: a server killed together
    with its driver would otherwise leave the workers running with no one to stop them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent ended before the request took effect
        os._exit(1)


def _tell(driver_fd: int, event: str) -> None:
    try:
        os.write(driver_fd, f"{event}\n".encode())
    except OSError:  # the driver closed its end
        pass


def _kill(workers: set[int]) -> None:
    for pid in workers:  # children not reaped yet: the ids cannot have been reused
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _reap(workers: set[int], deaths_fd: int | None, block_seconds: float = 0) -> None:
    """Reap the workers that ended; with ``deaths_fd``, report them to the driver."""
    deadline = time.monotonic() + block_seconds
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            workers.discard(pid)
            if deaths_fd is not None:
                _tell(deaths_fd, f"end {pid} {status}")
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
