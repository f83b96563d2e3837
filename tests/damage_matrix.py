"""Damage done to a published chunkline output, one kind at a time, and the check of what the next run
made of it. Used by ``tests/pipeline/test_damaged_output.py`` and ``benchmarks/bench_damage.py``.

A *history* is an output holding two kept snapshots: ``older``, a full run, and ``latest``, built
incrementally from it after one document was edited, one added and one deleted. Each entry of
:data:`DAMAGES` damages a copy of such an output in place (a part deleted, truncated or with one bit
flipped, in each table of either snapshot; the root manifest or a snapshot's own manifest truncated or
edited to name wrong files, files outside the dataset or wrong row counts; a snapshot folder removed; a
stale ``_SUCCESS``) and says what a correct next run does about it: which snapshot its ``changes/`` are
computed against (``latest``: the latest snapshot's data verifies, through the root manifest or, when
that is what is damaged, through the snapshot's own manifest; ``older``: the latest is damaged and the run
rebuilds in full against the older one; ``none``: nothing verifies, the changes mark a full reload), and which
snapshot ``chunkline inspect`` must refuse in one line before that run. The damages are done to a copy in
which each snapshot has files of its own: where kept snapshots share a part's file (hard links on a local
disk), damaging it in place damages every snapshot that names it.

:func:`check_rerun` checks a finished rerun: every row table equal, row for row, to a clean full run of the
same corpus; ``changes/`` consistent with the snapshot it names as its base (or a full reload);
``_SUCCESS`` naming the published snapshot; every kept snapshot's manifest readable.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.schemas import ROW_TABLES, TABLE_SCHEMAS

__all__ = ["DAMAGES", "Damage", "Snapshots", "check_rerun", "reference_rows"]

ALL_TABLES = tuple(TABLE_SCHEMAS)


@dataclass(frozen=True)
class Snapshots:
    """The two snapshots of a history: the older full run and the latest, incremental one."""

    older: str
    latest: str

    def __getitem__(self, which: str) -> str:
        return {"older": self.older, "latest": self.latest}[which]


@dataclass(frozen=True)
class Damage:
    """One kind of damage and what a correct next run makes of it."""

    name: str
    apply: Callable[[Path, Snapshots], None]
    """Damage the output folder in place."""
    base: str
    """What the next run's ``changes/`` are computed against: ``latest``, ``older`` or ``none``."""
    refused: tuple[str, ...]
    """The snapshots (``latest``, ``older``) that ``chunkline inspect`` must refuse in one line."""


# ------------------------------------------------------------------------------------------ helpers


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True))


def _manifest_path(output: Path, snapshot: str | None = None) -> Path:
    return output / "_manifest.json" if snapshot is None else output / "snapshots" / snapshot / "_manifest.json"


def _largest_part(output: Path, snapshot: str, table: str) -> Path:
    """The largest part of ``table`` in ``snapshot`` (its data pages, not only its footer, get damaged)."""
    parts = (output / "snapshots" / snapshot / table).glob("part-*.parquet")
    return sorted(parts, key=lambda path: (-path.stat().st_size, path.name))[0]


def _delete(path: Path) -> None:
    path.unlink()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


_PART_DAMAGE = {"deleted": _delete, "truncated": _truncate, "bit-flipped": _flip_bit}


def _part_damage(kind: str, which: str, table: str) -> Callable[[Path, Snapshots], None]:
    def apply(output: Path, snapshots: Snapshots) -> None:
        _PART_DAMAGE[kind](_largest_part(output, snapshots[which], table))

    return apply


Edit = Callable[[dict[str, Any], Path, Snapshots], None]


def _edit_manifest(which: str | None, edit: Edit) -> Callable[[Path, Snapshots], None]:
    """Edit the root manifest (``which`` None), or the own manifest of the ``latest`` or ``older`` snapshot."""

    def apply(output: Path, snapshots: Snapshots) -> None:
        path = _manifest_path(output, None if which is None else snapshots[which])
        manifest = json.loads(path.read_text())
        edit(manifest, output, snapshots)
        _write_json(path, manifest)

    return apply


def _truncate_manifest(which: str | None) -> Callable[[Path, Snapshots], None]:
    def apply(output: Path, snapshots: Snapshots) -> None:
        _truncate(_manifest_path(output, None if which is None else snapshots[which]))

    return apply


def _nest_the_root_manifest(output: Path, snapshots: Snapshots) -> None:
    """JSON nested deeper than any parser's recursion limit."""
    (output / "_manifest.json").write_text("[" * 100_000 + "]" * 100_000)


def _rename_a_chunks_file(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    files = manifest["tables"]["chunks"]["files"]
    files[0] = files[0].rsplit("-", 1)[0] + "-0123456789abcdef.parquet"


def _point_a_chunks_file_outside(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    """``../outside.parquet``, holding the very bytes of the part it replaces: a reader that follows the
    name reads rows that look right, from outside the dataset."""
    files = manifest["tables"]["chunks"]["files"]
    (output.parent / "outside.parquet").write_bytes((output / files[0]).read_bytes())
    files[0] = "../outside.parquet"


def _point_a_chunks_file_at_an_absolute_path(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    files = manifest["tables"]["chunks"]["files"]
    files[0] = str((output / files[0]).resolve())


def _name_the_documents_parts_as_chunks(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    manifest["tables"]["chunks"] = dict(manifest["tables"]["documents"])


def _change_the_chunks_row_count(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    manifest["tables"]["chunks"]["rows"] += 7


def _leave_out_a_chunks_part(manifest: dict[str, Any], output: Path, snapshots: Snapshots) -> None:
    """One part dropped from the list and the row count lowered to match: a consistent-looking edit."""
    entry = manifest["tables"]["chunks"]
    dropped = entry["files"].pop()
    entry["rows"] -= pq.ParquetFile(output / dropped).metadata.num_rows


def _remove_folder(which: str) -> Callable[[Path, Snapshots], None]:
    def apply(output: Path, snapshots: Snapshots) -> None:
        shutil.rmtree(output / "snapshots" / snapshots[which])

    return apply


def _stale_success(output: Path, snapshots: Snapshots) -> None:
    """What a run killed right after its commit point leaves: ``_SUCCESS`` still names the snapshot before."""
    (output / "_SUCCESS").write_text(f"{snapshots.older}\n")


def _both(*damages: Callable[[Path, Snapshots], None]) -> Callable[[Path, Snapshots], None]:
    def apply(output: Path, snapshots: Snapshots) -> None:
        for damage in damages:
            damage(output, snapshots)

    return apply


def _damages() -> list[Damage]:
    damages = []
    for which in ("latest", "older"):
        for table in ALL_TABLES:
            for kind in _PART_DAMAGE:
                if which == "older":
                    base = "latest"  # an older snapshot's parts are verified when read, not by every run
                elif table in ROW_TABLES or kind == "deleted":
                    base = "older"  # the run reads, carries or copies these parts (and lists every table)
                else:
                    base = "latest"  # a change table's bytes: nothing the next run reads
                damages.append(Damage(f"{which} {table} part {kind}", _part_damage(kind, which, table), base, (which,)))
    damages += [
        Damage("root manifest truncated", _truncate_manifest(None), "latest", ("latest",)),
        Damage("root manifest nested deeper than a parser goes", _nest_the_root_manifest, "latest", ("latest",)),
    ]
    for name, edit in (
        ("a chunks file renamed", _rename_a_chunks_file),
        ("a chunks file is ../outside.parquet", _point_a_chunks_file_outside),
        ("a chunks file is an absolute path", _point_a_chunks_file_at_an_absolute_path),
        ("chunks files name the documents parts", _name_the_documents_parts_as_chunks),
        ("chunks row count changed", _change_the_chunks_row_count),
        ("a chunks part left out, rows to match", _leave_out_a_chunks_part),
    ):
        # The latest snapshot's own manifest still describes it: a new root manifest is published from it.
        damages.append(Damage(f"root manifest: {name}", _edit_manifest(None, edit), "latest", ("latest",)))
    older_outside = _edit_manifest("older", _point_a_chunks_file_outside)
    damages += [
        Damage("latest snapshot manifest truncated", _truncate_manifest("latest"), "latest", ()),
        Damage("older snapshot manifest truncated", _truncate_manifest("older"), "latest", ("older",)),
        Damage("older snapshot manifest: a chunks file is ../outside.parquet", older_outside, "latest", ("older",)),
        Damage(
            "older snapshot manifest: chunks row count changed",
            _edit_manifest("older", _change_the_chunks_row_count),
            "latest",
            ("older",),
        ),
        Damage("latest snapshot folder removed", _remove_folder("latest"), "older", ("latest",)),
        Damage("older snapshot folder removed", _remove_folder("older"), "latest", ("older",)),
        Damage("_SUCCESS names the older snapshot", _stale_success, "latest", ()),
        Damage(
            "both snapshots: a chunks part bit-flipped",
            _both(_part_damage("bit-flipped", "latest", "chunks"), _part_damage("bit-flipped", "older", "chunks")),
            "none",
            ("latest", "older"),
        ),
        Damage(
            "root manifest truncated and the latest chunks part bit-flipped",
            _both(_truncate_manifest(None), _part_damage("bit-flipped", "latest", "chunks")),
            "older",
            ("latest",),
        ),
    ]
    return damages


#: Every kind of damage, by name.
DAMAGES: dict[str, Damage] = {damage.name: damage for damage in _damages()}


# ------------------------------------------------------------------------------------------ checking


def _sorted_rows(url: str, table: str, snapshot: str | None = None) -> list[dict[str, Any]]:
    key = TABLE_SCHEMAS[table][1]
    rows = read_dataset(url, table, snapshot=snapshot).to_pylist()
    return sorted(rows, key=lambda row: tuple("" if row[name] is None else str(row[name]) for name in key))


def reference_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row table of the dataset at ``url``, rows sorted by the table's key."""
    return {table: _sorted_rows(url, table) for table in ROW_TABLES}


def check_rerun(url: str, reference: dict[str, list[dict[str, Any]]], snapshots: Snapshots, damage: Damage) -> str:
    """Raise AssertionError unless the dataset now published at ``url`` is what a correct rerun after
    ``damage`` publishes; returns what it did (``incremental``, ``full against older`` ...)."""
    published = read_manifest(url)
    for table in ROW_TABLES:
        assert _sorted_rows(url, table) == reference[table], f"{table} differs from a clean full run"
    output = Path(url)
    assert (output / "_SUCCESS").read_text() == f"{published['snapshot']}\n", "_SUCCESS names another snapshot"
    for kept in published["snapshots"]:
        read_manifest(url, snapshot=kept)  # every kept snapshot's manifest is there and well formed
    base = published["rebuild"]["previous_snapshot"]
    expected_base = None if damage.base == "none" else snapshots[damage.base]
    assert base == expected_base, f"changes/ against {base}, expected {expected_base}"
    assert published["full_reload"] is (base is None)
    chunks = {row["chunk_uuid"]: row for row in reference["chunks"]}
    changes = {row["doc_id"]: row["change"] for row in read_dataset(url, "changes/documents").to_pylist()}
    # What a store holds of an upsert: its chunk columns (embedding_changed only says whether to embed it).
    upserts = read_dataset(url, "changes/upserts").drop_columns(["embedding_changed"]).to_pylist()
    deletes = read_dataset(url, "changes/deletes").column("chunk_uuid").to_pylist()
    if base is None:
        assert set(changes.values()) == {"added"}, "a full reload's documents are all added"
        assert {row["chunk_uuid"]: row for row in upserts} == chunks and not deletes
        return "full reload"
    assert base in published["snapshots"], "the base of changes/ is no longer kept"
    applied = {row["chunk_uuid"]: row for row in read_dataset(url, "chunks", snapshot=base).to_pylist()}
    for uuid in deletes:
        del applied[uuid]
    applied.update({row["chunk_uuid"]: row for row in upserts})
    assert applied == chunks, f"changes/ applied to snapshot {base} do not give the published chunks"
    mode = published["rebuild"]["mode"]
    return f"{mode} from {damage.base}" if mode == "incremental" else f"full, changes against {damage.base}"
