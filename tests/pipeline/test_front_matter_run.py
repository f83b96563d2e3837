"""``chunkline run`` with ``output.front_matter_columns``: documents with front matter (a tags list, a version
string, numbers, dates, booleans, a wrong-typed value, a missing key) become chunks with typed columns that
pyarrow, pandas and DuckDB filter on without parsing JSON; a value that does not fit is null and an errors
row, and the document is chunked all the same; the columns change the fingerprint, and the changes tables
follow them."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import datetime, timezone

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import chunkline
from chunkline.dataset.publish import manifest_problem
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.cli import main
from chunkline.schemas.dictionary import data_dictionary_markdown, description_of

from .conftest import documents, manifest, rows, rows_by_doc, write_files

pytestmark = pytest.mark.timeout(300)

DOCS = {
    "guide/tide-gauges.md": b"""\
---
title: Tide gauges
tags: [sensors, operations]
version: "2.1"
weight: 3
ratio: 0.75
draft: false
updated: 2024-05-01
---
# Tide gauges

The gauges read the water level every minute.

## Calibration

Calibrate against the benchmark on the quay each spring.
""",
    "guide/wind.md": b"""\
---
tags: wind
version: 1.10
weight: heavy
draft: yes
updated: 2024-05-01T10:30:00+02:00
---
# Wind

Gusts over 20 m/s stop the cranes.
""",
    "notes/plain.md": b"# Plain notes\n\nNo front matter at all.\n",
    "notes/toml.md": b"""\
+++
tags = ["toml", "notes"]
version = "0.9"
weight = 1.5
updated = 2023-12-24T08:00:00Z
+++
# TOML front matter

Hugo writes it this way.
""",
}

CONFIG = """\
output:
  front_matter_columns:
    tags: list<string>
    version: string
    weight: float
    draft: boolean
    updated: timestamp
    title: {type: string, column: page_title}
"""

PROMOTED = ["draft", "page_title", "tags", "updated", "version", "weight"]
UTC = timezone.utc

EXPECTED = {  # doc_id -> the promoted values of each of its chunks
    "guide/tide-gauges.md": {
        "draft": False,
        "page_title": "Tide gauges",
        "tags": ["sensors", "operations"],
        "updated": datetime(2024, 5, 1, tzinfo=UTC),
        "version": "2.1",
        "weight": 3.0,
    },
    "guide/wind.md": {  # version 1.10 is YAML's number 1.1, weight a word: both null
        "draft": True,
        "page_title": None,
        "tags": ["wind"],
        "updated": datetime(2024, 5, 1, 8, 30, tzinfo=UTC),
        "version": None,
        "weight": None,
    },
    "notes/plain.md": dict.fromkeys(PROMOTED),
    "notes/toml.md": {
        "draft": None,
        "page_title": None,
        "tags": ["toml", "notes"],
        "updated": datetime(2023, 12, 24, 8, tzinfo=UTC),
        "version": "0.9",
        "weight": 1.5,
    },
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(corpus, output, config file) of one ``chunkline run --config`` over DOCS."""
    root = tmp_path_factory.mktemp("front-matter-run")
    corpus = write_files(root / "corpus", DOCS)
    config_file = root / "chunkline.yaml"
    config_file.write_text(CONFIG, encoding="utf-8")
    output = root / "out"
    assert main(["run", str(corpus), "--output", str(output), "--config", str(config_file)]) == 0
    return corpus, output, config_file


def test_chunks_carry_the_typed_values_and_the_documents_are_all_chunked(published):
    _, output, _ = published
    by_doc = rows_by_doc(output, "chunks")
    assert set(by_doc) == set(DOCS)
    assert {doc_id: row["status"] for doc_id, row in documents(output).items()} == dict.fromkeys(DOCS, "ok")
    for doc_id, chunk_rows in by_doc.items():
        assert chunk_rows and all({name: row[name] for name in PROMOTED} == EXPECTED[doc_id] for row in chunk_rows)


def test_a_value_that_does_not_fit_is_an_errors_row_naming_the_key(published):
    _, output, _ = published
    errors = sorted((row["doc_id"], row["stage"], row["error_type"], row["message"]) for row in rows(output, "errors"))
    assert [error[:3] for error in errors] == [("guide/wind.md", "parse", "FrontMatterTypeMismatch")] * 2
    assert errors[0][3].startswith("front matter 'version' is 1.1 (a number), which is not a string")
    assert errors[1][3].startswith("front matter 'weight' is \"heavy\" (a string), which is not a float")


def test_pyarrow_pandas_and_duckdb_read_the_columns_typed_and_described(published):
    _, output, _ = published
    files = chunkline.dataset_files(str(output), "chunks")
    table = pq.read_table(files)
    schema = table.schema
    assert schema.field("tags").type == pa.list_(pa.string())
    assert schema.field("version").type == pa.string()
    assert schema.field("weight").type == pa.float64()
    assert schema.field("draft").type == pa.bool_()
    assert schema.field("updated").type == pa.timestamp("us", tz="UTC")
    config = load_run_config(published[2], environ={}, output=str(output), require_inputs=False)
    dictionary = data_dictionary_markdown(config.output.promoted_front_matter)
    for name in PROMOTED:
        description = description_of(schema.field(name).metadata)
        assert description.startswith("Front matter ")
        assert f"| `{name}` |" in dictionary and " ".join(description.split()).replace("<", "\\<") in dictionary

    frame = pd.concat([pd.read_parquet(path) for path in files])
    tagged = frame[frame["tags"].map(lambda tags: tags is not None and "operations" in tags)]
    assert set(tagged["doc_id"]) == {"guide/tide-gauges.md"}
    assert str(frame["updated"].dtype) == "datetime64[us, UTC]"
    assert frame["weight"].dtype == "float64"
    recent = frame[frame["updated"] >= pd.Timestamp("2024-01-01", tz="UTC")]
    assert set(recent["doc_id"]) == {"guide/tide-gauges.md", "guide/wind.md"}

    with_pandas = chunkline.read_dataset(str(output), "chunks", as_pandas=True)
    assert with_pandas.loc[with_pandas["doc_id"] == "notes/toml.md", "tags"].iloc[0] == ["toml", "notes"]

    connection = duckdb.connect()
    paths = ", ".join(f"'{path}'" for path in files)
    found = connection.execute(
        f"SELECT DISTINCT doc_id FROM read_parquet([{paths}]) WHERE list_contains(tags, 'wind') AND draft"
    ).fetchall()
    assert found == [("guide/wind.md",)]


def test_the_manifest_records_the_columns_and_upserts_carry_them(published):
    _, output, _ = published
    assert manifest(output)["config"]["output"]["front_matter_columns"]["title"] == {
        "type": "string",
        "column": "page_title",
    }
    upserts = rows(output, "changes/upserts")
    assert {row["doc_id"]: row["tags"] for row in upserts}["guide/tide-gauges.md"] == ["sensors", "operations"]


def test_a_manifest_whose_columns_cannot_be_read_is_not_trusted(published):
    _, output, _ = published
    tampered = copy.deepcopy(manifest(output))
    tampered["config"]["output"]["front_matter_columns"]["tags"] = {"type": "list<str>", "column": "tags"}
    assert manifest_problem(tampered) == (
        "its output.front_matter_columns.tags: unknown type 'list<str>'; types: string, list<string>, integer, "
        "float, boolean, timestamp"
    )
    assert manifest_problem(manifest(output)) is None


def test_same_columns_carry_over_other_columns_rebuild_and_upsert_every_chunk(published, tmp_path):
    corpus, first, config_file = published
    output = tmp_path / "out"
    assert main(["run", str(corpus), "--output", str(output), "--config", str(config_file)]) == 0
    assert main(["run", str(corpus), "--output", str(output), "--config", str(config_file)]) == 0
    again = manifest(output)
    assert again["rebuild"]["mode"] == "incremental" and again["rebuild"]["documents_chunked"] == 0
    assert rows(output, "changes/upserts") == []
    assert rows(output, "errors") == rows(first, "errors")  # the mismatch rows carried over with their documents

    # Fewer columns: a full rebuild, and every chunk an upsert (a store's copy holds a column no longer written).
    assert (
        main(["run", str(corpus), "--output", str(output), "--set", "output.front_matter_columns.tags=list<string>"])
        == 0
    )
    fewer = manifest(output)
    assert fewer["rebuild"]["mode"] == "full"
    chunk_rows = rows(output, "chunks")
    assert [name for name in chunk_rows[0] if name in PROMOTED] == ["tags"]
    assert len(rows(output, "changes/upserts")) == len(chunk_rows)
    assert rows(output, "errors") == []  # tags fit everywhere

    # None at all: the chunks are the built-in columns again.
    assert main(["run", str(corpus), "--output", str(output)]) == 0
    assert not set(rows(output, "chunks")[0]) & set(PROMOTED)


# A run over one document whose front matter is a list of about 1 MB, promoted to a list<string> column, in
# a process of its own: prints the process's peak resident memory in MB.
_LARGE_LIST_RUN = """\
import resource, sys
from chunkline.pipelines.cli import main
code = main(["run", sys.argv[1], "--output", sys.argv[2], "--config", sys.argv[3]])
print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.slow
def test_a_megabyte_of_promoted_tags_is_null_with_one_row_and_memory_stays_bounded(tmp_path):
    tags = [f"sensor-{number:07d}" for number in range(70_000)]
    text = "---\ntags:\n" + "".join(f"  - {tag}\n" for tag in tags) + "---\n# Sensors\n\nEvery sensor on the quay.\n"
    assert len(text) > 1_000_000
    corpus = write_files(tmp_path / "corpus", {"sensors.md": text.encode(), **{"guide/wind.md": DOCS["guide/wind.md"]}})
    config_file = tmp_path / "chunkline.yaml"
    config_file.write_text("output:\n  front_matter_columns:\n    tags: list<string>\nrun:\n  workers: 0\n")
    output = tmp_path / "out"
    finished = subprocess.run(
        [sys.executable, "-c", _LARGE_LIST_RUN, str(corpus), str(output), str(config_file)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    code, peak_mb = map(int, finished.stdout.split()[-2:])
    assert code == 0, finished.stderr[-2000:]
    # Every chunk of the document would carry the megabyte: some 1,000 chunks, gigabytes. Without it the
    # run peaks near 0.2 GB.
    assert peak_mb < 1024, f"peak resident memory {peak_mb} MB"
    assert documents(output)["sensors.md"]["status"] == "ok"
    chunk_rows = rows_by_doc(output, "chunks")
    assert len(chunk_rows["sensors.md"]) > 100 and all(row["tags"] is None for row in chunk_rows["sensors.md"])
    assert all(row["tags"] == ["wind"] for row in chunk_rows["guide/wind.md"])
    errors = [(row["doc_id"], row["error_type"], row["message"]) for row in rows(output, "errors")]
    assert [error[:2] for error in errors] == [("sensors.md", "FrontMatterValueTooLarge")]
    size_bytes = len(json.dumps(tags))
    assert errors[0][2].startswith(
        f"front matter 'tags' is a list of {size_bytes:,} bytes as JSON, over the 65,536 bytes"
    )
