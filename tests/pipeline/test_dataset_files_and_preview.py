"""What ``chunkline.dataset_files`` returns opens in every reader a user hands it to (pandas, pyarrow, Beam's
``FileSystems`` and ``ReadFromParquet``), for a local and an in-memory dataset; and ``chunkline chunk`` on a
folder shows the text as it is and names each file with the doc_id ``chunkline run`` gives it."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pandas as pd
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

import chunkline
from chunkline.pipelines.cli import main

from .conftest import CORPUS, rows, run, write_files

pytestmark = pytest.mark.timeout(300)

# A nested folder of documents whose text is not ASCII: typographic quotes and dashes, accents, CJK, an emoji.
NON_ASCII_DOCS = {
    "handbook/berths/north-quay.md": (
        "# North quay\n\nIt\u2019s the \u201cdeep\u201d berth \u2014 ships up to 14 m draught moor here.\n\n"
        "## Caf\u00e9\n\nLe caf\u00e9 du port ouvre \u00e0 6 h. \u6f6e\u4f4d\u8a08 by the door \U0001f30a.\n"
    ).encode("utf-8"),
    "handbook/safety.md": b"# Safety\n\nLife jackets hang at every ladder.\n",
    "index.md": "# Stra\u00dfe\n\nGr\u00fc\u00dfe aus dem Hafen.\n".encode(),
}


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory) -> tuple[str, str]:
    """(corpus folder, dataset folder) of one in-process run over the harbour corpus plus NON_ASCII_DOCS."""
    root = tmp_path_factory.mktemp("dataset-files")
    corpus = write_files(root / "corpus", {**CORPUS, **NON_ASCII_DOCS})
    output = root / "out"
    run([corpus], output)
    return str(corpus), str(output)


@pytest.mark.slow
def test_local_parts_are_plain_absolute_paths_every_reader_opens(local_dataset):
    _, output = local_dataset
    expected = sorted(
        (row["chunk_id"], row["text"]) for row in rows(output, "chunks")
    )  # through the manifest, verified
    files = chunkline.dataset_files(output, "chunks")
    assert files and all(os.path.isabs(path) and "://" not in path and os.path.isfile(path) for path in files)

    by_pandas = pd.concat([pd.read_parquet(path) for path in files])
    assert sorted(zip(by_pandas["chunk_id"], by_pandas["text"])) == expected
    assert sorted(zip(*pd.read_parquet(files, columns=["chunk_id", "text"]).to_dict("list").values())) == expected
    by_pyarrow = pq.read_table(files, columns=["chunk_id", "text"])
    assert sorted(zip(by_pyarrow["chunk_id"].to_pylist(), by_pyarrow["text"].to_pylist())) == expected

    for path in files:  # Beam's filesystems, as a DoFn or a custom source opens a file
        with FileSystems.open(path) as handle:
            assert handle.read(4) == b"PAR1"

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        read = (
            pipeline
            | beam.Create(files)
            | beam.io.ReadAllFromParquet(columns=["chunk_id", "text"])
            | beam.Map(lambda row: (row["chunk_id"], row["text"]))
        )
        assert_that(read, equal_to(expected))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        # One ReadFromParquet per part: the files sit in a snapshot folder beside no others.
        folder = os.path.dirname(files[0])
        globbed = pipeline | beam.io.ReadFromParquet(os.path.join(folder, "*.parquet"), columns=["chunk_id"])
        assert_that(globbed | beam.Map(lambda row: row["chunk_id"]), equal_to([chunk_id for chunk_id, _ in expected]))


def test_remote_parts_keep_their_protocol(memory_fs, tmp_path):
    corpus = write_files(tmp_path / "corpus", NON_ASCII_DOCS)
    run([corpus], "memory://harbour/out")
    files = chunkline.dataset_files("memory://harbour/out", "documents")
    # As fsspec writes a memory URL: its paths start at "/".
    assert files and all(path.startswith("memory:///harbour/out/snapshots/") for path in files)
    documents = pd.concat([pd.read_parquet(path) for path in files])
    assert sorted(documents["doc_id"]) == sorted(NON_ASCII_DOCS)


def test_chunk_on_a_folder_names_files_as_run_does_and_shows_text_as_it_is(local_dataset, capsys):
    corpus, output = local_dataset
    capsys.readouterr()
    assert main(["chunk", corpus, "--format", "jsonl"]) == 0
    previewed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    run_rows = rows(output, "chunks")
    assert (
        {record["doc_id"] for record in previewed}
        == {row["doc_id"] for row in run_rows}
        == set(CORPUS) | set(NON_ASCII_DOCS)
    )
    assert sorted((record["chunk_id"], record["text"]) for record in previewed) == sorted(
        (row["chunk_id"], row["text"]) for row in run_rows
    )

    # A subfolder is its own root, for both commands.
    assert main(["chunk", os.path.join(corpus, "handbook"), "--format", "jsonl"]) == 0
    subfolder_ids = {json.loads(line)["doc_id"] for line in capsys.readouterr().out.splitlines()}
    assert subfolder_ids == {"berths/north-quay.md", "safety.md"}

    assert main(["chunk", corpus, "--set", "min_tokens=0"]) == 0
    table = capsys.readouterr().out
    assert f"== {corpus}/handbook/berths/north-quay.md: 2 chunk(s)" in table
    assert "North quay > Caf\u00e9" in table  # the heading path as it is
    assert "It\u2019s the \u201cdeep\u201d berth \u2014 ships" in table
    assert "Le caf\u00e9 du port ouvre \u00e0 6 h. \u6f6e\u4f4d\u8a08 by" in table
    assert "# Stra\u00dfe\\n\\nGr\u00fc\u00dfe aus dem Hafen.\\n" in table  # line breaks stay escaped: one line
    assert "\\u" not in table and "\\x" not in table


def test_chunk_on_a_quoted_glob_names_files_as_run_on_that_glob_does(local_dataset, tmp_path, capsys):
    corpus, _ = local_dataset
    pattern = f"{corpus}/handbook/**/*.md"
    output = tmp_path / "globbed"
    run([pattern], output)
    capsys.readouterr()
    assert main(["chunk", pattern, "--format", "jsonl"]) == 0
    previewed = {json.loads(line)["doc_id"] for line in capsys.readouterr().out.splitlines()}
    assert previewed == {row["doc_id"] for row in rows(output, "chunks")} == {"berths/north-quay.md", "safety.md"}
    assert main(["chunk", f"{corpus}/no-such-folder/*.md"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_chunk_preview_escapes_what_would_break_or_reorder_its_lines(tmp_path, capsys):
    document = tmp_path / "controls.md"
    document.write_text(
        "# Log\n\nred \x1b[31malarm\x1b[0m\tlevel \u202egnirts\u202c end\u2028next, caf\u00e9\n", encoding="utf-8"
    )
    assert main(["chunk", str(document)]) == 0
    lines = capsys.readouterr().out.splitlines()
    preview = next(line.strip() for line in lines if line.strip().startswith("# Log"))
    assert preview == "# Log\\n\\nred \\x1b[31malarm\\x1b[0m\\tlevel \\u202egnirts\\u202c end\\u2028next, caf\u00e9\\n"
