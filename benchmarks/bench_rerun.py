"""Unchanged-rerun benchmark: what each step of a rerun over many small documents costs, side by side.

The pages are generated as ``bench_scale.py`` generates them (``--pages`` pages of 1-4 KB with a ``title``
front matter in ``--fanout`` x ``--fanout`` folders, kept under ``--work``), and one full run writes the
dataset (``--workers 0``, once; kept for the next run of the benchmark). Then ``--runs`` rounds of an
unchanged ``chunkline run PAGES --output OUT`` (as the ``chunkline`` program runs it; ``--workers`` is
passed on), each a fresh process: with this checkout's code, and with ``--against PYTHON`` (an interpreter
whose ``chunkline`` is other code, such as another checkout's ``.venv/bin/python``) in alternating order.

For each step of the run: its CPU seconds (``time.process_time`` around it, every thread of the process)
and wall seconds. The steps are those of ``chunkline.pipelines.run.run_pipeline``: listing the input,
checking the published snapshot (``verify``: the lock held, its parts hashed, its documents read),
planning, the merge (each shard's parts carried or merged) and publishing; ``imports`` is the CPU of
importing the command, ``process`` the whole process's CPU (user + system) and wall time, interpreter
start included. Medians of the rounds, and this code's over the other's.

Usage::

    python benchmarks/bench_rerun.py CORPUS [--pages 100000] [--fanout 32] [--runs 3] [--workers 0]
        [--against OTHER/.venv/bin/python] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_scale import add_corpus_arguments, prepare_corpus  # noqa: E402

STEPS = ("imports", "listing", "verify", "planning", "merge", "publish", "process")

# Runs in the measured process: each step of run_pipeline timed through the module's own names.
_STEPS_SNIPPET = """
import json, os, sys, time
started, started_wall = time.process_time(), time.perf_counter()
import chunkline.pipelines.cli as cli
import chunkline.pipelines.run as run_module
steps = {"imports": [time.process_time() - started, time.perf_counter() - started_wall]}

def timed(step, function):
    def call(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent = steps.setdefault(step, [0.0, 0.0])
            spent[0] += time.process_time() - cpu
            spent[1] += time.perf_counter() - wall
    return call

for step, name in [("listing", "list_inputs"), ("verify", "_previous_state"), ("planning", "_plan"),
                   ("planning", "_execution"), ("merge", "_run_in_process"), ("publish", "staged_counts"),
                   ("publish", "change_counts"), ("publish", "_publish")]:
    setattr(run_module, name, timed(step, getattr(run_module, name)))
cli._fork_workers = True  # as the chunkline program runs
status = cli.main(sys.argv[1:])
print("BENCH_RERUN " + json.dumps({"status": status, "steps": steps}), flush=True)
sys.stderr.flush()
os._exit(status)
"""


def measure(python: str, pages: Path, output: Path, workers: str) -> dict[str, list[float]]:
    """One unchanged rerun in a fresh process: step -> [CPU s, wall s]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [python, "-c", _STEPS_SNIPPET, "run", str(pages), "--output", str(output)]
    if workers != "auto":
        command += ["--workers", workers]
    # Run from the output's folder: ``-c`` puts the working folder first on the path, and a checkout's
    # own chunkline there would be imported in place of the interpreter's.
    completed = subprocess.run(command, capture_output=True, text=True, check=False, cwd=output.parent)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("BENCH_RERUN ")]
    if completed.returncode != 0 or not lines:
        raise SystemExit(f"the rerun failed ({python}):\n{completed.stderr[-3000:]}")
    steps = json.loads(lines[-1].split(" ", 1)[1])["steps"]
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    steps["process"] = [cpu, wall]
    return steps


def medians(rounds: list[dict[str, list[float]]]) -> dict[str, tuple[float, float]]:
    return {
        step: (
            statistics.median(run.get(step, [0.0, 0.0])[0] for run in rounds),
            statistics.median(run.get(step, [0.0, 0.0])[1] for run in rounds),
        )
        for step in STEPS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser, pages=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", default="0", help="passed to chunkline run (auto: not passed)")
    parser.add_argument("--against", help="another interpreter whose chunkline to time side by side")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "chunkline-bench-rerun")
    arguments = parser.parse_args(argv)
    arguments.work = arguments.work.resolve()
    if arguments.work == REPO or REPO in arguments.work.parents:
        parser.error("--work must be outside the repository")
    arguments.work.mkdir(parents=True, exist_ok=True)
    pages, _ = prepare_corpus(arguments)
    output = arguments.work / f"output-{pages.name}"
    if not (output / "_manifest.json").exists():
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "chunkline", "run", str(pages), "--output", str(output), "--workers", "0"],
            check=True,
            capture_output=True,
        )
        print(f"full run into {output}: {time.perf_counter() - started:.0f} s", flush=True)
    pythons = {"this": sys.executable, **({"against": arguments.against} if arguments.against else {})}
    rounds: dict[str, list[dict[str, list[float]]]] = {name: [] for name in pythons}
    for number in range(arguments.runs):
        order = list(pythons) if number % 2 == 0 else list(reversed(pythons))
        for name in order:
            rounds[name].append(measure(pythons[name], pages, output, arguments.workers))
    figures = {name: medians(runs) for name, runs in rounds.items()}
    print(f"\nunchanged rerun of {arguments.pages:,} pages, medians of {arguments.runs} (CPU s / wall s)")
    header = f"{'step':<10}{'this':>16}"
    if "against" in figures:
        header += f"{'against':>16}{'CPU ratio':>11}"
    print(header)
    for step in STEPS:
        cpu, wall = figures["this"][step]
        line = f"{step:<10}{cpu:>8.2f} / {wall:<5.2f}"
        if "against" in figures:
            other_cpu, other_wall = figures["against"][step]
            ratio = f"{cpu / other_cpu:.2f}x" if other_cpu else "-"
            line += f"{other_cpu:>8.2f} / {other_wall:<5.2f}{ratio:>11}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
