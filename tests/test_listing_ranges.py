"""The staged listing read in byte ranges: ranges that tile the file give every listed document exactly once,
in the file's order, wherever the cuts fall; and the pipeline's reader claims each line, so a range split
while it is being read still gives each document once."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import fsspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.listing import (
    largest_first,
    listing_size_bytes,
    read_listing,
    read_listing_range,
    write_listing,
)
from chunkline.dataset.storage import StorageError
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.read import _ListedDocumentsFn

MEMORY = fsspec.filesystem("memory")

# Doc ids as a folder of real names holds them: any character, lone surrogates of undecodable names, and
# the line separators that JSON leaves unescaped (U+2028, U+0085) but str.splitlines breaks at.
doc_ids = st.text(
    st.one_of(
        st.characters(exclude_categories=()),
        st.sampled_from(["\u2028", "\u2029", "\x85", "\x0c", "\x1c", "\r", "\n", "\udce9", "/", "é", "🦀"]),
    ),
    min_size=1,
    max_size=40,
)


@st.composite
def listed_documents(draw) -> tuple[str, list[SourceFile]]:
    doc_id = draw(doc_ids)
    files = []
    for input_index in range(draw(st.integers(1, 3))):
        problem = draw(st.none() | st.just(FileProblem("read", "FileTooLarge", f"over the limit: {doc_id}")))
        files.append(
            SourceFile(
                doc_id=doc_id,
                source_uri=f"memory://corpus-{input_index}/" + doc_id.encode("utf-8", "surrogatepass").hex(),
                input_index=input_index,
                path=f"/corpus-{input_index}/{doc_id}",
                size_bytes=draw(st.none() | st.integers(0, 10**9)),
                modified_time=datetime(2026, 12, 1, tzinfo=timezone.utc)
                + timedelta(microseconds=draw(st.integers(0, 10**12))),
                problem=problem,
                etag=draw(st.none() | st.text(max_size=300)),
            )
        )
    return doc_id, files


def staged(matched: list[tuple[str, list[SourceFile]]]) -> str:
    return write_listing(f"memory://staging-{uuid.uuid4().hex}/run-1", matched)


@pytest.fixture(autouse=True)
def empty_memory_store():
    MEMORY.store.clear()
    MEMORY.pseudo_dirs.clear()
    MEMORY.pseudo_dirs.append("")
    yield
    MEMORY.store.clear()


@given(
    matched=st.lists(listed_documents(), max_size=25, unique_by=lambda pair: pair[0]),
    cut_fractions=st.lists(st.floats(0, 1), max_size=12),
)
def test_ranges_that_tile_the_listing_give_every_document_once_in_file_order(matched, cut_fractions):
    url = staged(matched)
    size = listing_size_bytes(url)
    data = MEMORY.cat_file(url.removeprefix("memory://"))
    assert size == len(data)
    line_starts = [0] + [offset + 1 for offset, byte in enumerate(data[:-1]) if byte == ord("\n")]
    assert len(line_starts) == len(matched) or not matched

    cuts = sorted({0, size, *(round(fraction * size) for fraction in cut_fractions)})
    pieces = [list(read_listing_range(url, start, stop)) for start, stop in zip(cuts, cuts[1:])]
    for (start, stop), piece in zip(zip(cuts, cuts[1:]), pieces):
        offsets = [offset for offset, _ in piece]
        assert offsets == [offset for offset in line_starts if start <= offset < stop]

    documents = [document for piece in pieces for document in piece]
    assert [document for _, document in documents] == largest_first(matched) == read_listing(url)


def test_a_doc_id_with_unicode_line_separators_stays_one_document():
    names = ["notes/\u2028para.md", "caf\udce9\x85.md", "form\x0cfeed.md"]
    url = staged([(name, [listed_file(name, size)]) for size, name in enumerate(names)])
    assert [doc_id for doc_id, _ in read_listing(url)] == list(reversed(names))
    size = listing_size_bytes(url)
    assert [doc_id for _, (doc_id, _) in read_listing_range(url, 0, size)] == list(reversed(names))


def listed_file(doc_id: str, size: int) -> SourceFile:
    return SourceFile(
        doc_id=doc_id,
        source_uri=f"memory://corpus/{doc_id}",
        input_index=0,
        path=f"/corpus/{doc_id}",
        size_bytes=size,
        modified_time=None,
    )


def many_documents(count: int) -> list[tuple[str, list[SourceFile]]]:
    names = [f"section-{number % 7}/page-{number:04d}.md" for number in range(count)]
    return [(name, [listed_file(name, size)]) for size, name in enumerate(names)]


def test_the_reader_splits_the_listing_and_batches_within_each_range():
    url = staged(many_documents(300))
    fn = _ListedDocumentsFn(None, (), batch_documents=8, range_bytes=4_000)
    restriction = fn.initial_restriction(url)
    assert restriction.start == 0 and restriction.stop == listing_size_bytes(url)
    ranges = list(fn.split(url, restriction))
    assert len(ranges) > 5
    assert [piece.start for piece in ranges[1:]] == [piece.stop for piece in ranges[:-1]]

    batches_by_range = []
    for piece in ranges:
        tracker = fn.create_tracker(piece)
        batches_by_range.append(list(fn.process(url, tracker=tracker)))
        tracker.check_done()  # every range read to its end
        assert all(0 < len(batch) <= 8 for batch in batches_by_range[-1])
    read = [document for batches in batches_by_range for batch in batches for document in batch]
    assert read == read_listing(url)
    # A runner that does not split reads the whole listing as one range, in the same batches of eight.
    whole = list(apply_in_process(_ListedDocumentsFn(None, (), batch_documents=8), [url]))
    assert [document for batch in whole for document in batch] == read
    assert [len(batch) for batch in whole] == [8] * 37 + [4]


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.9])
def test_a_range_split_while_it_is_read_gives_each_document_once(fraction):
    url = staged(many_documents(120))
    fn = _ListedDocumentsFn(None, ())
    tracker = fn.create_tracker(fn.initial_restriction(url))
    documents = fn.process(url, tracker=tracker)
    primary_documents = [next(documents) for _ in range(10)]
    split = tracker.try_split(fraction)
    assert split is not None
    primary, residual = split
    primary_documents += list(documents)
    tracker.check_done()
    residual_tracker = fn.create_tracker(residual)
    residual_documents = list(fn.process(url, tracker=residual_tracker))
    residual_tracker.check_done()
    assert primary_documents + residual_documents == read_listing(url)
    assert len(residual_documents) > 0 and primary.stop == residual.start


def test_storage_errors_name_the_listing_without_its_secrets():
    url = "memory://staging/key=s3cr3t-token/run-1/_listing.jsonl"
    for read in (
        lambda: listing_size_bytes(url, secrets=("s3cr3t-token",)),
        lambda: list(read_listing_range(url, 0, 100, secrets=("s3cr3t-token",))),
        lambda: read_listing(url, secrets=("s3cr3t-token",)),
    ):
        with pytest.raises(StorageError) as raised:
            read()
        assert "staging/key=***/run-1/_listing.jsonl" in str(raised.value)
        assert "s3cr3t" not in str(raised.value)
