"""A run in this process uses a second core: it writes its spill files on a thread of its own while it
chunks on, and merges its shards on a few threads. The spilled rows and the parts are those written in
line by one thread, and a spill or a shard's merge that fails fails the run, which then publishes nothing.

The corpus is the repository's sample corpus and the tests' markdown fixtures (front matter, CRLF line
endings, an empty file, long sections with code and tables), with a binary file and a file that is not
UTF-8 (error rows), split into six shards so that each thread merges several, in a full run and in an
incremental one (documents edited, added and deleted: some shards merged, others copied).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from chunkline.config import ChunkConfig
from chunkline.dataset import sink
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.document_rows import DocumentChunker
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.layout import STAGING_FOLDER
from chunkline.dataset.publish import read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING
from chunkline.pipelines.run import RunSummary, run_pipeline
from chunkline.schemas import CHANGE_TABLES, ROW_TABLES

from .conftest import all_file_digests, table_digests, write_files, write_realistic_corpus

pytestmark = pytest.mark.timeout(300)

ALL_TABLES = ROW_TABLES + CHANGE_TABLES
SHARDS = 6


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_realistic_corpus(tmp_path / "corpus")


def _run(corpus: Path, output: Path, *overrides: str) -> RunSummary:
    """A run with ``chunkline run``'s process tuning (its merges share one switch of pyarrow's pool)."""
    config = load_run_config(
        None,
        [f"output.shards={SHARDS}", "chunking.max_tokens=128", *overrides],
        environ={},
        inputs=[str(corpus)],
        output=str(output),
    )
    return run_pipeline(config, process_hooks=RUN_PROCESS_TUNING)


def _edit(corpus: Path) -> None:
    guide = corpus / "sample" / "guide" / "configuration.md"
    guide.write_bytes(guide.read_bytes() + b"\n## Reloading\n\nSend SIGHUP to reload the configuration.\n")
    write_files(corpus, {"sample/guide/tides.md": b"# Tides\n\nHigh water twice a day.\n"})
    (corpus / "sample" / "operations" / "windows-install.md").unlink()


@pytest.mark.slow
def test_shards_merged_on_threads_are_the_parts_one_thread_merges(corpus, tmp_path, monkeypatch):
    outputs = {threads: tmp_path / f"dataset-{threads}" for threads in (1, 3)}
    calls = []
    real_merge_shards = sink.merge_shards

    def merge_shards(settings, spills_done, threads):
        calls.append(threads)
        return real_merge_shards(settings, spills_done, threads)

    monkeypatch.setattr(sink, "merge_shards", merge_shards)
    pool_before = pa.default_memory_pool().backend_name
    pools_set = []
    set_memory_pool = pa.set_memory_pool
    monkeypatch.setattr(
        pa, "set_memory_pool", lambda pool: (pools_set.append(pool.backend_name), set_memory_pool(pool))
    )
    for incremental in (False, True):
        if incremental:
            _edit(corpus)
        summaries = {}
        for threads, output in outputs.items():
            monkeypatch.setattr(sink, "merge_threads", lambda shards, largest=0, threads=threads: threads)
            summaries[threads] = _run(corpus, output, "run.workers=0")
            # The full runs' merges switch to the system allocator: whatever order the threads leave in,
            # the pool the run found is back.
            assert pa.default_memory_pool().backend_name == pool_before
        assert {summary.rebuild["mode"] for summary in summaries.values()} == {"incremental" if incremental else "full"}
        assert summaries[1].chunks == summaries[3].chunks > 40
        assert table_digests(outputs[1], ALL_TABLES) == table_digests(outputs[3], ALL_TABLES)
        documents = read_manifest(str(outputs[3]))["tables"]["documents"]["files"]
        assert len(documents) == SHARDS  # every shard has documents: each thread merged some
    assert calls == [1, 3, 1, 3]
    # Only the full runs' merges switch to the system allocator, and each switch is undone.
    assert pools_set and pools_set[0::2] == ["system"] * (len(pools_set) // 2)
    assert pools_set[1::2] == [pool_before] * (len(pools_set) // 2)
    changes = summaries[3].changes
    assert (changes["added"], changes["changed"], changes["deleted"]) == (1, 1, 1)


@pytest.mark.slow
def test_a_failed_shard_merge_fails_the_run_and_publishes_nothing(corpus, tmp_path, monkeypatch):
    output = tmp_path / "dataset"
    _run(corpus, output, "run.workers=0")
    published = all_file_digests(output)
    _edit(corpus)
    (corpus / "sample" / "guide" / "tides.md").write_bytes(b"# Tides\n\nLow water too.\n" * 50)

    monkeypatch.setattr(sink, "merge_threads", lambda shards, largest=0: 2)
    real_merge_table = sink.MergeShard._merge_table
    both_failing = threading.Barrier(2, timeout=60)
    failing = set()

    def merge_table(self, table_name, shard, *arguments):
        if table_name == "errors" and len(failing) < 2:
            # The first two shards merged, one on each thread, fail together.
            failing.add(shard)
            both_failing.wait()
            raise OSError(f"disk full while merging shard {shard}")
        return real_merge_table(self, table_name, shard, *arguments)

    monkeypatch.setattr(sink.MergeShard, "_merge_table", merge_table)
    with pytest.raises(OSError, match="disk full while merging shard") as raised:
        _run(corpus, output, "run.workers=0", "run.reindex=true")
    first = int(str(raised.value).rsplit(" ", 1)[1])
    (other,) = failing - {first}
    assert any(f"the merge of shard {other} failed too: OSError" in note for note in raised.value.__notes__)
    # Nothing of the failed run is published, and its staged files are gone.
    assert all_file_digests(output) == published
    assert not list((output / STAGING_FOLDER).glob("*"))


def _chunked(corpus: Path) -> list:
    """Each markdown file of ``corpus`` as the chunker's rows (two of them error rows)."""
    sources = [
        SourceFile(
            path.relative_to(corpus).as_posix(),
            path.as_uri(),
            0,
            str(path),
            path.stat().st_size,
            None,
            path.read_bytes(),
        )
        for path in sorted(corpus.rglob("*.md"))
    ]
    return list(run_bundle(DocumentChunker(ChunkConfig(max_tokens=128), "strict", ()), sources))


def _settings(tmp_path: Path, name: str) -> sink.WriteSettings:
    return sink.WriteSettings(
        staging_url=str(tmp_path / name),
        snapshot_url=str(tmp_path / f"{name}-snapshot"),
        shards=3,
        row_group_rows=1000,
        spill_bytes=20_000,  # many spills, each written while the next rows are buffered
    )


def _spilled(settings: sink.WriteSettings) -> dict[tuple[str, int], tuple[int, pa.Table]]:
    """(table, shard) -> (its spill files, its spilled rows sorted by the table's key)."""
    spilled = {}
    for table_name in ROW_TABLES:
        schema, key = settings.schemas[table_name]
        for shard in range(settings.shards):
            paths = sorted(Path(settings.staging_url).glob(f"spill/{table_name}/{shard:05d}/*.arrow"))
            read = [ipc.open_file(pa.BufferReader(path.read_bytes())).read_all() for path in paths]
            table = pa.concat_tables([schema.empty_table(), *read])
            spilled[(table_name, shard)] = len(paths), table.sort_by([(name, "ascending") for name in key])
    return spilled


def test_spills_written_in_the_background_hold_the_rows_spilled_in_line(corpus, tmp_path):
    documents = _chunked(corpus)
    in_line, background = _settings(tmp_path, "in-line"), _settings(tmp_path, "background")
    ids_in_line = list(run_bundle(sink.SpillRows(in_line), documents))
    ids_in_background = list(run_bundle(sink.SpillRows(background, background=True), documents))
    assert len(ids_in_line) == len(ids_in_background) > 6
    # Every file is named by a spill id the step output, and each id names files.
    for settings, spill_ids in ((in_line, ids_in_line), (background, ids_in_background)):
        assert {path.stem for path in Path(settings.staging_url).rglob("*.arrow")} == set(spill_ids)
    expected, spilled = _spilled(in_line), _spilled(background)
    assert sum(files for files, _ in spilled.values()) > 6 * 3
    assert sum(spilled[("chunks", shard)][1].num_rows for shard in range(3)) > 3 * len(documents)
    assert (
        spilled[("errors", 0)][1].num_rows + spilled[("errors", 1)][1].num_rows + spilled[("errors", 2)][1].num_rows
        == 2
    )
    for key, (files, table) in expected.items():
        assert spilled[key][0] == files and spilled[key][1].equals(table), key
    assert not [thread for thread in threading.enumerate() if thread.name == "chunkline-spill"]


def test_a_spill_that_fails_in_the_background_fails_the_bundle(corpus, tmp_path, monkeypatch):
    documents = _chunked(corpus)
    settings = _settings(tmp_path, "failing")
    real_write = sink.write_file_atomically
    written, failed_on = [], []

    def write_file_atomically(fs, path, data, **options):
        if len(written) == 4:  # a file of the first spill, written on the spill's thread
            failed_on.append(threading.current_thread().name)
            raise OSError("no space left on device")
        written.append(path)
        return real_write(fs, path, data, **options)

    monkeypatch.setattr(sink, "write_file_atomically", write_file_atomically)
    with pytest.raises(OSError, match="no space left on device"):
        list(run_bundle(sink.SpillRows(settings, background=True), documents))
    assert len(written) == 4 and failed_on == ["chunkline-spill"]
    # Nothing is still writing into the staging area the failed run discards.
    assert not [thread for thread in threading.enumerate() if thread.name == "chunkline-spill"]


@pytest.mark.parametrize(
    ("cores", "busy_elsewhere", "shards", "threads"),
    [
        (2, 0.0, 8, 2),  # this run alone on two cores: a merge on each
        (2, 0.0, 1, 1),  # one shard
        (2, 2.0, 8, 1),  # two other processes keep both cores busy: the threads would only take turns
        (2, 1.0, 8, 1),
        (8, 0.0, 8, 2),  # more cores: still at most two merges, whose row groups are held at once
        (8, 5.0, 8, 2),
        (1, 0.0, 8, 1),
    ],
)
def test_shards_are_merged_on_the_cores_other_work_leaves_free(monkeypatch, cores, busy_elsewhere, shards, threads):
    monkeypatch.setattr(sink, "available_cores", lambda: cores)
    monkeypatch.setattr(sink, "cores_busy_elsewhere", lambda: busy_elsewhere)
    assert sink.merge_threads(shards) == threads


@pytest.mark.slow
def test_merges_holding_large_previous_parts_run_one_at_a_time(corpus, tmp_path, monkeypatch):
    """A merge reads its spilled rows a row group at a time, so a full build merges side by side however
    large its shards; an incremental merge holds the previous snapshot's rows of its shard, so two at once
    are allowed only while the largest previous part it reads is within the bound."""
    monkeypatch.setattr(sink, "free_cores", lambda: 2)
    monkeypatch.setattr(sink, "MERGE_SIDE_BY_SIDE_BYTES", 1)  # a bound every previous part is over
    chosen = []
    real_merge_threads = sink.merge_threads

    def merge_threads(shards, largest_previous_bytes=0):
        threads = real_merge_threads(shards, largest_previous_bytes)
        chosen.append((largest_previous_bytes, threads))
        return threads

    monkeypatch.setattr(sink, "merge_threads", merge_threads)
    output = tmp_path / "dataset"
    _run(corpus, output, "run.workers=0")
    assert chosen == [(0, 2), (0, 2)]  # before the spill, then for the merge: nothing previous is held

    # An incremental run's merges read the previous parts.
    _edit(corpus)
    chosen.clear()
    summary = _run(corpus, output, "run.workers=0")
    assert summary.rebuild["mode"] == "incremental"
    previous_bytes, threads = chosen[-1]
    previous_part = max(path.stat().st_size for path in output.glob("snapshots/*/chunks/*.parquet"))
    assert previous_bytes >= previous_part > 0 and threads == 1

    # Within the bound, the same incremental merges run two at once.
    guide = corpus / "sample" / "guide" / "configuration.md"
    guide.write_bytes(guide.read_bytes() + b"\nReloading drops no connection.\n")
    chosen.clear()
    monkeypatch.setattr(sink, "MERGE_SIDE_BY_SIDE_BYTES", 10 * previous_part)
    assert _run(corpus, output, "run.workers=0").rebuild["mode"] == "incremental"
    previous_bytes, threads = chosen[-1]
    assert 0 < previous_bytes <= 10 * previous_part and threads == 2
