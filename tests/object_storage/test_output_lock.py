"""The output lock on real object stores: created with a conditional write (``If-None-Match: *``), so of
several runs that take it at the same moment exactly one gets it, and the others are refused by name."""

from __future__ import annotations

import json
import threading

import pytest

from chunkline.pipelines.publish import ConcurrentRunError, _create_exclusively, acquire_output_lock

pytestmark = pytest.mark.timeout(120)

RUNS = 6


@pytest.mark.parametrize("store_fixture", ["s3_bucket", "azure_container"])
def test_runs_that_take_the_lock_at_the_same_moment_get_it_exactly_once(store_fixture, request):
    store = request.getfixturevalue(store_fixture)
    url = store.url("locked/")
    start = threading.Barrier(RUNS)
    outcomes: dict[str, str] = {}

    def take(run_id: str) -> None:
        start.wait()
        try:
            acquire_output_lock(url, run_id, store.storage_options)
            outcomes[run_id] = "holds"
        except ConcurrentRunError as error:
            outcomes[run_id] = str(error)

    threads = [threading.Thread(target=take, args=(f"run-{number}",)) for number in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [run_id for run_id, outcome in outcomes.items() if outcome == "holds"]
    assert len(winners) == 1, outcomes
    (winner,) = winners
    holder = json.loads(store.objects("locked/")["locked/_lock.json"])
    assert holder["run_id"] == winner
    for run_id, outcome in outcomes.items():
        if run_id != winner:
            assert f"another chunkline run ({winner}" in outcome or "took the lock" in outcome, outcome


@pytest.mark.parametrize("store_fixture", ["s3_bucket", "azure_container"])
def test_the_lock_is_created_with_a_conditional_write(store_fixture, request):
    from fsspec.core import url_to_fs

    store = request.getfixturevalue(store_fixture)
    fs, path = url_to_fs(store.url("conditional/_lock.json"), **store.storage_options)
    assert _create_exclusively(fs, path, b'{"run_id": "first"}', ()) is True
    assert _create_exclusively(fs, path, b'{"run_id": "second"}', ()) is False
    assert json.loads(store.objects("conditional/")["conditional/_lock.json"]) == {"run_id": "first"}
