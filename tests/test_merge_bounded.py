"""The bounded merge of a shard's chunks equals the whole-table merge, byte for byte, and stays bounded.

The reference is the straightforward merge: concatenate every source, sort by the key and drop repeated keys
(:func:`sorted_unique`), diff against the previous rows (:func:`chunk_changes`) and write each table whole
(:func:`parquet_bytes`). The bounded merge (:func:`sorted_unique_row_groups`, :class:`PartWriter`,
:func:`chunk_upserts` per row group, :func:`chunk_deletes` from the new chunk ids) must give the same rows
and the same part bytes, on random shards with the copies a retried bundle spills twice and with rows
carried over from a previous snapshot, with row groups ended by their rows or by their bytes
(``output.row_group_bytes``).
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.merge import (
    PartWriter,
    chunk_changes,
    chunk_deletes,
    chunk_upserts,
    not_carried,
    shard_of,
    sorted_row_groups_and_sizes,
    sorted_unique,
    sorted_unique_row_groups,
)
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.row_groups import row_bytes, row_group_ends
from chunkline.dataset.sink import MergeShard, SpillRows, WriteSettings
from chunkline.dataset.storage import parquet_bytes
from chunkline.pipelines.process_tuning import map_large_allocations, system_allocations
from chunkline.schemas import TABLE_SCHEMAS

CHUNKS_SCHEMA, CHUNKS_KEY = TABLE_SCHEMAS["chunks"]
UPSERTS_SCHEMA = TABLE_SCHEMAS["changes/upserts"][0]


def chunk_row(doc_id: str, chunk_index: int, text: str, heading: str = "Intro") -> dict:
    """A chunk row of the real schema whose columns follow from its document, index and text."""
    embed_text = f"{heading}\n\n{text}"
    return {
        "chunk_id": f"{doc_id}#{chunk_index}",
        "chunk_uuid": hashlib.sha256(f"{doc_id}#{chunk_index}".encode()).hexdigest()[:32],
        "doc_id": doc_id,
        "source_uri": f"file:///corpus/{doc_id}",
        "chunk_index": chunk_index,
        "text": text,
        "start_char": chunk_index * 100,
        "end_char": chunk_index * 100 + len(text),
        "start_byte": chunk_index * 100,
        "end_byte": chunk_index * 100 + len(text.encode()),
        "start_line": chunk_index + 1,
        "start_column": 1,
        "end_line": chunk_index + 2,
        "end_column": 1,
        "heading_path": [heading] if chunk_index % 3 else [],
        "section_index": chunk_index // 2,
        "token_count": len(text.split()),
        "char_count": len(text),
        "is_sub_split": chunk_index % 2 == 1,
        "strategy": "headings",
        "content_sha256": hashlib.sha256(doc_id.encode()).hexdigest(),
        "title": doc_id.upper(),
        "embed_text": embed_text,
        "embed_token_count": len(embed_text.split()),
        "section_id": f"{doc_id}#s{chunk_index // 2}",
        "prev_chunk_id": f"{doc_id}#{chunk_index - 1}" if chunk_index else None,
        "next_chunk_id": f"{doc_id}#{chunk_index + 1}",
        "parent_section_ids": [f"{doc_id}#s0"] if chunk_index // 2 else [],
    }


def chunks_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=CHUNKS_SCHEMA)


def reference_parts(
    sources: list[pa.Table], previous: pa.Table, carried_ids: pa.Array, row_group_rows: int, row_group_bytes=None
):
    """(chunks, upserts, deletes) part bytes of the whole-table merge."""
    merged = sorted_unique(pa.concat_tables([CHUNKS_SCHEMA.empty_table(), *sources]), CHUNKS_KEY)
    upserts, deletes = chunk_changes(previous, merged, carried_ids)
    upserts = upserts.select(UPSERTS_SCHEMA.names).cast(UPSERTS_SCHEMA)
    return tuple(
        parquet_bytes(table, row_group_rows, "zstd", row_group_bytes) if table.num_rows else b""
        for table in (merged, upserts, deletes)
    )


def bounded_parts(
    sources: list[pa.Table], previous: pa.Table, carried_ids: pa.Array, row_group_rows: int, row_group_bytes=None
):
    """(chunks, upserts, deletes) part bytes of the bounded merge, as the sink's merge runs it."""
    old_chunks = not_carried(previous, carried_ids)
    chunks_part = PartWriter(CHUNKS_SCHEMA, row_group_rows, "zstd", row_group_bytes)
    upserts_part = PartWriter(UPSERTS_SCHEMA, row_group_rows, "zstd", row_group_bytes)
    new_ids = []
    readers = [lambda table=table: table for table in sources]
    for rows in sorted_unique_row_groups(readers, CHUNKS_SCHEMA, CHUNKS_KEY, row_group_rows, row_group_bytes):
        assert rows.num_rows <= row_group_rows
        assert all(column.num_chunks == 1 for column in rows.columns)
        chunks_part.write(rows)
        new_chunks = not_carried(rows, carried_ids)
        new_ids.append(new_chunks.column("chunk_id"))
        upserts_part.write(chunk_upserts(old_chunks, new_chunks).select(UPSERTS_SCHEMA.names).cast(UPSERTS_SCHEMA))
    ids = pa.chunked_array([chunk for column in new_ids for chunk in column.chunks], pa.string())
    deletes = chunk_deletes(old_chunks, ids)
    return (
        chunks_part.finish(),
        upserts_part.finish(),
        parquet_bytes(deletes, row_group_rows, "zstd", row_group_bytes) if deletes.num_rows else b"",
    )


@st.composite
def shards(draw):
    """(spill tables with retried copies, the previous snapshot's rows, the carried doc_ids, row group rows,
    row group bytes: None, or from a cap every row is over to one no shard reaches)."""
    doc_ids = draw(
        st.lists(st.sampled_from(["a", "b", "c/d", "é", "e#1", "f", "g"]), min_size=1, max_size=6, unique=True)
    )
    carried = draw(st.lists(st.sampled_from(doc_ids), unique=True, max_size=len(doc_ids) - 1))
    words = st.text(alphabet="abc xyz\n#é", min_size=0, max_size=30)
    previous_rows, new_rows = [], []
    for doc_id in doc_ids:
        old_count = draw(st.integers(0, 5))
        for index in range(old_count):
            previous_rows.append(chunk_row(doc_id, index, draw(words), draw(st.sampled_from(["Intro", "Use"]))))
        if doc_id in carried:
            continue
        for index in range(draw(st.integers(0, 6))):
            if index < old_count and draw(st.booleans()):
                new_rows.append(next(r for r in previous_rows if r["chunk_id"] == f"{doc_id}#{index}"))
            else:
                new_rows.append(chunk_row(doc_id, index, draw(words), draw(st.sampled_from(["Intro", "Use"]))))
    if draw(st.booleans()):
        new_rows = draw(st.permutations(new_rows))
    else:  # a full rebuild's spills: rows of consecutive documents, in key order
        new_rows.sort(key=lambda row: (row["doc_id"], row["chunk_index"]))
    cuts = sorted(draw(st.lists(st.integers(0, len(new_rows)), max_size=4)))
    bounds = [0, *cuts, len(new_rows)]
    spills = [chunks_table(new_rows[start:stop]) for start, stop in zip(bounds, bounds[1:])]
    # A retried bundle spills its rows again: whole copies of some spill files, in any position.
    for copy in draw(st.lists(st.integers(0, len(spills) - 1), max_size=2)):
        spills.insert(draw(st.integers(0, len(spills))), spills[copy])
    previous = chunks_table(draw(st.permutations(previous_rows)))
    carried_ids = pa.array(sorted(carried), pa.string())
    carried_rows = previous.filter(pc.is_in(previous.column("doc_id"), value_set=carried_ids))
    row_group_bytes = draw(st.sampled_from([None, 1, 400, 900, 2500, 10**9]))
    return [carried_rows, *spills], previous, carried_ids, draw(st.sampled_from([1, 2, 3, 5, 1000])), row_group_bytes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shards())
@pytest.mark.slow
def test_bounded_merge_writes_the_whole_table_merges_parts(shard):
    assert bounded_parts(*shard) == reference_parts(*shard)


@settings(max_examples=150, deadline=None)
@given(shards())
@pytest.mark.slow
def test_bounded_rows_are_the_sorted_unique_rows(shard):
    sources, _, _, row_group_rows, row_group_bytes = shard
    readers = [lambda table=table: table for table in sources]
    sized = list(sorted_row_groups_and_sizes(readers, CHUNKS_SCHEMA, CHUNKS_KEY, row_group_rows, row_group_bytes))
    groups = [group for group, _ in sized]
    expected = sorted_unique(pa.concat_tables([CHUNKS_SCHEMA.empty_table(), *sources]), CHUNKS_KEY)
    # The bytes that come with each row group are its rows' as measured on them (what a PartWriter takes).
    for group, sizes in sized:
        assert list(sizes) == (list(row_bytes(group)) if row_group_bytes is not None else [0] * group.num_rows)
    assert pa.concat_tables([CHUNKS_SCHEMA.empty_table(), *groups]).equals(expected)
    keys = expected.select(list(CHUNKS_KEY)).to_pylist()
    assert len({tuple(key.values()) for key in keys}) == len(keys)  # no retried copy survives
    assert_row_groups_follow_the_rule([group.num_rows for group in groups], expected, row_group_rows, row_group_bytes)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_rows_taken_from_a_source_as_a_slice_or_positions_are_the_rows_take_gives(data):
    from chunkline.dataset.merge import _rows_taken, _taken

    rows = data.draw(st.lists(st.text(alphabet="ab", max_size=3), min_size=1, max_size=12))
    table = pa.table({"value": rows, "number": list(range(len(rows)))})
    if data.draw(st.booleans()):
        start = data.draw(st.integers(0, len(rows) - 1))
        positions = list(range(start, data.draw(st.integers(start + 1, len(rows)))))
    else:
        positions = sorted(data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, unique=True)))
    taken = _rows_taken(np.array(positions, np.int64))
    consecutive = positions == list(range(positions[0], positions[0] + len(positions)))
    assert isinstance(taken, slice) == consecutive
    assert _taken(table, taken).equals(table.take(pa.array(positions)))
    # Positions out of order (from a source whose rows were not in key order) are never a slice, even when
    # their first and last are as far apart as a slice's would be.
    if len(positions) > 2:
        shuffled = np.array([positions[0], positions[2], positions[1], *positions[3:]], np.int64)
        assert not isinstance(_rows_taken(shuffled), slice)


def assert_row_groups_follow_the_rule(group_rows: list[int], table: pa.Table, row_group_rows: int, row_group_bytes):
    """Row groups of ``group_rows`` rows over ``table``: at most ``row_group_rows`` rows each, under
    ``row_group_bytes`` but for their last row (a row larger than the cap is a row group alone), each but the
    last ended by its rows or its bytes, and where :func:`row_group_ends` puts them."""
    sizes = row_bytes(table)
    ends = list(np.cumsum(group_rows))
    assert ends == row_group_ends(sizes, row_group_rows, row_group_bytes)
    for index, (start, end) in enumerate(zip([0, *ends], ends)):
        assert 0 < end - start <= row_group_rows
        if row_group_bytes is None:
            assert index == len(ends) - 1 or end - start == row_group_rows
            continue
        assert sizes[start : end - 1].sum() < row_group_bytes
        if index < len(ends) - 1:
            assert end - start == row_group_rows or sizes[start:end].sum() >= row_group_bytes


@settings(max_examples=100, deadline=None)
@given(shards(), st.data())
@pytest.mark.slow
def test_a_part_written_in_pieces_has_the_row_groups_of_the_whole_table(shard, data):
    """Rows handed to the writer in tables of any sizes: the row groups, and the bytes, of the whole table."""
    sources, _, _, row_group_rows, row_group_bytes = shard
    table = sorted_unique(pa.concat_tables([CHUNKS_SCHEMA.empty_table(), *sources]), CHUNKS_KEY)
    cuts = sorted(data.draw(st.lists(st.integers(0, table.num_rows), max_size=5)))
    writer = PartWriter(CHUNKS_SCHEMA, row_group_rows, "zstd", row_group_bytes)
    for start, stop in zip([0, *cuts], [*cuts, table.num_rows]):
        writer.write(table.slice(start, stop - start))
    part = writer.finish()
    assert part == (parquet_bytes(table, row_group_rows, "zstd", row_group_bytes) if table.num_rows else b"")
    if table.num_rows:
        metadata = pq.ParquetFile(pa.BufferReader(part)).metadata
        group_rows = [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)]
        assert_row_groups_follow_the_rule(group_rows, table, row_group_rows, row_group_bytes)
        assert pq.ParquetFile(pa.BufferReader(part)).read().equals(table)


def test_row_bytes_are_the_values_arrow_holds():
    table = pa.table(
        {
            "text": pa.array(["tide", None, "é"], pa.large_string()),
            "name": pa.array(["a", "bc", ""], pa.string()),
            "heading_path": pa.array([["Intro", "Use"], None, []], pa.list_(pa.string())),
            "count": pa.array([1, 2, None], pa.int32()),
            "flag": pa.array([True, None, False]),
        }
    )
    # large_string: length + 8; string: length + 4; list: 4 + its items; int32: 4; bool: 1.
    assert list(row_bytes(table)) == [12 + 5 + (4 + 9 + 7) + 4 + 1, 8 + 6 + 4 + 4 + 1, 10 + 4 + 4 + 4 + 1]
    assert list(row_bytes(table.slice(1))) == list(row_bytes(table))[1:]
    sliced = table.column("heading_path").chunk(0).slice(1)
    assert list(row_bytes(pa.table({"heading_path": sliced}))) == [4, 4]


def test_part_writer_matches_whole_table_bytes_when_row_groups_split_pages():
    """Row groups of 1,000 rows (not a multiple of the writer's 1,024-row batches) with texts long enough to
    fill several data pages per column, fed in uneven tables: the bytes of the whole table written at once."""
    rows = [
        chunk_row(f"doc-{index // 40:03d}", index % 40, "lorem ipsum " * (50 + index % 70)) for index in range(3500)
    ]
    table = chunks_table(rows)
    writer = PartWriter(CHUNKS_SCHEMA, 1000, "zstd")
    for start, stop in [(0, 1), (1, 999), (999, 2500), (2500, 3500)]:
        writer.write(table.slice(start, stop - start))
    assert writer.finish() == parquet_bytes(table, 1000, "zstd")


class _PeakArrowBytes:
    """The most bytes pyarrow's memory pool held at once while the block ran (a proxy pool of its own)."""

    def __enter__(self):
        self._previous = pa.default_memory_pool()
        self._pool = pa.proxy_memory_pool(self._previous)
        pa.set_memory_pool(self._pool)
        return self

    def __exit__(self, *exc):
        pa.set_memory_pool(self._previous)

    @property
    def peak(self) -> int:
        return self._pool.max_memory()


@pytest.mark.slow
def test_merging_a_shard_far_larger_than_a_row_group_holds_about_one_row_group():
    """A shard of 40 spill files (about 25 MB of rows) merged into row groups of 2,000 rows (about 1.2 MB):
    pyarrow's pool never holds more than a few row groups and one spill file, a tenth of what the
    whole-table merge (every spill and their sorted copy) needs."""
    row_group_rows = 2000
    spill_paths = []
    rows_per_spill = 1000
    for spill in range(40):
        # Each spill holds documents of every part of the key range, as a worker's bundles do.
        rows = [
            chunk_row(f"doc-{(spill * 37 + index * 13) % 4000:04d}", spill, "tide gauge reading " * 30 + str(index))
            for index in range(rows_per_spill)
        ]
        spill_paths.append(rows)
    encoded = []
    for rows in spill_paths:
        sink = pa.BufferOutputStream()
        table = chunks_table(rows)
        with pa.ipc.new_file(sink, CHUNKS_SCHEMA) as writer:
            writer.write_table(table)
        encoded.append(sink.getvalue().to_pybytes())  # outside the pool: the spill files on disk
        del table, sink
    spill_bytes = max(len(data) for data in encoded)
    shard_bytes = sum(len(data) for data in encoded)

    def reader(data: bytes):
        return lambda: pa.ipc.open_file(pa.BufferReader(data)).read_all().combine_chunks()

    with _PeakArrowBytes() as bounded:
        writer = PartWriter(CHUNKS_SCHEMA, row_group_rows, "zstd")
        for rows in sorted_unique_row_groups(
            [reader(data) for data in encoded], CHUNKS_SCHEMA, CHUNKS_KEY, row_group_rows
        ):
            writer.write(rows)
            del rows
        part = writer.finish()
    row_group_bytes = shard_bytes * row_group_rows // (40 * rows_per_spill)
    bound = 4 * row_group_bytes + 2 * spill_bytes
    assert bounded.peak <= bound, (bounded.peak, bound, shard_bytes)

    with _PeakArrowBytes() as whole:
        tables = [reader(data)() for data in encoded]
        merged = sorted_unique(pa.concat_tables(tables), CHUNKS_KEY)
        del tables
        reference = parquet_bytes(merged, row_group_rows, "zstd")
        del merged
    assert part == reference
    print(
        f"peak {bounded.peak / 1e6:.1f} MB bounded, {whole.peak / 1e6:.1f} MB whole; shard {shard_bytes / 1e6:.1f} MB"
    )
    assert bound < shard_bytes / 3 < whole.peak / 3


@pytest.mark.slow
def test_a_shard_with_fewer_rows_than_a_row_group_is_merged_a_byte_capped_row_group_at_a_time():
    """A shard of 40 spill files (about 25 MB of rows, 40,000 rows) with the default ``row_group_rows``
    (65,536: the shard's rows would be one row group) and row groups capped at 1 MB of rows. Each spill
    file is read as the sink reads it, into a buffer of pyarrow's pool viewed without copying: pyarrow's pool
    never holds more than a few row groups and two spill files (not the shard's spill files, which the keys
    of every spill would keep if they were views of them), and the part holds the rows in row groups of
    about 1 MB."""
    row_group_rows, row_group_bytes, rows_per_spill = 65_536, 1_000_000, 1000
    encoded = []
    for spill in range(40):
        rows = [
            chunk_row(f"doc-{(spill * 37 + index * 13) % 4000:04d}", spill, "tide gauge reading " * 30 + str(index))
            for index in range(rows_per_spill)
        ]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, CHUNKS_SCHEMA) as writer:
            writer.write_table(chunks_table(rows))
        encoded.append(sink.getvalue().to_pybytes())  # outside the pool: the spill files on disk
    spill_bytes = max(len(data) for data in encoded)
    shard_bytes = sum(len(data) for data in encoded)

    def reader(data: bytes):
        def read() -> pa.Table:
            buffer = pa.allocate_buffer(len(data))  # the file read into memory...
            np.frombuffer(buffer, np.uint8)[:] = np.frombuffer(data, np.uint8)
            return pa.ipc.open_file(pa.BufferReader(buffer)).read_all()  # ...and its table a view of it

        return read

    with _PeakArrowBytes() as bounded:
        writer = PartWriter(CHUNKS_SCHEMA, row_group_rows, "zstd", row_group_bytes)
        for rows in sorted_unique_row_groups(
            [reader(data) for data in encoded], CHUNKS_SCHEMA, CHUNKS_KEY, row_group_rows, row_group_bytes
        ):
            assert rows.nbytes < 2 * row_group_bytes
            writer.write(rows)
            del rows
        part = writer.finish()
    bound = 4 * row_group_bytes + 2 * spill_bytes
    print(f"peak {bounded.peak / 1e6:.1f} MB; bound {bound / 1e6:.1f} MB; shard {shard_bytes / 1e6:.1f} MB")
    assert bounded.peak <= bound < shard_bytes / 2

    merged = sorted_unique(pa.concat_tables([reader(data)() for data in encoded]), CHUNKS_KEY)
    assert part == parquet_bytes(merged, row_group_rows, "zstd", row_group_bytes)
    metadata = pq.ParquetFile(pa.BufferReader(part)).metadata
    assert metadata.num_rows == merged.num_rows == 40 * rows_per_spill
    group_rows = [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)]
    assert metadata.num_row_groups >= 20
    assert_row_groups_follow_the_rule(group_rows, merged, row_group_rows, row_group_bytes)


def test_system_allocations_switch_the_pool_for_the_block_only():
    before = pa.default_memory_pool().backend_name
    try:
        with system_allocations():
            assert pa.default_memory_pool().backend_name == "system"
            table = chunks_table([chunk_row("a", 0, "tide " * 1000)])
            raise RuntimeError("a merge that fails")
    except RuntimeError:
        pass
    assert pa.default_memory_pool().backend_name == before
    assert table.column("text")[0].as_py().startswith("tide")  # freed later, from the pool it came from


def test_system_allocations_overlapping_on_threads_restore_the_pool_when_the_last_leaves():
    """Two merges on two threads: the second enters while the first is inside, and the first leaves first.
    The system pool stays installed until the last one leaves, then the pool found by the first is back."""
    before = pa.default_memory_pool().backend_name
    assert before != "system"
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen, made = {}, []

    def first():
        with system_allocations():
            first_in.set()
            second_in.wait(10)
            seen["first, both inside"] = pa.default_memory_pool().backend_name
        first_out.set()

    def second():
        first_in.wait(10)
        with system_allocations():
            second_in.set()
            first_out.wait(10)
            seen["second, after the first left"] = pa.default_memory_pool().backend_name
            made.append(chunks_table([chunk_row("b", 0, "gauge " * 1000)]))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == {"first, both inside": "system", "second, after the first left": "system"}
    assert pa.default_memory_pool().backend_name == before
    assert made[0].column("text")[0].as_py().startswith("gauge")  # freed later, from the pool it came from


def test_system_allocations_of_a_thread_pool_of_merges_leave_the_default_pool():
    """Many blocks on a pool of threads, entered and left in every order, some failing: each sees the
    system pool inside, and the default pool is the one before once all are done."""
    before = pa.default_memory_pool().backend_name

    def merge(number: int) -> str:
        with system_allocations():
            time.sleep(0.001 * (number % 4))
            inside = pa.default_memory_pool().backend_name
            if number % 5 == 0:
                raise RuntimeError(f"merge {number} failed")
            return inside

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(merge, number) for number in range(40)]
    failed = [future for future in futures if future.exception() is not None]
    assert len(failed) == 8
    assert {future.result() for future in futures if future.exception() is None} == {"system"}
    assert pa.default_memory_pool().backend_name == before


def test_the_sinks_merge_of_a_retried_spill_writes_the_whole_table_merges_parts(tmp_path):
    """The sink end to end: documents spilled twice (a retried bundle), in small spill files, merged by
    ``MergeShard`` into row groups of 3 rows: each shard's chunks and upserts parts are the whole-table
    merge's bytes, and no chunk is lost or doubled."""
    settings = WriteSettings(
        staging_url=str(tmp_path / "staging"),
        snapshot_url=str(tmp_path / "snapshot"),
        shards=2,
        row_group_rows=3,
        spill_bytes=2_000,
    )
    documents = [
        [("chunks", chunk_row(f"guide/{name}.md", index, f"{name} paragraph {index} " * 20)) for index in range(count)]
        for name, count in [("install", 4), ("faq", 7), ("tides", 1), ("gauges", 5), ("alerts", 3)]
    ]
    spill_ids = []
    for _ in range(2):  # the bundle ran twice: every row is spilled twice
        spill_ids += run_bundle(SpillRows(settings), documents)
    written = list(run_bundle(MergeShard(settings), range(settings.shards), spills_done=spill_ids))
    assert written
    for shard in range(settings.shards):
        rows = [row for document in documents for _, row in document if shard_of(row["doc_id"], 2) == shard]
        expected = sorted_unique(chunks_table(rows), CHUNKS_KEY)
        upserts = chunk_changes(CHUNKS_SCHEMA.empty_table(), expected, pa.array([], pa.string()))[0]
        for table_name, table in [("chunks", expected), ("changes/upserts", upserts.cast(UPSERTS_SCHEMA))]:
            parts = [Path(path) for path in written if f"/{table_name}/part-{shard:05d}-" in path]
            assert len(parts) == 1, (table_name, shard, written)
            assert parts[0].read_bytes() == parquet_bytes(table, 3, "zstd")
        assert expected.num_rows == len({row["chunk_id"] for row in rows})


_MALLOC_FROM_PYTHON = """
import ctypes, sys
from chunkline.pipelines.process_tuning import map_large_allocations

class MallocInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallocInfo
"""
"""The start of a script that calls glibc's malloc, free and mallinfo2 itself (``libc``)."""

_MAPPED_AFTER_A_LARGER_FREE = (
    _MALLOC_FROM_PYTHON
    + """assert map_large_allocations() is True
libc.free(libc.malloc(24 << 20))
mapped = libc.mallinfo2().hblkhd
block = libc.malloc(8 << 20)
print(libc.mallinfo2().hblkhd - mapped)
libc.free(block)
"""
)


@pytest.mark.slow
def test_large_allocations_are_mapped_on_their_own_even_after_a_larger_one_was_freed():
    """glibc raises its mapping threshold to a freed 24 MB buffer's size and serves the next 8 MB from its
    heap, where it stays resident once freed; with the fixed threshold it is mapped on its own (in a fresh
    process, whose heap holds no free block that large). Only the fixed case is asserted: where glibc puts
    the 8 MB without it also depends on whether its heap can grow in place, which varies from process to
    process (a mapping placed just above the heap makes glibc map the block after all)."""
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):  # not glibc 2.33 or later: no figures to check it with
        assert isinstance(map_large_allocations(), bool)
        return

    script = [sys.executable, "-c", _MAPPED_AFTER_A_LARGER_FREE]
    mapped_for_8_mb = int(subprocess.run(script, check=True, capture_output=True, text=True).stdout)
    assert mapped_for_8_mb >= 8 << 20


_KEPT_AFTER_A_BATCH_IS_FREED = (
    _MALLOC_FROM_PYTHON
    + """if sys.argv[1] == "tuned":
    assert map_large_allocations() is True
else:  # the mapping threshold fixed alone, which leaves the trim threshold at glibc's 128 KB
    libc.mallopt(-3, 4 << 20)
blocks = [libc.malloc(256 << 10) for _ in range(12)]
for block in reversed(blocks):
    libc.free(block)
print(libc.mallinfo2().keepcost)
"""
)


@pytest.mark.slow
def test_the_heap_keeps_what_a_batch_freed_for_the_next_batch():
    """A batch's buffers (here twelve of 256 KB, under the 4 MB mapping threshold, so from the heap) are
    kept at the top of the heap once freed, for the next batch to reuse, rather than given back and
    faulted in again; with the mapping threshold fixed alone glibc's trim threshold stays at 128 KB and
    gives nearly all of them back (in a fresh process each). Where the heap's top lies against the
    blocks varies from process to process by a block or so, so most of the batch, ten of its twelve
    blocks, must be kept: far from the under 1 MB kept without the tuning."""
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):  # not glibc 2.33 or later: no figures to check it with
        assert isinstance(map_large_allocations(), bool)
        return

    def kept(mode: str) -> int:
        script = [sys.executable, "-c", _KEPT_AFTER_A_BATCH_IS_FREED, mode]
        return int(subprocess.run(script, check=True, capture_output=True, text=True).stdout)

    assert kept("tuned") >= 10 * (256 << 10)
    assert kept("mapping threshold alone") < 1 << 20


class _RecordingHooks(ProcessHooks):
    """Process hooks that record each call (what ``chunkline run``'s tuning would do at those points)."""

    def __init__(self):
        self.calls: list[str] = []

    def worker_setup(self) -> None:
        self.calls.append("worker_setup")

    def merging(self):
        self.calls.append("merging")
        return super().merging()

    def between_merge_steps(self) -> None:
        self.calls.append("between_merge_steps")


def test_a_merge_calls_the_process_hooks_it_is_given_and_writes_the_same_parts(tmp_path):
    """The sink's merge of a full rebuild calls the hooks of the process's owner (``chunkline run``'s
    tuning) at setup, around the shard's chunks and between a large row group's steps, and writes the same
    parts as with the default hooks, which do nothing."""
    documents = [
        [
            ("chunks", chunk_row(f"guide/{name}-{doc}.md", index, f"{name} paragraph {index} " * 200))
            for index in range(9)
        ]
        for name in ("install", "faq", "tides")
        for doc in range(4)
    ]
    hooks = _RecordingHooks()
    parts = {}
    for label, process_hooks in (("default", NO_PROCESS_HOOKS), ("hooked", hooks)):
        settings = WriteSettings(
            staging_url=str(tmp_path / label / "staging"),
            snapshot_url=str(tmp_path / label / "snapshot"),
            shards=1,
            row_group_rows=8,
            row_group_bytes=None,
            process_hooks=process_hooks,
        )
        spill_ids = list(run_bundle(SpillRows(settings), documents))
        written = list(run_bundle(MergeShard(settings), [0], spills_done=spill_ids))
        parts[label] = {Path(path).parent.name: Path(path).read_bytes() for path in written}
    assert parts["hooked"] == parts["default"]
    assert hooks.calls[:3] == ["worker_setup", "between_merge_steps", "merging"]


def test_the_bounded_merge_calls_between_steps_only_for_large_row_groups():
    rows = [chunk_row(f"doc-{index % 50:03d}", index, "tide gauge " * 40) for index in range(2000)]
    table = chunks_table(rows)
    sources = [lambda: table.slice(0, 1000), lambda: table.slice(1000)]
    calls = []

    def merged(group_bytes: int) -> list[pa.Table]:
        return list(
            sorted_unique_row_groups(
                sources, CHUNKS_SCHEMA, CHUNKS_KEY, 500, group_bytes=group_bytes, between_steps=lambda: calls.append(1)
            )
        )

    small_groups = merged(group_bytes=10**12)
    assert calls == []  # row groups smaller than group_bytes: not worth a call
    large_groups = merged(group_bytes=1000)
    assert len(calls) > len(large_groups)  # once after the keys, and after each step of each row group
    assert pa.concat_tables(large_groups).equals(pa.concat_tables(small_groups))


def _sample_sections_table() -> pa.Table:
    """The ``sections`` rows of the sample corpus, as the sink writes them."""
    from chunkline import ChunkConfig, chunk_markdown_with_sections
    from chunkline.dataset.document_rows import section_row

    rows = []
    for path in sorted(Path(__file__).resolve().parents[1].joinpath("sample_corpus").rglob("*.md")):
        doc_id = path.name
        sections = chunk_markdown_with_sections(path.read_text(), ChunkConfig(), doc_id=doc_id).sections
        rows += [section_row(section) for section in sections]
    schema, key = TABLE_SCHEMAS["sections"]
    return sorted_unique(pa.Table.from_pylist(rows, schema=schema), key)


def _dictionary_encoded(part: bytes) -> set[str]:
    """The columns of a Parquet part that some row group holds dictionary encoded."""
    metadata = pq.ParquetFile(pa.BufferReader(part)).metadata
    return {
        metadata.row_group(group).column(column).path_in_schema
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
        if any("DICTIONARY" in encoding for encoding in metadata.row_group(group).column(column).encodings)
    }


def test_chunk_and_section_parts_are_written_without_dictionaries_in_pieces_as_whole():
    """The values of the chunks and sections tables (and their upserts) are nearly all unique to their row:
    their parts hold no dictionary, a table of a few columns keeps the writer's, and a sections part written a
    row group at a time, its rows' bytes given or measured, is the bytes of the whole table."""
    sections = _sample_sections_table()
    assert sections.num_rows > 50
    whole = parquet_bytes(sections, 40, "zstd", 4000)
    writer = PartWriter(sections.schema, 40, "zstd", 4000)
    writer.write(sections.slice(0, 7))
    writer.write(sections.slice(7), row_bytes(sections.slice(7)))
    assert writer.finish() == whole
    assert pq.ParquetFile(pa.BufferReader(whole)).read().equals(sections)
    assert _dictionary_encoded(whole) == set()
    assert _dictionary_encoded(parquet_bytes(chunk_upserts_like_sections(sections), 1000, "zstd")) == set()
    chunks = chunks_table([chunk_row(f"doc-{index % 3}", index, f"text {index}") for index in range(30)])
    assert _dictionary_encoded(parquet_bytes(chunks, 1000, "zstd")) == set()
    deletes = chunk_deletes(chunks, pa.array([], pa.string()))
    assert "doc_id" in _dictionary_encoded(parquet_bytes(deletes, 1000, "zstd"))


def chunk_upserts_like_sections(sections: pa.Table) -> pa.Table:
    """``changes/section_upserts`` of ``sections`` against no previous rows (every row new)."""
    from chunkline.dataset.merge import section_upserts

    return section_upserts(sections.slice(0, 0), sections)
