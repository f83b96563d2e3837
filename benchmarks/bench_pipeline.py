"""Pipeline benchmark: what Beam and the Parquet sink cost, what worker processes buy, and memory as the
corpus grows.

Three measurements, each a ratio of two things timed side by side in the same run (medians of ``--runs``
rounds whose order alternates):

1. **in-process pipeline vs a plain loop**: ``chunkline run`` on Beam's in-process FnApiRunner over the
   corpus, end to end (matching, reading, chunking, writing and publishing Parquet), against a Python loop
   that reads the same files and calls ``chunk_markdown`` on each (and writes nothing).
2. **2 worker processes vs in-process**: the same pipeline with ``run.workers: 2`` (the multi-processing
   DirectRunner) against the in-process run, on a corpus of at least ``--large-mb`` MB made of copies of the
   corpus under different folder names.
3. **peak memory vs corpus size**: the in-process pipeline in a fresh process over 1x, 4x and 16x the corpus;
   the process's peak resident set size (``ru_maxrss``) is reported for each.

Usage::

    python benchmarks/bench_pipeline.py [CORPUS] [--runs 3] [--large-mb 50] [--only loop|workers|memory]

CORPUS defaults to ``../shared/corpus`` beside the repository.
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
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"

_RUN_SNIPPET = """
import sys, time
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.run import run_pipeline
config = load_run_config(None, sys.argv[3:], environ={}, inputs=[sys.argv[1]], output=sys.argv[2])
started = time.perf_counter()
summary = run_pipeline(config)
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
        choices=("loop", "workers", "memory"),
        action="append",
        help="run only these measurements (repeatable); default: all three",
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
            _compare_workers(corpus, work, megabytes, arguments, results)
        if "memory" in wanted:
            _measure_memory(corpus, work, results)
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


def _compare_with_loop(corpus: Path, work: Path, megabytes: float, runs: int, results: dict) -> None:
    pipeline_times, loop_times = median_pair(
        lambda: run_pipeline_once(corpus, work),
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


def _compare_workers(corpus: Path, work: Path, megabytes: float, arguments: argparse.Namespace, results: dict) -> None:
    copies = max(1, int(-(-arguments.large_mb // megabytes)))
    large = replicate(corpus, copies, work / "large")
    large_mb = corpus_megabytes(large)
    workers_times, single_times = median_pair(
        lambda: run_pipeline_once(large, work, "run.workers=2"),
        lambda: run_pipeline_once(large, work),
        arguments.runs,
    )
    speedup = statistics.median(single_times) / statistics.median(workers_times)
    results["workers_2_vs_in_process"] = {
        "corpus_mb": round(large_mb, 2),
        "workers_2_mb_s": round(large_mb / statistics.median(workers_times), 2),
        "in_process_mb_s": round(large_mb / statistics.median(single_times), 2),
        "speedup": round(speedup, 2),
        "workers_2_seconds": workers_times,
        "in_process_seconds": single_times,
    }
    print(
        f"2. {large_mb:.1f} MB corpus: 2 workers {large_mb / statistics.median(workers_times):.2f} MB/s, "
        f"in-process {large_mb / statistics.median(single_times):.2f} MB/s: {speedup:.2f}x",
        flush=True,
    )
    shutil.rmtree(large, ignore_errors=True)


def _measure_memory(corpus: Path, work: Path, results: dict) -> None:
    memory = {}
    for factor in (1, 4, 16):
        folder = corpus if factor == 1 else replicate(corpus, factor, work / f"x{factor}")
        seconds, peak_mb = run_pipeline_once(folder, work)
        memory[f"{factor}x"] = {
            "corpus_mb": round(corpus_megabytes(folder), 1),
            "peak_rss_mb": round(peak_mb, 1),
            "seconds": round(seconds, 1),
        }
        print(
            f"3. {factor:>2}x corpus ({memory[f'{factor}x']['corpus_mb']} MB): peak RSS {peak_mb:.0f} MB "
            f"in {seconds:.1f} s",
            flush=True,
        )
        if factor != 1:
            shutil.rmtree(folder, ignore_errors=True)
    results["peak_memory"] = memory


if __name__ == "__main__":
    raise SystemExit(main())
