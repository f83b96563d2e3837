"""``run.workers: auto`` decides from the driver's listing: a small corpus stays in-process, one whose bytes
to chunk pay for worker processes gets one per core (one per ``AUTO_BYTES_PER_WORKER``), a number the user
gave wins, and a ``memory://`` output stays in-process.

The listings are real ones (:func:`list_inputs` and :func:`plan_rebuild` over folders on disk): the
repository's sample corpus for a small run, and for a large one the sample corpus beside big files made
sparse, so the listing reports their sizes without the test writing them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from chunkline.cores import available_cores
from chunkline.dataset.listed_files import ListedDocuments
from chunkline.dataset.parallelism import AUTO_BYTES_PER_WORKER, bytes_to_chunk, choose_workers
from chunkline.dataset.rebuild import list_inputs, plan_rebuild
from chunkline.dataset.settings import ConfigError, RunConfig, load_run_config

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"


def listed_documents(*folders: Path, workers: str = "auto", output: str = "out/"):
    """The documents a full run of ``folders`` reads, as the driver lists and plans them."""
    config = load_run_config(
        None, [f"run.workers={workers}"], environ={}, inputs=[str(folder) for folder in folders], output=output
    )
    plan = plan_rebuild(config, None, None, list_inputs(config))
    return config, plan.to_chunk


@pytest.fixture
def large_corpus(tmp_path: Path) -> Path:
    """The sample corpus plus five sparse 20 MB markdown files: 100 MB to chunk as the listing sees it."""
    root = tmp_path / "large"
    shutil.copytree(SAMPLE_CORPUS, root / "sample")
    (root / "exports").mkdir()
    for number in range(5):
        with open(root / "exports" / f"export-{number}.md", "wb") as file:
            file.truncate(20_000_000)
    return root


def test_the_sample_corpus_stays_in_process_on_any_number_of_cores():
    config, to_chunk = listed_documents(SAMPLE_CORPUS)
    assert config.run.workers == "auto"
    assert len(to_chunk) == 12 and 0 < bytes_to_chunk(to_chunk) < 2 * AUTO_BYTES_PER_WORKER
    for cores in (1, 2, 8, 64):
        choice = choose_workers(config.run.workers, to_chunk, output_url="out/", cores=cores)
        assert choice.workers == 0
        assert choice.describe().startswith("in-process (auto: 0.2 MB to chunk")


def test_a_large_corpus_gets_one_worker_per_core_up_to_its_bytes(large_corpus):
    config, to_chunk = listed_documents(large_corpus)
    total = bytes_to_chunk(to_chunk)
    assert len(to_chunk) == 17 and 100_000_000 < total < 100_400_000
    assert choose_workers("auto", to_chunk, output_url="out/", cores=2).workers == 2
    assert choose_workers("auto", to_chunk, output_url="out/", cores=4).workers == 4
    # 100 MB pays for 25 workers at most, however many cores there are.
    assert choose_workers("auto", to_chunk, output_url="out/", cores=64).workers == total // AUTO_BYTES_PER_WORKER == 25
    choice = choose_workers("auto", to_chunk, output_url="out/", cores=2)
    assert choice.describe() == (
        "on 2 worker processes (auto: 100.2 MB to chunk, 2 cores: one worker per 4 MB, up to one per core)"
    )
    one_core = choose_workers("auto", to_chunk, output_url="out/", cores=1)
    assert one_core.workers == 0 and "one core" in one_core.reason


def test_files_over_the_size_limit_count_for_nothing(large_corpus):
    """They are error rows, never read: five 20 MB files over a 10 MB input.max_file_bytes buy no worker."""
    config, to_chunk = listed_documents(large_corpus)
    assert bytes_to_chunk(to_chunk, max_file_bytes=10_000_000) == bytes_to_chunk(
        [(doc_id, files) for doc_id, files in to_chunk if not doc_id.startswith("exports/")]
    )
    choice = choose_workers("auto", to_chunk, output_url="out/", max_file_bytes=10_000_000, cores=8)
    assert choice.workers == 0
    # The default limit (50 MB) lets them count.
    assert choose_workers("auto", to_chunk, max_file_bytes=config.input.max_file_bytes, cores=8).workers == 8


def test_auto_counts_only_what_an_incremental_run_chunks(large_corpus):
    """The decision reads the plan's documents to chunk: the big files, carried over, cost nothing."""
    _, to_chunk = listed_documents(large_corpus)
    small_share = [(doc_id, files) for doc_id, files in to_chunk if not doc_id.startswith("exports/")]
    assert len(small_share) == 12
    assert choose_workers("auto", small_share, output_url="out/", cores=8).workers == 0


def test_a_number_the_user_gave_wins(large_corpus):
    _, large = listed_documents(large_corpus)
    _, small = listed_documents(SAMPLE_CORPUS)
    assert choose_workers(0, large, output_url="out/", cores=8).workers == 0
    assert choose_workers(3, small, output_url="out/", cores=1).workers == 3
    assert choose_workers(3, small, output_url="out/", cores=1).reason == "run.workers is 3"
    config, _ = listed_documents(SAMPLE_CORPUS, workers="2")
    assert config.run.workers == 2


def test_a_memory_output_stays_in_process_however_large_the_corpus(large_corpus):
    config, to_chunk = listed_documents(large_corpus, output="memory://dataset")
    choice = choose_workers(config.run.workers, to_chunk, output_url=config.output.url, cores=8)
    assert choice.workers == 0 and "memory://" in choice.reason


def test_unknown_sizes_count_as_the_mean_of_the_known_ones(large_corpus):
    _, listed = listed_documents(large_corpus)
    known = bytes_to_chunk(listed)
    to_chunk = list(listed)  # the same pairs as Python values count the same bytes
    assert bytes_to_chunk(to_chunk) == known
    first_doc, first_files = to_chunk[0]
    unknown_first = [(first_doc, [_without_size(first_files[0])]), *to_chunk[1:]]
    mean_of_others = (known - (first_files[0].size_bytes or 0)) / (len(to_chunk) - 1)
    assert bytes_to_chunk(unknown_first) == int(known - (first_files[0].size_bytes or 0) + mean_of_others)
    assert bytes_to_chunk(ListedDocuments.of_pairs(unknown_first)) == bytes_to_chunk(unknown_first)
    assert bytes_to_chunk([(doc_id, [_without_size(files[0])]) for doc_id, files in to_chunk]) == 0


def _without_size(source):
    return replace(source, size_bytes=None)


def test_available_cores_is_what_this_process_may_run_on():
    assert 1 <= available_cores() <= (os.cpu_count() or 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("many", "workers must be auto or a whole number from 0 to 256, got 'many'"),
        ("Auto", "got 'Auto'"),
        ("-1", "workers must be a whole number from 0 to 256, got -1"),
        ("257", "got 257"),
    ],
)
def test_bad_workers_settings_name_what_is_allowed(value, message):
    with pytest.raises(ConfigError, match=message):
        load_run_config(None, [f"run.workers={value}"], environ={}, inputs=["docs"], output="out")


def test_the_default_is_auto_and_yaml_takes_auto_or_a_number():
    assert RunConfig().run.workers == "auto"
    assert RunConfig.from_dict({"run": {"workers": "auto"}}).run.workers == "auto"
    assert RunConfig.from_dict({"run": {"workers": 4}}).run.workers == 4
    with pytest.raises(ConfigError, match="got '2.5'"):
        RunConfig.from_dict({"run": {"workers": 2.5}})
