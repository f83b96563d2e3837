"""Stopping a run whose worker process died.

The FnApiRunner waits for each worker's answers without a deadline: a worker killed at the wrong moment
(while the runner waits on its control channel rather than its data channel) leaves the runner waiting
forever, with the output's lock held. The fork server reports every worker that ends with a signal or a
non-zero status (:meth:`~chunkline.pipelines.forked_workers.WorkerForkServer.worker_deaths`); while the
pipeline runs in the main thread, :class:`WorkerWatchdog` reads those reports on a thread of its own and,
at the first, kills the other workers and interrupts the main thread, which leaves the runner with
:class:`WorkerDiedError`. The caller then discards what the run staged and releases the lock as for any
failed run.

The runner's own threads report a lost worker with tracebacks (``Exception in thread run_worker``, gRPC
errors); while watching, those are held back and dropped when the watchdog names the worker that died,
so that the run ends with one line.
"""

from __future__ import annotations

import signal
import threading
import time
from types import TracebackType

from chunkline.pipelines.forked_workers import WorkerDeath, WorkerForkServer

__all__ = ["WorkerDiedError", "WorkerWatchdog"]

_POLL_SECONDS = 0.2
_VERDICT_SECONDS = 2.0
_RUNNER_WORKER_THREAD = "run_worker"
"""The name Beam's local job service gives the thread that starts and waits for one worker process."""
"""How long a pipeline that failed on its own waits for the fork server's report of a worker's death."""


class WorkerDiedError(RuntimeError):
    """A worker process died while the pipeline ran; nothing of the run was published."""

    def __init__(self, death: WorkerDeath):
        super().__init__(
            f"{death.describe()} while the pipeline ran; the run was stopped and published nothing "
            "(the output is as it was and unlocked): run it again"
        )
        self.death = death


class _Interrupted(BaseException):
    """Raised in the main thread to leave the runner; a BaseException, so that no ``except Exception`` in
    the runner takes it for a failure it can handle."""


class WorkerWatchdog:
    """Watches the workers of ``fork_server`` while the ``with`` block runs in the main thread; the first
    worker that dies stops the block with :class:`WorkerDiedError`. In another thread it watches nothing."""

    def __init__(self, fork_server: WorkerForkServer):
        self._fork_server = fork_server
        self._death: WorkerDeath | None = None
        self._armed = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._held_exceptions: list[threading.ExceptHookArgs] = []
        self._previous_handler = None
        self._previous_excepthook = None

    def __enter__(self) -> WorkerWatchdog:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._main_thread_id = threading.get_ident()
        self._previous_handler = signal.signal(signal.SIGUSR1, self._interrupt)
        self._previous_excepthook = threading.excepthook
        threading.excepthook = self._hold_exception
        self._armed = True
        self._thread = threading.Thread(target=self._watch, name="chunkline-worker-watchdog", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stopped.is_set():
            deaths = self._fork_server.worker_deaths(_POLL_SECONDS)
            if not deaths:
                continue
            with self._lock:
                self._death = deaths[0]
                if not self._armed:
                    return
            self._fork_server.abort()  # the other workers would only wait for a runner that gives up
            signal.pthread_kill(self._main_thread_id, signal.SIGUSR1)
            return

    def _interrupt(self, signum: int, frame: object) -> None:
        with self._lock:
            if not self._armed:
                return
            self._armed = False
        raise _Interrupted

    def _hold_exception(self, arguments: threading.ExceptHookArgs) -> None:
        self._held_exceptions.append(arguments)

    @staticmethod
    def _wait_for_the_runner_s_worker_threads() -> None:
        """After a worker died, the runner's thread of each other worker (stopped with the rest) reports its
        worker's end a moment later: wait for those threads, while their reports are still held, so that
        none reaches the terminal after the run's one line."""
        deadline = time.monotonic() + _VERDICT_SECONDS
        for thread in threading.enumerate():
            if thread.name == _RUNNER_WORKER_THREAD and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._thread is None:
            return
        # Ctrl-C or SIGTERM (a KeyboardInterrupt) stops the run as it is, whatever its workers do meanwhile:
        # no wait for a verdict, and no WorkerDiedError in its place.
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if exc_type is not None and not interrupted and self._death is None:
            # The runner may fail on the lost channel before the server's report arrives.
            self._thread.join(_VERDICT_SECONDS)
        with self._lock:
            self._armed = False
        self._stopped.set()
        self._thread.join()
        if self._death is not None:
            self._wait_for_the_runner_s_worker_threads()
        signal.signal(signal.SIGUSR1, self._previous_handler)
        threading.excepthook = self._previous_excepthook
        held, self._held_exceptions = self._held_exceptions, []
        if self._death is None:
            for arguments in held:
                self._previous_excepthook(arguments)
            return
        if exc_type is not None and not interrupted:
            raise WorkerDiedError(self._death) from None
        # The runner finished every bundle before the death was noticed (a worker that ended at the very
        # end): the run's output is complete, and the run goes on.
