"""The driver's listing held as Arrow rows: the plan and the staged listing are what a listing of
``SourceFile`` values gave, for inputs that share a doc_id, a folder that cannot be listed and a link out of
the root; and every field of a listed file survives the trip through Arrow."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset.inputs import FileProblem, SourceFile
from chunkline.dataset.listed_files import (
    BATCH_ROWS,
    HELD_FILES_SCHEMA,
    ListedDocuments,
    held_columns,
    held_rows,
    listed_files_batch,
    listed_files_table,
    plain_rows,
    source_files_of,
    take_rows,
)
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


# Names shaped as listings give them: a few folders shared by many files, under roots of different shapes
# (a URL's scheme and bucket, a local path, none), some with no folder part, some not UTF-8.
name_parts = st.sampled_from(["a", "b", "page-1.md", "ü.md", "\udcff.md", "x\\y", ""]) | st.text(max_size=6)
folders = st.lists(st.sampled_from(["", "f012/", "f012/f034/", "/", "ü/", "\udce9/", "a//"]), min_size=1, max_size=3)
roots = st.sampled_from(["file:///data/corpus/", "s3://bucket/", "memory://", "gs://b/key/", "", "/"])


@st.composite
def listed_files(draw):
    """Files of a few shared folders: doc_id ``folder/name``, its URL and path under a root; now and then a
    ``source_uri`` or ``path`` whose name is not the doc_id's, or free text."""
    shared = draw(folders)
    files = []
    for _ in range(draw(st.integers(0, 14))):
        folder, name = draw(st.sampled_from(shared)), draw(name_parts)
        doc_id = folder + name
        root = draw(roots)
        source_uri = draw(st.sampled_from([root + doc_id, root + folder, root + doc_id + "%20", doc_id]) | texts)
        path = draw(st.sampled_from(["/data/corpus/" + doc_id, doc_id, "/data/" + folder + name.upper()]) | texts)
        files.append(
            SourceFile(
                doc_id,
                source_uri,
                draw(st.integers(0, 10_000)),
                path,
                draw(st.none() | st.integers(0, 2**62)),
                draw(times),
                problem=draw(problems),
                mtime_ns=draw(st.none() | int64s),
                etag=draw(st.none() | st.sampled_from(['"e1"', 'W/"e2"']) | texts),
                version=draw(st.none() | texts),
            )
        )
    return files


@settings(max_examples=300, deadline=None)
@given(listed_files() | st.lists(source_files, max_size=12))
def test_held_rows_are_the_plain_rows_value_for_value(sources):
    plain = pa.Table.from_batches([listed_files_batch(sources)])
    held = held_rows(plain)
    assert held.schema.equals(HELD_FILES_SCHEMA)
    assert plain_rows(held).equals(plain)
    assert listed_files_table(sources).equals(held)
    assert source_files_of(held) == sources
    # Some columns at a time, through take_rows, in any order.
    rows = pa.array(reversed(range(len(sources))), pa.int64())
    for names in (["doc_id"], ["source_uri", "size_bytes"], ["path", "input_index", "problem_message"]):
        assert take_rows(held.select(held_columns(names)), rows.to_numpy()).equals(plain.select(names).take(rows))


@settings(max_examples=150, deadline=None)
@given(listed_files() | st.lists(source_files, max_size=12))
def test_files_grouped_by_doc_id_then_input_then_path_as_a_sort_of_the_plain_rows(sources):
    """Grouping sorts the doc_ids whole and orders the files of a doc_id held twice by input and path, as
    a sort of the plain rows by (doc_id, input, path, order listed) does, on the bytes of the text."""
    shared = [*sources, *sources[:3]]  # some doc_ids held by several files
    held = ListedDocuments.by_doc_id(listed_files_table(shared), then_by=("input_index", "path"))

    def key(number):
        source = shared[number]
        encoded = (source.doc_id.encode("utf-8", "surrogatepass"), source.path.encode("utf-8", "surrogatepass"))
        return encoded[0], source.input_index, encoded[1], number

    expected = []
    for number in sorted(range(len(shared)), key=key):
        if expected and key(expected[-1][-1])[0] == key(number)[0]:
            expected[-1].append(number)
        else:
            expected.append([number])
    assert list(held) == [(shared[group[0]].doc_id, [shared[number] for number in group]) for group in expected]


def test_a_listing_longer_than_a_batch_keeps_every_batch_own_dictionaries():
    """Files past one batch of rows, each with a folder and a message of its own: every batch numbers its
    own values, and taking rows across batches gives each its own values back."""
    count = 2 * BATCH_ROWS + 5
    sources = [
        SourceFile(
            f"f{number}/p.md",
            f"s3://bucket/f{number}/p.md",
            0,
            f"f{number}/p.md",
            number,
            None,
            problem=FileProblem("read", "OSError", f"failed {number}", False),
        )
        for number in range(count)
    ]
    listing = InputListing.of(reversed(sources))
    assert listing.files.num_rows == count and listing.files.column("doc_id_folder").num_chunks == 3
    assert len(listing.groups()) == count
    assert list(listing.groups()) == sorted(((source.doc_id, [source]) for source in sources), key=lambda pair: pair[0])
    groups = listing.groups()
    largest = [doc_id for doc_id, _ in groups.pairs(groups.largest_first_order()[:3])]
    assert largest == [f"f{number}/p.md" for number in (count - 1, count - 2, count - 3)]
