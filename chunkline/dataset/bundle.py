"""Calling a pipeline step without a runner: the lifecycle a runner calls a step with, for one bundle.

An incremental rebuild with a handful of edited documents spends far longer starting a Beam runner (a
fraction of a second in-process, minutes on Dataflow) than chunking them. The steps of a run (reading a
matched file, chunking a document, spilling rows, merging a shard) are Beam-free classes with a runner's
lifecycle methods (:class:`BundleStep`); the Beam DoFns subclass them, and :func:`run_bundle` calls them
directly on an iterable of elements, as a runner would for one bundle. The small path thus runs exactly the
transforms' own code and writes exactly the same files, without importing Beam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["BATCH_BYTES", "BATCH_DOCUMENTS", "BundleStep", "batched", "run_bundle"]

T = TypeVar("T")

BATCH_DOCUMENTS = 64
"""The most documents read and chunked as one element (their rows converted to Arrow together): a run's
cost per element (a runner's encoding and dispatch, a conversion's set-up) is paid once for them all."""
BATCH_BYTES = 1_000_000
"""A batch also ends once its documents hold this many bytes, so that large documents are not held
together, and a reshuffle can still spread a corpus of a few large files over the workers."""


def batched(
    items: Iterable[T],
    size_of: Callable[[T], int],
    documents: int = BATCH_DOCUMENTS,
    data_bytes: int = BATCH_BYTES,
) -> Iterator[list[T]]:
    """``items`` in lists of at most ``documents``, a list ending early once its items' ``size_of`` add up
    to ``data_bytes``."""
    batch: list[T] = []
    held = 0
    for item in items:
        batch.append(item)
        held += size_of(item)
        if len(batch) >= documents or held >= data_bytes:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


class BundleStep:
    """The lifecycle a runner calls a step with; each method does nothing unless a step needs it."""

    def setup(self) -> None:
        pass

    def start_bundle(self) -> None:
        pass

    def finish_bundle(self) -> Any:
        return None

    def teardown(self) -> None:
        pass


def run_bundle(step: Any, elements: Iterable[Any], **side_inputs: Any) -> Iterator[Any]:
    """The outputs of ``step`` (a :class:`BundleStep`, or a DoFn whose ``finish_bundle`` outputs plain
    values) over ``elements`` as one bundle, lazily: ``finish_bundle`` and ``teardown`` run once the
    elements are exhausted."""
    step.setup()
    try:
        step.start_bundle()
        for element in elements:
            outputs = step.process(element, **side_inputs)
            if outputs is not None:
                yield from outputs
        outputs = step.finish_bundle()
        if outputs is not None:
            yield from outputs
    finally:
        step.teardown()
