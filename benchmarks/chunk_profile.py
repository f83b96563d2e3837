"""Chunk-size profile: how full chunkline's chunks are, what ends each one, and where the small ones come from.

Usage::

    python benchmarks/chunk_profile.py [FOLDER ...] [--source NAME=DIR ...] [--max-tokens 256]
                                       [--overlap-tokens N] [--set key=value ...] [--no-others]

FOLDER is any folder of markdown files (``*.md``, ``*.markdown``); ``--source NAME=DIR`` builds the documents
of a question set of ``benchmarks.question_sets`` from its source folder, the documents the retrieval
benchmark chunks (``--source keps=../enhancements/keps``). Every system chunks every document at
``--max-tokens`` (the overlap defaults to the retrieval benchmark's, 50/512 of it); ``--set`` changes
chunkline's config as on the command line.

It prints, with public API only:

* for chunkline, and for chonkie's ``RecursiveChunker`` and semantic-text-splitter's ``TextSplitter`` at the
  same size and overlap as in the retrieval benchmark (those installed; ``--no-others`` leaves them out):
  chunks, mean tokens and a histogram of chunk text tokens (cl100k_base) in eighths of ``max_tokens``;
* chunkline's budget: the mean reserve for each chunk's context line (``max_tokens`` less the span budget,
  :func:`chunkline.engine.span_budget`) and the mean of ``max_tokens - embed_token_count``;
* what each chunkline chunk is, with its mean fill of the span budget: one whole section, sections packed
  together, a piece of a section cut at the budget (alone, or with other spans merged into it). The
  strategy's own spans are the chunks of the same config with ``min_tokens: 0`` (no fragment merging);
* why each chunk (but a document's last) ends where it does: the next span does not fit even in
  ``max_tokens``; it fits the budget but the chunk had reached ``min_tokens``; it would fit ``max_tokens``
  but not the budget left by the reserve; a cut piece ends at structure, or would go further with the whole
  ``max_tokens``;
* the chunks under ``min_tokens``, by cause: a whole short section before a big one, a packed run stopped by
  a big section, the last (or a middle) piece of a cut section, ...

Nothing is timed; the figures say where a config's chunk count comes from when it is compared with a chunker
that fills its windows (the retrieval benchmark, ``benchmarks/bench_retrieval.py``, says which retrieves
better).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import chunkline  # noqa: E402
from chunkline import Chunk, ChunkConfig, load_chunk_config, parse_markdown  # noqa: E402
from chunkline.engine import span_budget  # noqa: E402
from chunkline.splitting import first_piece_of_range  # noqa: E402
from chunkline.tokenizers import counter_for, load_encoding  # noqa: E402

ENCODING_NAME = "cl100k_base"
OVERLAP_SHARE = 50 / 512
"""The retrieval benchmark's overlap as a share of the chunk size (50 tokens at 512)."""
EIGHTHS = 8


def read_folder(folder: Path) -> list[tuple[str, str]]:
    paths = sorted(path for path in folder.rglob("*") if path.suffix in (".md", ".markdown") and path.is_file())
    return [(path.relative_to(folder).as_posix(), path.read_text(encoding="utf-8")) for path in paths]


def read_source(name: str, folder: Path, count_tokens) -> list[tuple[str, str]]:
    from benchmarks.question_sets import SETS

    if name not in SETS:
        raise SystemExit(f"error: no question set {name!r}; sets: {', '.join(sorted(SETS))}")
    return list(SETS[name](folder, count_tokens).documents)


def histogram(counts: Sequence[int], max_tokens: int) -> list[tuple[str, int]]:
    """(label, how many of ``counts``) for each eighth of ``max_tokens`` (the last eighth ends at
    ``max_tokens`` itself), then for the counts over ``max_tokens``."""
    edges = [round(slot * max_tokens / EIGHTHS) for slot in range(EIGHTHS)]
    rows = [0] * (EIGHTHS + 1)
    for count in counts:
        rows[bisect_right(edges, count) - 1 if count <= max_tokens else EIGHTHS] += 1
    labels = [f"{low}-{high - 1}" for low, high in zip(edges, edges[1:])]
    labels += [f"{edges[-1]}-{max_tokens}", f"over {max_tokens}"]
    return list(zip(labels, rows))


class DocumentProfile:
    """One document's chunks set against the strategy's own spans (the chunks without fragment merging)."""

    def __init__(self, doc_id: str, text: str, config: ChunkConfig):
        self.text = text
        self.config = config
        self.counter = counter_for(config)
        self.document = parse_markdown(text, config.parser)
        self.budget = span_budget(self.document, config, self.counter, doc_id=doc_id)
        self.chunks = chunkline.chunk_markdown(text, config, doc_id=doc_id)
        unmerged = dataclasses.replace(config, min_tokens=0)
        self.spans = chunkline.chunk_markdown(text, unmerged, doc_id=doc_id)
        self.section_starts = {section.start_char for section in self.document.sections}

    def parts(self, chunk: Chunk) -> list[Chunk]:
        """The strategy's spans that ``chunk`` holds (those that start in it, when it was cut anew)."""
        start, end = chunk.start_char, chunk.end_char
        held = [span for span in self.spans if start <= span.start_char and span.end_char <= end]
        return held or [span for span in self.spans if start <= span.start_char < end]

    def next_span(self, chunk: Chunk) -> Chunk | None:
        return next((span for span in self.spans if span.end_char > chunk.end_char), None)

    def cut_end(self, span: Chunk) -> int:
        """The end of the cut section ``span`` is a piece of."""
        end = span.end_char
        for other in self.spans:
            if other.is_sub_split and other.start_char >= span.start_char and other.start_char <= end:
                if other.start_char > span.start_char and other.start_char in self.section_starts:
                    break
                end = max(end, other.end_char)
        return end

    def kind(self, parts: Sequence[Chunk]) -> str:
        cut = [part for part in parts if part.is_sub_split]
        if not cut:
            return "one whole section" if len(parts) == 1 else "sections packed together"
        return "piece of a cut section" + ("" if len(cut) == len(parts) else " + merged spans")

    def ending(self, chunk: Chunk, parts: Sequence[Chunk], following: Chunk) -> str:
        """Why ``chunk`` ends where it does (``following``: the strategy's next span)."""
        max_tokens = self.config.max_tokens
        continues_cut = following.is_sub_split and following.start_char not in self.section_starts
        if continues_cut and parts and parts[-1].is_sub_split:
            end = self.cut_end(parts[-1])
            whole = first_piece_of_range(self.document, chunk.start_char, end, self.counter, max_tokens)
            if whole.end_char > chunk.end_char:
                return "cut piece: would go further with the whole max_tokens (the reserve)"
            return "cut piece: ends at the best boundary within max_tokens (structure)"
        joined = self.counter.count(self.text[chunk.start_char : following.end_char])
        if joined <= self.budget:
            return "packing: the next span fits, but the chunk reached min_tokens"
        if joined <= max_tokens:
            return "packing: the next span fits max_tokens but not the budget (the reserve)"
        return "packing: the next span does not fit even in max_tokens"

    def small_cause(self, chunk: Chunk, parts: Sequence[Chunk], following: Chunk | None) -> str:
        """Why ``chunk`` (under ``min_tokens``) stayed small."""
        cut = [part for part in parts if part.is_sub_split]
        if not cut:
            what = "a whole short section" if len(parts) == 1 else "short sections packed together"
            if following is None:
                return f"{what}, at the document's end"
            if following.is_sub_split:
                return f"{what}, before a section cut at the budget"
            return f"{what}, before a section too big to join"
        first, last = cut[0], cut[-1]
        before = any(
            span.is_sub_split and span.start_char < first.start_char < span.end_char + 1 for span in self.spans
        ) or (first.start_char not in self.section_starts)
        after = following is not None and following.is_sub_split and following.start_char not in self.section_starts
        after = after and following.start_char <= last.end_char
        where = {(True, False): "the last", (False, True): "the first", (True, True): "a middle"}.get(
            (before, after), "the only"
        )
        return f"{where} piece of a cut section" + ("" if len(cut) == len(parts) else " + merged spans")


def profile_chunkline(documents: Sequence[tuple[str, str]], config: ChunkConfig) -> list[int]:
    """Print chunkline's profile; return its chunks' token counts."""
    max_tokens, min_tokens = config.max_tokens, config.effective_min_tokens
    counts: list[int] = []
    reserves: list[int] = []
    unused: list[int] = []
    fills: dict[str, list[float]] = defaultdict(list)
    endings: Counter[str] = Counter()
    small: Counter[str] = Counter()
    small_tokens: dict[str, list[int]] = defaultdict(list)
    for doc_id, text in documents:
        profile = DocumentProfile(doc_id, text, config)
        reserves.append(max_tokens - profile.budget)
        for number, chunk in enumerate(profile.chunks):
            counts.append(chunk.token_count)
            unused.append(max_tokens - chunk.embed_token_count)
            parts = profile.parts(chunk)
            fills[profile.kind(parts)].append(chunk.token_count / profile.budget)
            following = profile.next_span(chunk)
            if number + 1 < len(profile.chunks) and following is not None:
                endings[profile.ending(chunk, parts, following)] += 1
            if chunk.token_count < min_tokens:
                cause = profile.small_cause(chunk, parts, following)
                small[cause] += 1
                small_tokens[cause].append(chunk.token_count)
    total = len(counts)
    print(f"\nchunkline: {total:,} chunks, mean {statistics.fmean(counts):.0f} tokens (min_tokens {min_tokens})")
    print(
        f"context-line reserve per document: mean {statistics.fmean(reserves):.1f} tokens "
        f"(median {statistics.median(reserves):g}); max_tokens - embed_token_count per chunk: "
        f"mean {statistics.fmean(unused):.1f}"
    )
    print("\n| what the chunk is | chunks | mean fill of the budget | under 3/4 of it |\n| --- | ---: | ---: | ---: |")
    for kind, values in sorted(fills.items(), key=lambda item: -len(item[1])):
        under = sum(value < 0.75 for value in values)
        print(f"| {kind} | {len(values):,} | {statistics.fmean(values):.2f} | {under:,} |")
    print(
        "\n| why a chunk ends there (a document's last chunk left out) | chunks | share of all |\n| --- | ---: | ---: |"
    )
    for ending, number in endings.most_common():
        print(f"| {ending} | {number:,} | {100 * number / total:.1f}% |")
    print(f"\n| chunks under min_tokens ({sum(small.values()):,}) | chunks | mean tokens |\n| --- | ---: | ---: |")
    for cause, number in small.most_common():
        print(f"| {cause} | {number:,} | {statistics.fmean(small_tokens[cause]):.0f} |")
    return counts


def other_counts(documents: Sequence[tuple[str, str]], max_tokens: int, overlap: int, encoding) -> dict[str, list[int]]:
    """Chunk text tokens of the other chunkers that are installed, configured as in the retrieval benchmark."""
    chunkers = {}
    try:
        from chonkie import RecursiveChunker

        chonkie = RecursiveChunker(tokenizer=encoding, chunk_size=max_tokens)
        chunkers["chonkie recursive"] = lambda text: [piece.text for piece in chonkie.chunk(text)]
    except ImportError:
        pass
    try:
        from semantic_text_splitter import TextSplitter

        splitter = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", max_tokens, overlap=overlap)
        chunkers["semantic-text-splitter text"] = splitter.chunks
    except ImportError:
        pass
    return {
        name: [len(encoding.encode_ordinary(piece)) for _, text in documents for piece in chunk(text)]
        for name, chunk in chunkers.items()
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of markdown files")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=DIR", help="a question set's source")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--overlap-tokens", type=int, default=None, help="default: 50/512 of --max-tokens")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-others", action="store_true", help="chunkline alone (no other chunkers)")
    args = parser.parse_args(argv)
    if not args.folders and not args.source:
        parser.error("give a FOLDER or --source NAME=DIR")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    encoding = load_encoding(ENCODING_NAME)
    count_tokens = encoding.encode_ordinary
    documents: list[tuple[str, str]] = []
    for folder in args.folders:
        documents += read_folder(folder)
    for value in args.source:
        name, _, folder = value.partition("=")
        documents += read_source(name.strip(), Path(folder), lambda text: len(count_tokens(text)))
    overlap = round(args.max_tokens * OVERLAP_SHARE) if args.overlap_tokens is None else args.overlap_tokens
    assignments = [f"max_tokens={args.max_tokens}", f"overlap_tokens={overlap}", *args.settings]
    config = load_chunk_config(None, assignments, environ={})
    print(f"{len(documents):,} documents; chunkline: {' '.join(assignments)}")
    ours = profile_chunkline(documents, config)
    others = {} if args.no_others else other_counts(documents, args.max_tokens, overlap, encoding)
    systems = {"chunkline": ours, **others}
    print("\n| chunk tokens | " + " | ".join(systems) + " |")
    print("| --- |" + " ---: |" * len(systems))
    print(
        "| chunks (mean tokens) | "
        + " | ".join(f"{len(c):,} ({statistics.fmean(c):.0f})" for c in systems.values())
        + " |"
    )
    columns = [histogram(counts, args.max_tokens) for counts in systems.values()]
    for row in zip(*columns):
        print(f"| {row[0][0]} | " + " | ".join(f"{number:,}" for _, number in row) + " |")


if __name__ == "__main__":
    main()
