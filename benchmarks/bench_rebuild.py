"""Rebuild benchmark: a full run, an incremental run after 1% of the documents changed, and an unchanged
rerun, side by side; and how long ``chunkline`` takes to start.

The corpus is copied to a temporary folder and built once. Then, for each of ``--runs`` rounds, 1% of its
documents (a different 1% each round) get a paragraph appended, and three runs are timed, the first two in
an order that alternates between rounds:

- **incremental**: ``chunkline run`` on the output that holds the previous snapshot (documents whose bytes
  are unchanged are carried over, the edited ones are chunked);
- **full**: ``chunkline run`` of the same corpus into a fresh output (every document chunked);
- **unchanged**: ``chunkline run`` again on the incremental output, nothing edited since.

Each run is its own Python process running ``chunkline run``'s command line, as a scheduled rebuild is. Two
times are reported per run: the time of the command inside the process (loading the config and the
tokenizer, listing, hashing, chunking, writing and publishing), and the wall time of the whole process
(which adds the interpreter's start and the imports). After every round the incremental and the full
output's ``chunks``, ``documents`` and ``errors`` tables must be equal, part file names included: the
incremental result is a full rebuild's.

Start-up: the wall time of ``chunkline --help`` and of ``chunkline chunk`` on one small file, each a fresh
process (medians of ``--runs`` x 3), and whether the command imported Apache Beam.

Usage::

    python benchmarks/bench_rebuild.py [CORPUS] [--runs 5] [--edited-share 0.01]

CORPUS defaults to ``sample_corpus/``, the small corpus this repository ships; the published figures are of a
larger corpus given as the argument (``python benchmarks/bench_rebuild.py ../shared/corpus``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO / "sample_corpus"

_RUN_SNIPPET = """
import contextlib, io, json, os, sys, time
from chunkline.pipelines.cli import main
from chunkline.dataset.publish import read_manifest
started = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    status = main(["run", sys.argv[1], "--output", sys.argv[2]])
seconds = time.perf_counter() - started
manifest = read_manifest(sys.argv[2])
print(json.dumps({"status": status, "seconds": seconds, "rebuild": manifest["rebuild"], "changes": manifest["changes"]}), flush=True)
os._exit(0)  # as `chunkline run` does: pyarrow's threads can abort a normal interpreter exit
"""

# A command in a fresh process, as the `chunkline` program runs it; reports whether it imported Beam.
_START_SNIPPET = """
import contextlib, io, json, os, sys
from chunkline.pipelines.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"beam": "apache_beam" in sys.modules}), flush=True)
os._exit(0)
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


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(corpus: Path, output: Path) -> tuple[float, float, dict]:
    """(seconds of the command inside the process, wall seconds of the whole process, its report with
    ``cpu_seconds``: the process's user and system CPU time, which the machine's load does not inflate)."""
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", _RUN_SNIPPET, str(corpus), str(output)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"run failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    if report["status"] != 0:
        raise SystemExit(f"chunkline run exited with status {report['status']}:\n{completed.stderr[-3000:]}")
    report["cpu_seconds"] = _children_cpu_seconds() - cpu_before
    return report["seconds"], wall, report


def _start_up(arguments: list[str], runs: int) -> tuple[float, bool]:
    """(median wall seconds of ``chunkline ARGUMENTS`` as a fresh process, whether it imported Beam)."""
    times, beam = [], False
    for _ in range(runs):
        started = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, "-c", _START_SNIPPET, *arguments], capture_output=True, text=True, check=True
        )
        times.append(time.perf_counter() - started)
        beam = json.loads(completed.stdout.strip().splitlines()[-1])["beam"]
    return statistics.median(times), beam


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
        inside = {"incremental": [], "full": [], "unchanged": []}
        wall = {"incremental": [], "full": [], "unchanged": []}
        cpu = {"incremental": [], "full": [], "unchanged": []}
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
                cpu[kind].append(report["cpu_seconds"])
                if kind == "incremental":
                    rebuild, changes = report["rebuild"], report["changes"]
                    if rebuild["mode"] != "incremental":
                        raise SystemExit(
                            f"round {round_number + 1}: the rebuild was not incremental: {rebuild['reason']}"
                        )
            seconds, wall_seconds, report = _run(corpus, incremental_output)
            if report["rebuild"]["documents_chunked"] != 0:
                raise SystemExit(
                    f"round {round_number + 1}: the unchanged rerun chunked documents: {report['rebuild']}"
                )
            inside["unchanged"].append(seconds)
            wall["unchanged"].append(wall_seconds)
            cpu["unchanged"].append(report["cpu_seconds"])
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
                f"full {inside['full'][-1]:.3f} s, unchanged rerun {inside['unchanged'][-1]:.3f} s; "
                f"whole processes {wall['incremental'][-1]:.2f} / {wall['full'][-1]:.2f} / "
                f"{wall['unchanged'][-1]:.2f} s; tables equal: {all(equal.values())}"
            )
            if not all(equal.values()):
                raise SystemExit(f"the incremental result differs from the full rebuild: {equal}")
            shutil.rmtree(full_output)
        sample = files[0]
        start_up = {
            "chunkline --help": _start_up(["--help"], arguments.runs * 3),
            f"chunkline chunk {sample.name}": _start_up(["chunk", str(sample)], arguments.runs * 3),
        }
    median = {kind: statistics.median(values) for kind, values in inside.items()}
    median_wall = {kind: statistics.median(values) for kind, values in wall.items()}
    ratio = median["incremental"] / median["full"]
    ratio_wall = median_wall["incremental"] / median_wall["full"]
    # Each round's two runs share that round's load: the median of their ratios, beside the ratio of medians.
    round_ratio_wall = statistics.median(
        incremental / full for incremental, full in zip(wall["incremental"], wall["full"], strict=True)
    )
    print()
    print(f"medians of {arguments.runs} rounds     full   1% changed   unchanged   1% changed / full")
    print(
        f"inside the process  {median['full']:7.3f} s  {median['incremental']:8.3f} s  {median['unchanged']:8.3f} s"
        f"   {ratio:.3f}x"
    )
    print(
        f"whole process       {median_wall['full']:7.3f} s  {median_wall['incremental']:8.3f} s  "
        f"{median_wall['unchanged']:8.3f} s   {ratio_wall:.3f}x"
    )
    median_cpu = {kind: statistics.median(values) for kind, values in cpu.items()}
    print(
        f"process CPU time    {median_cpu['full']:7.3f} s  {median_cpu['incremental']:8.3f} s  "
        f"{median_cpu['unchanged']:8.3f} s   {median_cpu['incremental'] / median_cpu['full']:.3f}x"
    )
    print(
        f"1% changed / full as whole processes, median of the rounds' own ratios: {round_ratio_wall:.3f}x "
        f"(each {', '.join(f'{i / f:.3f}' for i, f in zip(wall['incremental'], wall['full'], strict=True))})"
    )
    print(
        f"targets: 1% changed / full as whole processes <= 0.15x: {'met' if ratio_wall <= 0.15 else 'missed'} "
        f"by the ratio of medians, {'met' if round_ratio_wall <= 0.15 else 'missed'} by the rounds' median; "
        f"unchanged rerun as a whole process <= 1.0 s: {'met' if median_wall['unchanged'] <= 1.0 else 'missed'}"
    )
    print()
    for command, (seconds, beam) in start_up.items():
        print(f"start-up, {command}: {seconds:.3f} s as a whole process (median); imports Beam: {beam}")
    print(f"load average at the end: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
