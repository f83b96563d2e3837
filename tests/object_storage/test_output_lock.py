"""The output lock on real object stores: taken with a conditional write (``If-None-Match: *``) and a stale
holder replaced through an exclusive takeover claim, so of several runs that take it at the same moment —
on a new output, or on one a dead or expired run left locked — exactly one gets it, every time, and the
others are refused by name.

Each race starts its runs (threads, each with its own filesystem instance, as fsspec hands out one per
thread) together on a barrier.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from chunkline.dataset.lock import (
    LOCK_NAME,
    ConcurrentRunError,
    _create_exclusively,
    acquire_output_lock,
)

pytestmark = pytest.mark.timeout(180)

#: Racing runs per attempt, and attempts per kind of race and store.
RACERS = 3
ATTEMPTS = 200

STORES = ["s3_bucket", "azure_container"]


def _race(store, prefixes: list[str]) -> dict[int, dict[str, str]]:
    """attempt -> run id -> "holds" or the refusal, for ``RACERS`` threads racing on each prefix."""
    start = threading.Barrier(RACERS)
    outcomes: dict[int, dict[str, str]] = {attempt: {} for attempt in range(len(prefixes))}

    def take(racer: int) -> None:
        for attempt, prefix in enumerate(prefixes):
            start.wait(timeout=60)
            run_id = f"20261201T000000Z-racer{racer}-attempt{attempt}"
            try:
                acquire_output_lock(store.url(prefix), run_id, store.storage_options)
                outcomes[attempt][run_id] = "holds"
            except ConcurrentRunError as error:
                outcomes[attempt][run_id] = str(error)
            except Exception as error:  # reported, so that the test names it
                outcomes[attempt][run_id] = f"crashed: {type(error).__name__}: {error}"

    threads = [threading.Thread(target=take, args=(racer,)) for racer in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
    return outcomes


def _assert_one_holder_each_time(store, prefixes: list[str], outcomes: dict[int, dict[str, str]]) -> None:
    objects = store.objects()
    doubles = {}
    for attempt, prefix in enumerate(prefixes):
        by_run = outcomes[attempt]
        assert len(by_run) == RACERS, (attempt, by_run)
        winners = [run_id for run_id, outcome in by_run.items() if outcome == "holds"]
        if len(winners) != 1:
            doubles[attempt] = by_run
            continue
        (winner,) = winners
        assert json.loads(objects[f"{prefix}{LOCK_NAME}"])["run_id"] == winner, (attempt, by_run)
        for run_id, outcome in by_run.items():
            if run_id != winner:
                assert f"another chunkline run ({winner}, pid " in outcome, (attempt, by_run)
        # Nothing of the race is left beside the lock: no takeover claim.
        left = [name for name in objects if name.startswith(prefix)]
        assert left == [f"{prefix}{LOCK_NAME}"], (attempt, by_run)
    example = next(iter(doubles.values()), None)
    assert not doubles, f"{len(doubles)} of {len(prefixes)} races had no single holder, e.g. {example}"


def _dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    command = [sys.executable, "-c", "import os; print(os.getpid())"]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("store_fixture", STORES)
@pytest.mark.slow
def test_runs_that_take_a_new_outputs_lock_at_the_same_moment_get_it_exactly_once(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    prefixes = [f"fresh-{attempt}/" for attempt in range(ATTEMPTS)]
    _assert_one_holder_each_time(store, prefixes, _race(store, prefixes))


@pytest.mark.parametrize("store_fixture", STORES)
@pytest.mark.slow
def test_runs_that_take_over_a_stale_lock_at_the_same_moment_get_it_exactly_once(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    dead_pid = _dead_pid()
    prefixes = [f"stale-{attempt}/" for attempt in range(ATTEMPTS)]
    stale_locks = {}
    for attempt, prefix in enumerate(prefixes):
        stale = {"run_id": f"20261130T000000Z-stale{attempt}", "pid": dead_pid, "started_at": "2026-11-30"}
        if attempt % 2 == 0:  # a run killed on this host
            stale |= {"host": socket.gethostname(), "started_at_epoch": time.time()}
        else:  # a run of another host, past output.lock_expiry_seconds
            stale |= {"host": "etl-7.example.internal", "started_at_epoch": time.time() - 2 * 86_400}
        stale_locks[f"{prefix}{LOCK_NAME}"] = json.dumps(stale).encode()
    store.put(stale_locks, "races")
    prefixes = [f"races/{prefix}" for prefix in prefixes]
    _assert_one_holder_each_time(store, prefixes, _race(store, prefixes))


@pytest.mark.parametrize("store_fixture", STORES)
def test_the_lock_is_created_with_a_conditional_write(store_fixture, request):
    from fsspec.core import url_to_fs

    store = request.getfixturevalue(store_fixture)
    fs, path = url_to_fs(store.url("conditional/_lock.json"), **store.storage_options)
    assert _create_exclusively(fs, path, b'{"run_id": "first"}', ()) is True
    assert _create_exclusively(fs, path, b'{"run_id": "second"}', ()) is False
    assert json.loads(store.objects("conditional/")["conditional/_lock.json"]) == {"run_id": "first"}


@pytest.mark.parametrize("store_fixture", STORES)
@pytest.mark.slow
def test_a_run_killed_while_taking_over_a_stale_lock_does_not_wedge_the_output(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "started_at_epoch": time.time()}
    stale = "20261130T000000Z-killed"
    store.put(
        {
            LOCK_NAME: json.dumps(dead | {"run_id": stale}).encode(),
            # The run that claimed the takeover was killed before it replaced the lock.
            f"{LOCK_NAME}.takeover-{stale}.0": json.dumps(dead | {"run_id": "claimant"}).encode(),
        },
        "wedged",
    )
    lock = acquire_output_lock(store.url("wedged/"), "20261201T000000Z-next", store.storage_options)
    assert json.loads(store.objects("wedged/")[f"wedged/{LOCK_NAME}"])["run_id"] == "20261201T000000Z-next"
    lock.release()
    assert store.objects("wedged/") == {}
