"""Pipeline benchmark: what Beam and the Parquet sink cost, what worker processes buy, and memory as the
corpus grows.

Three measurements, each a ratio of two things timed side by side in the same run (medians of ``--runs``
rounds whose order alternates):

1. **in-process pipeline vs a plain loop**: ``chunkline run`` in this process (``run.workers: 0`` and no
   Beam argument: the run's steps without a runner, with the command's process tuning) over the corpus, end to end (matching, reading, chunking, writing and publishing Parquet), against a Python loop
   that reads the same files and calls ``chunk_markdown`` on each (and writes nothing).
2. **the default run, in-process (without and on Beam), 1 and 2 worker processes**: the ``chunkline run`` command as a whole
   process (start-up included, as a user runs it) by default (``run.workers: auto``), with ``--workers 0``
   (in this process, without Beam), ``--workers 0 --runner FnApiRunner`` (in this process, on Beam),
   ``--workers 1`` and ``--workers 2``, on a corpus of at least ``--large-mb`` MB made of copies of the
   corpus under different folder names, then on the repository's 12-file sample corpus: median wall and
   CPU seconds (the driver and its workers), the workers each ran, and the load average before each run
   (the machine may be shared: CPU seconds show what the runs cost whatever the load).
3. **peak memory vs corpus size**: the default and the in-process ``chunkline run`` over 1x, 4x and 16x
   the corpus; the peak resident set size (``ru_maxrss``, the largest of the driver and its workers) is
   reported for each.
4. **what the sections table costs**: ``chunkline run CORPUS --output OUT --workers 0`` as a whole process,
   as the program runs it, against the same command with the chunker's ``sections`` rows left out (the
   chunks, their link columns included, are made as always; no sections are built, converted, spilled or
   merged, and the snapshot has no ``sections`` or section ``changes/`` parts): the median CPU seconds of
   each process (user and system) and their ratio. Not part of the default set; ``--only sections``.

Usage::

    python benchmarks/bench_pipeline.py [CORPUS] [--runs 3] [--large-mb 50] [--only loop|workers|memory|sections]

CORPUS defaults to ``sample_corpus/``, the small corpus this repository ships; the published figures are of a
larger corpus given as the argument (``python benchmarks/bench_pipeline.py ../shared/corpus``).
"""

from __future__ import annotations

import argparse
import json
import os
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
import sys, time
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING, map_large_allocations
from chunkline.pipelines.run import run_pipeline
config = load_run_config(None, sys.argv[3:], environ={}, inputs=[sys.argv[1]], output=sys.argv[2])
map_large_allocations()  # tuned as the chunkline program tunes its process
started = time.perf_counter()
summary = run_pipeline(config, process_hooks=RUN_PROCESS_TUNING)
print(time.perf_counter() - started, summary.chunks, summary.documents_ok + summary.documents_error)
"""

_LOOP_SNIPPET = """
import sys, time
from pathlib import Path
import chunkline
files = sorted(p for p in Path(sys.argv[1]).rglob("*") if p.suffix in (".md", ".markdown"))
started = time.perf_counter()
chunks = 0
for path in files:
    chunks += len(chunkline.chunk_markdown(path.read_bytes().decode("utf-8"), doc_id=str(path)))
print(time.perf_counter() - started, chunks, len(files))
"""


_COMMAND_SNIPPET = """
import sys
{before}
from chunkline.pipelines.cli import console_main
sys.argv = ["chunkline", *sys.argv[1:]]
console_main()
"""

_WITHOUT_SECTIONS = """
import chunkline.dataset.document_rows as document_rows
from chunkline.engine import chunk_document
document_rows.chunk_document_with_section_rows = lambda document, config, counter, **keywords: (
    chunk_document(document, config, counter, **keywords), []
)
"""


def corpus_megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.suffix in (".md", ".markdown")) / 1e6


def replicate(corpus: Path, copies: int, into: Path) -> Path:
    """``copies`` copies of ``corpus`` under ``into/copy-NN/`` (different doc_ids, same text)."""
    into.mkdir(parents=True, exist_ok=True)
    for number in range(copies):
        target = into / f"copy-{number:02d}"
        if not target.exists():
            shutil.copytree(corpus, target, ignore=shutil.ignore_patterns("LICENSE*"))
    return into


def timed_subprocess(snippet: str, *arguments: str) -> tuple[float, float]:
    """(seconds reported by the snippet, peak RSS in MB of that process and its children)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", snippet, *arguments], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    output = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    if not output.strip():
        raise RuntimeError(f"benchmark process failed (wait status {status}): {' '.join(arguments)}")
    if status != 0:
        # The run finished and reported; Beam's gRPC threads have been seen to abort at interpreter exit.
        print(f"   (process exited with wait status {status} after reporting its result)", file=sys.stderr)
    seconds = float(output.split()[0]) if output.strip() else time.perf_counter() - started
    return seconds, usage.ru_maxrss / 1024


def run_pipeline_once(corpus: Path, work: Path, *overrides: str) -> tuple[float, float]:
    output = work / f"out-{time.monotonic_ns()}"
    try:
        return timed_subprocess(_RUN_SNIPPET, str(corpus), str(output), *overrides)
    finally:
        shutil.rmtree(output, ignore_errors=True)


def median_pair(first, second, runs: int) -> tuple[list[float], list[float]]:
    """Times of ``first`` and ``second`` over ``runs`` rounds, alternating which goes first."""
    first_times: list[float] = []
    second_times: list[float] = []
    for round_number in range(runs):
        order = [(first, first_times), (second, second_times)]
        if round_number % 2:
            order.reverse()
        for function, times in order:
            times.append(function()[0])
    return first_times, second_times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--large-mb", type=float, default=50.0, help="corpus size for the workers comparison")
    parser.add_argument(
        "--only",
        choices=("loop", "workers", "memory", "sections"),
        action="append",
        help="run only these measurements (repeatable); default: loop, workers and memory",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args(argv)
    corpus = arguments.corpus.resolve()
    if not corpus.is_dir():
        print(f"no corpus at {corpus}; pass a folder of markdown files", file=sys.stderr)
        return 2
    megabytes = corpus_megabytes(corpus)
    results: dict[str, object] = {"corpus": str(corpus), "corpus_mb": round(megabytes, 2), "runs": arguments.runs}
    with tempfile.TemporaryDirectory(prefix="chunkline-bench-") as temporary:
        work = Path(temporary)
        print(f"corpus {corpus}: {megabytes:.2f} MB; {arguments.runs} rounds per comparison", flush=True)

        wanted = set(arguments.only or ("loop", "workers", "memory"))
        if "loop" in wanted:
            _compare_with_loop(corpus, work, megabytes, arguments.runs, results)
        if "workers" in wanted:
            _compare_runners_large_and_sample(corpus, work, megabytes, arguments, results)
        if "memory" in wanted:
            _measure_memory(corpus, work, results)
        if "sections" in wanted:
            _measure_sections_cost(corpus, work, arguments.runs, results)
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


def _compare_with_loop(corpus: Path, work: Path, megabytes: float, runs: int, results: dict) -> None:
    pipeline_times, loop_times = median_pair(
        lambda: run_pipeline_once(corpus, work, "run.workers=0"),
        lambda: timed_subprocess(_LOOP_SNIPPET, str(corpus)),
        runs,
    )
    pipeline_rate = megabytes / statistics.median(pipeline_times)
    loop_rate = megabytes / statistics.median(loop_times)
    results["in_process_vs_loop"] = {
        "pipeline_mb_s": round(pipeline_rate, 2),
        "loop_mb_s": round(loop_rate, 2),
        "ratio": round(pipeline_rate / loop_rate, 2),
        "pipeline_seconds": pipeline_times,
        "loop_seconds": loop_times,
    }
    print(
        f"1. in-process pipeline {pipeline_rate:.2f} MB/s, plain chunk_markdown loop {loop_rate:.2f} MB/s: "
        f"{pipeline_rate / loop_rate:.2f}x",
        flush=True,
    )


_RUNNERS = {
    "default": (),
    "in-process": ("--workers", "0"),
    "in-process, Beam": ("--workers", "0", "--runner", "FnApiRunner"),
    "1 worker": ("--workers", "1"),
    "2 workers": ("--workers", "2"),
}
"""What the runner comparison times, as ``chunkline run`` arguments: the default (``run.workers: auto``), the
in-process run (without Beam, as ``--workers 0`` runs), the same on Beam's in-process FnApiRunner (what a
Beam option gets), and one and two worker processes (Beam's FnApiRunner in multi-processing mode)."""


def timed_run(corpus: Path, work: Path, *arguments: str) -> dict:
    """One ``chunkline run CORPUS --output OUT ARGUMENTS`` as a whole process, as a user runs it: its wall
    seconds (imports and start-up included), the CPU seconds of the process and every worker it waited for,
    its peak RSS (the largest of those processes), the workers it ran (from the manifest), and the 1-minute
    load average before it started."""
    output = work / f"out-{time.monotonic_ns()}"
    load_before = os.getloadavg()[0]
    command = [sys.executable, "-m", "chunkline", "run", str(corpus), "--output", str(output), *arguments]
    try:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        errors = process.stderr.read() if process.stderr else ""
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        if status != 0:
            raise RuntimeError(f"chunkline run failed (wait status {status}): {' '.join(command)}\n{errors[-2000:]}")
        workers = json.loads((output / "_manifest.json").read_text())["config"]["run"]["workers"]
    finally:
        shutil.rmtree(output, ignore_errors=True)
    return {
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "workers": workers,
        "load_before": load_before,
    }


def compare_runners(corpus: Path, work: Path, runs: int) -> dict:
    """Every runner of :data:`_RUNNERS` on ``corpus``, ``runs`` rounds whose order rotates: the medians of
    wall and CPU seconds, the workers each ran, each run's figures, and each runner's speedup over the
    in-process run (ratios of medians)."""
    figures: dict[str, list[dict]] = {name: [] for name in _RUNNERS}
    names = list(_RUNNERS)
    for round_number in range(runs):
        for name in names[round_number % len(names) :] + names[: round_number % len(names)]:
            figures[name].append(timed_run(corpus, work, *_RUNNERS[name]))
    summary: dict[str, dict] = {}
    for name, measured in figures.items():
        summary[name] = {
            "median_seconds": round(statistics.median(run["seconds"] for run in measured), 2),
            "median_cpu_seconds": round(statistics.median(run["cpu_seconds"] for run in measured), 2),
            "workers": sorted({run["workers"] for run in measured}),
            "runs": [
                {key: round(value, 2) if isinstance(value, float) else value for key, value in run.items()}
                for run in measured
            ],
        }
    in_process = summary["in-process"]["median_seconds"]
    for name in summary:
        summary[name]["speedup_vs_in_process"] = round(in_process / summary[name]["median_seconds"], 2)
    return summary


def _print_runners(label: str, megabytes: float, summary: dict) -> None:
    loads = [run["load_before"] for runner in summary.values() for run in runner["runs"]]
    print(
        f"2. {label} ({megabytes:.1f} MB, load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores):",
        flush=True,
    )
    for name, figures in summary.items():
        print(
            f"   {name:>10}: {figures['median_seconds']:6.2f} s ({megabytes / figures['median_seconds']:.2f} MB/s), "
            f"CPU {figures['median_cpu_seconds']:6.2f} s, workers {figures['workers']}: "
            f"{figures['speedup_vs_in_process']:.2f}x in-process",
            flush=True,
        )


def _compare_runners_large_and_sample(
    corpus: Path, work: Path, megabytes: float, arguments: argparse.Namespace, results: dict
) -> None:
    """The default run, in-process and two workers side by side on a corpus of at least ``--large-mb`` MB
    (copies of the corpus under different folder names) and on the repository's 12-file sample corpus."""
    copies = max(1, int(-(-arguments.large_mb // megabytes)))
    large = replicate(corpus, copies, work / "large")
    large_mb = corpus_megabytes(large)
    large_summary = compare_runners(large, work, arguments.runs)
    results["runners_large"] = {"corpus_mb": round(large_mb, 2), **large_summary}
    _print_runners(f"{copies} copies of the corpus", large_mb, large_summary)
    shutil.rmtree(large, ignore_errors=True)
    sample = REPO / "sample_corpus"
    sample_mb = corpus_megabytes(sample)
    sample_summary = compare_runners(sample, work, max(arguments.runs, 5))
    results["runners_sample"] = {"corpus_mb": round(sample_mb, 3), **sample_summary}
    _print_runners("the 12-file sample corpus", sample_mb, sample_summary)


def _measure_memory(corpus: Path, work: Path, results: dict) -> None:
    """Peak RSS of the default run (the largest of the driver and its workers) and of the in-process run
    over 1x, 4x and 16x the corpus."""
    memory = {}
    for factor in (1, 4, 16):
        folder = corpus if factor == 1 else replicate(corpus, factor, work / f"x{factor}")
        folder_mb = round(corpus_megabytes(folder), 1)
        for name in ("default", "in-process"):
            run = timed_run(folder, work, *_RUNNERS[name])
            memory[f"{factor}x {name}"] = {
                "corpus_mb": folder_mb,
                "peak_rss_mb": round(run["peak_rss_mb"], 1),
                "seconds": round(run["seconds"], 1),
                "cpu_seconds": round(run["cpu_seconds"], 1),
                "workers": run["workers"],
                "load_before": round(run["load_before"], 2),
            }
            print(
                f"3. {factor:>2}x corpus ({folder_mb} MB), {name} (workers {run['workers']}): peak RSS "
                f"{run['peak_rss_mb']:.0f} MB in {run['seconds']:.1f} s, CPU {run['cpu_seconds']:.1f} s",
                flush=True,
            )
        if factor != 1:
            shutil.rmtree(folder, ignore_errors=True)
    for name in ("default", "in-process"):
        memory[f"16x vs 1x {name}"] = round(
            memory[f"16x {name}"]["peak_rss_mb"] / memory[f"1x {name}"]["peak_rss_mb"], 2
        )
    results["peak_memory"] = memory


def command_cpu_seconds(corpus: Path, work: Path, before: str = "") -> float:
    """CPU seconds (user and system) of ``chunkline run CORPUS --output OUT --workers 0`` as one process,
    with the code ``before`` run first."""
    output = work / f"out-{time.monotonic_ns()}"
    command = [
        sys.executable,
        "-c",
        _COMMAND_SNIPPET.format(before=before),
        "run",
        str(corpus),
        "--output",
        str(output),
        "--workers",
        "0",
    ]
    try:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        errors = process.stderr.read() if process.stderr else ""
        _, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            raise RuntimeError(f"chunkline run failed (wait status {status})\n{errors[-2000:]}")
        has_sections = (output / "_manifest.json").is_file() and bool(
            json.loads((output / "_manifest.json").read_text())["tables"].get("sections", {}).get("rows")
        )
    finally:
        shutil.rmtree(output, ignore_errors=True)
    if has_sections == bool(before):
        raise RuntimeError("the run without sections wrote sections, or the run with them did not")
    return usage.ru_utime + usage.ru_stime


def _measure_sections_cost(corpus: Path, work: Path, runs: int, results: dict) -> None:
    with_sections, without_sections = median_pair(
        lambda: (command_cpu_seconds(corpus, work),),
        lambda: (command_cpu_seconds(corpus, work, _WITHOUT_SECTIONS),),
        runs,
    )
    with_median, without_median = statistics.median(with_sections), statistics.median(without_sections)
    results["sections_cost"] = {
        "cpu_seconds_with_sections": [round(value, 2) for value in with_sections],
        "cpu_seconds_without_sections": [round(value, 2) for value in without_sections],
        "ratio": round(with_median / without_median, 3),
    }
    print(
        f"4. in-process run, CPU {with_median:.2f} s with the sections table, {without_median:.2f} s without: "
        f"{with_median / without_median:.3f}x ({runs} rounds, medians)",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
