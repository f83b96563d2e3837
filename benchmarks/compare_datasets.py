"""Whether two chunkline datasets hold the same rows, and the same part files byte for byte.

Usage::

    python benchmarks/compare_datasets.py OUTPUT_A OUTPUT_B

Compares the published snapshot of each output: every table's rows (through ``read_dataset``) and the names
of the ``chunks``, ``documents`` and ``errors`` part files, which carry a hash of their bytes. Exit status 0
when both agree; 1, naming the first difference, otherwise. For checking that a change to how a run works
leaves its output as it was: run the old and the new code on the same corpus into two outputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chunkline.dataset.publish import read_dataset

TABLES = ("chunks", "documents", "errors")


def part_names(output: str) -> dict[str, list[str]]:
    tables = json.loads((Path(output) / "_manifest.json").read_text())["tables"]
    return {table: sorted(Path(name).name for name in tables.get(table, {}).get("files", [])) for table in TABLES}


def differences(first: str, second: str) -> list[str]:
    found = []
    for table in TABLES:
        a, b = read_dataset(first, table), read_dataset(second, table)
        if not a.equals(b):
            found.append(f"{table}: the rows differ ({a.num_rows} vs {b.num_rows} rows)")
    try:
        names_a, names_b = part_names(first), part_names(second)
    except (KeyError, OSError, ValueError) as error:
        return [*found, f"cannot read the snapshot manifests: {error}"]
    for table in TABLES:
        if names_a[table] != names_b[table]:
            found.append(f"{table}: the part files differ: {names_a[table]} vs {names_b[table]}")
    return found


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 2:
        print(__doc__)
        return 2
    found = differences(*arguments)
    for line in found:
        print(line)
    if not found:
        print("same rows, same part files")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
