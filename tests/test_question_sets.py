"""The rules of the markdown question sets (``benchmarks/question_sets``), on documents written for these
tests in the shape of each source: a proposal, an enhancement proposal with a template's comments, a
command reference page with examples. Nothing here reads the sets' public sources."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from benchmarks.question_sets import SETS, keps, powershell_examples, swift_proposals
from benchmarks.question_sets.section_pairs import SectionPairRule, cap_documents, section_pair_set
from chunkline.tokenizers import get_token_counter

count_tokens = get_token_counter("cl100k_base").count

MOTIVATION = "Lighthouses log the beam's rotation by hand today, and the logs drift. " * 12
OPENING = (
    "We propose a `Beacon` type that records each rotation with a monotonic clock and a keeper's "
    "signature. Every record is appended to a ledger that the harbour office reads each morning.\n\n"
    "```swift\nlet beacon = Beacon(tower: .north)\nbeacon.record(rotation: 1)\n```\n\n"
    "The ledger keeps a year of records and folds older ones into monthly totals, so that the office "
    "sees trends without reading every line."
)
INTRODUCTION = (
    "This proposal adds a way to record a lighthouse beam's rotations automatically, so that keepers "
    "stop copying them into paper logs."
)


def proposal(
    introduction: str = INTRODUCTION, opening: str = OPENING, solution_title: str = "Proposed solution"
) -> str:
    return (
        "# Beacon rotation records\n\n"
        "* Proposal: [SE-9001](9001-beacon.md)\n* Status: **Awaiting review**\n\n"
        f"## Introduction\n\n{introduction}\n\n"
        "Swift-evolution thread: [Pitch](https://forums.example/beacon)\n\n"
        f"## Motivation\n\n{MOTIVATION}\n\n"
        f"## {solution_title}\n\n{opening}\n\n"
        "## Detailed design\n\nThe ledger is a ring buffer of fixed capacity.\n"
    )


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return folder


def build(set_name: str, folder: Path):
    return SETS[set_name](folder, count_tokens)


# ------------------------------------------------------------------------------------ the shared rule


def test_swift_question_is_the_introduction_cut_from_the_text_and_the_reference_the_solution_opening(tmp_path):
    built = build("swift-proposals", write(tmp_path, {"9001-beacon.md": proposal()}))
    assert built.rule_counts == {"documents": 1, "qualifying": 1, "kept": 1}
    (question,) = built.questions
    assert question.question == INTRODUCTION  # the forum-thread line is not part of it
    ((doc_id, text),) = built.documents
    (reference,) = question.references
    assert reference.doc_id == doc_id == "9001-beacon.md"
    assert text[reference.start_char : reference.end_char] == OPENING
    assert INTRODUCTION not in text
    assert "## Introduction\n\n\n\nSwift-evolution thread: [Pitch]" in text  # heading and link line stay
    assert text == proposal().replace(INTRODUCTION, "")
    assert not built.held_out


def test_a_proposal_without_a_proposed_solution_answers_from_its_design_section(tmp_path):
    text = proposal(solution_title="Proposed design").replace("## Detailed design", "## Future directions")
    built = build("swift-proposals", write(tmp_path, {"9001-beacon.md": text}))
    (question,) = built.questions
    ((_, rewritten),) = built.documents
    (reference,) = question.references
    assert rewritten[reference.start_char : reference.end_char] == OPENING


def test_a_document_without_a_question_is_searched_as_written_and_counted_by_reason(tmp_path):
    files = {
        "0001-no-introduction.md": proposal().replace("## Introduction", "## Overview"),
        "0002-no-solution.md": proposal(solution_title="Alternatives considered").replace(
            "## Detailed design", "## Source compatibility"
        ),
        "0003-short-solution.md": proposal(opening="We add a `Beacon` type."),
        "0004-tiny-introduction.md": proposal(introduction="Beacons."),
        "0005-good.md": proposal(introduction=f"{INTRODUCTION} Records are signed by the keeper."),
    }
    built = build("swift-proposals", write(tmp_path, files))
    assert built.rule_counts == {
        "documents": 5,
        "qualifying": 1,
        "kept": 1,
        "answer opening under 300 characters": 1,
        "no answer section": 1,
        "no question section": 1,
        "question section empty or under 30 characters": 1,
    }
    assert [question.references[0].doc_id for question in built.questions] == ["0005-good.md"]
    texts = dict(built.documents)
    for name, text in files.items():
        if name != "0005-good.md":
            assert texts[name] == text


def test_a_question_whose_words_stay_in_another_document_gives_none(tmp_path):
    rewrapped = INTRODUCTION.replace(" so", "\n so")  # found whatever the line breaks
    files = {"9001-beacon.md": proposal(), "notes.md": "# Notes\n\n" + rewrapped + "\n"}
    built = build("swift-proposals", write(tmp_path, files))
    assert built.questions == []
    assert built.rule_counts["question text still in the corpus"] == 1
    assert dict(built.documents)["9001-beacon.md"] == files["9001-beacon.md"]


def test_the_question_never_holds_its_reference(tmp_path):
    opening = OPENING
    introduction = f"{opening}\n\nThat is all."
    built = build("swift-proposals", write(tmp_path, {"9001-beacon.md": proposal(introduction, opening)}))
    assert built.questions == []
    assert built.rule_counts["question and reference hold one another"] == 1


KEP = """<!--
**Note:** When your KEP is complete, all of these comment blocks should be removed.
-->
# KEP-7001: Quota for tide gauges

<!-- toc -->
- [Summary](#summary)
- [Proposal](#proposal)
<!-- /toc -->

## Summary

<!--
This section is incredibly important for producing high-quality, user-focused documentation.
-->

Tide gauges report water levels to the harbour API without any limit. This KEP adds a per-namespace
quota on gauge readings, enforced by the API server.

## Motivation

{motivation}

### Goals

- Limit readings per namespace.

## Proposal

<!--
This is where we get down to the specifics of what the proposal actually is.
-->

### User Stories

#### Story 1

{opening}

## Design Details

A `GaugeQuota` object holds the limit.
"""


def test_kep_template_comments_are_neither_question_nor_reference(tmp_path):
    text = KEP.format(motivation=MOTIVATION, opening=OPENING)
    built = build("keps", write(tmp_path, {"sig-harbour/7001-gauge-quota/README.md": text}))
    (question,) = built.questions
    assert question.question == (
        "Tide gauges report water levels to the harbour API without any limit. This KEP adds a per-namespace\n"
        "quota on gauge readings, enforced by the API server."
    )
    ((_, rewritten),) = built.documents
    (reference,) = question.references
    assert rewritten[reference.start_char : reference.end_char] == OPENING  # the sub-headings before it skipped
    assert "This section is incredibly important" in rewritten  # the template's comment stays
    assert "Tide gauges report" not in rewritten


def test_front_matter_is_not_read_as_headings():
    # YAML lines followed by "---" are a setext heading to a CommonMark parser; the rule parses after them.
    front = "---\ntitle: Summary\n---\n"
    text = front + proposal()
    rule = SectionPairRule(question_titles=("Introduction",), answer_titles=("Proposed solution",))
    built = section_pair_set([("a.md", text, len(front))], {}, rule)
    (question,) = built.questions
    assert question.question.startswith(INTRODUCTION)
    assert dict(built.documents)["a.md"].startswith(front)


def test_questions_are_capped_by_smallest_sha256_of_doc_id_and_listed_in_doc_id_order():
    rule = SectionPairRule(question_titles=("Introduction",), answer_titles=("Proposed solution",), max_questions=3)
    documents = [
        (f"{number:04d}.md", proposal(introduction=f"{INTRODUCTION} Variant {number}."), 0) for number in range(8)
    ]
    built = section_pair_set(documents, {}, rule)
    expected = sorted(sorted((doc_id for doc_id, _, _ in documents), key=sha)[:3])
    assert [question.references[0].doc_id for question in built.questions] == expected
    assert built.rule_counts == {"documents": 8, "qualifying": 8, "kept": 3}
    texts = dict(built.documents)
    for doc_id, text, _ in documents:  # a document beyond the question cap is searched as written
        assert (texts[doc_id] == text) is (doc_id not in expected)
    assert section_pair_set(documents, {}, rule) == built


def sha(doc_id: str) -> str:
    return hashlib.sha256(doc_id.encode("utf-8")).hexdigest()


def test_the_corpus_cap_keeps_documents_by_smallest_sha256_while_they_fit():
    documents = [(f"{letter}.md", letter * 100, 0) for letter in "abcdef"]
    assert cap_documents(documents, 600) == (documents, 0)
    kept, over = cap_documents(documents, 250)
    assert over == 4
    assert [doc_id for doc_id, _, _ in kept] == sorted(sorted((d for d, _, _ in documents), key=sha)[:2])


# ----------------------------------------------------------------------------------- powershell examples

CMDLET = """---
external help file: Harbour.dll-Help.xml
Module Name: Harbour.Tides
title: Get-TideLevel
---

# Get-TideLevel

## SYNOPSIS
Gets the water level that a tide gauge reported.

## EXAMPLES

### Example 1: Get the latest water level of every gauge in a harbour

```powershell
Get-TideLevel -Harbour 'North' | Sort-Object -Property Gauge
```

This command gets the latest reading of each gauge in the North harbour and sorts the readings by gauge
name, so that the gauges are listed in the order the harbour office keeps them.

### Example 2: Basic use

```powershell
Get-TideLevel
```

The command gets every reading of the default gauge, from the first to the last, one object per reading.

### Example 3 - Get the readings of a gauge between two dates

```powershell
Get-TideLevel -Gauge 'Pier 4' -From (Get-Date).AddDays(-7)
```

Short.

## PARAMETERS

### -Gauge

The gauge's name.
"""


def test_example_titles_are_the_questions_and_every_title_is_removed_from_the_corpus(tmp_path):
    built = build("powershell-examples", write(tmp_path, {"Harbour.Tides/Get-TideLevel.md": CMDLET}))
    assert built.held_out
    assert built.rule_counts == {
        "documents": 1,
        "documents with examples": 1,
        "examples": 3,
        "qualifying": 1,
        "kept": 1,
        "example body under 150 characters": 1,
        "title not 25 to 300 characters": 1,
    }
    ((doc_id, text),) = built.documents
    assert "### Example 1\n\n```powershell" in text
    assert "### Example 2\n" in text and "### Example 3\n" in text
    assert "Basic use" not in text and "between two dates" not in text
    (question,) = built.questions
    assert question.question == "Get the latest water level of every gauge in a harbour (PowerShell)"
    (reference,) = question.references
    assert reference.doc_id == doc_id
    body = CMDLET[
        CMDLET.index("```powershell\nGet-TideLevel -Harbour") : CMDLET.index("keeps them.") + len("keeps them.")
    ]
    assert text[reference.start_char : reference.end_char] == body
    assert text == (
        CMDLET.replace(": Get the latest water level of every gauge in a harbour", "")
        .replace(": Basic use", "")
        .replace(" - Get the readings of a gauge between two dates", "")
    )


def test_an_example_title_used_twice_or_still_in_the_text_gives_no_question(tmp_path):
    twin = CMDLET.replace("Get-TideLevel", "Get-TideLog")
    quoting = CMDLET.replace("Gets the water level", "Get the latest water level of every gauge in a harbour. Gets")
    built = build("powershell-examples", write(tmp_path, {"a/Get-TideLevel.md": CMDLET, "a/Get-TideLog.md": twin}))
    assert built.questions == []
    assert built.rule_counts["title of more than one example"] == 2
    built = build("powershell-examples", write(tmp_path / "quoting", {"Get-TideLevel.md": quoting}))
    assert built.questions == []
    assert built.rule_counts["title text still in the corpus"] == 1


def test_examples_are_capped_by_sha256_of_doc_id_and_number():
    pages = [
        (
            f"Get-Tide{number}.md",
            CMDLET.replace("every gauge in a harbour", f"every gauge in harbour number {number}"),
            CMDLET.index("---\n\n") + 4,
        )
        for number in range(6)
    ]
    built = powershell_examples.build_from_documents(pages, {}, max_questions=2)
    keys = sorted((f"{doc_id}#1" for doc_id, _, _ in pages), key=sha)[:2]
    assert [f"{question.references[0].doc_id}#1" for question in built.questions] == sorted(keys)
    assert powershell_examples.build_from_documents(pages, {}, max_questions=2) == built


# ---------------------------------------------------------------------------------------- registration


def test_every_set_is_registered_with_a_commit_and_one_is_held_out(tmp_path):
    assert {"swift-proposals", "keps", "powershell-examples"} <= set(SETS)
    for module in (swift_proposals, keps, powershell_examples):
        assert len(module.COMMIT) == 40 and module.COMMIT in module.__doc__
        assert SETS[module.SET_NAME] is module.build


@pytest.mark.parametrize("set_name", ["swift-proposals", "keps", "powershell-examples"])
def test_references_index_the_documents_returned(tmp_path, set_name):
    files = {
        "9001-beacon.md": proposal(),
        "sig-harbour/7001/README.md": KEP.format(motivation=MOTIVATION, opening=OPENING).replace(
            "## Proposal", "## Proposed solution\n\n" + OPENING + "\n\n## Proposal"
        ),
        "Get-TideLevel.md": CMDLET,
    }
    built = build(set_name, write(tmp_path, files))
    texts = dict(built.documents)
    assert sorted(texts) == sorted(files)
    assert built.questions
    for question in built.questions:
        for reference in question.references:
            span = texts[reference.doc_id][reference.start_char : reference.end_char]
            assert span.strip() == span and span
            assert question.question not in texts[reference.doc_id]
