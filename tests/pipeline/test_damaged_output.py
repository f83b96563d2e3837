"""A damaged output never wedges: after any single damage to a published output (see
``tests/damage_matrix.py``: parts deleted, truncated or bit-flipped in each table of the latest or an older
kept snapshot, manifests truncated or edited, snapshot folders removed, a stale ``_SUCCESS``) the next run
publishes the dataset a clean full run of the same corpus publishes, with ``changes/`` against the newest
snapshot that verifies (or marked as a full reload), and ``chunkline inspect`` answers in one line.

Each case damages a copy of one module-wide history (two kept snapshots of the pipeline tests' corpus) and
runs the pipeline in process; a few go through the real ``chunkline`` program. The copy (``copytree``)
gives each snapshot files of its own, as a restored backup or an object store has them: in the history
itself the parts of a shard the latest run did not touch are hard links to the older snapshot's, and a
part damaged in place there is damaged in both (``tests/pipeline/test_linked_parts.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from damage_matrix import DAMAGES, Snapshots, check_rerun, reference_rows
from hypothesis import given
from hypothesis import strategies as st

import chunkline.pipelines.run as run_module
from chunkline.dataset.publish import (
    DamagedDatasetError,
    manifest_problem,
    read_dataset,
    read_manifest,
    verify_output,
    verify_part,
)
from chunkline.pipelines.cli import main
from chunkline.schemas import TABLE_SCHEMAS

from .conftest import run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)

CHUNKLINE = Path(sys.executable).parent / "chunkline"


@dataclass(frozen=True)
class History:
    template: Path
    """An output with two kept snapshots; every test damages a copy of it."""
    corpus: Path
    snapshots: Snapshots
    reference: dict
    """The row tables of a clean full run of the corpus into a fresh output."""


def edit_add_and_delete(corpus: Path) -> None:
    installation = corpus / "guide/installation.md"
    installation.write_bytes(
        installation.read_bytes().replace(b"## Upgrading", b"## Upgrading\n\nRead the release notes first.\n")
    )
    write_files(corpus, {"guide/faq.md": b"# FAQ\n\n## Late readings\n\nThe dashboard refreshes every five minutes.\n"})
    (corpus / "CHANGELOG.md").unlink()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    root = tmp_path_factory.mktemp("damage")
    corpus = write_corpus(root / "corpus")
    template = root / "history"
    older = run([corpus], template)
    edit_add_and_delete(corpus)
    latest = run([corpus], template)
    assert latest.rebuild["mode"] == "incremental"
    clean = root / "clean"
    run([corpus], clean)
    return History(template, corpus, Snapshots(older.run_id, latest.run_id), reference_rows(str(clean)))


def damaged_copy(history: History, tmp_path: Path, name: str) -> Path:
    output = tmp_path / "output"
    shutil.copytree(history.template, output)
    DAMAGES[name].apply(output, history.snapshots)
    return output


def assert_one_error_line(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("chunkline: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def chunkline_program(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHUNKLINE), *arguments], capture_output=True, text=True, timeout=240)


def chunkline_warnings(caplog) -> list[str]:
    records = [record for record in caplog.records if record.name == "chunkline" and record.levelno >= logging.WARNING]
    return [record.getMessage() for record in records]


# --------------------------------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DAMAGES))
@pytest.mark.slow
def test_after_one_damage_inspect_answers_in_one_line_and_the_next_run_publishes_a_clean_runs_dataset(
    name, history, tmp_path, capsys, caplog
):
    damage = DAMAGES[name]
    output = damaged_copy(history, tmp_path, name)
    for which in ("latest", "older"):
        arguments = ["inspect", str(output)] + (["--snapshot", history.snapshots.older] if which == "older" else [])
        code = main(arguments)
        captured = capsys.readouterr()
        if which in damage.refused:
            assert_one_error_line(code, captured.err)
        else:
            assert code == 0 and not captured.err, captured.err

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="chunkline"):
        run([history.corpus], output)
    check_rerun(str(output), history.reference, history.snapshots, damage)
    warnings = chunkline_warnings(caplog)
    assert len(warnings) <= 1 and all("\n" not in line for line in warnings), warnings
    if damage.base != "latest" or name.startswith("root manifest"):
        assert len(warnings) == 1 and "damaged" in warnings[0], warnings
    assert main(["inspect", str(output)]) == 0


REINDEXED = (
    "latest chunks part bit-flipped",
    "latest documents part truncated",
    "root manifest truncated",
    "root manifest: a chunks file is ../outside.parquet",
    "latest snapshot folder removed",
    "both snapshots: a chunks part bit-flipped",
    "_SUCCESS names the older snapshot",
)


@pytest.mark.parametrize("name", REINDEXED)
@pytest.mark.slow
def test_a_reindex_run_after_one_damage_publishes_a_clean_runs_dataset(name, history, tmp_path):
    output = damaged_copy(history, tmp_path, name)
    summary = run([history.corpus], output, "run.reindex=true")
    assert summary.rebuild["mode"] == "full"
    check_rerun(str(output), history.reference, history.snapshots, DAMAGES[name])


@pytest.mark.slow
def test_the_chunkline_program_rebuilds_a_damaged_output_with_one_warning_and_inspect_says_one_line(history, tmp_path):
    output = damaged_copy(history, tmp_path, "latest chunks part bit-flipped")
    inspected = chunkline_program("inspect", str(output))
    assert_one_error_line(inspected.returncode, inspected.stderr)
    assert "chunks/part-" in inspected.stderr and "--snapshot" in inspected.stderr

    ran = chunkline_program("run", str(history.corpus), "--output", str(output))
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    named = [line for line in ran.stderr.splitlines() if "chunks/part-" in line]
    assert len(named) == 1 and named[0].startswith("chunkline: snapshot ") and "damaged" in named[0], ran.stderr
    check_rerun(str(output), history.reference, history.snapshots, DAMAGES["latest chunks part bit-flipped"])


@pytest.mark.slow
def test_the_chunkline_program_publishes_a_new_root_manifest_over_a_truncated_one(history, tmp_path):
    output = damaged_copy(history, tmp_path, "root manifest truncated")
    inspected = chunkline_program("inspect", str(output))
    assert_one_error_line(inspected.returncode, inspected.stderr)
    assert "_manifest.json is damaged" in inspected.stderr

    ran = chunkline_program("run", str(history.corpus), "--output", str(output))
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    check_rerun(str(output), history.reference, history.snapshots, DAMAGES["root manifest truncated"])


# --------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------


def test_read_dataset_never_follows_a_manifest_entry_outside_the_dataset(history, tmp_path):
    output = damaged_copy(history, tmp_path, "root manifest: a chunks file is ../outside.parquet")
    assert (tmp_path / "outside.parquet").exists()
    with pytest.raises(DamagedDatasetError, match=r"\.\./outside\.parquet"):
        read_dataset(str(output), "chunks")
    # An older kept snapshot is still read on request, through its own manifest.
    older = read_dataset(str(output), "chunks", snapshot=history.snapshots.older)
    assert older.num_rows == read_dataset(str(history.template), "chunks", snapshot=history.snapshots.older).num_rows


def test_read_dataset_names_the_damaged_part_and_the_kept_snapshots_to_read_instead(history, tmp_path):
    output = damaged_copy(history, tmp_path, "latest chunks part truncated")
    with pytest.raises(DamagedDatasetError) as raised:
        read_dataset(str(output), "chunks")
    message = str(raised.value)
    assert "\n" not in message
    assert f"snapshot {history.snapshots.latest}" in message and "chunks/part-" in message
    assert history.snapshots.older in message
    # The documents table is whole, and is still read.
    assert read_dataset(str(output), "documents").num_rows == len(history.reference["documents"])


def test_read_dataset_refuses_parts_whose_rows_are_not_the_manifests_count(history, tmp_path):
    output = damaged_copy(history, tmp_path, "root manifest: chunks row count changed")
    with pytest.raises(DamagedDatasetError, match="rows"):
        read_dataset(str(output), "chunks")


def test_inspect_shows_an_older_kept_snapshot_on_request(history, tmp_path, capsys):
    output = damaged_copy(history, tmp_path, "latest chunks part bit-flipped")
    assert main(["inspect", str(output), "--snapshot", history.snapshots.older]) == 0
    shown = capsys.readouterr().out
    assert f"snapshot {history.snapshots.older}" in shown.splitlines()[0]
    assert f"{history.snapshots.older} (shown)" in shown and f"{history.snapshots.latest} (latest)" in shown


def test_inspect_of_a_snapshot_that_is_not_kept_says_so_in_one_line(history, capsys):
    code = main(["inspect", str(history.template), "--snapshot", "20200101T000000.000000Z-000000"])
    assert_one_error_line(code, capsys.readouterr().err)


# --------------------------------------------------------------------------------------------------
# _SUCCESS, and parts that change during a run
# --------------------------------------------------------------------------------------------------


def test_a_stale_success_is_repaired_once_the_lock_is_taken_even_if_the_run_then_fails(history, tmp_path, monkeypatch):
    output = damaged_copy(history, tmp_path, "_SUCCESS names the older snapshot")
    root_before = (output / "_manifest.json").read_bytes()

    def fail(*arguments, **keywords):
        raise RuntimeError("planning failed")

    monkeypatch.setattr(run_module, "plan_rebuild", fail)
    with pytest.raises(RuntimeError, match="planning failed"):
        run([history.corpus], output)
    assert (output / "_SUCCESS").read_text() == f"{history.snapshots.latest}\n"
    assert (output / "_manifest.json").read_bytes() == root_before


def test_readers_follow_the_root_manifest_whatever_success_names(history, tmp_path):
    output = damaged_copy(history, tmp_path, "_SUCCESS names the older snapshot")
    assert read_manifest(str(output))["snapshot"] == history.snapshots.latest
    latest_rows = read_dataset(str(history.template), "chunks").to_pylist()
    assert read_dataset(str(output), "chunks").to_pylist() == latest_rows


def test_a_part_that_changes_after_the_check_is_never_copied_forward(history, tmp_path, monkeypatch):
    """The sink verifies every previous part it reads or copies, not only the check before the run."""
    output = tmp_path / "output"
    shutil.copytree(history.template, output)
    checked = verify_output(str(output))
    assert checked.latest_trusted
    DAMAGES["latest chunks part bit-flipped"].apply(output, history.snapshots)
    root_before = (output / "_manifest.json").read_bytes()
    monkeypatch.setattr(run_module, "verify_output", lambda *arguments, **keywords: checked)
    with pytest.raises(DamagedDatasetError, match="chunks/part-"):
        run([history.corpus], output)
    assert (output / "_manifest.json").read_bytes() == root_before
    assert sorted(path.name for path in (output / "snapshots").iterdir()) == sorted(
        [history.snapshots.older, history.snapshots.latest]
    )


def test_when_no_kept_snapshot_verifies_the_changes_mark_a_full_reload(history, tmp_path):
    output = damaged_copy(history, tmp_path, "both snapshots: a chunks part bit-flipped")
    summary = run([history.corpus], output)
    published = read_manifest(str(output))
    assert published["full_reload"] is True and published["rebuild"]["previous_snapshot"] is None
    assert summary.changes["added"] == len(history.reference["documents"]) and summary.changes["deleted"] == 0
    # The damaged snapshots are no longer kept, nor left on disk.
    assert published["snapshots"] == [summary.run_id]
    assert [path.name for path in (output / "snapshots").iterdir()] == [summary.run_id]


# --------------------------------------------------------------------------------------------------
# Invariants of the checks themselves
# --------------------------------------------------------------------------------------------------


def _part_name(shard: int, data: bytes) -> str:
    return f"part-{shard:05d}-{hashlib.sha256(data).hexdigest()[:16]}.parquet"


@given(
    data=st.binary(min_size=1, max_size=512),
    shard=st.integers(0, 99_999),
    position=st.integers(0, 511),
    bit=st.integers(0, 7),
)
@pytest.mark.slow
def test_a_part_verifies_exactly_when_its_bytes_are_the_ones_its_name_hashes(data, shard, position, bit):
    name = f"snapshots/x/chunks/{_part_name(shard, data)}"
    verify_part(name, data)
    flipped = bytearray(data)
    flipped[position % len(data)] ^= 1 << bit
    for damaged in (bytes(flipped), data[: len(data) // 2], data + b"\0"):
        with pytest.raises(DamagedDatasetError):
            verify_part(name, damaged)


SNAPSHOT = "20261201T101500.123456Z-3f9a1c"
_SEGMENTS = st.sampled_from(
    [
        "snapshots",
        SNAPSHOT,
        "20250101T000000.000000Z-aaaaaa",
        "chunks",
        "documents",
        "changes",
        "upserts",
        "..",
        ".",
        "",
        "/",
        "part-00001-0123456789abcdef.parquet",
        "outside.parquet",
        "two\nlines",
    ]
)


def _manifest_with_chunks_file(name: str) -> dict:
    tables = {
        table: {"files": [f"snapshots/{SNAPSHOT}/{table}/part-00000-0123456789abcdef.parquet"], "rows": 0}
        for table in TABLE_SCHEMAS
    }
    tables["chunks"]["files"].append(name)
    return {"format": "chunkline-dataset", "snapshot": SNAPSHOT, "snapshots": [SNAPSHOT], "tables": tables}


@given(segments=st.lists(_SEGMENTS, min_size=1, max_size=6), absolute=st.booleans())
def test_a_manifest_names_only_part_files_of_its_own_snapshots_table_folders(segments, absolute):
    name = ("/" if absolute else "") + "/".join(segments)
    problem = manifest_problem(_manifest_with_chunks_file(name))
    inside = name == f"snapshots/{SNAPSHOT}/chunks/part-00001-0123456789abcdef.parquet"
    assert (problem is None) == inside, (name, problem)
    if problem is not None:
        assert "\n" not in problem and "chunks table names" in problem


def test_a_manifest_whose_json_is_not_a_chunkline_manifest_is_no_dataset_and_never_damaged(tmp_path, capsys):
    (tmp_path / "_manifest.json").write_text(json.dumps({"format": "something-else"}))
    code = main(["inspect", str(tmp_path)])
    err = capsys.readouterr().err
    assert_one_error_line(code, err)
    assert "not a chunkline manifest" in err


def test_a_damaged_part_on_an_object_store_like_filesystem_is_found_and_rebuilt(history, memory_fs, caplog):
    """The same checks through fsspec paths without a local folder (``memory://``, as on S3 or Azure)."""
    run([history.corpus], "memory://healing")
    latest = run([history.corpus], "memory://healing")
    part = sorted(path for path in memory_fs.find(f"/healing/snapshots/{latest.run_id}/chunks"))[0]
    memory_fs.pipe_file(part, memory_fs.cat_file(part)[:-16])
    with pytest.raises(DamagedDatasetError, match="chunks/part-"):
        read_dataset("memory://healing", "chunks")
    caplog.clear()
    repaired = run([history.corpus], "memory://healing")
    assert repaired.rebuild["mode"] == "full" and repaired.rebuild["previous_snapshot"] != latest.run_id
    assert len(chunkline_warnings(caplog)) == 1
    rows = sorted(read_dataset("memory://healing", "chunks").to_pylist(), key=lambda row: row["chunk_id"])
    assert rows == sorted(history.reference["chunks"], key=lambda row: row["chunk_id"])
