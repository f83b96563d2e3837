"""A document's token offsets encoded on a second thread while the first parses its markdown.

tiktoken's encoder releases the GIL, so the one encoding of a document that the engine reads its token
counts from (:class:`~chunkline.token_offsets.TokenOffsets`) can run on another core while this thread parses
the markdown, which holds the GIL. The chunks are the same either way: the offsets are a pure function of the
text and the tokenizer, and an encoding that fails on the thread is dropped, so that the engine encodes the
text itself where it always did and fails there alike.

Used only where it can pay: a counter that encodes without the GIL, a document large enough to outweigh
handing it over, and a process with a core to spare (:func:`encode_ahead_default`). The thread belongs to
one document: it is started for it and joined before :func:`parse_encoding_ahead` returns (or raises), so
no thread of chunkline's outlives the call that started it. No Beam here.
"""

from __future__ import annotations

import threading

from chunkline.cores import available_cores
from chunkline.structure import MarkdownDocument, parse_markdown
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter

__all__ = ["MIN_CHARS_AHEAD", "PendingOffsets", "encode_ahead_default", "parse_encoding_ahead", "start_encoding"]

MIN_CHARS_AHEAD = 65_536
"""Documents shorter than this (in characters) are encoded where the engine needs them. Handing a document
to the thread and back costs a thread's start and GIL hand-overs (about 0.2 ms a round trip on a 2-core
virtual machine), and the two threads slow each other down: on the text of ../shared/corpus cut into 8 KB
and 32 KB documents, chunking with the thread ran 0.97x and 0.95x as fast as without it; 128 KB and 512 KB
documents ran 1.11x and 1.27x as fast (``benchmarks/bench_chunking.py --encode-ahead``, medians of 5)."""

THREAD_NAME = "chunkline-encode"


class PendingOffsets:
    """The token offsets of one text, being encoded on a thread of their own; calling it waits for them
    (``None`` when the encoding failed: the engine then encodes the text itself)."""

    __slots__ = ("_offsets", "_thread")

    def __init__(self, text: str, counter: TokenCounter):
        self._offsets: TokenOffsets | None = None
        self._thread = threading.Thread(target=self._encode, args=(text, counter), name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _encode(self, text: str, counter: TokenCounter) -> None:
        try:
            self._offsets = TokenOffsets(text, 0, len(text), counter)
        except Exception:  # the engine encodes the text itself and reports the failure where it always did
            self._offsets = None

    def __call__(self) -> TokenOffsets | None:
        self._thread.join()
        return self._offsets


def encode_ahead_default() -> bool:
    """Whether encoding ahead can pay in this process: it may run on more than one core."""
    return available_cores() > 1


def start_encoding(text: str, counter: TokenCounter) -> PendingOffsets | None:
    """Start encoding the token offsets of all of ``text`` on a thread of its own; ``None`` (nothing
    started) for a text under :data:`MIN_CHARS_AHEAD` or a counter that holds the GIL while it encodes.
    The caller waits for the result (calling it) before it returns, whatever happens meanwhile."""
    if len(text) < MIN_CHARS_AHEAD or not getattr(counter, "encodes_without_gil", False):
        return None
    return PendingOffsets(text, counter)


def parse_encoding_ahead(
    text: str, parser: str, counter: TokenCounter, encode_ahead: bool
) -> tuple[MarkdownDocument, TokenOffsets | None]:
    """``text`` parsed with ``parser``, and with ``encode_ahead`` its token offsets encoded on a second
    thread meanwhile (``None`` when they were not, or their encoding failed). The thread is joined before
    this returns or raises."""
    pending = start_encoding(text, counter) if encode_ahead else None
    try:
        document = parse_markdown(text, parser)
    finally:
        offsets = pending() if pending is not None else None
    return document, offsets
