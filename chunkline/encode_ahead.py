"""A document's token offsets encoded on a second thread while the first parses its markdown.

tiktoken's encoder releases the GIL, so the one encoding of a document that the engine reads its token
counts from (:class:`~chunkline.token_offsets.TokenOffsets`) can run on another core while this thread parses
the markdown, which holds the GIL. The chunks are the same either way: the offsets are a pure function of the
text and the tokenizer, and an encoding that fails on the thread is dropped, so that the engine encodes the
text itself where it always did and fails there alike.

Used only where it can pay: a counter that encodes without the GIL, a document large enough to outweigh
handing it over, and a process with a core to spare (:func:`encode_ahead_default`). No Beam here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from chunkline.cores import available_cores
from chunkline.token_offsets import TokenOffsets
from chunkline.tokenizers import TokenCounter

__all__ = ["MIN_CHARS_AHEAD", "PendingOffsets", "encode_ahead_default", "start_encoding"]

MIN_CHARS_AHEAD = 65_536
"""Documents shorter than this (in characters) are encoded where the engine needs them. Handing a document
to the thread and back costs wake-ups of a sleeping thread and GIL hand-overs (about 0.2 ms a round trip on
a 2-core virtual machine), and the two threads slow each other down: on the text of ../shared/corpus cut
into 8 KB and 32 KB documents, chunking with the thread ran 0.97x and 0.95x as fast as without it; 128 KB and
512 KB documents ran 1.11x and 1.27x as fast (``benchmarks/bench_chunking.py --encode-ahead``, medians of 5)."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

PendingOffsets = Callable[[], "TokenOffsets | None"]
"""Waits for the offsets encoded ahead; ``None`` when the encoding failed (the engine then encodes)."""


def encode_ahead_default() -> bool:
    """Whether encoding ahead can pay in this process: it may run on more than one core."""
    return available_cores() > 1


def start_encoding(text: str, counter: TokenCounter) -> PendingOffsets | None:
    """Start encoding the token offsets of all of ``text`` on the encoding thread; ``None`` (nothing
    started) for a text under :data:`MIN_CHARS_AHEAD` or a counter that holds the GIL while it encodes."""
    if len(text) < MIN_CHARS_AHEAD or not getattr(counter, "encodes_without_gil", False):
        return None
    future = _thread_pool().submit(TokenOffsets, text, 0, len(text), counter)
    return lambda: _result(future)


def _result(future: Future[TokenOffsets]) -> TokenOffsets | None:
    try:
        return future.result()
    except Exception:  # the engine encodes the text itself and reports the failure where it always did
        return None


def _thread_pool() -> ThreadPoolExecutor:
    """The process's one encoding thread, started on first use."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunkline-encode")
    return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own pool when it needs one."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)
