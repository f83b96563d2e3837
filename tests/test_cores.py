"""How many cores other work keeps busy, which decides whether a run in this process merges its shards
on a second thread: counted from the threads runnable at this instant (Linux's ``/proc/loadavg`` less
this process's own runnable threads), so that a core freed a moment ago counts as free although the
1-minute load average still holds it; the load average where there is no ``/proc``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chunkline import cores

LINUX_PROC = Path(cores.PROC_LOADAVG).exists() and Path(cores.PROC_SELF_TASKS).is_dir()


def fake_proc(tmp_path: Path, runnable: int, thread_states: list[str]) -> tuple[Path, Path]:
    """A ``/proc/loadavg`` counting ``runnable`` threads and a ``/proc/self/task`` with one thread per state;
    the thread names hold spaces and parentheses, as a thread's name may."""
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"1.84 1.92 1.40 {runnable}/412 90211\n", encoding="ascii")
    tasks = tmp_path / "task"
    for number, state in enumerate(thread_states, start=5000):
        (tasks / str(number)).mkdir(parents=True)
        (tasks / str(number) / "stat").write_text(
            f"{number} (py (worker) {number}) {state} 4999 4999 4999 0 -1 4194560 912 0 0 0 11 3 0 0 20 0\n",
            encoding="ascii",
        )
    return loadavg, tasks


@pytest.mark.parametrize(
    ("runnable", "thread_states", "busy"),
    [
        (1, ["R", "S", "S"], 0.0),  # only the thread asking
        (3, ["R", "S", "S"], 2.0),  # two threads of other processes
        (3, ["R", "R", "S"], 1.0),  # one of the runnable threads is this process's own
        (2, ["R", "R", "R"], 0.0),  # the count was read before two of ours woke: never below none
        (4, ["S", "D", "S"], 3.0),  # the asking thread is counted runnable even when its stat lagged
    ],
)
def test_cores_busy_elsewhere_are_the_runnable_threads_of_other_processes(
    tmp_path, monkeypatch, runnable, thread_states, busy
):
    loadavg, tasks = fake_proc(tmp_path, runnable, thread_states)
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(loadavg))
    monkeypatch.setattr(cores, "PROC_SELF_TASKS", str(tasks))
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (9.0, 9.0, 9.0))  # a minute of past work: not read
    assert cores.cores_busy_elsewhere() == busy


def test_a_thread_runnable_at_only_some_reads_does_not_count(tmp_path, monkeypatch):
    """The kernel writing back a run's files, or a thread woken for a moment, is runnable at one read and
    not the next; a process that computes is runnable at every read."""
    loadavg, tasks = fake_proc(tmp_path, 3, ["R", "S"])
    counts = iter([5, 3, 4, 3, 5])  # one other process at every read, up to two more now and then

    def read_runnable():
        loadavg.write_text(f"1.84 1.92 1.40 {next(counts)}/412 90211\n", encoding="ascii")
        return runnable_threads()

    runnable_threads = cores._runnable_threads
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(loadavg))
    monkeypatch.setattr(cores, "PROC_SELF_TASKS", str(tasks))
    monkeypatch.setattr(cores, "_runnable_threads", read_runnable)
    assert cores.cores_busy_elsewhere() == 2.0  # the fewest runnable (3) less the thread asking


def test_without_proc_the_load_average_beyond_this_process_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(tmp_path / "absent" / "loadavg"))
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (2.5, 2.0, 1.0))
    assert cores.cores_busy_elsewhere() == 1.5


def test_a_proc_that_shows_no_runnable_thread_is_not_believed(tmp_path, monkeypatch):
    """Some kernels' emulations (gVisor, WSL 1) show 0 runnable threads: the thread asking is one."""
    loadavg, tasks = fake_proc(tmp_path, 0, ["R"])
    monkeypatch.setattr(cores, "PROC_LOADAVG", str(loadavg))
    monkeypatch.setattr(cores, "PROC_SELF_TASKS", str(tasks))
    monkeypatch.setattr(cores.os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    assert cores.cores_busy_elsewhere() == 1.0


def test_without_proc_or_a_load_average_no_core_counts_as_busy(tmp_path, monkeypatch):
    def no_load_average():
        raise OSError("load average unobtainable")

    monkeypatch.setattr(cores, "PROC_LOADAVG", str(tmp_path / "absent" / "loadavg"))
    monkeypatch.setattr(cores.os, "getloadavg", no_load_average)
    assert cores.cores_busy_elsewhere() == 0.0


@pytest.mark.skipif(not LINUX_PROC, reason="counts the runnable threads Linux's /proc shows")
def test_a_process_spinning_on_a_core_counts_as_busy_at_once():
    """A process that started a moment ago counts at once: the 1-minute load average would take most of a
    minute to show it."""
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import sys\nprint(flush=True)\nwhile True: pass"], stdout=subprocess.PIPE
    )
    try:
        spinner.stdout.readline()  # it is past start-up and spinning
        assert cores.cores_busy_elsewhere() >= 1.0
    finally:
        spinner.kill()
        spinner.wait()
