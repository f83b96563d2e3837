"""The ``chunkline`` command line around the pipeline: run, config files, environment overrides, errors,
inspect, chunk and strategies."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest

import chunkline
from chunkline.cores import available_cores
from chunkline.pipelines.cli import main
from chunkline.schemas import CHUNKS_SCHEMA

from .conftest import CORPUS, as_chunk, manifest, rows, rows_by_doc

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def no_chunkline_environment(monkeypatch):
    """Settings come only from what each test sets."""
    for name in list(os.environ):
        if name.startswith("CHUNKLINE_"):
            monkeypatch.delenv(name)


def part_shards(output, table: str) -> set[int]:
    names = [name.rsplit("/", 1)[1] for name in manifest(output)["tables"][table]["files"]]
    return {int(re.match(r"part-(\d{5})-", name).group(1)) for name in names}


def test_run_exits_0_and_prints_the_summary(corpus, tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    chunk_rows = rows(output, "chunks")
    total_bytes = sum(len(data) for data in CORPUS.values())
    assert f"chunkline: {len(CORPUS)} documents ({len(CORPUS)} ok, 0 error, 0 skipped)" in out
    assert f"{len(chunk_rows):,} chunks" in out
    assert f"{sum(row['token_count'] for row in chunk_rows):,} tokens" in out
    assert f"{total_bytes / 1e6:.2f} MB" in out
    assert out.splitlines()[0].endswith(f"-> {output}")
    assert f"changes: {len(CORPUS)} added, 0 changed, 0 deleted, 0 unchanged; {len(chunk_rows):,} chunk upserts" in out
    assert set(rows_by_doc(output, "chunks")) == set(CORPUS)


def test_config_file_with_input_chunking_and_output_sections(corpus, tmp_path, capsys):
    output = tmp_path / "from-config"
    config = tmp_path / "chunkline.yaml"
    config.write_text(
        f"""\
input:
  paths: [{corpus}]
  exclude: ["*.markdown", "CHANGELOG.md"]
chunking:
  strategy: headings
  max_tokens: 120
  overlap_tokens: 10
  headings:
    max_heading_level: 2
output:
  url: {output}
  shards: 2
run:
  fail_on_error: true
""",
        encoding="utf-8",
    )
    assert main(["run", "--config", str(config)]) == 0
    expected_docs = set(CORPUS) - {"reference/api.markdown", "CHANGELOG.md"}
    found = manifest(output)
    assert found["config"]["chunking"]["max_tokens"] == 120
    assert found["config"]["chunking"]["headings"]["max_heading_level"] == 2
    assert found["config"]["output"]["shards"] == 2
    assert found["config"]["run"]["fail_on_error"] is True
    assert part_shards(output, "chunks") <= {0, 1}
    chunk_rows = rows(output, "chunks")
    assert {row["doc_id"] for row in chunk_rows} == expected_docs
    assert max(row["token_count"] for row in chunk_rows) <= 120
    # Level-3 headings are not split points: no heading path is deeper than two.
    assert max(len(row["heading_path"]) for row in chunk_rows) == 2
    assert "Checking the configuration" not in {title for row in chunk_rows for title in row["heading_path"]}
    # Command-line inputs and --output take precedence over the file's.
    other = tmp_path / "from-args"
    first_run = found["run_id"]
    assert main(["run", str(corpus / "guide"), "--config", str(config), "--output", str(other)]) == 0
    assert {row["doc_id"] for row in rows(other, "chunks")} == {"installation.md", "advanced/tuning.md", "empty.md"}
    assert manifest(output)["run_id"] == first_run  # the file's output.url was not written again


def test_environment_overrides_and_set_on_top(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKLINE_CHUNK_MAX_TOKENS", "80")
    monkeypatch.setenv("CHUNKLINE_OUTPUT_SHARDS", "1")
    output = tmp_path / "env"
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    found = manifest(output)
    assert found["config"]["chunking"]["max_tokens"] == 80
    assert found["config"]["output"]["shards"] == 1
    for table in ("chunks", "documents", "errors"):
        assert len(manifest(output)["tables"][table]["files"]) == 1
    chunk_rows = rows(output, "chunks")
    assert max(row["token_count"] for row in chunk_rows) <= 80
    assert max(row["token_count"] for row in chunk_rows) > 60  # the limit, not the content, bounds the chunks

    # --set wins over the environment.
    output = tmp_path / "set"
    assert (
        main(["run", str(corpus), "--output", str(output), "--set", "max_tokens=200", "--set", "output.shards=3"]) == 0
    )
    found = manifest(output)
    assert found["config"]["chunking"]["max_tokens"] == 200
    assert found["config"]["output"]["shards"] == 3
    assert max(row["token_count"] for row in rows(output, "chunks")) > 80


@pytest.mark.parametrize(
    ("setting", "dotted"),
    [
        ("chunking.headings.max_heading_levle=2", "chunking.headings.max_heading_levle"),
        ("input.exclude_patterns=[x]", "input.exclude_patterns"),
        ("output.shard=2", "output.shard"),
        ("run.worker=2", "run.worker"),
        ("chunk_size=100", "chunking.chunk_size"),
    ],
)
def test_unknown_setting_exits_2_naming_its_dotted_path(corpus, tmp_path, capsys, setting, dotted):
    output = tmp_path / "out"
    assert main(["run", str(corpus), "--output", str(output), "--set", setting]) == 2
    err = capsys.readouterr().err
    assert f"unknown setting {dotted}" in err
    assert err.startswith("chunkline: error:")
    assert not output.exists()


def test_unknown_setting_in_the_environment_exits_2(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKLINE_OUTPUT_SHARDZ", "3")
    assert main(["run", str(corpus), "--output", str(tmp_path / "out")]) == 2
    assert "unknown setting output.shardz" in capsys.readouterr().err


def test_bad_value_exits_2(corpus, tmp_path, capsys):
    assert main(["run", str(corpus), "--output", str(tmp_path / "out"), "--set", "output.shards=0"]) == 2
    assert "output" in capsys.readouterr().err


def test_workers_flag_with_memory_output_exits_2(corpus, memory_fs, capsys):
    assert main(["run", str(corpus), "--output", "memory://dataset", "--workers", "2"]) == 2
    assert "in-process" in capsys.readouterr().err
    assert not memory_fs.store


def test_a_small_corpus_runs_in_process_by_default_and_the_log_says_why(corpus, tmp_path, caplog):
    output = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="chunkline"):
        assert main(["run", str(corpus), "--output", str(output)]) == 0
    total_megabytes = sum(len(data) for data in CORPUS.values()) / 1e6
    lines = [record.getMessage() for record in caplog.records if record.name == "chunkline"]
    running = [line for line in lines if line.startswith("chunkline: running ")]
    assert running == [
        f"chunkline: running in-process without Beam (auto: {total_megabytes:.1f} MB to chunk, {available_cores()} "
        f"core{'s' if available_cores() != 1 else ''}: "
        + ("one core" if available_cores() < 2 else "under the 8 MB that pay for worker processes")
        + ")"
    ]
    # What ran is what the manifest records.
    assert manifest(output)["config"]["run"]["workers"] == 0
    assert manifest(output)["rebuild"]["runner"] == "none"


def test_auto_with_a_memory_output_runs_in_process(corpus, memory_fs, caplog):
    with caplog.at_level(logging.INFO, logger="chunkline"):
        assert main(["run", str(corpus), "--output", "memory://dataset", "--workers", "auto"]) == 0
    assert "chunkline: running in-process without Beam (auto: a memory:// output is this process's memory)" in [
        record.getMessage() for record in caplog.records
    ]
    assert any(path.endswith("/_SUCCESS") for path in memory_fs.store)


def test_run_without_input_or_output_exits_2(corpus, tmp_path, capsys):
    assert main(["run", "--output", str(tmp_path / "out")]) == 2
    assert "no input" in capsys.readouterr().err
    assert main(["run", str(corpus)]) == 2
    assert "no output" in capsys.readouterr().err


def test_inspect(corpus, tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["run", str(corpus), "--output", str(output), "--set", "max_tokens=150"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(output)]) == 0
    text = capsys.readouterr().out
    found = manifest(output)
    assert text.startswith(f"dataset {output}\n")
    assert f"run {found['run_id']}" in text
    assert "strategy headings, max_tokens 150, overlap_tokens 50, tokenizer cl100k_base" in text
    assert re.search(
        rf"chunks\s+{found['tables']['chunks']['rows']:,} rows in {len(found['tables']['chunks']['files'])} file\(s\)",
        text,
    )
    assert f"documents: {len(CORPUS)} ok, 0 error, 0 skipped" in text
    histogram = re.findall(r"^\s+(\d+)-(\d+)\s+([\d,]+) #*$", text, re.MULTILINE)
    assert sum(int(count.replace(",", "")) for _, _, count in histogram) == found["tables"]["chunks"]["rows"]
    assert max(int(high) for _, high, _ in histogram) >= max(row["token_count"] for row in rows(output, "chunks"))


def test_inspect_of_a_folder_that_is_no_dataset_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 2
    assert "no chunkline dataset" in capsys.readouterr().err


def test_chunk_jsonl_prints_every_chunk_column(corpus, tmp_path, capsys):
    path = corpus / "guide" / "advanced" / "tuning.md"
    assert main(["chunk", str(path), "--format", "jsonl"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) > 2
    records = [json.loads(line) for line in lines]
    for record in records:
        assert list(record) == CHUNKS_SCHEMA.names
    text = path.read_bytes().decode("utf-8")
    assert chunkline.reconstruct([as_chunk(record) for record in records]) == text
    assert [r["chunk_index"] for r in records] == list(range(len(records)))
    assert any(record["is_sub_split"] for record in records)
    assert all(record["token_count"] <= 512 for record in records)
    assert f"1 file(s), {len(records)} chunk(s)" in captured.err
    # The preview chunks the file exactly as the pipeline does.
    output = tmp_path / "out"
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    pipeline_rows = rows_by_doc(output, "chunks")["guide/advanced/tuning.md"]
    columns = (
        "chunk_index",
        "text",
        "start_char",
        "end_char",
        "start_byte",
        "end_byte",
        "start_line",
        "end_line",
        "heading_path",
        "token_count",
        "is_sub_split",
        "content_sha256",
        "title",
        "embed_text",
        "embed_token_count",
    )
    assert all(record["embed_token_count"] <= 512 and record["embed_text"] for record in records)
    assert [tuple(r[c] for c in columns) for r in records] == [tuple(r[c] for c in columns) for r in pipeline_rows]


def test_chunk_table_preview(corpus, capsys):
    # One chunk per section (small ones not packed together), so that every kind of heading path shows.
    assert main(["chunk", str(corpus / "README.md"), "--set", "min_tokens=0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"== {corpus / 'README.md'}: 5 chunk(s)")
    assert "Harbour Telemetry > Quick start" in out
    assert "(preamble)" in out


def test_chunk_skips_what_the_pipeline_refuses_to_decode(tmp_path, capsys):
    """``chunkline chunk`` decodes as ``chunkline run`` does: a binary file (even one that is valid UTF-8)
    and invalid UTF-8 are skipped with why, and the run gives each the same verdict as an error row."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.md").write_bytes(b"# Title\n\nText.\n")
    (folder / "controls.md").write_bytes(bytes(range(1, 9)) + b" text\n")
    (folder / "logo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    (folder / "latin1.md").write_bytes("# Caf\u00e9\n".encode("latin-1"))
    assert main(["chunk", str(folder)]) == 1
    captured = capsys.readouterr()
    err = captured.err
    for name in ("controls.md", "logo.md"):
        assert (
            f"{name}: file is binary (control bytes or NUL bytes in invalid UTF-8), not markdown text; skipped" in err
        )
    assert "latin1.md: not valid UTF-8 (byte 5: invalid continuation byte); skipped" in err
    assert "1 file(s), 1 chunk(s)" in captured.out and "3 file(s) could not be read" in captured.out
    output = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(output)]) == 0
    errors = {row["doc_id"]: row["error_type"] for row in rows(output, "errors")}
    assert errors == {"controls.md": "BinaryFile", "logo.md": "BinaryFile", "latin1.md": "InvalidUtf8"}


def test_strategies_lists_headings_and_its_parameters(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "headings (default)" in out.splitlines()
    assert "chunking.headings.max_heading_level: int = 6" in out
    assert "chunking.headings.min_heading_level: int = 1" in out
    assert "max_tokens=512" in out
    for name in chunkline.available_strategies():
        assert re.search(rf"^{re.escape(name)}( \(default\))?$", out, re.MULTILINE), name


def test_chunk_and_run_show_the_overlap_warning_once_on_stderr(tmp_path):
    # Headings long enough that the context line takes 13 of max_tokens 64: windows of 51 tokens with an
    # overlap of 50 advance 1 token. Two documents, one warning per command.
    guide = (
        "# Getting started with the Tidewater harbour logger\n\n"
        "## Installing the logger on a tide gauge station\n\n"
        + " ".join(f"Step {n} checks one more setting of the harbour logger." for n in range(10))
        + "\n"
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "getting-started.md").write_text(guide, encoding="utf-8")
    (docs / "again.md").write_text(guide + "\nOne more line.\n", encoding="utf-8")
    settings = ["--set", "chunking.strategy=tokens", "--set", "max_tokens=64"]
    warning = (
        "overlap_tokens 50 leaves windows of 51 tokens (max_tokens 64 less 13 for the context line) advancing "
        "1 token: each token of text lands in about 51 chunks; lower overlap_tokens to 25 or less (32 or less "
        "with embed_context: none)"
    )
    commands = (
        ["chunk", str(docs / "getting-started.md"), str(docs / "again.md"), *settings],
        ["run", str(docs), "--output", str(tmp_path / "out"), *settings],
    )
    for command in commands:
        completed = subprocess.run(
            [sys.executable, "-m", "chunkline", *command], capture_output=True, text=True, timeout=240, check=False
        )
        assert completed.returncode == 0, completed.stderr
        assert completed.stderr.splitlines().count(warning) == 1, completed.stderr
