"""Hostile-input benchmark: how long, how fast and how much memory chunking each hostile file takes.

Usage::

    python benchmarks/bench_hostile.py [--strategies default | all | NAME,...] [--runs 3]
                                       [--nesting-runs 5] [--nesting-only] [--max-tokens 512]
                                       [--overlap-tokens 50]

The corpus is ``tests/hostile_corpus.py``, generated in memory (nothing is read from disk). Each file is
decoded as the pipeline decodes it (strict UTF-8); a file that is binary or not UTF-8 is refused before
chunking, as the pipeline does, and shows ``refused`` instead of figures.

Per file and strategy (``chunkline.chunk_markdown`` with ``max_tokens``/``overlap_tokens`` and the
strategy's default parameters; the ``regex`` strategy with its example pattern ``^#{1,6} ``):

* size in bytes;
* seconds: the MEDIAN of ``--runs`` timed calls (the parse is part of the call, as in the pipeline);
* MB/s: size / seconds, MB = 1e6 bytes;
* peak memory: ``tracemalloc``'s peak of Python allocations during ONE further call, made apart from the
  timed ones because tracing slows Python down several times. It counts memory allocated through Python's
  allocators (strings, lists, chunk records, markdown-it tokens), not tiktoken's Rust heap, so read it
  as "how much Python memory does this file cost", not as the process's RSS;
* chunks; the slowest file of each strategy is marked ``<- slowest``.

Nesting vs ordinary text: the median time (over ``--nesting-runs`` rounds, the files alternating within
each round) of ``nested_block_quotes_5000.md`` and ``nested_list_levels_2000.md`` next to ordinary prose of
exactly the same byte size (``hostile_corpus.ordinary_prose``), and their ratio. TARGET: at most 10x, for
every strategy. A summary table at the end gives each strategy's two ratios and PASS or FAIL; the exit
status is 1 when any ratio is over the target. ``--nesting-only`` skips the per-file tables.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

import hostile_corpus  # noqa: E402  (lives in tests/, put on the path above)

from chunkline import ChunkConfig, ConfigError, available_strategies, chunk_markdown, get_strategy  # noqa: E402
from chunkline.dataset.decoding import decode_markdown, looks_binary  # noqa: E402

NESTING_FILES = ("nested_block_quotes_5000.md", "nested_list_levels_2000.md")
NESTING_TARGET = 10.0
"""Most times slower a pathologically nested file may be than ordinary text of the same size."""


@dataclass(frozen=True)
class FileResult:
    name: str
    size_bytes: int
    seconds: float | None = None
    peak_bytes: int | None = None
    chunks: int | None = None
    refused: str | None = None
    """Why the file was not chunked (binary, not UTF-8, or the strategy raised)."""

    @property
    def megabytes_per_second(self) -> float | None:
        if self.seconds is None:
            return None
        return self.size_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")


def config_for(strategy: str, max_tokens: int, overlap_tokens: int) -> ChunkConfig:
    return ChunkConfig(
        strategy=strategy,
        max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
        params=get_strategy(strategy).default_params(),
    )


def decoded_text(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) for a file the pipeline would chunk, (None, reason) for one it refuses at decoding."""
    if looks_binary(data):
        return None, "refused: binary file"
    try:
        text, _, _ = decode_markdown(data, "strict")
    except UnicodeDecodeError:
        return None, "refused: not valid UTF-8"
    return text, None


def median_seconds(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_python_memory(call: Callable[[], object]) -> int:
    """Peak bytes of Python allocations during one ``call()`` (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def bench_file(name: str, data: bytes, config: ChunkConfig, runs: int) -> FileResult:
    text, refused = decoded_text(data)
    if text is None:
        return FileResult(name, len(data), refused=refused)

    def chunk() -> list:
        return chunk_markdown(text, config, doc_id=name)

    try:
        chunks = chunk()  # untimed warm-up, and the chunk count
    except Exception as error:  # noqa: BLE001 - reported in the row, the benchmark goes on
        return FileResult(name, len(data), refused=f"{type(error).__name__}: {error}"[:80])
    seconds = median_seconds(chunk, runs)
    return FileResult(name, len(data), seconds, peak_python_memory(chunk), len(chunks))


def print_strategy_table(strategy: str, results: Sequence[FileResult]) -> None:
    timed = [result for result in results if result.seconds is not None]
    slowest = max(timed, key=lambda result: result.seconds).name if timed else None
    width = max(len(result.name) for result in results)
    print(f"\n== strategy {strategy} ==")
    print(f"{'file':<{width}}  {'bytes':>10}  {'seconds':>9}  {'MB/s':>8}  {'peak MiB':>9}  {'chunks':>7}")
    for result in results:
        if result.seconds is None:
            print(f"{result.name:<{width}}  {result.size_bytes:>10,}  {result.refused}")
            continue
        mark = "  <- slowest" if result.name == slowest else ""
        print(
            f"{result.name:<{width}}  {result.size_bytes:>10,}  {result.seconds:>9.4f}  "
            f"{result.megabytes_per_second:>8.2f}  {result.peak_bytes / 2**20:>9.2f}  {result.chunks:>7,}{mark}"
        )
    total_bytes = sum(result.size_bytes for result in timed)
    total_seconds = sum(result.seconds for result in timed)
    print(
        f"{'total (chunked files)':<{width}}  {total_bytes:>10,}  {total_seconds:>9.4f}  "
        f"{total_bytes / 1e6 / total_seconds:>8.2f}"
    )


def nesting_ratios(config: ChunkConfig, runs: int) -> list[tuple[str, int, float, float]]:
    """(file, size, median seconds of the nested file, median seconds of ordinary prose of that size)."""
    figures = []
    for name in NESTING_FILES:
        nested = hostile_corpus.HOSTILE_FILES[name]().decode("utf-8")
        size = len(nested.encode("utf-8"))
        ordinary = hostile_corpus.ordinary_prose(size).decode("utf-8")
        assert len(ordinary.encode("utf-8")) == size
        chunk_markdown(nested, config)
        chunk_markdown(ordinary, config)
        nested_times, ordinary_times = [], []
        for _ in range(runs):  # alternate, so that noise falls on both alike
            nested_times.append(median_seconds(lambda text=nested: chunk_markdown(text, config), 1))
            ordinary_times.append(median_seconds(lambda text=ordinary: chunk_markdown(text, config), 1))
        figures.append((name, size, statistics.median(nested_times), statistics.median(ordinary_times)))
    return figures


def print_nesting_table(strategy: str, figures: Sequence[tuple[str, int, float, float]]) -> None:
    """Print the side-by-side table of one strategy."""
    print(f"\n-- {strategy}: pathological nesting vs ordinary text of the same size (median) --")
    print(
        f"{'file':<28}  {'bytes':>8}  {'nested s':>9}  {'ordinary s':>10}  {'ratio':>6}  target <= {NESTING_TARGET:g}x"
    )
    for name, size, nested_seconds, ordinary_seconds in figures:
        ratio = nested_seconds / ordinary_seconds
        verdict = "PASS" if ratio <= NESTING_TARGET else "FAIL"
        print(f"{name:<28}  {size:>8,}  {nested_seconds:>9.4f}  {ordinary_seconds:>10.4f}  {ratio:>5.2f}x  {verdict}")


def print_nesting_summary(ratios: dict[str, list[tuple[str, float]]], runs: int) -> list[str]:
    """One row per strategy: its ratio on each nesting file and PASS/FAIL; returns the failures."""
    print(
        f"\nnesting summary: time on the nested file / time on ordinary prose of the same size "
        f"(median of {runs} rounds), target <= {NESTING_TARGET:g}x"
    )
    width = max([len("strategy"), *map(len, ratios)])
    print(f"{'strategy':<{width}}  " + "  ".join(f"{name:>28}" for name in NESTING_FILES) + "  verdict")
    failures = []
    for strategy, figures in ratios.items():
        over = [f"{strategy}: {name} {ratio:.1f}x" for name, ratio in figures if ratio > NESTING_TARGET]
        failures += over
        cells = "  ".join(f"{ratio:>27.2f}x" for _, ratio in figures)
        print(f"{strategy:<{width}}  {cells}  {'FAIL' if over else 'PASS'}")
    worst = max((ratio for figures in ratios.values() for _, ratio in figures), default=0.0)
    print(f"worst ratio {worst:.2f}x: " + ("FAIL" if failures else "PASS") + f" against {NESTING_TARGET:g}x")
    return failures


def chosen_strategies(choice: str) -> list[str]:
    if choice == "default":
        return [ChunkConfig().strategy]
    if choice == "all":
        return available_strategies()
    names = [name.strip() for name in choice.split(",") if name.strip()]
    unknown = sorted(set(names) - set(available_strategies()))
    if unknown:
        raise SystemExit(f"error: unknown strategies {unknown}; registered: {', '.join(available_strategies())}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", default="default", help="default | all | NAME,NAME,... (default: default)")
    parser.add_argument("--runs", type=int, default=3, help="timed calls per file; the median is shown (default 3)")
    parser.add_argument("--nesting-runs", type=int, default=5, help="rounds of the nesting comparison (default 5)")
    parser.add_argument(
        "--nesting-only", action="store_true", help="only the nesting comparison, not the per-file tables"
    )
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--overlap-tokens", type=int, default=50)
    args = parser.parse_args(argv)

    corpus = {name: make_bytes() for name, make_bytes in hostile_corpus.HOSTILE_FILES.items()}
    if args.nesting_only:
        print(f"nesting comparison only; max_tokens {args.max_tokens}, overlap_tokens {args.overlap_tokens}")
    else:
        print(
            f"hostile corpus: {len(corpus)} files, {sum(map(len, corpus.values())) / 1e6:.2f} MB; "
            f"max_tokens {args.max_tokens}, overlap_tokens {args.overlap_tokens}; median of {args.runs} runs; "
            "peak = tracemalloc peak of one separate call (Python allocations only)"
        )
    ratios: dict[str, list[tuple[str, float]]] = {}
    for strategy in chosen_strategies(args.strategies):
        try:
            config = config_for(strategy, args.max_tokens, args.overlap_tokens)
        except (ConfigError, ValueError) as error:
            print(f"\n== strategy {strategy} ==\n{error}")
            continue
        if not args.nesting_only:
            results = [bench_file(name, data, config, args.runs) for name, data in corpus.items()]
            print_strategy_table(strategy, results)
        figures = nesting_ratios(config, args.nesting_runs)
        print_nesting_table(strategy, figures)
        ratios[strategy] = [(name, nested / ordinary) for name, _, nested, ordinary in figures]
    failures = print_nesting_summary(ratios, args.nesting_runs)
    if failures:
        print(f"OVER the {NESTING_TARGET:g}x nesting target: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
