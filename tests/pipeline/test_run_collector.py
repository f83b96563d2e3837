"""``chunkline run`` freezes the garbage collector's view of what was imported before the run, so that its
collections walk only what the run makes, and gives it back when the run ends: a program that calls
:func:`chunkline.pipelines.cli.main` again and again is left with nothing frozen, and one that froze objects
of its own, or turned the collector off, keeps them so."""

from __future__ import annotations

import gc

import pytest

import chunkline.pipelines.run as run_module
from chunkline.dataset.publish import read_manifest
from chunkline.pipelines.cli import main

from .conftest import CORPUS, write_corpus

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def frozen_counts_while_listing(monkeypatch):
    """The collector's frozen-object count at the moment each run lists its inputs."""
    seen: list[int] = []
    list_inputs = run_module.list_inputs

    def recording(config):
        seen.append(gc.get_freeze_count())
        return list_inputs(config)

    monkeypatch.setattr(run_module, "list_inputs", recording)
    return seen


@pytest.fixture
def collector_restored():
    """The collector as the test found it, whatever the test did to it."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


@pytest.mark.slow
def test_each_run_freezes_the_collector_and_unfreezes_it_after(tmp_path, frozen_counts_while_listing, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    assert gc.get_freeze_count() == 0
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    assert gc.get_freeze_count() == 0, "the full run left objects frozen"
    (corpus / "guide" / "installation.md").write_bytes(CORPUS["guide/installation.md"] + b"\n\nOne more line.\n")
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    assert gc.get_freeze_count() == 0, "the incremental run left objects frozen"
    assert read_manifest(str(output))["rebuild"]["mode"] == "incremental"
    assert len(frozen_counts_while_listing) == 2
    assert all(count > 1000 for count in frozen_counts_while_listing), frozen_counts_while_listing


def test_a_run_that_publishes_nothing_unfreezes_the_collector(tmp_path, frozen_counts_while_listing, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", str(empty), "--output", str(tmp_path / "dataset")]) == 1
    assert "matches no file" in capsys.readouterr().err
    assert frozen_counts_while_listing and frozen_counts_while_listing[0] > 0
    assert gc.get_freeze_count() == 0


@pytest.mark.slow
def test_objects_a_program_froze_stay_frozen(tmp_path, frozen_counts_while_listing, collector_restored, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    gc.freeze()
    frozen_by_the_program = gc.get_freeze_count()
    assert main(["run", str(corpus), "--output", str(tmp_path / "dataset")]) == 0
    # Frozen objects that die leave the count; none is unfrozen, and the run freezes nothing more.
    assert 0 < gc.get_freeze_count() <= frozen_by_the_program, "the run unfroze what the program had frozen"
    assert len(frozen_counts_while_listing) == 1
    assert 0 < frozen_counts_while_listing[0] <= frozen_by_the_program


def test_a_collector_turned_off_stays_off_and_nothing_is_frozen(
    tmp_path, frozen_counts_while_listing, collector_restored, capsys
):
    corpus = write_corpus(tmp_path / "corpus")
    gc.disable()
    assert main(["run", str(corpus), "--output", str(tmp_path / "dataset")]) == 0
    assert not gc.isenabled()
    assert frozen_counts_while_listing == [0]
    assert gc.get_freeze_count() == 0
