"""A run in this process without a Beam argument starts no runner, and stages exactly the files the Beam
pipeline on the FnApiRunner stages.

The corpus is realistic: the repository's sample corpus and the tests' markdown fixtures (front matter in
YAML and TOML, CRLF line endings, an empty file, setext headings, long sections with code and tables), with
a binary file, a file that is not UTF-8, a doc_id that a second input holds too (skipped), and promoted
front-matter columns, one of whose values does not fit its type (an errors row of a document that still
chunks). Each run is made twice, once with no Beam argument (no runner) and once with ``--runner
FnApiRunner``; every part file of every table, ``changes/`` included, must have the same name and bytes, in
a full run and in an incremental one (documents edited, added and deleted) that the runner's side runs on
the runner too, with row groups small enough in bytes that each part holds several.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from chunkline.config import ChunkConfig
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.document_rows import ConvertedRows, DocumentChunker
from chunkline.dataset.front_matter_columns import parse_front_matter_columns
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.dataset.sink import SpillRows, WriteSettings
from chunkline.pipelines.run import RunSummary, run_pipeline
from chunkline.schemas import CHANGE_TABLES, ROW_TABLES

from .conftest import table_digests, write_files, write_realistic_corpus

pytestmark = pytest.mark.timeout(300)

ALL_TABLES = ROW_TABLES + CHANGE_TABLES
ON_THE_RUNNER = ["--runner", "FnApiRunner"]

FRONT_MATTER_CONFIG = """\
output:
  shards: 3
  row_group_bytes: 20000
  front_matter_columns:
    tags: list<string>
    weight: float
chunking:
  max_tokens: 128
  overlap_tokens: 16
"""


@pytest.fixture
def realistic_inputs(tmp_path):
    """(the corpus folder, a second input holding one of its doc_ids), copied so the test may edit them."""
    root = write_realistic_corpus(
        tmp_path / "corpus",
        {"notes/weights.md": b"---\ntags: [ops, tides]\nweight: heavy\n---\n# Weights\n\nA word, not a number.\n"},
    )
    second = write_files(tmp_path / "mirror", {"sample/README.md": b"# A copy\n\nOf the readme.\n"})
    return root, second


def _run(inputs, output: Path, config: Path, *overrides: str, beam_args: list[str] | None = None) -> RunSummary:
    run_config = load_run_config(
        config, list(overrides), environ={}, inputs=[str(item) for item in inputs], output=str(output)
    )
    return run_pipeline(run_config, beam_args)


def _run_both(inputs, tmp_path: Path, config: Path) -> tuple[RunSummary, RunSummary]:
    """The same run without a runner (into dataset-free) and on the FnApiRunner (dataset-runner, with no
    incremental run small enough to skip the runner)."""
    free = _run(inputs, tmp_path / "dataset-free", config)
    on_runner = _run(
        inputs, tmp_path / "dataset-runner", config, "run.in_process_max_documents=0", beam_args=ON_THE_RUNNER
    )
    return free, on_runner


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "chunkline.yaml"
    path.write_text(FRONT_MATTER_CONFIG)
    return path


@pytest.mark.slow
def test_the_run_without_a_runner_stages_the_runners_files_byte_for_byte(realistic_inputs, tmp_path):
    root, second = realistic_inputs
    inputs = [root, second]
    config = _config(tmp_path)
    free_output, runner_output = tmp_path / "dataset-free", tmp_path / "dataset-runner"

    free, on_runner = _run_both(inputs, tmp_path, config)
    assert read_manifest(str(free_output))["rebuild"]["runner"] == "none"
    assert read_manifest(str(runner_output))["rebuild"]["runner"] == "FnApiRunner"
    assert free.rebuild["mode"] == on_runner.rebuild["mode"] == "full"
    # The corpus is what the test says: every file a document, the bad ones as errors, one skipped.
    documents = read_dataset(str(free_output), "documents").to_pylist()
    assert len(documents) == 12 + 23 + 3 + 1
    by_status = {status: sum(row["status"] == status for row in documents) for status in ("ok", "error", "skipped")}
    assert by_status == {"ok": 36, "error": 2, "skipped": 1}
    error_types = sorted(row["error_type"] for row in read_dataset(str(free_output), "errors").to_pylist())
    assert error_types == ["BinaryFile", "FrontMatterTypeMismatch", "InvalidUtf8"]
    assert (free.chunks, free.tokens, free.input_bytes) == (on_runner.chunks, on_runner.tokens, on_runner.input_bytes)
    assert free.chunks > 3 * by_status["ok"]
    assert table_digests(free_output, ALL_TABLES) == table_digests(runner_output, ALL_TABLES)
    # Parts of several row groups, cut by their bytes (output.row_group_bytes), on both sides.
    chunk_parts = read_manifest(str(free_output))["tables"]["chunks"]["files"]
    assert max(pq.ParquetFile(free_output / name).metadata.num_row_groups for name in chunk_parts) > 2

    # Incremental: two documents edited, one added, one deleted; the others carried over by the merges.
    guide = root / "sample" / "guide" / "configuration.md"
    guide.write_bytes(guide.read_bytes() + b"\n## Reloading\n\nSend SIGHUP to reload the configuration.\n")
    crlf = root / "fixtures" / "crlf_line_endings.md"
    crlf.write_bytes(crlf.read_bytes().replace(b"\r\n", b"\r\n\r\n", 1))
    write_files(root, {"sample/guide/tides.md": b"# Tides\n\nHigh water twice a day.\n"})
    (root / "sample" / "operations" / "windows-install.md").unlink()

    free, on_runner = _run_both(inputs, tmp_path, config)
    for summary in (free, on_runner):
        # The three changes, and the three documents never carried over: the two in error, and the doc_id
        # that two inputs hold.
        assert summary.rebuild["mode"] == "incremental" and summary.rebuild["documents_chunked"] == 3 + 3
        assert (summary.changes["added"], summary.changes["changed"], summary.changes["deleted"]) == (1, 2, 1)
    assert read_manifest(str(free_output))["rebuild"]["runner"] == "none"
    assert read_manifest(str(runner_output))["rebuild"]["runner"] == "FnApiRunner"
    assert table_digests(free_output, ALL_TABLES) == table_digests(runner_output, ALL_TABLES)

    # And the incremental result is what a full run of the new corpus without a runner writes.
    fresh = _run(inputs, tmp_path / "fresh", config)
    assert fresh.rebuild["mode"] == "full"
    assert table_digests(free_output, ROW_TABLES) == table_digests(tmp_path / "fresh", ROW_TABLES)


def _spilled(settings: WriteSettings) -> dict[tuple[str, int], pa.Table]:
    """Each (table, shard)'s spilled rows under ``settings``' staging area, sorted by the table's key."""
    tables = {}
    for table_name in ROW_TABLES:
        schema, key = settings.schemas[table_name]
        for shard in range(settings.shards):
            read = [
                ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
                for path in sorted(Path(settings.staging_url).glob(f"spill/{table_name}/{shard:05d}/*.arrow"))
            ]
            table = pa.concat_tables([schema.empty_table(), *read])
            tables[(table_name, shard)] = table.sort_by([(name, "ascending") for name in key])
    return tables


def _spill(tmp_path: Path, name: str, elements, front_matter_columns=()) -> dict[tuple[str, int], pa.Table]:
    settings = WriteSettings(
        staging_url=str(tmp_path / name),
        snapshot_url=str(tmp_path / f"{name}-snapshot"),
        shards=3,
        row_group_rows=1000,
        spill_bytes=20_000,  # several spills per shard
        front_matter_columns=tuple(front_matter_columns),
    )
    assert len(list(run_bundle(SpillRows(settings), elements))) > 3  # the spill ids it output
    return _spilled(settings)


def test_the_spill_writes_a_converted_documents_arrays_as_it_would_its_rows(realistic_inputs, tmp_path):
    """The chunker converts each document's rows to Arrow once; spilling those arrays writes the rows the
    spill writes from the plain row dicts (a document in error, or rows of a step of one's own); a chunker
    with other front-matter columns than the writer's has its rows converted by the spill instead."""
    root, _ = realistic_inputs
    front_matter_columns = parse_front_matter_columns({"tags": "list<string>", "weight": "float"})
    listing = [(path.relative_to(root).as_posix(), path) for path in sorted(root.rglob("*.md"))]
    sources = [
        SourceFile(doc_id, path.as_uri(), 0, str(path), path.stat().st_size, None, path.read_bytes())
        for doc_id, path in listing
    ]
    chunker = DocumentChunker(ChunkConfig(max_tokens=128), "strict", (), front_matter_columns)
    converted = list(run_bundle(chunker, sources))
    assert sum(isinstance(element, ConvertedRows) for element in converted) == len(sources) - 2  # two in error
    plain = [list(element) for element in converted]
    assert not any(hasattr(element, "arrays") for element in plain)

    from_arrays = _spill(tmp_path, "from-arrays", converted, front_matter_columns)
    from_rows = _spill(tmp_path, "from-rows", plain, front_matter_columns)
    assert sum(from_arrays[("chunks", shard)].num_rows for shard in range(3)) > 3 * len(sources)
    assert all(from_arrays[("chunks", shard)].num_rows for shard in range(3))
    assert {"tags", "weight"} <= set(from_arrays[("chunks", 0)].column_names)
    assert from_arrays.keys() == from_rows.keys()
    for key, table in from_arrays.items():
        assert table.equals(from_rows[key]), key

    # A writer without the chunker's front-matter columns: the rows are converted to its own columns.
    without_columns = _spill(tmp_path, "without-columns", converted)
    for key, table in without_columns.items():
        assert table.equals(from_rows[key].select(table.column_names).cast(table.schema)), key
