"""The Parquet handoff as analysts open it: the sample corpus's dataset read with pyarrow, pyarrow.dataset,
pandas, polars, DuckDB and ``read_dataset``. Every reader sees the manifest's row counts and the schema's
column types with no cast: integers stay integers, timestamps timestamps, and ``heading_path`` a list of
strings.

The part files are found through the manifest, never by assuming a folder layout: the folder a reader globs
is the one that holds the files the manifest names.
"""

from __future__ import annotations

import glob
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import run_pipeline
from chunkline.schemas import TABLE_SCHEMAS

pytestmark = pytest.mark.timeout(300)

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
#: The tables every run publishes (PRODUCT.md); others the manifest names are checked as well.
ALWAYS_PUBLISHED = ("chunks", "documents", "errors")


@pytest.fixture(scope="module")
def sample_dataset(tmp_path_factory) -> str:
    """The dataset of ``sample_corpus/``, published once on the in-process runner; its URL."""
    output = tmp_path_factory.mktemp("readers") / "sample-dataset"
    config = load_run_config(None, [], environ={}, inputs=[str(SAMPLE_CORPUS)], output=str(output))
    run_pipeline(config)
    return str(output)


@pytest.fixture(scope="module")
def published_tables(sample_dataset) -> dict[str, dict[str, Any]]:
    """table -> its manifest entry (``files``, ``rows``), for every table the manifest names."""
    tables = read_manifest(sample_dataset)["tables"]
    assert set(ALWAYS_PUBLISHED) <= set(tables)
    assert set(tables) <= set(TABLE_SCHEMAS), (
        f"manifest names tables without a schema: {set(tables) - set(TABLE_SCHEMAS)}"
    )
    return tables


def part_files(url: str, table: str) -> list[str]:
    """Local paths of the part files the manifest names for ``table``."""
    return [posixpath.join(url, name) for name in read_manifest(url)["tables"][table]["files"]]


def part_folder(url: str, table: str) -> str:
    """The folder holding ``table``'s part files: what a reader that globs (DuckDB, pyarrow.dataset) opens."""
    files = read_manifest(url)["tables"][table]["files"]
    return posixpath.join(url, posixpath.commonpath([posixpath.dirname(name) for name in files]))


# --------------------------------------------------------------------------------------------------
# What each reader's types must be, from the Arrow type of the schema
# --------------------------------------------------------------------------------------------------


def expected_polars_type(arrow_type: pa.DataType) -> pl.DataType:
    if pa.types.is_list(arrow_type):
        return pl.List(expected_polars_type(arrow_type.value_type))
    if pa.types.is_timestamp(arrow_type):
        return pl.Datetime(arrow_type.unit, arrow_type.tz)
    simple = {
        pa.int32(): pl.Int32,
        pa.int64(): pl.Int64,
        pa.bool_(): pl.Boolean,
        pa.string(): pl.String,
        pa.large_string(): pl.String,
    }
    assert arrow_type in simple, f"no polars type expected for {arrow_type}: add it to this test"
    return simple[arrow_type]


def expected_duckdb_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_list(arrow_type):
        return expected_duckdb_type(arrow_type.value_type) + "[]"
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz == "UTC":
        return "TIMESTAMP WITH TIME ZONE"
    simple = {
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.bool_(): "BOOLEAN",
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
    }
    assert arrow_type in simple, f"no DuckDB type expected for {arrow_type}: add it to this test"
    return simple[arrow_type]


def check_pandas_column(
    series: pd.Series,
    arrow_type: pa.DataType,
    *,
    lists: tuple[type, ...] = (list, np.ndarray),
    nullable: bool = False,
) -> None:
    """``series`` holds ``arrow_type`` without a cast (no float for an int, no object for a timestamp); a
    nullable integer column that holds a null reads as ``float64`` of whole numbers, as the data dictionary
    says."""
    values = [
        value for value in series.tolist() if value is not None and not (isinstance(value, float) and np.isnan(value))
    ]
    if pa.types.is_integer(arrow_type) and nullable and series.isna().any():
        assert series.dtype == np.dtype("float64"), (series.name, series.dtype)
        assert all(float(value).is_integer() for value in values), series.name
    elif pa.types.is_integer(arrow_type):
        assert series.dtype == np.dtype(arrow_type.to_pandas_dtype()), (series.name, series.dtype)
    elif pa.types.is_boolean(arrow_type):
        assert series.dtype == np.dtype(bool), (series.name, series.dtype)
    elif pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        assert pd.api.types.is_string_dtype(series.dtype), (series.name, series.dtype)
        assert all(isinstance(value, str) for value in values), series.name
    elif pa.types.is_timestamp(arrow_type):
        assert isinstance(series.dtype, pd.DatetimeTZDtype) and str(series.dtype.tz) == arrow_type.tz, (
            series.name,
            series.dtype,
        )
    elif pa.types.is_list(arrow_type) and pa.types.is_string(arrow_type.value_type):
        assert series.dtype == np.dtype(object), (series.name, series.dtype)
        assert all(isinstance(value, lists) for value in values), (series.name, {type(value) for value in values})
        assert all(isinstance(item, str) for value in values for item in value), series.name
    else:
        raise AssertionError(f"no pandas check for {arrow_type}: add it to this test")


def check_pandas_frame(frame: pd.DataFrame, table: str, **options) -> None:
    schema = TABLE_SCHEMAS[table][0]
    assert list(frame.columns) == schema.names, table
    for field in schema:
        check_pandas_column(frame[field.name], field.type, nullable=field.nullable, **options)


def check_arrow_schema(found: pa.Schema, table: str) -> None:
    schema = TABLE_SCHEMAS[table][0]
    assert found.names == schema.names, table
    for field in schema:
        assert found.field(field.name).type == field.type, (table, field.name, found.field(field.name).type)


# --------------------------------------------------------------------------------------------------
# Every reader, every published table
# --------------------------------------------------------------------------------------------------


def test_globbed_folder_holds_exactly_the_manifest_files(sample_dataset, published_tables):
    # DuckDB and pyarrow.dataset read a folder: that is only the dataset if the folder holds nothing else.
    for table, entry in published_tables.items():
        assert entry["files"], table
        folder = part_folder(sample_dataset, table)
        assert sorted(glob.glob(posixpath.join(folder, "*.parquet"))) == sorted(part_files(sample_dataset, table)), (
            table
        )


def test_manifest_counts_match_the_corpus(sample_dataset, published_tables):
    manifest = read_manifest(sample_dataset)
    markdown_files = [path for path in SAMPLE_CORPUS.rglob("*") if path.suffix in {".md", ".markdown"}]
    assert published_tables["documents"]["rows"] == len(markdown_files) == manifest["counts"]["documents_ok"]
    assert published_tables["chunks"]["rows"] == manifest["counts"]["chunks"] > len(markdown_files)
    assert published_tables["errors"]["rows"] == 0


def test_pyarrow_read_table_on_the_part_files(sample_dataset, published_tables):
    for table, entry in published_tables.items():
        found = pq.read_table(part_files(sample_dataset, table))
        assert found.num_rows == entry["rows"], table
        check_arrow_schema(found.schema, table)
    chunks = pq.read_table(part_files(sample_dataset, "chunks"))
    assert all(isinstance(item, str) for path in chunks.column("heading_path").to_pylist() for item in path)


def test_pyarrow_dataset_on_each_table_folder(sample_dataset, published_tables):
    for table, entry in published_tables.items():
        dataset = ds.dataset(part_folder(sample_dataset, table), format="parquet")
        assert dataset.count_rows() == entry["rows"], table
        check_arrow_schema(dataset.schema, table)


def test_pandas_read_parquet(sample_dataset, published_tables):
    for table, entry in published_tables.items():
        frame = pd.read_parquet(part_files(sample_dataset, table))
        assert len(frame) == entry["rows"], table
        check_pandas_frame(frame, table)


def test_polars_read_and_scan_parquet(sample_dataset, published_tables):
    for table, entry in published_tables.items():
        expected = {field.name: expected_polars_type(field.type) for field in TABLE_SCHEMAS[table][0]}
        frame = pl.read_parquet(part_files(sample_dataset, table))
        assert frame.height == entry["rows"], table
        assert dict(frame.schema) == expected, table
        lazy = pl.scan_parquet(posixpath.join(part_folder(sample_dataset, table), "*.parquet"))
        assert dict(lazy.collect_schema()) == expected, table
        assert lazy.select(pl.len()).collect().item() == entry["rows"], table


def test_duckdb_read_parquet(sample_dataset, published_tables):
    connection = duckdb.connect()
    for table, entry in published_tables.items():
        source = f"read_parquet('{posixpath.join(part_folder(sample_dataset, table), '*.parquet')}')"
        described = connection.execute(f"describe select * from {source}").fetchall()
        expected = [(field.name, expected_duckdb_type(field.type)) for field in TABLE_SCHEMAS[table][0]]
        assert [(name, kind) for name, kind, *_ in described] == expected, table
        assert connection.execute(f"select count(*) from {source}").fetchall() == [(entry["rows"],)], table
    paths = connection.execute(
        f"select heading_path from read_parquet('{posixpath.join(part_folder(sample_dataset, 'chunks'), '*.parquet')}')"
    ).fetchall()
    assert all(isinstance(path, list) and all(isinstance(item, str) for item in path) for (path,) in paths)


def test_read_dataset_as_pandas_gives_lists_of_strings(sample_dataset, published_tables):
    for table, entry in published_tables.items():
        frame = read_dataset(sample_dataset, table, as_pandas=True)
        assert len(frame) == entry["rows"], table
        # read_dataset promises Python lists, not the numpy arrays of a plain to_pandas().
        check_pandas_frame(frame, table, lists=(list,))


def duckdb_rows(query: str) -> list[dict[str, Any]]:
    """The rows of ``query`` as DuckDB's own Python values."""
    cursor = duckdb.connect().execute(query)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


READERS: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "pyarrow": lambda url: pq.read_table(part_files(url, "chunks")).to_pylist(),
    "pyarrow.dataset": lambda url: ds.dataset(part_folder(url, "chunks"), format="parquet").to_table().to_pylist(),
    "pandas": lambda url: pd.read_parquet(part_files(url, "chunks")).to_dict("records"),
    "polars": lambda url: pl.read_parquet(part_files(url, "chunks")).to_dicts(),
    "duckdb": lambda url: duckdb_rows(
        f"select * from read_parquet('{posixpath.join(part_folder(url, 'chunks'), '*.parquet')}')"
    ),
}


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_sees_the_same_chunk_positions_and_heading_paths(sample_dataset, reader):
    def positions(rows: list[dict[str, Any]]) -> dict[str, tuple]:
        return {
            row["chunk_id"]: (
                row["doc_id"],
                int(row["start_line"]),
                int(row["end_line"]),
                [str(item) for item in row["heading_path"]],
            )
            for row in rows
        }

    expected = positions(read_dataset(sample_dataset, "chunks").to_pylist())
    assert positions(READERS[reader](sample_dataset)) == expected
    assert any(len(path) >= 3 for *_, path in expected.values())
