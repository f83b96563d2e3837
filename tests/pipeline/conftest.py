"""Fixtures and helpers of the Beam pipeline tests.

A small but realistic markdown corpus is written into ``tmp_path`` by the tests themselves (front matter,
headings of several levels and both syntaxes, code fences, a table, an HTML block, CRLF line endings, a
byte order mark, non-ASCII text, an empty file, a nested folder, a file that is not markdown), and the
helpers below run the pipeline on it, hash a published dataset's files and rebuild every document from its
chunk rows.

Test modules import the plain helpers with ``from .conftest import ...``; the fixtures are found by pytest.
"""

from __future__ import annotations

import hashlib
import posixpath
import shutil
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.core import url_to_fs

import chunkline
from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import RunSummary, run_pipeline
from chunkline.record import Chunk

REPOSITORY = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------

README = """\
---
title: Harbour Telemetry
tags: [sensors, operations]
updated: 2024-05-01
---
# Harbour Telemetry

Harbour Telemetry collects tide, wind and berth-occupancy readings from the sensors along the quay and
publishes them every minute to the port's operations dashboard.

## Quick start

Install the collector and point it at the serial port of the gateway:

```bash
pip install harbour-telemetry
# this line is a shell comment, not a heading
ht collect --port /dev/ttyUSB0 --interval 60
```

## Sensors

| sensor      | unit | interval |
| ----------- | ---- | -------- |
| tide gauge  | cm   | 60 s     |
| anemometer  | m/s  | 10 s     |
| berth radar | %    | 300 s    |

## Licence

Apache-2.0. See `LICENSE` for the full text.
"""

INSTALLATION = """\
# Installation

The collector runs on any Linux gateway with Python 3.10 or newer.

## Requirements

1. A gateway with one free USB port.
2. Network access to the dashboard (port 443).
3. The `ht` service account, created by the platform team.

## Configuration

Write `/etc/harbour/collector.yaml`:

```yaml
gateway: quay-north
sensors:
  - kind: tide
    port: /dev/ttyUSB0
  - kind: wind
    port: /dev/ttyUSB1
```

### Checking the configuration

Run the check before you start the service:

    ht check --config /etc/harbour/collector.yaml

It prints one line per sensor and exits with status 0 when every sensor answered.

## Upgrading

Stop the service, upgrade the package and start it again. Readings buffered on disk are sent after the
restart, so no reading is lost.
"""

TUNING = (
    "# Tuning the collector\n\n## Flush interval\n\n"
    + "\n\n".join(
        f"Step {n}: raise `flush_interval` to {n * 5} s on berth {n % 7} and watch the queue depth. If the "
        f"p95 latency stays under {100 + n * 3} ms for an hour, keep the setting and note it in the operations "
        "log; otherwise roll back and open a ticket with the graphs attached."
        for n in range(1, 31)
    )
    + "\n\n## Buffer size\n\nThe buffer holds 10 000 readings; raise it only together with the disk quota.\n"
)

API = """\
API reference
=============

The dashboard reads readings over HTTP.

Endpoints
---------

| method | path                 | returns               |
| ------ | -------------------- | --------------------- |
| GET    | /readings            | the latest readings   |
| GET    | /readings/{sensor}   | one sensor's history  |
| POST   | /alarms              | 201 and the alarm id  |

<div class="note">
# not a heading: this line sits in an HTML block
</div>

Errors
------

Every error is a JSON object with `code` and `message`.
"""

# CRLF line endings, a byte order mark, accents (precomposed and combining), CJK, an emoji and a tab.
GLOSSARY = (
    "\ufeff# Glossary\r\n\r\n"
    "## Berth\r\n\r\nA place at the quay where a ship moors. Le café du port est à côté du poste 3.\r\n\r\n"
    "## Tide gauge\r\n\r\nMeasures the water level (潮位計). Readings arrive every minute 🌊.\r\n\r\n"
    "## Naïve reading\r\n\r\nA reading taken before calibration (the e\u0301 here is combining).\r\n"
    "\tIndented with a tab.\r\n"
)

CHANGELOG = """\
# Changelog

## 1.2.0

- The berth radar reports occupancy in percent.
- `ht check` exits non-zero when a sensor does not answer.

## 1.1.0

- Readings are buffered on disk while the dashboard is unreachable.
"""

#: doc_id -> file bytes of every markdown document of the corpus.
CORPUS: dict[str, bytes] = {
    "README.md": README.encode("utf-8"),
    "CHANGELOG.md": CHANGELOG.encode("utf-8"),
    "guide/installation.md": INSTALLATION.encode("utf-8"),
    "guide/advanced/tuning.md": TUNING.encode("utf-8"),
    "guide/empty.md": b"",
    "reference/api.markdown": API.encode("utf-8"),
    "reference/glossary.md": GLOSSARY.encode("utf-8"),
}

#: Files in the corpus folder that folder inputs must not pick up (not a markdown extension).
NOT_MARKDOWN: dict[str, bytes] = {
    "notes.txt": b"# Not markdown\n\nA text file with a heading-like first line.\n",
    "reference/diagram.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><title># quay</title></svg>\n',
}


def write_files(root: Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` (relative POSIX path -> bytes) under ``root``; returns ``root``."""
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def write_realistic_corpus(root: Path, extra: Mapping[str, bytes] | None = None) -> Path:
    """The repository's sample corpus and the tests' markdown fixtures (front matter, CRLF line endings, an
    empty file, long sections with code and tables) under ``root``, with a binary file and a Latin-1 file
    (error rows), and ``extra`` files; returns ``root``."""
    shutil.copytree(REPOSITORY / "sample_corpus", root / "sample")
    shutil.copytree(REPOSITORY / "tests" / "fixtures" / "markdown", root / "fixtures")
    return write_files(
        root,
        {
            "assets/logo.md": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
            "legacy/latin1.md": "# Caf\xe9\n\nNa\xefve r\xe9sum\xe9.\n".encode("latin-1"),
            **(extra or {}),
        },
    )


def write_corpus(root: Path) -> Path:
    """The corpus (markdown documents and the files that are not markdown) under ``root``."""
    return write_files(root, {**CORPUS, **NOT_MARKDOWN})


# --------------------------------------------------------------------------------------------------
# Running the pipeline
# --------------------------------------------------------------------------------------------------


def run(
    inputs: Iterable[Any],
    output: Any,
    *overrides: str,
    beam_args: list[str] | None = None,
) -> RunSummary:
    """Run the pipeline as ``chunkline run`` does, with no environment variables taken into account."""
    config = load_run_config(
        None, list(overrides), environ={}, inputs=[str(item) for item in inputs], output=str(output)
    )
    return run_pipeline(config, beam_args)


# --------------------------------------------------------------------------------------------------
# Reading a dataset back
# --------------------------------------------------------------------------------------------------


def _file_digests(url: str, folders: Iterable[str] | None) -> dict[str, str]:
    fs, root = url_to_fs(str(url))
    root = root.rstrip("/")
    digests = {}
    for path in sorted(fs.find(root)):
        relative = posixpath.relpath(path, root)
        if folders is not None and relative.split("/", 1)[0] not in folders:
            continue
        digests[relative] = hashlib.sha256(fs.cat_file(path)).hexdigest()
    return digests


def table_digests(url: Any, tables: Iterable[str] = ("chunks", "documents")) -> dict[str, str]:
    """``{"chunks/part-....parquet": sha256, ...}`` for every file the published manifest names in the given
    tables (keyed without the snapshot folder, so two outputs' snapshots compare by their parts alone)."""
    fs, root = url_to_fs(str(url))
    published = read_manifest(str(url))
    digests = {}
    for table in tables:
        for name in published["tables"][table]["files"]:
            digests[f"{table}/{posixpath.basename(name)}"] = hashlib.sha256(
                fs.cat_file(f"{root.rstrip('/')}/{name}")
            ).hexdigest()
    return digests


def all_file_digests(url: Any) -> dict[str, str]:
    """sha256 of every file under ``url`` (manifest, _SUCCESS, every table, anything else)."""
    return _file_digests(str(url), None)


def rows(url: Any, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` of the dataset published at ``url``."""
    return read_dataset(str(url), table).to_pylist()


def rows_by_doc(url: Any, table: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of ``table`` grouped by doc_id (chunks in chunk_index order)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows(url, table):
        grouped[row["doc_id"]].append(row)
    for group in grouped.values():
        group.sort(key=lambda row: (row.get("chunk_index") or 0, row.get("source_uri") or ""))
    return dict(grouped)


def documents(url: Any) -> dict[str, dict[str, Any]]:
    """The documents table as doc_id -> row (asserting one row per doc_id)."""
    table = rows(url, "documents")
    by_id = {row["doc_id"]: row for row in table}
    assert len(by_id) == len(table), f"several documents rows for one doc_id: {sorted(r['doc_id'] for r in table)}"
    return by_id


def as_chunk(row: Mapping[str, Any]) -> Chunk:
    """A chunk row of the dataset as a :class:`chunkline.Chunk`."""
    values = dict(row)
    values["heading_path"] = tuple(values["heading_path"])
    return Chunk(**values)


def rebuild_documents(url: Any) -> dict[str, str]:
    """doc_id -> the document text rebuilt from its chunk rows with ``chunkline.reconstruct``."""
    return {
        doc_id: chunkline.reconstruct([as_chunk(row) for row in group])
        for doc_id, group in rows_by_doc(url, "chunks").items()
    }


def assert_document_chunks(chunk_rows: list[dict[str, Any]], data: bytes, text: str | None = None) -> None:
    """Every chunk row of one document is the verbatim slice of its text and bytes, indexes run 0..n-1,
    and the rows rebuild the document exactly."""
    text = data.decode("utf-8") if text is None else text
    assert [row["chunk_index"] for row in chunk_rows] == list(range(len(chunk_rows)))
    for row in chunk_rows:
        assert row["chunk_id"] == f"{row['doc_id']}#{row['chunk_index']}"
        assert row["text"] == text[row["start_char"] : row["end_char"]]
        assert data[row["start_byte"] : row["end_byte"]] == row["text"].encode("utf-8")
        assert row["char_count"] == len(row["text"])
        assert row["content_sha256"] == hashlib.sha256(row["text"].encode("utf-8")).hexdigest()
    assert chunkline.reconstruct([as_chunk(row) for row in chunk_rows]) == text


def manifest(url: Any) -> dict[str, Any]:
    return read_manifest(str(url))


# --------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """The corpus written into ``tmp_path/corpus``."""
    return write_corpus(tmp_path / "corpus")


@pytest.fixture
def memory_fs():
    """fsspec's in-memory filesystem, emptied before and after the test (it is one store per process)."""
    fs = fsspec.filesystem("memory")

    def clear() -> None:
        fs.store.clear()
        fs.pseudo_dirs.clear()
        fs.pseudo_dirs.append("")

    clear()
    yield fs
    clear()
