"""Small-to-big retrieval: rank chunks, hand the reader the sections around them. No Beam here.

``chunkline evaluate --expand section:N`` ranks the chunks as plain retrieval does, then returns for each
ranked chunk the largest section around it of at most ``N`` tokens, within the same retrieved-token budget,
counted the same way (cl100k_base on the text returned, :func:`~chunkline.evaluation.retrieval.budget_token_counter`).

The rule, exactly. A chunk's *units* are the sections that hold its whole character range and have at most
``N`` budget tokens (its own section or an ancestor: its ``section_id`` and ``parent_section_ids``),
outermost first, then the chunk itself (:func:`unit_chains`). The ranking is walked best first, with the
ranges returned so far (:func:`take_expanded_within_budget`); for a ranked chunk its units are tried in
that order:

1. *What the unit adds.* A unit that lies inside a range already returned, or that ranges already
   returned cover, adds nothing: the chunk is skipped (its smaller units add nothing either). Ranges
   returned before that lie inside the unit are *absorbed*: the unit replaces them, at the place of the
   first of them, and their tokens go back to the budget. A range returned before that overlaps one end
   of the unit (a neighbouring chunk's overlap, a chunk that runs past a section's end) trims the unit to
   the rest.
2. *What it costs*: the budget tokens of the unit's (trimmed) text, minus those of the ranges it absorbs.
   The first unit whose cost fits in what is left of the budget is returned.
3. When not even the chunk fits, the chunk's text is the one that crosses the budget: it is cut as
   :func:`~chunkline.evaluation.retrieval.take_within_budget` cuts (it counts only the tokens left, and
   keeps the same share of its characters, from its start), and the walk stops.

So the ranges returned never overlap (no character is handed out twice, where plain retrieval hands out
the overlap of consecutive chunks twice); each is a whole section, a whole chunk, either trimmed where a
range returned before overlaps its end, or the last one cut at the budget; and their tokens add up to the
budget at most (to exactly the budget unless the ranking runs out). ``N`` 0 expands nothing and keeps only
the deduplication: the control for what expansion itself adds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from chunkline.evaluation.retrieval import BudgetShare
from chunkline.record import Chunk, SectionRecord

__all__ = [
    "ExpandedShare",
    "RetrievalUnit",
    "parse_expand",
    "take_expanded_within_budget",
    "unit_chains",
]

_EXPAND = re.compile(r"section:(\d+)")


def parse_expand(value: str) -> int:
    """The ``N`` of an ``--expand`` value ``section:N`` (whole tokens, 0 or more); ``ValueError`` otherwise."""
    match = _EXPAND.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"--expand takes section:N, N a number of tokens (section:512), got {value!r}")
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class RetrievalUnit:
    """A range that can be returned for a ranked chunk: a section around it, or the chunk itself."""

    doc_id: str
    start_char: int
    end_char: int
    tokens: int
    """Budget tokens of the range's text."""
    section_id: str | None = None
    """The section's id; ``None`` for the chunk itself."""


@dataclass(frozen=True, slots=True)
class ExpandedShare:
    """One range returned by :func:`take_expanded_within_budget`."""

    chunk_index: int
    """The ranked chunk it was returned for."""
    doc_id: str
    start_char: int
    end_char: int
    tokens: int
    """Its tokens counted against the budget (for the range cut at the budget, the tokens that were left)."""
    section_id: str | None
    """The section it is (or the part of it that was not returned before); ``None`` for a chunk."""
    truncated: bool = False
    """Cut at the budget: the last range returned."""


def unit_chains(
    chunks: Sequence[Chunk],
    sections: Iterable[SectionRecord],
    chunk_tokens: Sequence[int],
    section_tokens: Callable[[SectionRecord], int],
) -> list[tuple[RetrievalUnit, ...]]:
    """For each chunk: the sections that hold its whole range, outermost first, then the chunk itself (as
    :class:`RetrievalUnit` with budget tokens: ``chunk_tokens[i]`` for chunk ``i``, ``section_tokens(s)``
    for a section). A section with the same range as the one enclosing it is left out (the root and a
    heading that starts the document and runs to its end are the same text)."""
    by_id = {section.section_id: section for section in sections}
    units_of_section: dict[str, RetrievalUnit] = {}
    chains: list[tuple[RetrievalUnit, ...]] = []
    for chunk, tokens in zip(chunks, chunk_tokens, strict=True):
        chain: list[RetrievalUnit] = []
        for section_id in (*chunk.parent_section_ids, chunk.section_id):
            section = by_id.get(section_id)
            if section is None or not section.start_char <= chunk.start_char <= chunk.end_char <= section.end_char:
                continue
            unit = units_of_section.get(section_id)
            if unit is None:
                unit = units_of_section[section_id] = RetrievalUnit(
                    section.doc_id, section.start_char, section.end_char, section_tokens(section), section_id
                )
            if chain and (chain[-1].start_char, chain[-1].end_char) == (unit.start_char, unit.end_char):
                continue
            chain.append(unit)
        chain.append(RetrievalUnit(chunk.doc_id, chunk.start_char, chunk.end_char, int(tokens)))
        chains.append(tuple(chain))
    return chains


def _addition(
    unit: RetrievalUnit, returned: Sequence[ExpandedShare], count_tokens: Callable[[str, int, int], int]
) -> tuple[int, int, int, list[int]] | None:
    """What ``unit`` adds to the ranges returned: its range trimmed by those that overlap one of its ends,
    the tokens of that range, and the positions of the returned ranges inside it; ``None`` when it adds
    nothing."""
    start, end = unit.start_char, unit.end_char
    inside: list[int] = []
    for position, item in enumerate(returned):
        if item.doc_id != unit.doc_id or item.start_char >= unit.end_char or item.end_char <= unit.start_char:
            continue  # no character in common (an empty unit inside a range overlaps it by this test)
        if item.start_char <= unit.start_char and unit.end_char <= item.end_char:
            return None  # inside a range already returned
        if unit.start_char <= item.start_char and item.end_char <= unit.end_char:
            inside.append(position)
        elif item.start_char < unit.start_char:
            start = max(start, item.end_char)
        else:
            end = min(end, item.start_char)
    if start >= end:
        return None
    tokens = unit.tokens if (start, end) == (unit.start_char, unit.end_char) else count_tokens(unit.doc_id, start, end)
    return start, end, tokens, inside


def take_expanded_within_budget(
    ranked: Iterable[int],
    chains: Sequence[Sequence[RetrievalUnit]],
    max_section_tokens: int,
    budget_tokens: int,
    count_tokens: Callable[[str, int, int], int],
) -> list[ExpandedShare]:
    """The ranges returned for ``ranked`` (chunk indices, best first) within ``budget_tokens``, by the rule
    of this module's docstring, in the order of the ranked chunks that brought them.

    ``chains[i]`` is chunk ``i``'s sections, outermost first, then the chunk itself (:func:`unit_chains`);
    the sections of more than ``max_section_tokens`` are passed over. ``count_tokens(doc_id, start, end)``
    counts the budget tokens of a part of a document (for units trimmed by ranges returned before)."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    if max_section_tokens < 0:
        raise ValueError(f"max_section_tokens must be >= 0, got {max_section_tokens}")
    returned: list[ExpandedShare] = []
    left = budget_tokens
    for chunk_index in ranked:
        if left <= 0:
            break
        chunk_index = int(chunk_index)
        chain = chains[chunk_index]
        units = [unit for unit in chain[:-1] if unit.tokens <= max_section_tokens]
        units.append(chain[-1])
        addition = None
        for unit in units:
            addition = _addition(unit, returned, count_tokens)
            if addition is None:
                break  # the chunk adds nothing, and neither do its smaller units
            start, end, tokens, inside = addition
            cost = tokens - sum(returned[position].tokens for position in inside)
            if cost <= left:
                share = ExpandedShare(chunk_index, unit.doc_id, start, end, tokens, unit.section_id)
                at = inside[0] if inside else len(returned)
                for position in reversed(inside):
                    del returned[position]
                returned.insert(at, share)
                left -= cost
                addition = None
                break
        if addition is None:
            continue
        # Not even the chunk fits: it crosses the budget and is cut to what is left.
        start, end, tokens, inside = addition
        if inside:  # chunks that contain one another: stop before the text already returned
            end = min(returned[position].start_char for position in inside)
            if end <= start:
                continue
            tokens = count_tokens(chain[-1].doc_id, start, end)
        share = BudgetShare(chunk_index, min(tokens, left), tokens)
        cut_start, cut_end = share.char_range(start, end)
        returned.append(
            ExpandedShare(chunk_index, chain[-1].doc_id, cut_start, cut_end, share.tokens, None, share.truncated)
        )
        left -= share.tokens
    return returned
