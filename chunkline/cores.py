"""How many CPUs this process may use: what the engine and the dataset layer size their threads and
workers by. No Beam here."""

from __future__ import annotations

import os

__all__ = ["available_cores"]


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
