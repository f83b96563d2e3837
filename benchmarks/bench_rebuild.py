"""Rebuild benchmark: an incremental run after 1% of the documents changed, against a full run.

The corpus is copied to a temporary folder and built once. Then, for each of ``--runs`` rounds, 1% of its
documents (a different 1% each round) get a paragraph appended, and two runs are timed side by side, in an
order that alternates between rounds:

- **incremental**: ``chunkline run`` on the output that holds the previous snapshot (documents whose bytes
  are unchanged are carried over, the edited ones are chunked);
- **full**: ``chunkline run`` of the same corpus into a fresh output (every document chunked).

Each run is its own Python process, as a scheduled rebuild is. Two times are reported per run: the time of
``run_pipeline`` inside the process (listing, hashing, chunking, writing and publishing), and the wall time
of the whole process (which adds the interpreter's start and the imports of Beam, pyarrow and tiktoken).
After every round the two outputs' ``chunks``, ``documents`` and ``errors`` tables must be equal, part file
names included: the incremental result is a full rebuild's.

Usage::

    python benchmarks/bench_rebuild.py [CORPUS] [--runs 5] [--edited-share 0.01]

CORPUS defaults to ``../shared/corpus`` beside the repository.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"

_RUN_SNIPPET = """
import json, os, sys, time
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import run_pipeline
config = load_run_config(None, [], environ={}, inputs=[sys.argv[1]], output=sys.argv[2])
started = time.perf_counter()
summary = run_pipeline(config)
print(json.dumps({"seconds": time.perf_counter() - started, "rebuild": summary.rebuild, "changes": summary.changes}), flush=True)
os._exit(0)  # as `chunkline run` does: pyarrow's threads can abort a normal interpreter exit
"""

_COMPARE_SNIPPET = """
import json, os, sys
from chunkline.dataset.publish import read_dataset, read_manifest
a, b = sys.argv[1], sys.argv[2]
result = {}
for table in ("chunks", "documents", "errors"):
    names_a = [name.rsplit("/", 1)[1] for name in read_manifest(a)["tables"][table]["files"]]
    names_b = [name.rsplit("/", 1)[1] for name in read_manifest(b)["tables"][table]["files"]]
    result[table] = read_dataset(a, table).equals(read_dataset(b, table)) and names_a == names_b
print(json.dumps(result), flush=True)
os._exit(0)
"""


def _run(corpus: Path, output: Path) -> tuple[float, float, dict]:
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", _RUN_SNIPPET, str(corpus), str(output)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"run failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    return report["seconds"], wall, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", default=str(DEFAULT_CORPUS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--edited-share", type=float, default=0.01, help="share of documents edited per round")
    arguments = parser.parse_args(argv)
    source = Path(arguments.corpus)
    if not source.is_dir():
        raise SystemExit(f"corpus {source} not found")
    with tempfile.TemporaryDirectory(prefix="chunkline-rebuild-") as scratch:
        work = Path(scratch)
        corpus = work / "corpus"
        shutil.copytree(source, corpus)
        files = sorted(path for path in corpus.rglob("*") if path.suffix.lower() in (".md", ".markdown"))
        edited_per_round = max(1, round(len(files) * arguments.edited_share))
        size_mb = sum(path.stat().st_size for path in files) / 1e6
        print(
            f"corpus: {len(files)} documents, {size_mb:.2f} MB; {edited_per_round} edited per round, {arguments.runs} rounds"
        )
        incremental_output = work / "incremental"
        _run(corpus, incremental_output)
        inside = {"incremental": [], "full": []}
        wall = {"incremental": [], "full": []}
        for round_number in range(arguments.runs):
            start = (round_number * edited_per_round) % len(files)
            for path in (files * 2)[start : start + edited_per_round]:
                with path.open("a", encoding="utf-8", newline="") as handle:
                    handle.write(f"\n\nRevised in round {round_number + 1}: one more paragraph to chunk.\n")
            full_output = work / f"full-{round_number}"
            order = ("incremental", "full") if round_number % 2 == 0 else ("full", "incremental")
            for kind in order:
                seconds, wall_seconds, report = _run(
                    corpus, incremental_output if kind == "incremental" else full_output
                )
                inside[kind].append(seconds)
                wall[kind].append(wall_seconds)
                if kind == "incremental":
                    rebuild, changes = report["rebuild"], report["changes"]
                    if rebuild["mode"] != "incremental":
                        raise SystemExit(
                            f"round {round_number + 1}: the rebuild was not incremental: {rebuild['reason']}"
                        )
            compared = subprocess.run(
                [sys.executable, "-c", _COMPARE_SNIPPET, str(incremental_output), str(full_output)],
                capture_output=True,
                text=True,
                check=True,
            )
            equal = json.loads(compared.stdout.strip().splitlines()[-1])
            print(
                f"round {round_number + 1}: incremental {inside['incremental'][-1]:.3f} s "
                f"({rebuild['documents_chunked']} chunked, {rebuild['documents_carried_over']} carried over; "
                f"{changes['changed']} changed, {changes['chunks_upserted']} upserts, {changes['chunks_deleted']} deletes), "
                f"full {inside['full'][-1]:.3f} s; tables equal: {all(equal.values())}"
            )
            if not all(equal.values()):
                raise SystemExit(f"the incremental result differs from the full rebuild: {equal}")
            shutil.rmtree(full_output)
    median = {kind: statistics.median(values) for kind, values in inside.items()}
    median_wall = {kind: statistics.median(values) for kind, values in wall.items()}
    ratio = median["incremental"] / median["full"]
    ratio_wall = median_wall["incremental"] / median_wall["full"]
    print()
    print(
        f"run_pipeline, median of {arguments.runs}: incremental {median['incremental']:.3f} s, full {median['full']:.3f} s "
        f"-> {ratio:.3f}x ({'meets' if ratio <= 0.1 else 'misses'} the 0.1x target)"
    )
    print(
        f"whole process, median of {arguments.runs}: incremental {median_wall['incremental']:.3f} s, "
        f"full {median_wall['full']:.3f} s -> {ratio_wall:.3f}x (includes interpreter start and imports)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
