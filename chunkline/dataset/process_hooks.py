"""What a program that owns its process may do around a run's steps, which the library itself never does.

chunkline's steps run inside other people's programs and Beam workers, so they change no process-wide
state: no allocator settings, memory pools, garbage-collector switches or threads left running. A program
that owns its process (``chunkline run``, see :mod:`chunkline.pipelines.process_tuning`) can tune it at
the few points where that pays, by passing a :class:`ProcessHooks` of its own to the steps; it travels
pickled with them to the workers, so its class must be importable there. The default does nothing.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

__all__ = ["NO_PROCESS_HOOKS", "ProcessHooks"]


class ProcessHooks:
    """The points of a run where the process's owner may step in; each does nothing here."""

    def worker_setup(self) -> None:
        """Called from each chunking and merging step's ``setup()``, once per worker."""

    def listing(self) -> AbstractContextManager[None]:
        """Wraps the driver's listing of the inputs: an object per file (a hundred thousand for as many
        pages), none of them in a reference cycle."""
        return contextlib.nullcontext()

    def listing_released(self) -> None:
        """Called once the driver has staged its listing and let its rows go, before the pipeline runs."""

    def parsing(self, chars: int) -> AbstractContextManager[None]:
        """Wraps the markdown parse of a document of ``chars`` characters."""
        return contextlib.nullcontext()

    def merging(self) -> AbstractContextManager[None]:
        """Wraps the merge of a full rebuild's shard of ``chunks`` (a share of the whole corpus)."""
        return contextlib.nullcontext()

    def between_merge_steps(self) -> None:
        """Called before a full rebuild's shard is merged and between the steps of a large row group's merge,
        each of which frees much of what the one before allocated."""


NO_PROCESS_HOOKS = ProcessHooks()
"""The hooks of a program that leaves its process alone (every program but ``chunkline run``)."""
