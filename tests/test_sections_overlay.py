"""The sections overlay: every chunk's section_index and derived heading path, for any strategy, from
markdown headings or from a custom heading pattern (LocalVectorDB's SectionDetector)."""

from __future__ import annotations

import pytest

from chunkline import ChunkConfig, ConfigError, chunk_markdown, parse_markdown, sections_by_pattern
from chunkline.patterns import RegexTimeoutError

CONTRACT = """Preamble of the agreement.

SECTION 1: Scope
This agreement covers the harbour sensors.

```text
SECTION 9: an example line inside code, not a heading
```

SECTION 1.1: Exclusions
Tide gauges are excluded.

SECTION 2: Terms
Twelve months, renewed yearly.
"""
PATTERN = r"^SECTION (\d+(?:\.\d+)*): (.+)$"


def test_custom_pattern_sections_have_levels_parents_and_a_preamble():
    sections = sections_by_pattern(parse_markdown(CONTRACT), PATTERN)
    assert [(s.heading, s.level, s.parent) for s in sections] == [
        (None, 0, None),
        ("Scope", 1, None),
        ("Exclusions", 2, 1),
        ("Terms", 1, None),
    ]
    assert CONTRACT[sections[2].start_char :].startswith("SECTION 1.1: Exclusions")
    assert sections[-1].end_char == len(CONTRACT)


@pytest.mark.parametrize("strategy", ["sentences", "tokens", "lines", "headings"])
def test_every_strategy_reports_the_custom_section_each_chunk_starts_in(strategy):
    config = ChunkConfig(strategy=strategy, max_tokens=64, overlap_tokens=0, section_pattern=PATTERN)
    chunks = chunk_markdown(CONTRACT, config)
    sections = sections_by_pattern(parse_markdown(CONTRACT), PATTERN)
    for chunk in chunks:
        section = sections[chunk.section_index]
        assert section.start_char <= chunk.start_char < max(section.end_char, section.start_char + 1)


def test_derived_heading_paths_follow_the_custom_sections():
    # Chunks of a few lines at a tiny budget: no embed_text context takes a share of it.
    config = ChunkConfig(
        strategy="lines", max_tokens=8, overlap_tokens=0, section_pattern=PATTERN, embed_context="none"
    )
    config = ChunkConfig.from_dict({**config.to_dict(), "lines": {"overlap": 0}})
    by_first_line = {chunk.text.splitlines()[0]: chunk.heading_path for chunk in chunk_markdown(CONTRACT, config)}
    assert by_first_line["Preamble of the agreement."] == ()
    assert by_first_line["Tide gauges are excluded."] == ("Scope", "Exclusions")
    assert by_first_line["Twelve months, renewed yearly."] == ("Terms",)


def test_without_a_pattern_sections_are_the_markdown_headings():
    text = "# Guide\n\nIntro to the guide.\n\n## Setup\n\nSteps one to three.\n"
    config = ChunkConfig.from_dict(
        {
            "strategy": "paragraphs",
            "max_tokens": 8,
            "overlap_tokens": 0,
            "paragraphs": {"overlap": 0},
            "embed_context": "none",
        }
    )
    chunks = chunk_markdown(text, config)
    assert [(chunk.text.splitlines()[0], chunk.heading_path) for chunk in chunks] == [
        ("# Guide", ("Guide",)),
        ("## Setup", ("Guide", "Setup")),
    ]


def test_a_pattern_without_two_groups_is_refused_when_the_config_is_built():
    with pytest.raises(ConfigError, match="two groups"):
        ChunkConfig(section_pattern=r"^SECTION \d+")
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        ChunkConfig(section_pattern=r"^(SECTION")


def test_a_catastrophic_pattern_fails_the_document_within_its_time_limit():
    document = parse_markdown("a" * 3000 + "b\n")
    with pytest.raises(RegexTimeoutError, match="time limit"):
        sections_by_pattern(document, r"(a+)+(x)$", timeout_seconds=0.2)
