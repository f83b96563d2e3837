"""Archive members whose names lead out of the input (zip slip): never read, never lost, never a bad doc_id.

A member named ``../evil.md``, ``ok/../../sneaky.md``, ``/../abs.md`` or ``a\\..\\..\\back.md`` gets a
``documents`` row with status ``error`` and an ``errors`` row (stage ``match``, type ``PathOutsideInput``)
whose message names the member and says that its name leaves the input's root, under the doc_id
``_outside_input/<12 hex of the name's sha256>/<name without empty, . and .. parts>``. The members that stay
inside are chunked as usual, and no file is written outside the output.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from .conftest import documents, rows, rows_by_doc, run

pytestmark = pytest.mark.timeout(300)

INSIDE = {
    "ok/a.md": b"# A\n\nInside the archive.\n",
    "x/../inner.md": b"# Inner\n\nStays inside once normalized.\n",
}
#: Member name -> the name parts its doc_id keeps.
CLIMBING = {
    "../evil.md": "evil.md",
    "../../up/deeper.md": "up/deeper.md",
    "ok/../../sneaky.md": "ok/sneaky.md",
    "/../absolute-climb.md": "absolute-climb.md",
    "notes\\..\\..\\back.md": "notes/back.md",
}


def outside_doc_id(name: str) -> str:
    return f"_outside_input/{hashlib.sha256(name.encode()).hexdigest()[:12]}/{CLIMBING[name]}"


def write_archive(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(zipfile.ZipInfo(name), data)
    assert set(zipfile.ZipFile(path).namelist()) == set(members)
    return path


def assert_clean(doc_ids: set[str]) -> None:
    for doc_id in doc_ids:
        assert ".." not in re.split(r"[/\\]", doc_id), doc_id
        assert not doc_id.startswith(("/", "\\")), doc_id


@pytest.fixture(scope="module")
def archive_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("zip-slip")
    members = {**INSIDE, **{name: f"# Climbing\n\nMember {name}.\n".encode() for name in CLIMBING}}
    archive = write_archive(base / "upload.zip", members)
    output = base / "out"
    run([f"zip::{archive.as_uri()}"], output)
    return base, output


def test_every_climbing_member_is_an_error_row_that_names_it(archive_run):
    _, output = archive_run
    docs = documents(output)
    errors = {row["doc_id"]: row for row in rows(output, "errors")}
    assert set(errors) == {outside_doc_id(name) for name in CLIMBING}
    for name in CLIMBING:
        doc_id = outside_doc_id(name)
        assert docs[doc_id]["status"] == "error"
        assert docs[doc_id]["chunk_count"] == 0
        error = errors[doc_id]
        assert (error["stage"], error["error_type"]) == ("match", "PathOutsideInput")
        assert repr(name) in error["message"] and "leads out of the input's root" in error["message"]
        assert docs[doc_id]["message"] == error["message"]


def test_members_inside_the_archive_are_chunked_beside_them(archive_run):
    _, output = archive_run
    docs = documents(output)
    assert {doc_id for doc_id, row in docs.items() if row["status"] == "ok"} == {"ok/a.md", "inner.md"}
    chunks = rows_by_doc(output, "chunks")
    assert set(chunks) == {"ok/a.md", "inner.md"}
    assert "".join(row["text"] for row in chunks["ok/a.md"]) == INSIDE["ok/a.md"].decode()


@pytest.mark.slow
def test_no_row_of_any_table_has_a_doc_id_that_climbs(archive_run):
    base, output = archive_run
    doc_ids = {row["doc_id"] for table in ("chunks", "documents", "errors") for row in rows(output, table)}
    assert len(doc_ids) == len(INSIDE) + len(CLIMBING)
    assert_clean(doc_ids)
    written = {path.name for path in base.parent.rglob("*")}
    assert not written & {"evil.md", "deeper.md", "sneaky.md", "absolute-climb.md", "back.md"}


def test_ids_are_the_same_on_a_second_run(archive_run, tmp_path):
    base, output = archive_run
    again = tmp_path / "again"
    run([f"zip::{(base / 'upload.zip').as_uri()}"], again)
    assert documents(again).keys() == documents(output).keys()


def test_a_subfolder_root_reports_members_that_climb_out_of_it(tmp_path):
    archive = write_archive(
        tmp_path / "bundle.zip",
        {"ok/a.md": INSIDE["ok/a.md"], "ok/../../sneaky.md": b"# Sneaky\n", "other/b.md": b"# B\n"},
    )
    output = tmp_path / "out"
    run([f"zip://ok::{archive.as_uri()}"], output)
    docs = documents(output)
    assert set(docs) == {"a.md", outside_doc_id("ok/../../sneaky.md")}
    (error,) = rows(output, "errors")
    assert error["doc_id"] == outside_doc_id("ok/../../sneaky.md")
    assert "'ok/../../sneaky.md'" in error["message"] and "'ok'" in error["message"]
    assert_clean(set(docs))


def test_a_member_that_climbs_never_takes_the_place_of_the_file_it_names(tmp_path):
    # "../guide.md" cleaned to "guide.md" would be a duplicate of the real one and could win over it.
    archive = write_archive(
        tmp_path / "bundle.zip", {"guide.md": b"# Guide\n\nThe real one.\n", "../guide.md": b"# Fake\n"}
    )
    output = tmp_path / "out"
    run([f"zip::{archive.as_uri()}"], output)
    docs = documents(output)
    assert docs["guide.md"]["status"] == "ok"
    assert "The real one." in "".join(row["text"] for row in rows_by_doc(output, "chunks")["guide.md"])
    assert docs[f"_outside_input/{hashlib.sha256(b'../guide.md').hexdigest()[:12]}/guide.md"]["status"] == "error"


#: Member names that some OS reads as absolute -> the name parts their doc_id keeps.
ABSOLUTE = {
    "C:/windows-drive.md": "C:/windows-drive.md",
    "D:\\backslash-drive.md": "D:/backslash-drive.md",
    "\\\\server\\share\\unc.md": "server/share/unc.md",
    "/rooted.md": "rooted.md",
    "\\rooted-backslash.md": "rooted-backslash.md",
}


def test_members_named_absolute_on_any_os_are_error_rows_never_doc_ids(tmp_path):
    archive = write_archive(
        tmp_path / "bundle.zip",
        {"ok/a.md": INSIDE["ok/a.md"], **{name: f"# Absolute\n\nMember {name}.\n".encode() for name in ABSOLUTE}},
    )
    output = tmp_path / "out"
    run([f"zip::{archive.as_uri()}"], output)
    docs = documents(output)
    expected = {
        name: f"_outside_input/{hashlib.sha256(name.encode()).hexdigest()[:12]}/{parts}"
        for name, parts in ABSOLUTE.items()
    }
    assert set(docs) == {"ok/a.md", *expected.values()}
    errors = {row["doc_id"]: row for row in rows(output, "errors")}
    for name, doc_id in expected.items():
        assert docs[doc_id]["status"] == "error" and docs[doc_id]["chunk_count"] == 0
        assert (errors[doc_id]["stage"], errors[doc_id]["error_type"]) == ("match", "PathOutsideInput")
        assert repr(name) in errors[doc_id]["message"]
    assert_clean(set(docs))
    for doc_id in docs:
        assert not re.match(r"[A-Za-z]:", doc_id), doc_id
    assert rows_by_doc(output, "chunks").keys() == {"ok/a.md"}
