"""How many CPUs this process may use, and how many other work keeps busy: what the engine and the dataset
layer size their threads and workers by. No Beam here."""

from __future__ import annotations

import os
import time

__all__ = ["available_cores", "cores_busy_elsewhere"]

#: Where Linux says how many threads are runnable at this instant (the fourth field: ``runnable/total``).
PROC_LOADAVG = "/proc/loadavg"
#: One folder per thread of this process, each with a ``stat`` file giving the thread's state.
PROC_SELF_TASKS = "/proc/self/task"
#: How many times the runnable count is read, :data:`RUNNABLE_READ_GAP_SECONDS` apart; the fewest seen is
#: the answer. A process that computes is runnable at every read; the kernel's own short work (writing
#: back what a run just wrote, for one) and a thread that wakes for a moment are not, and do not count.
RUNNABLE_READS = 5
RUNNABLE_READ_GAP_SECONDS = 0.002


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cores_busy_elsewhere() -> float:
    """How many cores other processes keep busy now: the threads the kernel counts runnable, less this
    process's own (the fewest of :data:`RUNNABLE_READS` reads over about 10 ms); where the platform does
    not say (no ``/proc``), the 1-minute load average beyond this process's one; 0 where neither can be
    had.

    The count of now comes first: a 1-minute average still counts, for about a minute, the cores of work
    that has just ended (a run started right after another would see them busy)."""
    try:
        runnable = _runnable_threads()
        for _ in range(RUNNABLE_READS - 1):
            time.sleep(RUNNABLE_READ_GAP_SECONDS)
            runnable = min(runnable, _runnable_threads())
        if runnable < 1:  # the thread asking is runnable: a platform that shows none does not count them
            raise ValueError("no runnable thread shown")
        own = _own_runnable_threads()
    except (OSError, ValueError, IndexError):
        try:
            return max(0.0, os.getloadavg()[0] - 1.0)
        except (AttributeError, OSError):
            return 0.0
    return float(max(0, runnable - own))


def _runnable_threads() -> int:
    """Threads runnable (running or waiting for a CPU) on the machine at this instant, this one included."""
    with open(PROC_LOADAVG, encoding="ascii") as loadavg:
        return int(loadavg.read().split()[3].split("/")[0])


def _own_runnable_threads() -> int:
    """This process's threads that are runnable at this instant (at least the one asking)."""
    runnable = 0
    for thread in os.listdir(PROC_SELF_TASKS):
        try:
            with open(f"{PROC_SELF_TASKS}/{thread}/stat", encoding="ascii", errors="replace") as stat:
                # The state follows the command name, which is in parentheses and may hold spaces.
                state = stat.read().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # the thread ended since the listing
            continue
        runnable += state == "R"
    return max(1, runnable)
