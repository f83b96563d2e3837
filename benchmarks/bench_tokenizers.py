"""chunk_markdown throughput with a Hugging Face tokenizer.json next to cl100k_base.

Usage::

    python benchmarks/bench_tokenizers.py [FOLDER] [--tokenizer-file tokenizer.json] [--strategy headings]
                                          [--max-tokens 512] [--overlap-tokens 50] [--runs 3]
                                          [--count-special-tokens]

FOLDER defaults to ``sample_corpus/``, the small corpus this repository ships (the published figures are of a
larger corpus given as the argument, e.g. ``../shared/corpus``). The tokenizer file defaults to the Llama-2
``tokenizer.json`` the ``wordllama`` package ships. Every ``*.md`` file is read into memory once; each round
chunks the whole corpus with both tokenizers, alternating which goes first, after one untimed pass each
(loading and warm-up). The figure per tokenizer is the median MB/s (1e6 bytes of UTF-8 input) of its rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from chunkline import ChunkConfig, chunk_markdown, get_strategy


def default_tokenizer_file() -> str:
    import wordllama

    found = sorted((Path(wordllama.__file__).parent / "tokenizers").glob("*.json"))
    if not found:
        raise SystemExit("wordllama ships no tokenizer.json here: pass --tokenizer-file")
    return str(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(Path(__file__).resolve().parents[1] / "sample_corpus"))
    parser.add_argument("--tokenizer-file")
    parser.add_argument("--strategy", default="headings")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--overlap-tokens", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count-special-tokens", action="store_true")
    args = parser.parse_args()

    texts = [path.read_text(encoding="utf-8") for path in sorted(Path(args.folder).rglob("*.md"))]
    megabytes = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts) / 1e6
    common = dict(
        strategy=args.strategy,
        max_tokens=args.max_tokens,
        overlap_tokens=args.overlap_tokens,
        params=get_strategy(args.strategy).default_params(),
    )
    configs = {
        "cl100k_base": ChunkConfig(**common),
        "huggingface": ChunkConfig(
            **common,
            tokenizer="huggingface",
            tokenizer_file=args.tokenizer_file or default_tokenizer_file(),
            count_special_tokens=args.count_special_tokens,
        ),
    }

    def one_pass(config: ChunkConfig) -> tuple[float, int]:
        started = time.perf_counter()
        chunks = sum(len(chunk_markdown(text, config)) for text in texts)
        return time.perf_counter() - started, chunks

    counts = {name: one_pass(config)[1] for name, config in configs.items()}  # untimed: load and warm up
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    names = list(configs)
    for round_index in range(args.runs):
        for name in names if round_index % 2 == 0 else reversed(names):
            seconds[name].append(one_pass(configs[name])[0])
    print(
        f"{len(texts)} files, {megabytes:.2f} MB, strategy {args.strategy}, max_tokens {args.max_tokens}, runs {args.runs}"
    )
    for name in names:
        median = statistics.median(seconds[name])
        print(f"{name:12} {megabytes / median:7.2f} MB/s  median {median:.2f} s  chunks {counts[name]}")


if __name__ == "__main__":
    main()
