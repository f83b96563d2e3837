"""The published dataset: layout, manifest, schemas, row order, rebuilds, failed runs, refused outputs and
credentials."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

import chunkline.dataset.inputs as inputs_module
import chunkline.dataset.publish as publish_module
import chunkline.dataset.sink as sink_module
from chunkline.dataset.merge import shard_of
from chunkline.dataset.publish import read_dataset
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.cli import main
from chunkline.pipelines.run import check_output_location
from chunkline.schemas import ROW_TABLES, SCHEMA_VERSION, TABLE_SCHEMAS
from chunkline.settings import ConfigError

from .conftest import (
    CORPUS,
    all_file_digests,
    assert_document_chunks,
    documents,
    manifest,
    rows,
    rows_by_doc,
    run,
    table_digests,
    write_corpus,
    write_files,
)

pytestmark = pytest.mark.timeout(300)

SHARDS = 4
PART_NAME = re.compile(r"part-(\d{5})-[0-9a-f]{16}\.parquet")


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    base = tmp_path_factory.mktemp("published")
    root = write_corpus(base / "corpus")
    output = base / "dataset"
    summary = run([root], output, f"output.shards={SHARDS}")
    return root, output, summary


def snapshot_folder(output: Path) -> Path:
    """The folder of the snapshot the root manifest points at."""
    return output / "snapshots" / manifest(output)["snapshot"]


def folder_files(output: Path, table: str) -> set[str]:
    """The files in ``table``'s folder of the published snapshot, named as the manifest names them."""
    snapshot = snapshot_folder(output)
    return {path.relative_to(output).as_posix() for path in (snapshot / table).iterdir()}


def staging_files(output: Path) -> list[Path]:
    staging = output / "_staging"
    return sorted(path for path in staging.rglob("*")) if staging.exists() else []


def test_manifest_names_exactly_the_files_in_each_table_folder(published):
    _, output, summary = published
    found = manifest(output)
    assert sorted(path.name for path in output.iterdir()) == ["_SUCCESS", "_manifest.json", "snapshots"]
    assert [path.name for path in (output / "snapshots").iterdir()] == [found["snapshot"]]
    assert sorted(path.name for path in snapshot_folder(output).iterdir()) == [
        "_manifest.json",
        "changes",
        "chunks",
        "documents",
        "errors",
        "sections",
    ]
    assert json.loads((snapshot_folder(output) / "_manifest.json").read_text()) == found
    assert set(found["tables"]) == set(TABLE_SCHEMAS)
    for table, entry in found["tables"].items():
        assert entry["files"], f"{table} has no file"
        assert len(entry["files"]) == len(set(entry["files"]))
        assert set(entry["files"]) == folder_files(output, table)
        assert all(PART_NAME.fullmatch(name.rsplit("/", 1)[1]) for name in entry["files"])
        assert entry["rows"] == sum(pq.ParquetFile(output / name).metadata.num_rows for name in entry["files"])
    assert found["tables"]["chunks"]["rows"] == summary.chunks
    assert found["tables"]["documents"]["rows"] == len(CORPUS)
    assert found["tables"]["errors"]["rows"] == 0
    # No temporary file of an atomic write is left anywhere.
    assert not [path for path in output.rglob("*") if ".tmp-" in path.name]


def test_success_marker_holds_the_run_id_of_the_manifest(published):
    _, output, summary = published
    found = manifest(output)
    assert (output / "_SUCCESS").read_text() == f"{found['run_id']}\n"
    assert summary.run_id == found["run_id"]
    assert found["format"] == "chunkline-dataset" and found["schema_version"] == SCHEMA_VERSION


def test_manifest_records_config_versions_and_counts(published):
    root, output, summary = published
    found = manifest(output)
    assert found["config"]["input"]["paths"] == [str(root)]
    assert found["config"]["output"]["shards"] == SHARDS
    assert found["config"]["chunking"]["strategy"] == "headings"
    assert found["versions"]["chunkline"] == importlib.metadata.version("chunkline")
    assert found["versions"]["apache-beam"] == importlib.metadata.version("apache-beam")
    chunk_rows = rows(output, "chunks")
    assert found["counts"] == {
        "chunks": len(chunk_rows),
        "documents_ok": len(CORPUS),
        "documents_error": 0,
        "documents_skipped": 0,
        "errors": 0,
        "input_bytes": sum(len(data) for data in CORPUS.values()),
        "tokens": sum(row["token_count"] for row in chunk_rows),
    }
    assert summary.tokens == found["counts"]["tokens"]


def test_empty_errors_table_is_one_file_with_the_schema(published):
    _, output, _ = published
    (name,) = manifest(output)["tables"]["errors"]["files"]
    table = pq.read_table(output / name)
    assert table.num_rows == 0
    assert table.schema.names == TABLE_SCHEMAS["errors"][0].names
    # A reader globbing the folder finds the schema, with no row.
    assert ds.dataset(snapshot_folder(output) / "errors", format="parquet").to_table().num_rows == 0


def _same_type(left: pa.DataType, right: pa.DataType) -> bool:
    if pa.types.is_list(left) and pa.types.is_list(right):  # Parquet renames a list's item field
        return left.value_type == right.value_type
    return left == right


def test_every_file_carries_the_schema_version_and_field_descriptions(published):
    _, output, _ = published
    for table, (expected, _) in TABLE_SCHEMAS.items():
        for name in manifest(output)["tables"][table]["files"]:
            schema = pq.read_schema(output / name)
            assert schema.metadata[b"chunkline.schema_version"] == SCHEMA_VERSION.encode()
            assert schema.metadata[b"chunkline.table"] == table.encode()
            assert schema.names == expected.names, name
            for field, expected_field in zip(schema, expected):
                assert _same_type(field.type, expected_field.type), (name, field.name)
                assert field.nullable == expected_field.nullable, (name, field.name)
                description = (field.metadata or {}).get(b"description", b"")
                assert len(description) > 10, f"{name}: field {field.name} has no description"


def test_chunks_files_are_sorted_and_hold_only_their_shard(published):
    _, output, _ = published
    for table, key in (("chunks", ("doc_id", "chunk_index")), ("documents", ("doc_id", "source_uri"))):
        for name in manifest(output)["tables"][table]["files"]:
            shard = int(PART_NAME.fullmatch(name.rsplit("/", 1)[1]).group(1))
            file_rows = pq.read_table(output / name).to_pylist()
            keys = [tuple(row[column] for column in key) for row in file_rows]
            assert keys == sorted(keys), f"{name} is not sorted by {key}"
            assert len(keys) == len(set(keys)), f"{name} repeats a key"
            assert {shard_of(row["doc_id"], SHARDS) for row in file_rows} == {shard}, name


def test_globbing_the_table_folders_reads_exactly_the_dataset(published):
    _, output, _ = published
    snapshot = snapshot_folder(output)
    for table in TABLE_SCHEMAS:
        globbed = ds.dataset(snapshot / table, format="parquet").to_table()
        assert globbed.num_rows == manifest(output)["tables"][table]["rows"]
    chunk_keys = sorted(
        zip(
            *ds.dataset(snapshot / "chunks", format="parquet")
            .to_table(columns=["doc_id", "chunk_index"])
            .to_pydict()
            .values()
        )
    )
    assert chunk_keys == sorted((row["doc_id"], row["chunk_index"]) for row in rows(output, "chunks"))


def test_read_dataset_as_pandas(published):
    _, output, summary = published
    frame = read_dataset(str(output), "chunks", as_pandas=True)
    assert list(frame.columns) == TABLE_SCHEMAS["chunks"][0].names
    assert len(frame) == summary.chunks
    readme = frame[frame["doc_id"] == "README.md"].sort_values("chunk_index")
    # The whole README is under half the budget: its small sections are packed into one chunk, front matter
    # first, under the path of the section with the most tokens (the sensor table).
    assert [list(path) for path in readme["heading_path"]] == [["Harbour Telemetry", "Sensors"]]
    assert readme["text"].iloc[0].startswith("---\ntitle: Harbour Telemetry")
    assert "## Quick start" in readme["text"].iloc[0] and "## Licence" in readme["text"].iloc[0]
    assert "".join(readme["text"]) == CORPUS["README.md"].decode()
    selected = read_dataset(str(output), "documents", columns=["doc_id", "status"], as_pandas=True)
    assert list(selected.columns) == ["doc_id", "status"]
    assert sorted(selected["doc_id"]) == sorted(CORPUS) and set(selected["status"]) == {"ok"}


def test_read_dataset_as_pandas_gives_heading_path_as_a_list_of_strings(published):
    _, output, _ = published
    frame = read_dataset(str(output), "chunks", as_pandas=True)
    for value in frame["heading_path"]:
        assert isinstance(value, list), f"heading_path is {type(value).__name__}, not a list"
        assert all(isinstance(title, str) for title in value)


def test_inspect_names_the_counts(published, capsys):
    _, output, summary = published
    found = manifest(output)
    assert main(["inspect", str(output)]) == 0
    text = capsys.readouterr().out
    assert found["run_id"] in text
    for table, entry in found["tables"].items():
        match = re.search(rf"^\s+{table}\s+([\d,]+) rows in (\d+) file\(s\)$", text, re.MULTILINE)
        assert match, f"no line for {table} in:\n{text}"
        assert int(match.group(1).replace(",", "")) == entry["rows"]
        assert int(match.group(2)) == len(entry["files"])
    assert f"documents: {len(CORPUS)} ok, 0 error, 0 skipped" in text
    assert f"chunks: {summary.chunks:,}, tokens {summary.tokens:,}" in text
    assert "errors: none" in text


def test_inspect_lists_error_rows(tmp_path, capsys):
    root = write_files(tmp_path / "docs", {"ok.md": b"# Fine\n", "bad.md": b"# Bad \xff\xfe bytes\n"})
    run([root], tmp_path / "out")
    assert main(["inspect", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "documents: 1 ok, 1 error, 0 skipped" in text
    assert "errors: 1" in text
    assert "bad.md [decode/InvalidUtf8]" in text


def test_rebuild_after_deleting_sources_leaves_no_stale_part(tmp_path):
    root = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([root], output, f"output.shards={SHARDS}")
    before = table_digests(output, ("chunks", "documents"))
    deleted = {"guide/empty.md", "README.md"}
    deleted_shards = {shard_of(doc_id, SHARDS) for doc_id in deleted}
    # One deleted document is alone in its shard, the other shares its shard with a kept document.
    shard_members = Counter(shard_of(doc_id, SHARDS) for doc_id in CORPUS)
    assert sorted(shard_members[shard] for shard in deleted_shards) == [1, 2]
    for doc_id in deleted:
        (root / doc_id).unlink()

    summary = run([root], output, f"output.shards={SHARDS}")
    assert summary.documents_ok == len(CORPUS) - len(deleted)
    after = table_digests(output, ("chunks", "documents"))
    for table in TABLE_SCHEMAS:
        assert set(manifest(output)["tables"][table]["files"]) == folder_files(output, table)
    # Parts of shards the deletion touched are gone; the others are kept, same names, same bytes.
    for name, digest in before.items():
        shard = int(PART_NAME.fullmatch(name.split("/", 1)[1]).group(1))
        if shard in deleted_shards:
            assert name not in after, f"stale part {name} survived the rebuild"
        else:
            assert after.get(name) == digest, name
    assert not any(
        int(PART_NAME.fullmatch(n.split("/", 1)[1]).group(1)) == shard_of("guide/empty.md", SHARDS) for n in after
    )
    assert not deleted & set(rows_by_doc(output, "chunks"))
    assert not deleted & set(documents(output))
    assert set(documents(output)) == set(CORPUS) - deleted
    assert staging_files(output) == []
    # The same as a first build of what is left.
    run([root], tmp_path / "fresh", f"output.shards={SHARDS}")
    assert after == table_digests(tmp_path / "fresh", ("chunks", "documents"))


def _edit_corpus(root: Path) -> None:
    with open(root / "README.md", "ab") as handle:
        handle.write(b"\n## Support\n\nAsk in #harbour-telemetry on the port's chat.\n")
    write_files(root, {"guide/faq.md": b"# FAQ\n\n## Why is the tide late?\n\nThe gauge reports every minute.\n"})


@pytest.mark.slow
def test_failed_pipeline_leaves_the_previous_dataset_then_a_rerun_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([root], output)
    before = all_file_digests(output)
    old_rows = rows(output, "chunks")
    _edit_corpus(root)

    def merge_fails(self, element, spills_done=()):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(sink_module.MergeShard, "process", merge_fails)
        with pytest.raises(Exception, match="No space left on device"):
            run([root], output)

    assert all_file_digests(output) == before, "a failed run changed the published dataset"
    assert staging_files(output) == [], "a failed run left staged files"
    assert rows(output, "chunks") == old_rows

    run([root], output)
    run([root], tmp_path / "uninterrupted")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "uninterrupted", ROW_TABLES)
    for table in TABLE_SCHEMAS:
        assert set(manifest(output)["tables"][table]["files"]) == folder_files(output, table)
    assert not (output / "_staging").exists()
    assert_document_chunks(rows_by_doc(output, "chunks")["README.md"], (root / "README.md").read_bytes())
    assert "guide/faq.md" in documents(output)


@pytest.mark.slow
def test_failure_before_the_manifest_is_written_keeps_the_old_dataset_for_readers(tmp_path, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    output = tmp_path / "dataset"
    run([root], output)
    old_manifest = (output / "_manifest.json").read_bytes()
    old_success = (output / "_SUCCESS").read_bytes()
    old_rows = {table: rows(output, table) for table in TABLE_SCHEMAS}
    _edit_corpus(root)
    original = publish_module.write_file_atomically

    def manifest_write_fails(fs, path, data, **keywords):
        if path.endswith("_manifest.json"):
            raise OSError(5, "Input/output error")
        return original(fs, path, data, **keywords)

    with monkeypatch.context() as patch:
        patch.setattr(publish_module, "write_file_atomically", manifest_write_fails)
        with pytest.raises(OSError, match="Input/output error"):
            run([root], output)

    # Readers go through the manifest: they still see exactly the previous dataset.
    assert (output / "_manifest.json").read_bytes() == old_manifest
    assert (output / "_SUCCESS").read_bytes() == old_success
    assert {table: rows(output, table) for table in TABLE_SCHEMAS} == old_rows
    # The failed run removed what it wrote; the next run publishes cleanly: exactly its own parts.
    assert sorted(path.name for path in (output / "snapshots").iterdir()) == [json.loads(old_manifest)["snapshot"]]
    run([root], output)
    run([root], tmp_path / "uninterrupted")
    assert table_digests(output, ROW_TABLES) == table_digests(tmp_path / "uninterrupted", ROW_TABLES)
    assert not (output / "_staging").exists()


@pytest.mark.parametrize(
    ("inputs", "output"),
    [
        (["{corpus}"], "{corpus}/out"),
        (["{corpus}"], "{corpus}"),
        (["file://{corpus}"], "{corpus}/build/dataset"),
        (["{corpus}/**"], "file://{corpus}/site"),
        (["{other}", "{corpus}/"], "{corpus}/guide/out"),
    ],
    ids=["subfolder", "same-folder", "file-url-input", "glob-input", "second-input"],
)
def test_output_inside_an_input_is_refused_before_anything_is_written(corpus, tmp_path, inputs, output):
    other = write_files(tmp_path / "other", {"x.md": b"# X\n"})
    fill = {"corpus": corpus, "other": other}
    before = all_file_digests(corpus)
    with pytest.raises(ConfigError, match="inside input"):
        run([item.format(**fill) for item in inputs], output.format(**fill))
    assert all_file_digests(corpus) == before
    assert sorted(path.relative_to(corpus).as_posix() for path in corpus.rglob("*") if path.is_dir()) == [
        "guide",
        "guide/advanced",
        "reference",
    ]


def test_memory_output_inside_a_memory_input_is_refused(memory_fs):
    memory_fs.pipe("/docs/a.md", b"# A\n")
    with pytest.raises(ConfigError, match="inside input"):
        run(["memory://docs"], "memory://docs/out")
    assert sorted(memory_fs.store) == ["/docs/a.md"]


def test_outputs_next_to_an_input_are_accepted(corpus):
    sibling = corpus.parent / f"{corpus.name}-dataset"
    for inputs, output in (
        ([str(corpus)], str(sibling)),
        ([f"{corpus}/**/*.md"], sibling.as_uri()),
        (["memory://docs"], "memory://docs-dataset"),
    ):
        check_output_location(load_run_config(None, [], environ={}, inputs=inputs, output=output))


def test_memory_output_with_worker_processes_is_refused(corpus, memory_fs):
    with pytest.raises(ConfigError, match="in-process"):
        run([corpus], "memory://dataset", "run.workers=2")
    assert not memory_fs.store


SECRET_IN = "AKIA-input-secret-7f3a9c21"
SECRET_OUT = "output-token-b81d44e6a0"


def test_credentials_are_never_written_or_printed(tmp_path, monkeypatch, capsys, caplog):
    root = write_corpus(tmp_path / "corpus")
    write_files(root, {"private/locked.md": b"# Locked\n\nOnly for the harbour master.\n"})
    output = tmp_path / "dataset"
    original_open = LocalFileSystem._open

    def storage_that_echoes_credentials(self, path, mode="rb", *args, **kwargs):
        # Like a storage client whose error message repeats the credential it was given.
        if path.endswith("locked.md") and "r" in mode:
            raise PermissionError(f"403 Forbidden: key {self.storage_options.get('secret')} may not read {path}")
        return original_open(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", storage_that_echoes_credentials)
    # Every read through the storage's open (a local file is otherwise read with plain system calls).
    monkeypatch.setattr(inputs_module, "_read_local_file", lambda path, limit: None)
    caplog.set_level(logging.DEBUG, logger="chunkline")
    caplog.set_level(logging.INFO)
    code = main(
        [
            "run",
            str(root),
            "--output",
            str(output),
            "--set",
            f"input.storage_options.secret={SECRET_IN}",
            "--set",
            f"output.storage_options.token={SECRET_OUT}",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    secrets = (SECRET_IN, SECRET_OUT)

    # The secret did reach an error message, and was replaced there.
    (error,) = rows(output, "errors")
    assert error["doc_id"] == "private/locked.md" and error["error_type"] == "PermissionError"
    assert "key *** may not read" in error["message"]
    assert "key *** may not read" in captured.out

    for text in (captured.out, captured.err, caplog.text):
        for secret in secrets:
            assert secret not in text
    everything = [path for path in output.rglob("*") if path.is_file()]
    assert len(everything) >= 5
    for path in everything:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret} written to {path}"
    for table in TABLE_SCHEMAS:
        for row in rows(output, table):
            assert not any(secret in repr(row) for secret in secrets), (table, row)
    config = json.loads((output / "_manifest.json").read_text())["config"]
    assert config["input"]["storage_options"] == {"secret": "***"}
    assert config["output"]["storage_options"] == {"token": "***"}
