"""``chunkline run`` tunes the process it owns, from one module (:mod:`chunkline.pipelines.process_tuning`):
the collector pauses for the parse of a large document and comes back as it was (after an exception, with
the program's collector off, with parses overlapping on threads); the ``chunkline`` program hands that tuning
to its run's steps and sets the allocator before any worker is forked, while a program that calls
:func:`~chunkline.pipelines.cli.main` gets its run without any of it.
"""

from __future__ import annotations

import gc
import threading

import pytest

from chunkline.dataset.listed_files import ListedDocuments
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines import cli
from chunkline.pipelines import process_tuning as tuning
from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING, collector_paused
from chunkline.pipelines.run import run_pipeline

from .conftest import write_corpus

pytestmark = pytest.mark.timeout(300)


def test_the_collector_is_paused_for_a_large_parse_only_and_restored():
    seen = []
    for chars in (tuning.COLLECTOR_PAUSE_MIN_CHARS, tuning.COLLECTOR_PAUSE_MIN_CHARS - 1):
        with RUN_PROCESS_TUNING.parsing(chars):
            seen.append(gc.isenabled())
    assert seen == [False, True]
    assert gc.isenabled()


def test_the_collector_is_restored_after_an_exception():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("parse failed")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_when_the_last_of_overlapping_parses_ends():
    first_inside, second_inside, first_done = threading.Event(), threading.Event(), threading.Event()
    states: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_inside.set()
            second_inside.wait(5)
        first_done.set()

    def second() -> None:
        first_inside.wait(5)
        with collector_paused():
            second_inside.set()
            first_done.wait(5)
            states["after the first ended"] = gc.isenabled()
        states["after both ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert states == {"after the first ended": False, "after both ended": True}


@pytest.fixture
def recorded_runs(monkeypatch):
    """The process hooks each run is given, and whether the allocator was set before it started."""
    runs: list[tuple[object, bool]] = []
    allocator_set: list[bool] = []
    monkeypatch.setattr(tuning, "map_large_allocations", lambda: allocator_set.append(True) or True)

    def run_pipeline(config, beam_args=None, *, fork_workers=False, process_hooks=NO_PROCESS_HOOKS):
        runs.append((process_hooks, bool(allocator_set)))
        raise SystemExit(0)

    import chunkline.pipelines.run as run_module

    monkeypatch.setattr(run_module, "run_pipeline", run_pipeline)
    return runs


def test_the_chunkline_program_tunes_its_run_and_a_calling_program_gets_none(tmp_path, monkeypatch, recorded_runs):
    corpus = write_corpus(tmp_path / "corpus")
    arguments = ["run", str(corpus), "--output", str(tmp_path / "dataset")]
    with pytest.raises(SystemExit):
        cli.main(arguments)
    monkeypatch.setattr(cli, "_fork_workers", True)  # what console_main sets: the chunkline program
    with pytest.raises(SystemExit):
        cli.main(arguments)
    assert recorded_runs == [(NO_PROCESS_HOOKS, False), (RUN_PROCESS_TUNING, True)]


def test_the_chunkline_programs_run_lists_its_inputs_with_the_collector_paused_and_a_calling_programs_does_not(
    tmp_path, monkeypatch
):
    import chunkline.pipelines.run as run_module

    corpus = write_corpus(tmp_path / "corpus")
    listing = run_module.list_inputs
    seen: list[bool] = []

    def list_inputs(config):
        seen.append(gc.isenabled())
        return listing(config)

    monkeypatch.setattr(run_module, "list_inputs", list_inputs)
    config = load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(tmp_path / "out"))
    for hooks in (NO_PROCESS_HOOKS, RUN_PROCESS_TUNING):
        summary = run_module.run_pipeline(config, process_hooks=hooks)
        assert summary.documents_ok and gc.isenabled()
    assert seen == [True, False]


class ListingReleasedHooks(ProcessHooks):
    """Hooks that record, when the driver says its listing is released, how many listings are still alive."""

    def __init__(self):
        self.alive_at_release: list[int] = []

    def listing_released(self) -> None:
        gc.collect()
        self.alive_at_release.append(sum(isinstance(held, ListedDocuments) for held in gc.get_objects()))


def test_a_run_on_beam_tells_its_hooks_when_the_listing_is_released_and_none_of_its_rows_is_left(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    config = load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(tmp_path / "out"))
    hooks = ListingReleasedHooks()
    summary = run_pipeline(config, ["--direct_num_workers=1"], process_hooks=hooks)  # Beam, in this process
    assert summary.documents_ok
    assert hooks.alive_at_release == [0]
