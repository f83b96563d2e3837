"""Calling a Beam DoFn's lifecycle directly in this process, as a runner would for one bundle.

``chunkline run``'s small incremental path needs no Beam at all: it calls the Beam-free steps the DoFns are
made of (:mod:`chunkline.dataset.bundle`). :func:`apply_in_process` does the same for any DoFn, whose
``finish_bundle`` may output ``WindowedValue`` s (their values are what it yields).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.dataset.bundle import run_bundle

__all__ = ["apply_in_process"]


def apply_in_process(fn: beam.DoFn, elements: Iterable[Any], **side_inputs: Any) -> Iterator[Any]:
    """The outputs of ``fn`` over ``elements`` as one bundle (lazily; ``finish_bundle`` and ``teardown``
    run once the elements are exhausted)."""
    for output in run_bundle(fn, elements, **side_inputs):
        yield output.value if isinstance(output, WindowedValue) else output
