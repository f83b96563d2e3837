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


@pytest.mark.slow
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
# a process of its own: prints the process's peak resident memory in MB (VmHWM, not ru_maxrss, which Linux
# carries over exec from the process that started this one: the whole test session).
_LARGE_LIST_RUN = """\
import sys
from chunkline.pipelines.cli import main
code = main(["run", sys.argv[1], "--output", sys.argv[2], "--config", sys.argv[3]])
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(code, peak_kb // 1024)
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


# --------------------------------------------------------------------------------------------------
# Hostile values: every one is a value, or a null and one errors row; the document is always chunked
# --------------------------------------------------------------------------------------------------

HOSTILE_COLUMNS = """\
output:
  front_matter_columns:
    text_value: string
    labels: list<string>
    count: integer
    ratio: float
    flag: boolean
    moment: timestamp
run:
  workers: 0
"""

_HUGE_TEXT = "x" * 70_000
_LONG_LABELS = "[" + ", ".join(f"label-{number:05d}" for number in range(6_000)) + "]"
_MISMATCH, _TOO_LARGE = "FrontMatterTypeMismatch", "FrontMatterValueTooLarge"

# doc_id -> (front matter body, {column: expected value, or the error_type of its one errors row})
HOSTILE_VALUES = {
    "huge.md": (
        f"text_value: {_HUGE_TEXT}\nlabels: {_LONG_LABELS}\ncount: 7\nratio: 0.5\nflag: true\nmoment: {_HUGE_TEXT}\n",
        {"text_value": _TOO_LARGE, "labels": _TOO_LARGE, "count": 7, "ratio": 0.5, "flag": True, "moment": _TOO_LARGE},
    ),
    "nested.md": (
        "".join(
            f"{key}: {{a: [1, {{b: [c, d]}}], e: {{f: g}}}}\n"
            for key in ("text_value", "labels", "count", "ratio", "flag", "moment")
        ),
        dict.fromkeys(("text_value", "labels", "count", "ratio", "flag", "moment"), _MISMATCH),
    ),
    "wrong-type.md": (
        'text_value: 12\nlabels: [1, two]\ncount: "12"\nratio: "1.5"\nflag: "true"\nmoment: 1714550400\n',
        dict.fromkeys(("text_value", "labels", "count", "ratio", "flag", "moment"), _MISMATCH),
    ),
    "edge-of-range.md": (
        'text_value: ""\nlabels: []\ncount: 9223372036854775807\nratio: 1.7976931348623157e+308\nflag: no\n'
        'moment: "0001-01-01T00:00:00-01:00"\n',
        {
            "text_value": "",
            "labels": [],
            "count": 2**63 - 1,
            "ratio": 1.7976931348623157e308,
            "flag": False,
            "moment": datetime(1, 1, 1, 1, tzinfo=UTC),
        },
    ),
    "past-the-range.md": (
        "text_value: 2024-05-01\nlabels: [a, null]\ncount: -9223372036854775809\nratio: 1e400\nflag: 1\n"
        'moment: "9999-12-31T23:30:00-01:00"\n',
        {
            "text_value": "2024-05-01",
            "labels": _MISMATCH,
            "count": _MISMATCH,
            "ratio": _MISMATCH,  # YAML 1.1 reads 1e400 (no dot) as text
            "flag": _MISMATCH,
            "moment": _MISMATCH,
        },
    ),
    "nan-and-infinities.md": (
        "text_value: .nan\nlabels: [.inf, -.inf]\ncount: .inf\nratio: .nan\nflag: -.inf\nmoment: .nan\n",
        {  # JSON-safe front matter holds them as the text "nan", "inf" and "-inf"
            "text_value": "nan",
            "labels": ["inf", "-inf"],
            "count": _MISMATCH,
            "ratio": _MISMATCH,
            "flag": _MISMATCH,
            "moment": _MISMATCH,
        },
    ),
    "huge-numbers.md": (
        f"text_value: {10**40}\nlabels: {2**64}\ncount: {2**64}\nratio: {10**300}\nflag: {2**64}\nmoment: {10**18}\n",
        dict.fromkeys(("text_value", "labels", "count", "ratio", "flag", "moment"), _MISMATCH),
    ),
    "odd-text.md": (
        'text_value: "a\\0b\\u200b\\uFFFE\\U0001F4A1"\nlabels: ["\\x7f", "\\u0301", ""]\ncount: "١٢"\n'
        'ratio: "٣.٥"\nflag: "ｔｒｕｅ"\nmoment: "２０２４-01-01"\n',
        {
            "text_value": "a\x00b\u200b\ufffe\U0001f4a1",
            "labels": ["\x7f", "\u0301", ""],
            "count": _MISMATCH,
            "ratio": _MISMATCH,
            "flag": _MISMATCH,
            "moment": _MISMATCH,
        },
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("beam_args", [[], ["--runner", "FnApiRunner"]], ids=["in-process", "beam"])
def test_hostile_values_of_every_type_are_a_value_or_a_null_and_one_errors_row(tmp_path, beam_args):
    files = {
        doc_id: f"---\n{body}---\n# {doc_id}\n\nThe tide gauge reads the water level.\n".encode()
        for doc_id, (body, _) in HOSTILE_VALUES.items()
    }
    files["latin1.md"] = b"---\ntext_value: caf\xe9\nlabels: [na\xefve]\n---\n# Latin-1\n\nRead with replacement.\n"
    corpus = write_files(tmp_path / "corpus", files)
    config_file = tmp_path / "chunkline.yaml"
    config_file.write_text(HOSTILE_COLUMNS + "input:\n  encoding_errors: replace\n", encoding="utf-8")
    output = tmp_path / "out"
    # With --runner, Beam's FnApiRunner in this process: the rows go through the row types Beam builds.
    assert main(["run", str(corpus), "--output", str(output), "--config", str(config_file), *beam_args]) == 0
    assert manifest(output)["rebuild"]["runner"] == ("FnApiRunner" if beam_args else "none")

    assert {doc_id: row["status"] for doc_id, row in documents(output).items()} == dict.fromkeys(files, "ok")
    errors = rows(output, "errors")
    by_doc = rows_by_doc(output, "chunks")
    expected_by_doc = {doc_id: expected for doc_id, (_, expected) in HOSTILE_VALUES.items()}
    expected_by_doc["latin1.md"] = {"text_value": "caf\ufffd", "labels": ["na\ufffdve"]}
    for doc_id, expected in expected_by_doc.items():
        for column in ("text_value", "labels", "count", "ratio", "flag", "moment"):
            wanted = expected.get(column)
            values = [row[column] for row in by_doc[doc_id]]
            problems = [
                row["error_type"]
                for row in errors
                if row["doc_id"] == doc_id and row["message"].startswith(f"front matter '{column}'")
            ]
            if wanted in (_MISMATCH, _TOO_LARGE):
                assert set(values) == {None} and problems == [wanted], (doc_id, column, problems)
            else:
                assert all(value == wanted for value in values) and problems == [], (doc_id, column, problems)
    assert all(row["stage"] == "parse" and "\n" not in row["message"] for row in errors)
