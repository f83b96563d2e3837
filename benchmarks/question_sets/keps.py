"""``keps``: Kubernetes Enhancement Proposals, where the author's summary is the question and the opening
of the proposal section is the answer.

Source: ``kubernetes/enhancements`` at commit ``64765b4b02389318f2113119dd9e491479f978a0``, the folder
``keps`` (one folder per KEP, ``keps/<sig>/<number>-<name>/README.md``, written from a template whose
sections are ``Summary``, ``Motivation`` with ``Goals`` and ``Non-Goals``, ``Proposal``, ``Design
Details`` and a production readiness questionnaire; the template's instructions are HTML comments)::

    git clone https://github.com/kubernetes/enhancements.git && cd enhancements
    git checkout 64765b4b02389318f2113119dd9e491479f978a0
    mkdir -p ../keps-data && git archive HEAD keps | tar -x -C ../keps-data
    # then: --source keps=../keps-data/keps

The rule is :mod:`benchmarks.question_sets.section_pairs` with these parts:

- question: the section headed ``Summary`` (its HTML comments left out); 30 to 1,500 characters;
- answer: the opening of the section headed ``Proposal`` at the same level, whole blocks within 2,000
  characters, at least 300 (HTML comments before it skipped, sub-headings such as ``User Stories`` inside
  the range kept, as the author wrote them);
- the summary's blocks are cut out of the searched document (its heading and the template's comments
  stay);
- the folder's markdown is about 21 MB (KEPs run to 30 kB each), over the 5,000,000-character cap: the
  documents kept are those with the smallest sha256 of doc id within the cap (the rest are counted ``over
  the corpus cap``); up to 250 questions, smallest sha256 of doc id first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.question_sets import SETS, BuiltSet
from benchmarks.question_sets.section_pairs import SectionPairRule, build_section_pair_set

SET_NAME = "keps"
COMMIT = "64765b4b02389318f2113119dd9e491479f978a0"
RULE = SectionPairRule(question_titles=("Summary",), answer_titles=("Proposal",))


def build(source: Path, count_tokens: Callable[[str], int]) -> BuiltSet:
    note = (
        f"{SET_NAME}: kubernetes/enhancements {COMMIT[:12]}, keps/; question = Summary (cut from the corpus), "
        "reference = opening of Proposal"
    )
    return build_section_pair_set(source, RULE, [note])


SETS[SET_NAME] = build
