"""Documents chunked in batches: one Arrow conversion per table for a batch, the same rows as one document
at a time, and a bad document in the middle of a batch still its own error row."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkline.registry as registry_module
from chunkline.config import ChunkConfig
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.document_rows import DOCUMENTS, ERRORS, DocumentChunker
from chunkline.dataset.in_process import batches_of
from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.sink import SpillRows, WriteSettings
from chunkline.record import ChunkSpan
from chunkline.strategies.headings import HeadingsParams

MODIFIED = datetime(2026, 1, 2, tzinfo=timezone.utc)


def source(doc_id: str, text: str | None = None, problem: FileProblem | None = None) -> SourceFile:
    data = None if text is None else text.encode("utf-8")
    return SourceFile(doc_id, f"file:///docs/{doc_id}", 0, f"/docs/{doc_id}", len(data or b""), MODIFIED, data, problem)


PAGES = [
    source(
        "guide/install.md",
        "---\ntitle: Install\n---\n# Install\n\nRun `pip install chunkline`.\n\n## Upgrade\n\nAgain.\n",
    ),
    source("guide/usage.md", "# Usage\n\nCall chunk_markdown on the text.\n"),
    source("reference/api.md", "# API\n\n" + "A sentence about the API. " * 200 + "\n\n## Errors\n\nNone.\n"),
    source("missing.md", problem=FileProblem("read", "FileNotFoundError", "cannot read missing.md: gone")),
    source("notes/empty.md", ""),
    source("notes/binary.md", "\x00\x01\x02 binary"),
]


@pytest.fixture
def numbered_headings_for_usage(monkeypatch):
    """A strategy (a plugin with a bug) that gives guide/usage.md a heading path of numbers, which the
    chunks table (lists of strings) cannot hold; every other document chunks as one chunk."""

    def chunk(document, config, counter):
        path = (1, 2) if "chunk_markdown" in document.text else ("whole document",)
        return [ChunkSpan(0, len(document.text), heading_path=path)]

    strategy = registry_module.Strategy("test-numbered-usage", HeadingsParams, chunk, "a test strategy")
    monkeypatch.setitem(registry_module._registry, "test-numbered-usage", strategy)
    return ChunkConfig(strategy="test-numbered-usage")


def one_at_a_time(config: ChunkConfig, sources: list[SourceFile]) -> list:
    return list(run_bundle(DocumentChunker(config, "strict", ()), sources))


def pairs(elements) -> list[tuple[str, dict]]:
    return [pair for element in elements for pair in element]


def test_a_batch_is_one_element_with_the_rows_of_its_documents_one_at_a_time():
    config = ChunkConfig()
    alone = one_at_a_time(config, PAGES)
    (batch,) = list(run_bundle(DocumentChunker(config, "strict", ()), [PAGES]))
    assert list(batch) == pairs(alone)
    # Its chunks array holds the chunks of every document in order, as each document's own array does.
    alone_chunks = [element.arrays["chunks"] for element in alone if "chunks" in getattr(element, "arrays", {})]
    assert batch.arrays["chunks"].equals(pa.concat_arrays(alone_chunks))
    for table, array in batch.arrays.items():
        assert array.to_pylist() == [row for name, row in batch if name == table]
    statuses = {row["doc_id"]: row["status"] for table, row in batch if table == DOCUMENTS}
    assert statuses == {
        "guide/install.md": "ok",
        "guide/usage.md": "ok",
        "reference/api.md": "ok",
        "missing.md": "error",
        "notes/empty.md": "ok",
        "notes/binary.md": "error",
    }


def test_a_document_whose_rows_do_not_fit_in_the_middle_of_a_batch_is_its_own_error(numbered_headings_for_usage):
    config = numbered_headings_for_usage
    alone = one_at_a_time(config, PAGES)
    batched = list(run_bundle(DocumentChunker(config, "strict", ()), [PAGES]))
    # One element per document, exactly the rows one document at a time gives.
    assert [list(element) for element in batched] == [list(element) for element in alone]
    errors = [row for table, row in pairs(batched) if table == ERRORS]
    assert sorted((row["doc_id"], row["error_type"]) for row in errors) == [
        ("guide/usage.md", "RowDoesNotFitSchema"),
        ("missing.md", "FileNotFoundError"),
        ("notes/binary.md", "BinaryFile"),
    ]
    usage = next(row for table, row in pairs(batched) if table == DOCUMENTS and row["doc_id"] == "guide/usage.md")
    assert usage["status"] == "error" and usage["message"].startswith("a chunks row of this document cannot be stored")
    assert usage["encoding"] == "utf-8" and usage["chunk_count"] == 0
    # The documents after the bad one are chunked and converted as always.
    api = [element for element in batched if any(row["doc_id"] == "reference/api.md" for _, row in element)]
    assert getattr(api[0], "arrays", None) is not None


def test_batches_end_at_their_count_or_their_bytes():
    sized = [source(f"p{n}.md", "x" * size) for n, size in enumerate([10, 10, 500, 10, 10, 10, 10])]
    assert [len(batch) for batch in batches_of(sized, documents=3, data_bytes=400)] == [3, 3, 1]
    assert [len(batch) for batch in batches_of(sized, documents=100, data_bytes=1)] == [1] * 7
    assert list(batches_of([], documents=3)) == []


def spilled(tmp_path, name: str, elements, shards: int = 4) -> dict[tuple[str, str], pa.Table]:
    """The rows each spill file of (table, shard) holds, for ``elements`` spilled in one bundle."""
    import pyarrow.ipc as ipc

    settings = WriteSettings(
        staging_url=str(tmp_path / name), snapshot_url=str(tmp_path / "s"), shards=shards, row_group_rows=1000
    )
    spill = SpillRows(settings)
    list(run_bundle(spill, elements))
    tables = {}
    for path in sorted((tmp_path / name).rglob("*.arrow")):
        key = (path.parent.parent.name, path.parent.name)
        tables[key] = ipc.open_file(pa.OSFile(str(path))).read_all()
    return tables


def test_a_batch_spills_each_row_to_its_documents_shard(tmp_path):
    config = ChunkConfig()
    alone = spilled(tmp_path, "alone", one_at_a_time(config, PAGES))
    batch = spilled(tmp_path, "batch", run_bundle(DocumentChunker(config, "strict", ()), [PAGES]))
    assert sorted(batch) == sorted(alone) and len({shard for _, shard in alone}) > 1
    for key in alone:
        assert batch[key].equals(alone[key])


def as_plain_rows(elements) -> list[list[tuple[str, dict]]]:
    """The same elements as plain lists of ``(table, row)`` pairs, without their Arrow arrays: what a
    pipeline step of a user's own outputs, which the spill converts itself."""
    return [list(element) for element in elements]


@settings(max_examples=25, deadline=None)
@given(shards=st.integers(1, 9), cuts=st.lists(st.integers(0, len(PAGES)), max_size=3))
def test_converted_rows_spill_as_the_same_rows_converted_by_the_spill(tmp_path_factory, shards, cuts):
    # A spill buffers converted rows as their arrays and puts them in shard order once, when it writes;
    # rows without arrays it converts itself. Both give each (table, shard) file the same rows in order,
    # however the documents came in elements.
    tmp_path = tmp_path_factory.mktemp("spills")
    config = ChunkConfig()
    bounds = [0, *sorted(cuts), len(PAGES)]
    elements = [
        element
        for start, stop in zip(bounds, bounds[1:])
        if start < stop
        for element in run_bundle(DocumentChunker(config, "strict", ()), [PAGES[start:stop]])
    ]
    assert any(getattr(element, "arrays", None) is not None for element in elements)
    converted = spilled(tmp_path, "converted", elements, shards)
    plain = spilled(tmp_path, "plain", as_plain_rows(elements), shards)
    assert sorted(converted) == sorted(plain)
    for key in plain:
        assert converted[key].equals(plain[key])


def test_a_spill_of_converted_and_plain_rows_holds_each_row_once(tmp_path):
    config = ChunkConfig()
    elements = one_at_a_time(config, PAGES)
    mixed = [element if number % 2 else list(element) for number, element in enumerate(elements)]
    spilled_mixed = spilled(tmp_path, "mixed", mixed)
    spilled_plain = spilled(tmp_path, "plain", as_plain_rows(elements))
    assert sorted(spilled_mixed) == sorted(spilled_plain)
    for key, table in spilled_plain.items():
        columns = table.column_names
        assert sorted(spilled_mixed[key].to_pylist(), key=repr) == sorted(table.to_pylist(), key=repr)
        assert spilled_mixed[key].column_names == columns


FRONT_MATTERS = [
    "title: Install\n",
    "title: Café – 日本語 ✓\ntags: [b, a, ü]\nweight: 3\n",
    "zeta: 1\nalpha:\n  nested: {y: 2, x: [1.5, null, true]}\nquote: 'say \"hi\"\\n'\n",
    "ratio: .nan\nlimit: .inf\nwhen: 2026-01-02\n",
]


@pytest.mark.parametrize("front_matter", FRONT_MATTERS)
def test_the_documents_row_holds_the_front_matter_as_json_dumps_writes_it(front_matter):
    import json

    from chunkline.structure import parse_markdown

    text = f"---\n{front_matter}---\n\n# Page\n\nBody text.\n"
    data = parse_markdown(text).front_matter.data
    (rows,) = one_at_a_time(ChunkConfig(), [source("page.md", text)])
    (document,) = [row for table, row in rows if table == DOCUMENTS]
    assert document["status"] == "ok"
    assert document["front_matter"] == json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False)
