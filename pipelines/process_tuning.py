"""How ``chunkline run`` tunes its own process: the one place where chunkline changes process-wide state.

chunkline's library (the engine, the dataset steps, the transforms) runs inside other people's programs and
Beam workers and leaves their process alone. ``chunkline run`` owns its process, and the worker processes
it forks or has Beam start for it, so it turns on here what pays there:

- **The allocator maps large buffers on their own** (:func:`map_large_allocations`): glibc's ``mallopt``
  threshold fixed at :data:`LARGE_ALLOCATION_BYTES`, so that a merge's row groups, columns and part bytes
  are given back to the system when freed instead of staying resident beside the next ones (at 16x the
  corpus, the in-process run peaked 25 MB higher without it). Freed memory at the top of a heap is given
  back once :data:`HEAP_TOP_KEPT_BYTES` of it is free, the pairing glibc itself makes for that threshold:
  at glibc's default of 128 KB the worker processes gave memory back and faulted it in again batch after
  batch (on 10,000 small pages, two workers took 28% fewer page faults and 15% less system time with the
  larger figure, 2.5% less CPU in all; a run in one process, no difference to measure). Set once in the ``chunkline`` program before any worker is forked (the workers inherit it), and
  in each worker's ``setup`` through :meth:`RunProcessTuning.worker_setup`. glibc only; it cannot be
  undone, so only a process that is ``chunkline``'s own sets it.
- **Freed memory is given back between the merge's steps** (:func:`release_freed_memory`): pyarrow's pool
  and the C heap (``malloc_trim``), before a full rebuild's shard is merged and between the steps of a large
  row group.
- **A full rebuild's merges allocate from the system allocator** (:func:`system_allocations`), which gives
  large buffers back when freed, where mimalloc, pyarrow's default, keeps them (at 16x the corpus the
  in-process run peaked 40 MB higher with it). pyarrow's pool is process-wide: merges on several threads
  share one switch, and the pool found first is put back when the last leaves.
- **The cyclic garbage collector pauses while a large document is parsed** (:func:`collector_paused`, from
  :data:`COLLECTOR_PAUSE_MIN_CHARS` characters): a parse allocates objects by the million and frees none
  until it ends, none in a cycle, and each full collection meanwhile scans all of them (``chunk_markdown``
  of 4 MB of list items ran 1.84x faster with markdown-it-py, 1.20x with markdown-it-pyrs on headings).
- **The collector also pauses while the driver lists the inputs** (:meth:`RunProcessTuning.listing`): an
  object or two per file and no cycle among them, while the collections that so many new objects set off
  walked the files listed so far again and again (0.12 s of the 0.58 s CPU an unchanged rerun of 100,000
  pages spent listing). What the listing freed is given back when it ends (:func:`release_freed_memory`:
  the driver listing and staging 1,000,000 pages peaked 26 MB lower), and the listing's rows once they are
  staged and let go, before the pipeline runs (resident 115 MB instead of 230 MB for 1,000,000 pages).
- **What was imported before the run is frozen out of the collector's view** (:func:`collector_frozen`),
  and thawed after it, so that its collections walk only what the run makes.

The library's steps call these through :class:`~chunkline.dataset.process_hooks.ProcessHooks`, which
``chunkline run`` passes them (:data:`RUN_PROCESS_TUNING`); every other program's steps get hooks that do
nothing.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import pyarrow as pa

from chunkline.dataset.process_hooks import ProcessHooks

__all__ = [
    "COLLECTOR_PAUSE_MIN_CHARS",
    "HEAP_TOP_KEPT_BYTES",
    "LARGE_ALLOCATION_BYTES",
    "RUN_PROCESS_TUNING",
    "RunProcessTuning",
    "collector_frozen",
    "collector_paused",
    "map_large_allocations",
    "release_freed_memory",
    "system_allocations",
]


@functools.cache
def _c_function(name: str) -> Callable[..., int] | None:
    """A function of the running process's C library (found once), or None where it has none: glibc's
    ``malloc_trim`` and ``mallopt`` are missing from musl, macOS and Windows."""
    try:
        return getattr(ctypes.CDLL(None), name, None)
    except OSError:
        return None


_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter for the size from which an allocation is mapped on its own."""
_M_TRIM_THRESHOLD = -1
"""glibc's ``mallopt`` parameter for how much free memory the top of a heap keeps before it is given back."""

LARGE_ALLOCATION_BYTES = 4 << 20
"""Allocations of this size or more are mapped on their own (see :func:`map_large_allocations`)."""
HEAP_TOP_KEPT_BYTES = 2 * LARGE_ALLOCATION_BYTES
"""Free memory the top of a heap keeps (see :func:`map_large_allocations`): twice the mapping threshold, as
glibc sets it when it moves that threshold itself."""


@functools.cache
def map_large_allocations() -> bool:
    """From now on, the C allocator maps every allocation of :data:`LARGE_ALLOCATION_BYTES` or more on its
    own and gives it back to the system when it is freed; returns whether it does (glibc only).

    By default glibc raises that threshold to the size of each large buffer freed (up to 32 MB), so that
    after the first few a merge's buffers come from its heap, where what they leave free stays resident
    beside the next ones. Fixing the threshold also stops glibc from moving its trim threshold, which would
    stay at 128 KB: it is set to :data:`HEAP_TOP_KEPT_BYTES`, so that a batch's buffers, all smaller than
    the mapped ones, reuse the heap the batch before freed instead of faulting in pages given back
    meanwhile. Process-wide and for good."""
    mallopt = _c_function("mallopt")
    if mallopt is None or not mallopt(_M_MMAP_THRESHOLD, LARGE_ALLOCATION_BYTES):
        return False
    mallopt(_M_TRIM_THRESHOLD, HEAP_TOP_KEPT_BYTES)
    return True


def release_freed_memory() -> None:
    """Give the memory that pyarrow's pool and the C allocator hold freed back to the system: what one
    step freed is not reused by the next when it sits in another allocator's free lists."""
    pa.default_memory_pool().release_unused()
    malloc_trim = _c_function("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


_pool_lock = threading.Lock()
_pool_users = 0
_pool_before: pa.MemoryPool | None = None


@contextmanager
def system_allocations() -> Iterator[None]:
    """Arrow buffers allocated meanwhile come from the system allocator, not pyarrow's default pool.

    Buffers remember their pool, so those allocated before or after are freed where they came from. Blocks
    entered at once on several threads share the switch: the first to enter installs the system pool and the
    last to leave puts back the pool the first found, in whatever order they leave."""
    global _pool_users, _pool_before
    with _pool_lock:
        if _pool_users == 0:
            _pool_before = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _pool_users += 1
    try:
        yield
    finally:
        with _pool_lock:
            _pool_users -= 1
            if _pool_users == 0:
                pa.set_memory_pool(_pool_before)
                _pool_before = None


COLLECTOR_PAUSE_MIN_CHARS = 64 * 1024
"""Documents of at least this many characters are parsed with the cyclic garbage collector paused; no
difference to measure on smaller ones, most of the benchmark corpus."""

_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector from running inside the block. The collector is restored when
    the last paused block in any thread ends, normally or by an exception, and only if it was enabled when
    the first began."""
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_enabled:
                gc.enable()


@contextmanager
def collector_frozen() -> Iterator[None]:
    """The garbage collector's view of the objects made so far (the imported modules, the config), frozen
    for the block and given back after it. A program whose collector is off, or that froze objects of its
    own, is left as it is."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class RunProcessTuning(ProcessHooks):
    """The :class:`~chunkline.dataset.process_hooks.ProcessHooks` of ``chunkline run``: the tuning of this
    module at the points where the run's steps call it. Pickled with the steps to the run's workers."""

    def worker_setup(self) -> None:
        map_large_allocations()

    def listing(self) -> AbstractContextManager[None]:
        return _listing()

    def listing_released(self) -> None:
        # The rows' memory stays in pyarrow's pool once freed (115 MB of 1,000,000 listed files), beside
        # everything the pipeline then allocates from other heaps.
        release_freed_memory()

    def parsing(self, chars: int) -> AbstractContextManager[None]:
        return collector_paused() if chars >= COLLECTOR_PAUSE_MIN_CHARS else nullcontext()

    def merging(self) -> AbstractContextManager[None]:
        return system_allocations()

    def between_merge_steps(self) -> None:
        release_freed_memory()


@contextmanager
def _listing() -> Iterator[None]:
    # The collections that so many new objects set off would walk the files listed so far again and
    # again: a fifth of the listing's time for 100,000 files. The listing makes no reference cycle.
    with collector_paused():
        yield
    # What the listing freed (its files' Python values, a batch at a time; the doc_ids it sorted by) is
    # given back: the driver's next allocations mostly come from other heaps.
    release_freed_memory()


RUN_PROCESS_TUNING = RunProcessTuning()
"""The tuning of the ``chunkline`` program's runs."""
