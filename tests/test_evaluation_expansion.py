"""Small-to-big retrieval (``--expand section:N``): which range each ranked chunk brings, the deduplication,
and the budget, on a real document's sections and on generated trees of sections and chunks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, chunk_markdown_with_sections
from chunkline.evaluation.expansion import (
    ExpandedShare,
    RetrievalUnit,
    parse_expand,
    take_expanded_within_budget,
    unit_chains,
)
from chunkline.evaluation.retrieval import budget_token_counter, take_within_budget

TIDE_GAUGES = """# Tide gauges

A tide gauge records the height of the sea at one place, every few minutes, for years.

## Calibration

Before a gauge goes into service its pressure sensor is zeroed against the chart datum at slack water,
with the harbour master watching the staff gauge beside it. The reading is written in the log.

### Zeroing the sensor

Open the valve, wait for the reading to settle, then press and hold the zero button for five seconds.
The display blinks twice when the new zero is stored. Close the valve before the tide turns.

### Checking the zero

A week later, read the staff gauge and the sensor at the same minute; they must agree within a centimetre.

## Maintenance

Clean the intake every month, and replace the desiccant when it turns pink.
"""


@pytest.fixture(scope="module")
def tide_gauges():
    """The document's chunks at 48 tokens (each subsection in chunks of its own), its sections, and their
    units with cl100k_base counts."""
    config = ChunkConfig(max_tokens=48, overlap_tokens=0, min_tokens=0)
    chunked = chunk_markdown_with_sections(TIDE_GAUGES, config, doc_id="tides.md")
    count = budget_token_counter()
    chunk_tokens = [count(chunk.text) for chunk in chunked.chunks]
    chains = unit_chains(chunked.chunks, chunked.sections, chunk_tokens, lambda section: count(section.text))
    sections = {section.heading: section for section in chunked.sections}

    def count_range(doc_id: str, start: int, end: int) -> int:
        return count(TIDE_GAUGES[start:end])

    return chunked.chunks, sections, chains, count_range


def _chunk_in(chunks, text: str) -> int:
    return next(index for index, chunk in enumerate(chunks) if text in chunk.text)


def test_a_ranked_chunk_brings_the_largest_section_around_it_within_n_tokens(tide_gauges):
    chunks, sections, chains, count_range = tide_gauges
    zero_button = _chunk_in(chunks, "zero button")
    calibration, zeroing = sections["Calibration"], sections["Zeroing the sensor"]
    # Calibration holds both subsections; the whole document is larger still.
    assert zeroing.token_count < calibration.token_count < sections[None].token_count
    for max_tokens, expected in [
        (calibration.token_count, calibration),
        (calibration.token_count - 1, zeroing),
        (sections[None].token_count, sections[None]),
    ]:
        (share,) = take_expanded_within_budget([zero_button], chains, max_tokens, 1000, count_range)
        assert (share.start_char, share.end_char, share.section_id) == (
            expected.start_char,
            expected.end_char,
            expected.section_id,
        )
        assert share.tokens == expected.token_count and not share.truncated
    # No section that small: the chunk itself.
    (share,) = take_expanded_within_budget([zero_button], chains, zeroing.token_count - 1, 1000, count_range)
    chunk = chunks[zero_button]
    assert (share.start_char, share.end_char, share.section_id) == (chunk.start_char, chunk.end_char, None)


def test_a_chunk_inside_a_section_already_returned_is_skipped(tide_gauges):
    chunks, sections, chains, count_range = tide_gauges
    calibration = sections["Calibration"]
    ranked = [
        _chunk_in(chunks, "zero button"),
        _chunk_in(chunks, "within a centimetre"),
        _chunk_in(chunks, "desiccant"),
    ]
    taken = take_expanded_within_budget(ranked, chains, calibration.token_count, 1000, count_range)
    assert [share.section_id for share in taken] == [calibration.section_id, sections["Maintenance"].section_id]
    assert [share.chunk_index for share in taken] == [ranked[0], ranked[2]]


def test_a_section_that_no_longer_fits_the_budget_gives_way_to_a_smaller_one(tide_gauges):
    chunks, sections, chains, count_range = tide_gauges
    calibration, zeroing = sections["Calibration"], sections["Zeroing the sensor"]
    desiccant, zero_button = _chunk_in(chunks, "desiccant"), _chunk_in(chunks, "zero button")
    maintenance = sections["Maintenance"]
    # Maintenance first; what is left holds Zeroing the sensor but not all of Calibration.
    budget = maintenance.token_count + zeroing.token_count + 1
    assert maintenance.token_count + calibration.token_count > budget
    first, second = take_expanded_within_budget([desiccant, zero_button], chains, 10_000, budget, count_range)
    assert (first.section_id, second.section_id) == (maintenance.section_id, zeroing.section_id)
    assert first.tokens + second.tokens == budget - 1


def test_when_not_even_the_chunk_fits_it_is_cut_as_plain_retrieval_cuts_it(tide_gauges):
    chunks, sections, chains, count_range = tide_gauges
    zero_button = _chunk_in(chunks, "zero button")
    chunk = chunks[zero_button]
    tokens = chains[zero_button][-1].tokens
    (share,) = take_expanded_within_budget([zero_button], chains, 10_000, tokens - 5, count_range)
    (plain,) = take_within_budget([zero_button], [unit.tokens for chain in chains for unit in chain[-1:]], tokens - 5)
    assert share.truncated and share.section_id is None and share.tokens == tokens - 5
    assert (share.start_char, share.end_char) == plain.char_range(chunk.start_char, chunk.end_char)


def _unit(start: int, end: int, section_id: str | None = None, doc_id: str = "a.md") -> RetrievalUnit:
    return RetrievalUnit(doc_id, start, end, end - start, section_id)


def _by_chars(doc_id: str, start: int, end: int) -> int:
    return end - start


def test_overlapping_chunks_are_handed_out_once():
    """Chunks that overlap by 10 characters, no section small enough: the second comes without the overlap."""
    chains = [(_unit(0, 50),), (_unit(40, 90),)]
    first, second = take_expanded_within_budget([0, 1], chains, 0, 1000, _by_chars)
    assert [(first.start_char, first.end_char), (second.start_char, second.end_char)] == [(0, 50), (50, 90)]
    assert second.tokens == 40


def test_a_section_absorbs_the_returned_text_inside_it_and_takes_its_place():
    """Chunk 1 straddles the start of section s (25..100), so s is not among its units; it comes trimmed by
    chunk 0 to 30..60, inside s. Chunk 2, inside s, brings s: trimmed by chunk 0 to 30..100, it absorbs
    30..60 and costs 70 - 30 = 40 more tokens."""
    chains = [(_unit(0, 30),), (_unit(20, 60),), (_unit(25, 100, "s"), _unit(60, 100))]
    taken = take_expanded_within_budget([0, 1, 2], chains, 1000, 100, _by_chars)
    assert [(share.start_char, share.end_char, share.section_id) for share in taken] == [(0, 30, None), (30, 100, "s")]
    assert sum(share.tokens for share in taken) == 100


def test_with_no_section_small_enough_and_chunks_apart_it_is_plain_retrieval():
    chains = [
        (_unit(0, 40, "root"), _unit(0, 10)),
        (_unit(0, 40, "root"), _unit(10, 25)),
        (_unit(0, 40, "root"), _unit(25, 40)),
    ]
    for budget in range(0, 45):
        expanded = take_expanded_within_budget([2, 0, 1], chains, 39, budget, _by_chars)
        plain = take_within_budget([2, 0, 1], [10, 15, 15], budget)
        ranges = [chains[share.index][-1] for share in plain]
        assert [(share.start_char, share.end_char, share.tokens) for share in expanded] == [
            (*share.char_range(unit.start_char, unit.end_char), share.tokens) for share, unit in zip(plain, ranges)
        ]


def test_parse_expand():
    assert parse_expand("section:512") == 512 and parse_expand(" section:0 ") == 0
    for bad in ("section", "section:-1", "sections:5", "chunk:5", "section:1.5"):
        with pytest.raises(ValueError, match="section:N"):
            parse_expand(bad)
    with pytest.raises(ValueError):
        take_expanded_within_budget([], [], 10, -1, _by_chars)


# ------------------------------------------------------------------------------------ generated cases


@st.composite
def documents(draw, overlapping: bool = True):
    """A document's sections (a tree of heading subtrees under the root) and its chunks (starts and ends
    increasing, consecutive chunks overlapping or touching), as unit chains; and a ranking."""
    length = draw(st.integers(20, 400))
    heading_starts = sorted(draw(st.sets(st.integers(1, length - 1), max_size=8)))
    levels = [draw(st.integers(1, 3)) for _ in heading_starts]
    sections = [("s0", 0, length, 0)]  # (id, start, end, level)
    for number, (start, level) in enumerate(zip(heading_starts, levels), start=1):
        end = next((other for other, lv in zip(heading_starts, levels) if other > start and lv <= level), length)
        sections.append((f"s{number}", start, end, level))
    cuts = sorted(draw(st.sets(st.integers(1, length - 1), max_size=12)))
    bounds = [0, *cuts, length]
    chunks = []
    for start, end in zip(bounds, bounds[1:]):
        back = draw(st.integers(0, min(8, start - chunks[-1][0] - 1))) if chunks and overlapping else 0
        chunks.append((start - back, end))
    chains = []
    for start, end in chunks:
        enclosing = [s for s in sections if s[1] <= start and end <= s[2]]
        enclosing.sort(key=lambda s: (s[1] - s[2], s[0]))  # outermost first
        units = [RetrievalUnit("d", s[1], s[2], _tokens(s[1], s[2]), s[0]) for s in enclosing]
        chains.append((*units, RetrievalUnit("d", start, end, _tokens(start, end))))
    ranking = draw(st.permutations(range(len(chunks))))
    return sections, chunks, chains, ranking


def _tokens(start: int, end: int) -> int:
    """Not additive, as real token counts are not: a range of n characters counts (n + 2) // 3."""
    return (end - start + 2) // 3


def _count(doc_id: str, start: int, end: int) -> int:
    return _tokens(start, end)


def _covered(ranges, start: int, end: int) -> bool:
    position = start
    for range_start, range_end in sorted(ranges):
        if range_start <= position < range_end:
            position = range_end
    return position >= end


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(documents(), st.integers(0, 200), st.integers(0, 150))
def test_returned_ranges_are_units_never_overlap_and_keep_to_the_budget(document, max_section_tokens, budget):
    sections, chunks, chains, ranking = document
    taken: list[ExpandedShare] = take_expanded_within_budget(ranking, chains, max_section_tokens, budget, _count)
    ranges = [(share.start_char, share.end_char) for share in taken]
    # Never a character twice.
    ordered = sorted(ranges)
    assert all(first[1] <= second[0] for first, second in zip(ordered, ordered[1:]))
    # The budget: never over it; under it only when every ranked chunk's text has been returned.
    spent = sum(share.tokens for share in taken)
    assert spent <= budget
    if spent < budget:
        assert all(_covered(ranges, *chunks[index]) for index in ranking)
    # Only the last can be cut at the budget, and then the budget is spent.
    assert not any(share.truncated for share in taken[:-1])
    if taken and taken[-1].truncated:
        assert spent == budget
    section_ranges = {section_id: (start, end) for section_id, start, end, _ in sections}
    others = set(ranges)
    for share in taken:
        if share.section_id is not None:
            start, end = section_ranges[share.section_id]
            assert _tokens(start, end) <= max_section_tokens
            # The ranked chunk it was returned for lies inside the section.
            assert start <= chunks[share.chunk_index][0] and chunks[share.chunk_index][1] <= end
        else:
            start, end = chunks[share.chunk_index]
        assert start <= share.start_char <= share.end_char <= end
        if share.truncated:
            assert share.tokens <= _tokens(share.start_char, end)
            continue
        assert share.tokens == _tokens(share.start_char, share.end_char)
        # A whole section or chunk, or one trimmed where text returned for another ranked chunk covers it.
        rest = others - {(share.start_char, share.end_char)}
        assert _covered(rest, start, share.start_char) and _covered(rest, share.end_char, end)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(documents(overlapping=False), st.integers(0, 150))
def test_with_no_section_small_enough_and_chunks_apart_it_is_plain_retrieval_generated(document, budget):
    sections, chunks, chains, ranking = document
    expanded = take_expanded_within_budget(ranking, chains, 0, budget, _count)
    plain = take_within_budget(ranking, [chain[-1].tokens for chain in chains], budget)
    assert [(share.chunk_index, share.start_char, share.end_char, share.tokens) for share in expanded] == [
        (share.index, *share.char_range(*chunks[share.index]), share.tokens) for share in plain
    ]
