"""The output lock on a local disk: of several runs that take it at once — on a new output, or on one whose
lock a dead or expired run left — exactly one holds it, every time, and the others are refused by name.

The races run in separate processes (each run's pid is its own, as in production) that start every
attempt together on a barrier.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset.publish import LOCK_NAME, ConcurrentRunError, acquire_output_lock

pytestmark = pytest.mark.timeout(120)

#: Racing processes per attempt, and attempts per kind of race.
RACERS = 4
ATTEMPTS = 1000


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
    example = next(iter(doubles.values()), None)
    assert not doubles, f"{len(doubles)} of {len(outputs)} races had no single holder, e.g. {example}"


def _dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    command = [sys.executable, "-c", "import os; print(os.getpid())"]
    finished = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(finished.stdout)


@pytest.mark.slow
def test_runs_that_take_a_new_outputs_lock_at_the_same_moment_get_it_exactly_once(tmp_path):
    outputs = [tmp_path / f"output-{attempt}" for attempt in range(ATTEMPTS)]
    _assert_one_holder_each_time(outputs, _race_everywhere(outputs))


@pytest.mark.slow
def test_runs_that_take_over_a_stale_lock_at_the_same_moment_get_it_exactly_once(tmp_path):
    dead_pid = _dead_pid()
    outputs = []
    for attempt in range(ATTEMPTS):
        output = tmp_path / f"output-{attempt}"
        output.mkdir()
        stale = {"run_id": f"20261130T000000Z-stale{attempt}", "pid": dead_pid, "started_at": "2026-11-30"}
        if attempt % 3 == 0:  # a run killed on this host
            killed = stale | {"host": socket.gethostname(), "started_at_epoch": time.time()}
            (output / LOCK_NAME).write_text(json.dumps(killed))
        elif attempt % 3 == 1:  # a run of another host, past output.lock_expiry_seconds
            expired = stale | {"host": "etl-7.example.internal", "started_at_epoch": time.time() - 2 * 86_400}
            (output / LOCK_NAME).write_text(json.dumps(expired))
        else:  # a lock a run killed long ago left empty
            (output / LOCK_NAME).write_bytes(b"")
            os.utime(output / LOCK_NAME, (time.time() - 3600, time.time() - 3600))
        outputs.append(output)
    _assert_one_holder_each_time(outputs, _race_everywhere(outputs))


# --------------------------------------------------------------------------------------------------
# Takeovers that a run left half done
# --------------------------------------------------------------------------------------------------

STALE_RUN = "20261130T000000Z-killed"
OTHER_HOST = "etl-7.example.internal"


def _holder(run_id: str, *, pid: int, host: str | None = None, started_at_epoch: float | None = None) -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "host": host or socket.gethostname(),
            "pid": pid,
            "started_at": "2026-11-30T00:00:00+00:00",
            "started_at_epoch": time.time() if started_at_epoch is None else started_at_epoch,
        }
    )


def test_a_run_killed_while_taking_over_a_stale_lock_does_not_wedge_the_output(tmp_path):
    dead_pid = _dead_pid()
    (tmp_path / LOCK_NAME).write_text(_holder(STALE_RUN, pid=dead_pid))
    # A run on this host claimed the takeover, then was killed before it replaced the lock.
    claim = tmp_path / f"{LOCK_NAME}.takeover-{STALE_RUN}.0"
    claim.write_text(_holder("20261130T000100Z-claimant", pid=dead_pid))
    lock = acquire_output_lock(str(tmp_path), "20261201T000000Z-next")
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == "20261201T000000Z-next"
    # The killed claim stays until the run that holds the lock releases it.
    assert claim.exists()
    lock.release()
    assert list(tmp_path.iterdir()) == []


def test_a_takeover_claimed_by_another_host_is_waited_for_then_broken_past_its_bound(tmp_path, short_waits):
    dead_pid = _dead_pid()
    (tmp_path / LOCK_NAME).write_text(_holder(STALE_RUN, pid=dead_pid))
    claim = tmp_path / f"{LOCK_NAME}.takeover-{STALE_RUN}.0"
    claim.write_text(_holder("20261130T000100Z-claimant", pid=4242, host=OTHER_HOST))
    # Its pid cannot be checked from here: a recent claim is a takeover in progress.
    with pytest.raises(ConcurrentRunError) as refused:
        acquire_output_lock(str(tmp_path), "20261201T000000Z-next")
    lock_url = f"file://{tmp_path}/{LOCK_NAME}"
    assert str(refused.value) == (
        f"another chunkline run (20261130T000100Z-claimant, pid 4242 on etl-7.example.internal) is taking "
        f"over the stale lock {lock_url}; try again, or remove {lock_url}.takeover-* if no chunkline run is "
        f"writing {tmp_path}"
    )
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == STALE_RUN
    # Once the claim is older than its bound, the next generation is claimed and the lock taken over.
    an_hour_ago = time.time() - 3600
    claim.write_text(_holder("20261130T000100Z-claimant", pid=4242, host=OTHER_HOST, started_at_epoch=an_hour_ago))
    lock = acquire_output_lock(str(tmp_path), "20261201T000000Z-next")
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == "20261201T000000Z-next"
    lock.release()
    assert list(tmp_path.iterdir()) == []


def test_releasing_the_lock_keeps_the_claim_of_a_run_taking_this_one_over(tmp_path):
    lock = acquire_output_lock(str(tmp_path), "20261201T000000Z-long")
    leftovers = {
        f"{LOCK_NAME}.takeover-20261130T000000Z-earlier.0": _holder("20261130T000100Z-a", pid=_dead_pid()),
        f"{LOCK_NAME}.takeover-sha256-0123456789abcdef.3": _holder("20261130T000100Z-b", pid=_dead_pid()),
        # Another run decided this one is stale (past output.lock_expiry_seconds) and is replacing it.
        f"{LOCK_NAME}.takeover-20261201T000000Z-long.0": _holder("20261202T000000Z-c", pid=os.getpid()),
    }
    for name, content in leftovers.items():
        (tmp_path / name).write_text(content)
    lock.release()
    kept = [f"{LOCK_NAME}.takeover-20261201T000000Z-long.0"]
    assert sorted(path.name for path in tmp_path.iterdir()) == kept


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
@pytest.mark.slow
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


lock_contents = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=80).map(lambda run_id: json.dumps({"run_id": run_id, "pid": 1}).encode()),
    st.from_regex(r"[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9a-f]{6}", fullmatch=True).map(
        lambda run_id: json.dumps({"run_id": run_id}).encode()
    ),
)


@given(lock_contents)
def test_a_takeover_claim_is_named_by_one_plain_file_name_whatever_the_lock_holds(data):
    from chunkline.dataset.lock import _parse

    seen = _parse(data)
    # A name of one path component on every store: no separator, no "..", nothing a URL would escape.
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", seen.key), seen.key
    run_id = (seen.holder or {}).get("run_id")
    if isinstance(run_id, str) and re.fullmatch(r"[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9a-f]{6}", run_id):
        assert seen.key == run_id  # chunkline's own run ids name their claims as they are


# --------------------------------------------------------------------------------------------------
# A store with no exclusive create
# --------------------------------------------------------------------------------------------------


class _NoExclusiveCreate(MemoryFileSystem):
    """A store that can only overwrite (as some fsspec filesystems can): mode ``xb`` is refused."""

    protocol = "noexclusive"
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.removeprefix(f"{cls.protocol}://"))

    def _open(self, path, mode="rb", **kwargs):
        if "x" in mode:
            raise ValueError(f"mode {mode!r} is not supported")
        return super()._open(path, mode, **kwargs)


@pytest.fixture
def no_exclusive_store():
    fsspec.register_implementation(_NoExclusiveCreate.protocol, _NoExclusiveCreate, clobber=True)
    _NoExclusiveCreate.store.clear()
    yield _NoExclusiveCreate()
    _NoExclusiveCreate.store.clear()


def test_a_store_without_exclusive_create_takes_the_lock_by_writing_and_reading_it_back(no_exclusive_store):
    lock = acquire_output_lock("noexclusive://out", "20261201T000000Z-first")
    assert json.loads(no_exclusive_store.cat_file("/out/_lock.json"))["run_id"] == "20261201T000000Z-first"
    with pytest.raises(ConcurrentRunError, match=r"another chunkline run \(20261201T000000Z-first, pid \d+ on "):
        acquire_output_lock("noexclusive://out", "20261201T000000Z-second")
    lock.release()
    assert not no_exclusive_store.exists("/out/_lock.json")
    # A dead run's lock is replaced there too (with no claim: the store could not make one exclusively).
    no_exclusive_store.pipe_file("/out/_lock.json", _holder(STALE_RUN, pid=_dead_pid()).encode())
    lock = acquire_output_lock("noexclusive://out", "20261201T000000Z-third")
    assert json.loads(no_exclusive_store.cat_file("/out/_lock.json"))["run_id"] == "20261201T000000Z-third"
    assert no_exclusive_store.ls("/out", detail=False) == ["/out/_lock.json"]


@pytest.mark.slow
def test_the_lock_imports_no_beam():
    check = "import sys, chunkline.dataset.lock, chunkline.dataset.publish; print('apache_beam' in sys.modules)"
    finished = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert finished.stdout.strip() == "False"


def test_a_lock_is_released_even_when_its_folder_cannot_be_listed_for_leftover_claims(tmp_path, monkeypatch, caplog):
    from fsspec.implementations.local import LocalFileSystem

    lock = acquire_output_lock(str(tmp_path), "20261201T000000Z-first")

    def refuse(self, path, *args, **kwargs):
        raise PermissionError(f"listing {path} is not allowed")

    monkeypatch.setattr(LocalFileSystem, "ls", refuse)
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    assert f"could not remove leftover takeover claims beside file://{tmp_path}/{LOCK_NAME}" in caplog.text
