"""The publish guard: a scheduled run never publishes a dataset it cannot vouch for.

An input whose root is missing or cannot be listed, or that matches no file, fails the run (exit status 1,
one line naming the input) before anything is written; a run that would delete more than
``output.max_deleted_fraction`` of the previous snapshot's documents refuses to publish unless
``--allow-deletes``; a folder below the input that cannot be listed is an error row, and the documents
published from it before are kept (or, when the run is a full rebuild and cannot keep them, the run fails).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import given
from hypothesis import strategies as st

from chunkline.dataset.rebuild import PublishRefusedError, RebuildPlan
from chunkline.dataset.settings import RunConfig
from chunkline.pipelines.cli import main
from chunkline.pipelines.run import refuse_mass_deletion

from .conftest import CORPUS, all_file_digests, documents, manifest, rows, rows_by_doc, run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)


def run_cli(capsys, *arguments: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what earlier runs of the test printed
    status = main(["run", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    """The lines of stderr that are not the run's progress log (nor the warnings of a storage retry)."""
    return [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith("chunkline: run ") and ", retrying in " not in line
    ]


def assert_one_error_line(err: str, *fragments: str) -> str:
    (line,) = error_lines(err)
    assert line.startswith("chunkline: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in line, line
    return line


@pytest.fixture
def published(tmp_path):
    """The corpus published once to ``tmp_path/out``: (corpus folder, output, digests of every output file)."""
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    run([corpus], output)
    return corpus, output, all_file_digests(output)


# --------------------------------------------------------------------------------------------------
# Inputs that are missing, cannot be listed or match nothing
# --------------------------------------------------------------------------------------------------


def test_a_renamed_input_folder_fails_with_status_1_and_leaves_the_dataset_as_it_was(published, capsys):
    corpus, output, before = published
    corpus.rename(corpus.with_name("corpus-renamed"))
    status, out, err = run_cli(capsys, str(corpus), "--output", str(output))
    assert status == 1 and out == ""
    assert_one_error_line(err, f"input {corpus} does not exist", "nothing was published")
    assert all_file_digests(output) == before
    assert not (output / "_lock.json").exists()


def test_a_glob_that_matches_no_file_publishes_nothing_and_names_the_glob(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    output = tmp_path / "out"
    pattern = f"{corpus}/**/*.mdx"
    status, _, err = run_cli(capsys, pattern, "--output", str(output))
    assert status == 1
    assert_one_error_line(err, f"input {pattern} matches no file", "nothing was published")
    assert not output.exists() or not any(output.iterdir())


def test_a_folder_whose_files_the_patterns_all_leave_out_matches_no_file(published, capsys):
    corpus, output, before = published
    status, _, err = run_cli(capsys, str(corpus), "--output", str(output), "--set", "input.include=['*.rst']")
    assert status == 1
    assert_one_error_line(
        err, f"input {corpus} matches no file (input.include/exclude and names ending in .md, .markdown)"
    )
    assert all_file_digests(output) == before


def test_an_input_root_that_cannot_be_listed_fails_naming_it(published, capsys, monkeypatch):
    corpus, output, before = published
    deny_listing(monkeypatch, corpus)
    status, _, err = run_cli(capsys, str(corpus), "--output", str(output))
    assert status == 1
    assert_one_error_line(err, f"cannot list input {corpus} (PermissionError", "nothing was published")
    assert all_file_digests(output) == before


@pytest.mark.slow
def test_an_object_store_listing_that_keeps_failing_publishes_nothing(memory_fs, monkeypatch, capsys):
    write_files_to_memory(memory_fs, "/docs", CORPUS)
    run(["memory://docs"], "memory://out")
    before = memory_snapshot(memory_fs, "/out")

    def unreachable(self, path, *args, **kwargs):
        raise ConnectionError(f"connection reset while listing {path}")

    monkeypatch.setattr(MemoryFileSystem, "find", unreachable)
    status, _, err = run_cli(capsys, "memory://docs", "--output", "memory://out")
    assert status == 1
    assert_one_error_line(err, "cannot list memory://docs", "still failing after 5 attempts", "nothing was published")
    monkeypatch.undo()
    assert memory_snapshot(memory_fs, "/out") == before


def test_one_input_of_two_missing_publishes_nothing_either(published, tmp_path):
    corpus, output, before = published
    extra = write_files(tmp_path / "extra", {"faq.md": b"# FAQ\n\nAsk the harbour master.\n"})
    shutil.rmtree(extra)
    with pytest.raises(PublishRefusedError, match=f"input {extra} does not exist"):
        run([corpus, extra], output)
    assert all_file_digests(output) == before


# --------------------------------------------------------------------------------------------------
# Deleting most of the dataset
# --------------------------------------------------------------------------------------------------


GONE = ["README.md", "CHANGELOG.md", "guide/installation.md", "guide/advanced/tuning.md", "guide/empty.md"]


def test_a_run_that_would_delete_most_documents_refuses_with_the_figures_and_the_way_out(published, capsys):
    corpus, output, before = published
    for doc_id in GONE:
        (corpus / doc_id).unlink()
    status, _, err = run_cli(capsys, str(corpus), "--output", str(output))
    assert status == 1
    snapshot = manifest(output)["snapshot"]
    assert_one_error_line(
        err,
        f"would delete 5 of the 7 documents of snapshot {snapshot} at {output} (71%)",
        "more than output.max_deleted_fraction (0.5)",
        "nothing was published",
        "--allow-deletes",
    )
    assert all_file_digests(output) == before
    assert not list((output / "snapshots").glob("*/_staging")) and len(list((output / "snapshots").iterdir())) == 1

    status, out, _ = run_cli(capsys, str(corpus), "--output", str(output), "--allow-deletes")
    assert status == 0 and "5 deleted" in out
    assert set(documents(output)) == set(CORPUS) - set(GONE)
    assert manifest(output)["config"]["run"]["allow_deletes"] is True


def test_deleting_up_to_the_fraction_publishes(published):
    corpus, output, _ = published
    for doc_id in GONE[:3]:
        (corpus / doc_id).unlink()
    summary = run([corpus], output)
    assert summary.changes["deleted"] == 3
    assert set(documents(output)) == set(CORPUS) - set(GONE[:3])


def test_a_full_rebuild_that_deletes_too_much_is_refused_as_well(published):
    corpus, output, before = published
    for doc_id in GONE[:4]:
        (corpus / doc_id).unlink()
    # Changed chunking settings: a full rebuild, judged by the same rule.
    with pytest.raises(PublishRefusedError, match=r"would delete 4 of the 7 documents .* \(57%\)"):
        run([corpus], output, "max_tokens=128")
    assert all_file_digests(output) == before


def test_max_deleted_fraction_is_a_setting(published):
    corpus, output, before = published
    for doc_id in GONE[:2]:
        (corpus / doc_id).unlink()
    with pytest.raises(PublishRefusedError, match=r"delete 2 of the 7 documents .*output.max_deleted_fraction \(0.2\)"):
        run([corpus], output, "output.max_deleted_fraction=0.2")
    assert all_file_digests(output) == before
    run([corpus], output, "output.max_deleted_fraction=0.3")
    assert set(documents(output)) == set(CORPUS) - set(GONE[:2])


def test_max_deleted_fraction_out_of_range_is_a_config_error(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    status, _, err = run_cli(
        capsys, str(corpus), "--output", str(tmp_path / "out"), "--set", "output.max_deleted_fraction=1.5"
    )
    assert status == 2
    assert "max_deleted_fraction must be from 0 to 1" in err


@given(
    before=st.integers(min_value=0, max_value=10_000),
    deleted_share=st.floats(min_value=0, max_value=1),
    limit=st.floats(min_value=0, max_value=1),
    allow=st.booleans(),
)
def test_the_guard_refuses_exactly_the_runs_over_the_fraction(before, deleted_share, limit, allow):
    deleted = round(before * deleted_share)
    config = RunConfig.from_dict(
        {"output": {"url": "out", "max_deleted_fraction": limit}, "run": {"allow_deletes": allow}}
    )
    refused = before > 0 and deleted / before > limit and not allow
    try:
        refuse_mass_deletion(config, deleted, before, RebuildPlan("full", ""))
    except PublishRefusedError as error:
        assert refused
        assert f"delete {deleted} of the {before} documents" in str(error) and "\n" not in str(error)
    else:
        assert not refused


# --------------------------------------------------------------------------------------------------
# A folder below the input that cannot be listed
# --------------------------------------------------------------------------------------------------


def deny_listing(monkeypatch, *folders: Path) -> None:
    """Make ``folders`` unlistable, as a folder without read permission is for a user who is not root
    (the tests may run as root, who can list anything)."""
    denied = {os.path.realpath(folder) for folder in folders}
    original = os.scandir

    def scandir(path="."):
        if not isinstance(path, int) and os.path.realpath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return original(path)

    monkeypatch.setattr(os, "scandir", scandir)


GUIDE = ["guide/installation.md", "guide/advanced/tuning.md", "guide/empty.md"]


def test_an_unlistable_subfolder_is_an_error_row_and_its_documents_are_kept(published, monkeypatch):
    corpus, output, _ = published
    chunks_before = rows_by_doc(output, "chunks")
    documents_before = documents(output)
    (corpus / "CHANGELOG.md").write_bytes(CORPUS["CHANGELOG.md"] + b"\n## 1.3.0\n\n- A new release.\n")
    deny_listing(monkeypatch, corpus / "guide")

    summary = run([corpus], output)
    assert summary.rebuild["mode"] == "incremental"
    assert "3 kept from 1 folder(s) that could not be listed" in summary.rebuild["reason"]
    (error,) = rows(output, "errors")
    assert (error["doc_id"], error["stage"], error["error_type"]) == ("guide/", "match", "UnlistableFolder")
    assert f"folder {(corpus / 'guide').as_uri()} could not be listed (PermissionError" in error["message"]
    assert "kept as they were" in error["message"]
    # The folder's documents are the previous snapshot's rows, unchanged; the edit elsewhere went through.
    docs = documents(output)
    assert set(docs) == set(CORPUS)
    chunks = rows_by_doc(output, "chunks")
    for doc_id in GUIDE:
        assert docs[doc_id] == documents_before[doc_id]
        assert chunks.get(doc_id) == chunks_before.get(doc_id)
    assert chunks["CHANGELOG.md"] != chunks_before["CHANGELOG.md"]
    changes = {row["doc_id"]: row["change"] for row in rows(output, "changes/documents")}
    assert {changes[doc_id] for doc_id in GUIDE} == {"unchanged"} and changes["CHANGELOG.md"] == "changed"
    assert summary.changes["deleted"] == 0
    assert not any(row["doc_id"].startswith("guide/") for row in rows(output, "changes/deletes"))

    monkeypatch.undo()
    again = run([corpus], output)
    assert rows(output, "errors") == [] and again.changes["deleted"] == 0
    assert rows_by_doc(output, "chunks")["guide/installation.md"] == chunks_before["guide/installation.md"]


def test_an_unlistable_subfolder_in_a_full_rebuild_fails_naming_the_folder(published, monkeypatch, capsys):
    corpus, output, before = published
    deny_listing(monkeypatch, corpus / "guide")
    status, _, err = run_cli(capsys, str(corpus), "--output", str(output), "--set", "max_tokens=128")
    assert status == 1
    assert_one_error_line(
        err,
        f"folder {(corpus / 'guide').as_uri()} could not be listed (PermissionError",
        "full rebuild (the chunking, decoding or output settings differ",
        "cannot keep the 3 document(s) published from it",
        "nothing was published",
    )
    assert all_file_digests(output) == before


def test_an_unlistable_subfolder_on_a_first_run_is_an_error_row(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus")
    deny_listing(monkeypatch, corpus / "guide" / "advanced")
    output = tmp_path / "out"
    summary = run([corpus], output)
    assert set(documents(output)) == set(CORPUS) - {"guide/advanced/tuning.md"}
    (error,) = rows(output, "errors")
    assert (error["doc_id"], error["error_type"]) == ("guide/advanced/", "UnlistableFolder")
    assert summary.documents_error == 0 and len(summary.errors) == 1


def test_an_unlistable_subfolder_under_a_glob_keeps_its_documents_too(published, monkeypatch):
    corpus, _, _ = published
    output = corpus.parent / "glob-out"
    pattern = f"{corpus}/**/*.md"
    run([pattern], output)
    before = rows_by_doc(output, "chunks")
    deny_listing(monkeypatch, corpus / "guide" / "advanced")
    summary = run([pattern], output)
    assert summary.changes["deleted"] == 0
    assert rows_by_doc(output, "chunks") == before
    assert [row["doc_id"] for row in rows(output, "errors")] == ["guide/advanced/"]


# --------------------------------------------------------------------------------------------------
# Helpers for memory:// stores
# --------------------------------------------------------------------------------------------------


def write_files_to_memory(fs: fsspec.AbstractFileSystem, root: str, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        fs.pipe_file(f"{root}/{relative}", data)


def memory_snapshot(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, bytes]:
    return {path: fs.cat_file(path) for path in fs.find(root)}
