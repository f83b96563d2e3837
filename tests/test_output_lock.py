"""The output lock on a local disk: of several runs that take a new output's lock at once, exactly one holds
it, every time, and the others are refused by name; a lock that cannot be parsed is held, not taken over.

The races run in separate processes (each run's pid is its own, as in production) that start every
attempt together on a barrier.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.pipelines.publish import LOCK_NAME, ConcurrentRunError, acquire_output_lock

pytestmark = pytest.mark.timeout(120)

#: Racing processes per attempt, and attempts per kind of race.
RACERS = 4
ATTEMPTS = 200


def _race(racer: int, outputs: list[str], start, results) -> None:
    """One racing process: at each attempt, wait for the others, then try to take the lock."""
    for attempt, output in enumerate(outputs):
        start.wait(timeout=60)
        run_id = f"20261201T000000Z-racer{racer}-attempt{attempt}"
        try:
            acquire_output_lock(output, run_id)
            results.put((attempt, run_id, "holds"))
        except ConcurrentRunError as error:
            results.put((attempt, run_id, str(error)))
        except Exception as error:  # reported, so that the test names it rather than hanging
            results.put((attempt, run_id, f"crashed: {type(error).__name__}: {error}"))


def _race_everywhere(outputs: list[Path]) -> dict[int, dict[str, str]]:
    """attempt -> run id -> "holds" or the refusal, for ``RACERS`` processes racing on each output."""
    context = multiprocessing.get_context("fork")
    start = context.Barrier(RACERS)
    results = context.Queue()
    urls = [str(output) for output in outputs]
    racers = [context.Process(target=_race, args=(racer, urls, start, results)) for racer in range(RACERS)]
    for process in racers:
        process.start()
    outcomes: dict[int, dict[str, str]] = {}
    try:
        for _ in range(RACERS * len(outputs)):
            attempt, run_id, outcome = results.get(timeout=60)
            outcomes.setdefault(attempt, {})[run_id] = outcome
    finally:
        for process in racers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return outcomes


def _assert_one_holder_each_time(outputs: list[Path], outcomes: dict[int, dict[str, str]]) -> None:
    doubles = {}
    for attempt, output in enumerate(outputs):
        by_run = outcomes[attempt]
        winners = [run_id for run_id, outcome in by_run.items() if outcome == "holds"]
        if len(winners) != 1:
            doubles[attempt] = by_run
            continue
        (winner,) = winners
        assert json.loads((output / LOCK_NAME).read_text())["run_id"] == winner, (attempt, by_run)
        for run_id, outcome in by_run.items():
            if run_id != winner:
                assert f"another chunkline run ({winner}, pid " in outcome, (attempt, by_run)
        # Nothing of the race is left beside the lock: no takeover claim, no temporary file.
        assert sorted(path.name for path in output.iterdir()) == [LOCK_NAME], (attempt, by_run)
    assert not doubles, f"{len(doubles)} of {len(outputs)} races had no single holder, e.g. {next(iter(doubles.values()))}"


def test_runs_that_take_a_new_outputs_lock_at_the_same_moment_get_it_exactly_once(tmp_path):
    outputs = [tmp_path / f"output-{attempt}" for attempt in range(ATTEMPTS)]
    _assert_one_holder_each_time(outputs, _race_everywhere(outputs))


# --------------------------------------------------------------------------------------------------
# A lock that cannot be parsed
# --------------------------------------------------------------------------------------------------

LIVE_HOLDER = json.dumps(
    {
        "host": "etl-1.example.internal",
        "pid": 48113,
        "run_id": "20261130T021500.123456Z-3f9a1c",
        "started_at": "2026-11-30T02:15:00+00:00",
        "started_at_epoch": 1796004900.0,
    },
    sort_keys=True,
).encode()


def _is_a_holder(data: bytes) -> bool:
    try:
        return bool(json.loads(data)) and isinstance(json.loads(data), dict)
    except ValueError:
        return False


@pytest.fixture(scope="module")
def short_waits():
    """A run gives up waiting for an unreadable lock to become whole after a twentieth of a second."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.modules[acquire_output_lock.__module__], "_BUSY_WAIT_SECONDS", 0.05, raising=False)
        yield


unparseable_locks = st.one_of(
    # What a reader can see of a lock another store is still writing: a prefix of it, empty included.
    st.integers(min_value=0, max_value=len(LIVE_HOLDER) - 1).map(lambda size: LIVE_HOLDER[:size]),
    st.binary(max_size=64),
).filter(lambda data: not _is_a_holder(data))


@settings(max_examples=40)
@given(unparseable_locks)
def test_a_lock_that_cannot_be_parsed_yet_is_held_not_taken_over(short_waits, data):
    with tempfile.TemporaryDirectory() as folder:
        lock_path = Path(folder) / LOCK_NAME
        lock_path.write_bytes(data)
        with pytest.raises(ConcurrentRunError) as refused:
            acquire_output_lock(folder, "20261201T000000Z-second")
        assert lock_path.read_bytes() == data
    message = str(refused.value)
    assert f"the lock file://{lock_path} cannot be read" in message and "remove it" in message
    assert "\n" not in message


def test_a_lock_that_cannot_be_parsed_is_taken_over_once_older_than_the_grace_period(tmp_path):
    lock_path = tmp_path / LOCK_NAME
    lock_path.write_bytes(b"")  # what a run killed between creating and writing its lock leaves
    modified = time.time() - 3600  # far past the grace period
    os.utime(lock_path, (modified, modified))
    lock = acquire_output_lock(str(tmp_path), "20261201T000000Z-next")
    assert json.loads(lock_path.read_text())["run_id"] == "20261201T000000Z-next"
    lock.release()
    assert list(tmp_path.iterdir()) == []
