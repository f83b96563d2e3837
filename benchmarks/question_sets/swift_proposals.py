"""``swift-proposals``: Swift Evolution proposals, where the author's introduction is the question and the
opening of the proposed solution is the answer.

Source: ``swiftlang/swift-evolution`` at commit ``0105e139a22938561c700cfbb89ddc3ebe402f0c``, the folder
``proposals`` (one markdown file per proposal: a title, a metadata list, then ``Introduction``,
``Motivation``, ``Proposed solution``, ``Detailed design`` and further sections)::

    git clone https://github.com/swiftlang/swift-evolution.git && cd swift-evolution
    git checkout 0105e139a22938561c700cfbb89ddc3ebe402f0c
    mkdir -p ../swift-evolution-data && git archive HEAD proposals | tar -x -C ../swift-evolution-data
    # then: --source swift-proposals=../swift-evolution-data/proposals

The rule is :mod:`benchmarks.question_sets.section_pairs` with these parts:

- question: the section headed ``Introduction``, where the author says in a paragraph or two what the
  proposal changes, less a paragraph starting ``Swift-evolution`` (the line of links to the forum thread,
  which stays in the text); 30 to 1,500 characters;
- answer: the opening of the first section after it, at the same heading level, headed ``Proposed
  solution`` (or, in proposals written without one, ``Proposed design``, ``Proposed approach`` or
  ``Detailed design``): where the author first explains the change; whole blocks within 2,000 characters,
  at least 300;
- the introduction's blocks are cut out of the searched document (its heading stays), so the question is
  the author's summary in words no document still holds, and what is measured is whether a system's
  chunks let a search reach the solution's opening from it;
- the folder is about 10 MB, over the 5,000,000-character cap: the documents kept are those with the
  smallest sha256 of doc id within the cap (the rest are counted ``over the corpus cap``); up to 250
  questions, smallest sha256 of doc id first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.question_sets import SETS, BuiltSet
from benchmarks.question_sets.section_pairs import SectionPairRule, build_section_pair_set

SET_NAME = "swift-proposals"
COMMIT = "0105e139a22938561c700cfbb89ddc3ebe402f0c"
RULE = SectionPairRule(
    question_titles=("Introduction",),
    answer_titles=("Proposed solution", "Proposed design", "Proposed approach", "Detailed design"),
    question_skip_prefixes=("Swift-evolution",),
)


def build(source: Path, count_tokens: Callable[[str], int]) -> BuiltSet:
    note = (
        f"{SET_NAME}: swiftlang/swift-evolution {COMMIT[:12]}, proposals/; question = Introduction (cut from "
        "the corpus), reference = opening of Proposed solution (or Proposed design, Proposed approach, Detailed design)"
    )
    return build_section_pair_set(source, RULE, [note])


SETS[SET_NAME] = build
