"""The driver's listing held as Arrow rows: the plan and the staged listing are what a listing of
``SourceFile`` values gave, for inputs that share a doc_id, a folder that cannot be listed and a link out of
the root; and every field of a listed file survives the trip through Arrow."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.listed_files import ListedDocuments, listed_files_batch, source_files_of
from chunkline.dataset.listing import read_listing, write_listing
from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.rebuild import PLANNED_COLUMNS, InputListing, list_inputs, plan_rebuild
from chunkline.dataset.settings import load_run_config

from .conftest import run, write_files
from .test_publish_guard import deny_listing

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def two_inputs(tmp_path, monkeypatch):
    """Two inputs: ``notes.md`` in both, a link out of the first one's root, a folder below it that cannot
    be listed."""
    first = write_files(
        tmp_path / "handbook",
        {
            "guide/intro.md": b"# Intro\n\n" + b"Words. " * 60,
            "guide/private/salaries.md": b"# Salaries\n",
            "notes.md": b"# Notes\n\n" + b"Handbook notes. " * 20,
            "zebra.md": b"# Zebra\n\n" + b"Stripes. " * 30,
        },
    )
    write_files(tmp_path / "elsewhere", {"leak.md": b"# Not in the handbook\n"})
    (first / "leak.md").symlink_to(tmp_path / "elsewhere" / "leak.md")
    second = write_files(
        tmp_path / "wiki",
        {"notes.md": b"# Wiki notes\n", "extra.md": b"# Extra\n\n" + b"More. " * 10},
    )
    deny_listing(monkeypatch, first / "guide" / "private")
    config = load_run_config(None, [], environ={}, inputs=[str(first), str(second)], output=str(tmp_path / "out"))
    return config, first, second


def described(pairs) -> list[tuple[str, list[tuple[int, str, int | None, str | None]]]]:
    """Each pair as (doc_id, [(input, file name, size, problem type)])."""
    return [
        (
            doc_id,
            [
                (
                    source.input_index,
                    "/".join(source.source_uri.split("/")[-2:]),
                    source.size_bytes,
                    source.problem.error_type if source.problem else None,
                )
                for source in files
            ],
        )
        for doc_id, files in pairs
    ]


def test_a_full_plan_reads_every_listed_file_in_doc_id_order(two_inputs):
    config, first, _ = two_inputs
    plan = plan_rebuild(config, None, None, list_inputs(config))
    assert plan.mode == "full" and len(plan.to_chunk) == 6
    assert described(plan.to_chunk) == [
        ("extra.md", [(1, "wiki/extra.md", 69, None)]),
        ("guide/intro.md", [(0, "guide/intro.md", 429, None)]),
        ("guide/private/", [(0, "guide/private", None, "UnlistableFolder")]),
        ("leak.md", [(0, "handbook/leak.md", None, "LinkOutsideInput")]),
        ("notes.md", [(0, "handbook/notes.md", 329, None), (1, "wiki/notes.md", 13, None)]),
        ("zebra.md", [(0, "handbook/zebra.md", 279, None)]),
    ]
    (_, (folder,)) = list(plan.to_chunk)[2]
    assert folder.source_uri == (first / "guide" / "private").as_uri() and folder.path == ""
    assert "could not be listed (PermissionError" in folder.problem.message


def test_the_staged_listing_is_largest_first_with_every_field(two_inputs, tmp_path):
    config, first, second = two_inputs
    plan = plan_rebuild(config, None, None, list_inputs(config))
    url = write_listing(str(tmp_path / "_staging" / "run-1"), plan.to_chunk)
    lines = [json.loads(line) for line in Path(url).read_text(encoding="utf-8").splitlines()]
    assert [doc_id for doc_id, _ in lines] == [
        "guide/intro.md",
        "notes.md",
        "zebra.md",
        "extra.md",
        "guide/private/",  # no size: last, by doc_id
        "leak.md",
    ]
    notes = dict(lines)["notes.md"]
    assert [(row["input_index"], row["path"], row["size_bytes"]) for row in notes] == [
        (0, str(first / "notes.md"), 329),
        (1, str(second / "notes.md"), 13),
    ]
    modified = (first / "notes.md").stat()
    listed_time = datetime.fromtimestamp(modified.st_mtime, tz=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert notes[0]["mtime_ns"] == modified.st_mtime_ns
    assert notes[0]["modified_time"] == listed_time // timedelta(microseconds=1)
    assert notes[0]["problem"] is None and notes[0]["etag"] is None and notes[0]["version"] is None
    (leak,) = dict(lines)["leak.md"]
    assert leak["problem"][:2] == ["match", "LinkOutsideInput"] and leak["problem"][3] is False
    assert read_listing(url) == sorted(plan.to_chunk, key=lambda pair: (-(pair[1][0].size_bytes or -1), pair[0]))


def test_a_rerun_chunks_the_shared_doc_id_and_the_edited_file_and_carries_the_rest(two_inputs):
    config, first, _ = two_inputs
    write_files(first, {f"guide/page-{number}.md": f"# Page {number}\n\nText.\n".encode() for number in range(6)})
    summary = run(config.input.paths, config.output.url)
    # notes.md read from the first input; the link skipped; the folder an error row
    assert (summary.documents_ok, summary.documents_error, summary.documents_skipped) == (10, 1, 1)
    (first / "zebra.md").write_bytes(b"# Zebra\n\nStripes, edited.\n")
    documents = read_dataset(config.output.url, "documents", columns=list(PLANNED_COLUMNS))
    plan = plan_rebuild(config, read_manifest(config.output.url), documents, list_inputs(config))
    assert plan.mode == "incremental"
    assert [doc_id for doc_id, _ in plan.to_chunk] == ["guide/private/", "leak.md", "notes.md", "zebra.md"]
    assert sorted(plan.carried.column("doc_id").to_pylist()) == [
        "extra.md",
        "guide/intro.md",
        *(f"guide/page-{number}.md" for number in range(6)),
    ]
    assert plan.documents_read_to_compare == 1  # zebra.md: its time moved; the others' did not
    assert plan.reason == "4 of 11 documents to chunk, 8 carried over, 0 gone"


times = (
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc))
    | st.none()
)
texts = st.text(max_size=20)  # lone surrogates included: a name that was not UTF-8 is listed with them
problems = st.none() | st.builds(FileProblem, texts, texts, texts, st.booleans())
int64s = st.integers(-(2**63), 2**63 - 1)
source_files = st.builds(
    SourceFile,
    doc_id=texts,
    source_uri=texts,
    input_index=st.integers(0, 10_000),
    path=texts,
    size_bytes=st.none() | st.integers(0, 2**62),
    modified_time=times,
    problem=problems,
    mtime_ns=st.none() | int64s,
    etag=st.none() | texts,
    version=st.none() | texts,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(source_files, max_size=12))
def test_every_field_of_a_listed_file_survives_arrow(sources):
    assert source_files_of(listed_files_batch(sources)) == sources


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(source_files, min_size=1, max_size=3), max_size=8))
def test_pairs_held_as_rows_iterate_back_as_they_were(groups):
    pairs = [(files[0].doc_id, files) for files in groups]
    held = ListedDocuments.of_pairs(pairs)
    assert len(held) == len(pairs) and list(held) == pairs
    assert held.doc_ids().to_pylist() == [doc_id for doc_id, _ in pairs] or any(
        "\ud800" <= character <= "\udfff" for doc_id, _ in pairs for character in doc_id
    )
    order = held.largest_first_order()
    assert [pairs[number] for number in order] == sorted(
        pairs, key=lambda pair: (-(-1 if pair[1][0].size_bytes is None else pair[1][0].size_bytes), pair[0])
    )
    assert list(held.pairs(order)) == [pairs[number] for number in order]


def test_a_listing_groups_files_by_doc_id_in_input_order():
    epoch = datetime(2026, 12, 1, tzinfo=timezone.utc)

    def source(doc_id, index, size):
        return SourceFile(doc_id, f"file:///in{index}/{doc_id}", index, f"/in{index}/{doc_id}", size, epoch)

    folder = SourceFile(
        "b/", "file:///in0/b", 0, "", None, None, problem=FileProblem("match", "UnlistableFolder", "no")
    )
    listing = InputListing.of(
        [source("c.md", 0, 5), source("a.md", 0, 1), folder, source("c.md", 1, 7), source("a.md", 1, 2)]
    )
    assert listing.unlisted == [folder]
    assert listing.doc_ids().to_pylist() == ["a.md", "c.md"]
    assert [(doc_id, [file.input_index for file in files]) for doc_id, files in listing.groups()] == [
        ("a.md", [0, 1]),
        ("b/", [0]),
        ("c.md", [0, 1]),
    ]
    assert list(listing.groups())[1] == ("b/", [folder])
    assert epoch + timedelta(0) == list(listing.groups())[0][1][0].modified_time
