"""Calling a Beam DoFn's lifecycle directly in this process, as a runner would for one bundle.

``chunkline run``'s small incremental path needs no Beam at all: it calls the Beam-free steps the DoFns are
made of (:mod:`chunkline.dataset.bundle`). :func:`apply_in_process` does the same for any DoFn, whose
``finish_bundle`` may output ``WindowedValue`` s (their values are what it yields). A splittable DoFn reads
each element's whole initial restriction, as a runner that does not split would.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.runners.common import DoFnSignature
from apache_beam.utils.windowed_value import WindowedValue

from chunkline.dataset.bundle import run_bundle

__all__ = ["apply_in_process"]


def apply_in_process(fn: beam.DoFn, elements: Iterable[Any], **side_inputs: Any) -> Iterator[Any]:
    """The outputs of ``fn`` over ``elements`` as one bundle (lazily; ``finish_bundle`` and ``teardown``
    run once the elements are exhausted)."""
    step = _WholeRestrictions(fn) if DoFnSignature(fn).is_splittable_dofn() else fn
    for output in run_bundle(step, elements, **side_inputs):
        yield output.value if isinstance(output, WindowedValue) else output


class _WholeRestrictions:
    """A splittable DoFn's lifecycle, each element processed over its initial restriction with a tracker."""

    def __init__(self, fn: beam.DoFn):
        signature = DoFnSignature(fn)
        self._fn = fn
        self._provider = signature.get_restriction_provider()
        self._tracker_name = next(
            name
            for name, parameter in inspect.signature(fn.process).parameters.items()
            if isinstance(parameter.default, beam.DoFn.RestrictionParam)
        )

    def setup(self) -> None:
        self._fn.setup()

    def start_bundle(self) -> None:
        self._fn.start_bundle()

    def process(self, element: Any, **side_inputs: Any) -> Iterator[Any]:
        tracker = self._provider.create_tracker(self._provider.initial_restriction(element))
        outputs = self._fn.process(element, **{self._tracker_name: tracker}, **side_inputs)
        if outputs is not None:
            yield from outputs
        tracker.check_done()

    def finish_bundle(self) -> Any:
        return self._fn.finish_bundle()

    def teardown(self) -> None:
        self._fn.teardown()
