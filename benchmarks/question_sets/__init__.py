"""Markdown question sets for the retrieval benchmark, each built by a written rule from public documentation.

Every set is a module of this package with a module docstring that states its rule (where its source comes
from, at which commit, how a question and its exact answer spans are chosen, what is left out and why) and
one function registered in :data:`SETS`::

    build(source: Path, count_tokens: Callable[[str], int]) -> BuiltSet

``source`` is the folder the user gives with ``--source NAME=DIR`` (a checkout of the public repository the
module names); ``count_tokens`` counts cl100k_base tokens. A set may rewrite the documents it reads (for
example, blank a FAQ's question heading); the reference spans index the documents it returns, which are the
documents every system chunks and the benchmark searches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chunkline.evaluation.questions import Question

__all__ = ["SETS", "BuiltSet", "SetBuilder"]


@dataclass(frozen=True)
class BuiltSet:
    documents: list[tuple[str, str]]
    """``(doc_id, text)`` pairs in doc id order: what every system chunks and the benchmark searches."""
    questions: list[Question]
    """The questions, each with reference spans into ``documents`` (doc id, start and end characters)."""
    rule_counts: dict[str, int] = field(default_factory=dict)
    """How many source files gave a question, and for each reason how many did not."""
    notes: list[str] = field(default_factory=list)
    """Lines printed above the set's tables (source, commit, what the rule kept)."""
    held_out: bool = False
    """A set kept out of every choice of default: reported last, as the held-out check."""


SetBuilder = Callable[[Path, Callable[[str], int]], BuiltSet]

SETS: dict[str, SetBuilder] = {}
"""Set name (as ``--sets`` takes it) -> its builder."""


def _register_sets() -> None:
    """Import the set modules, each of which adds its builder to :data:`SETS`."""
    from benchmarks.question_sets import keps, powershell_examples, swift_proposals  # noqa: F401


_register_sets()
