"""The ``sections`` strategy: headings are the break points, small sections packed whole, big ones split."""

from __future__ import annotations

import time

import pytest
from conftest import FIXTURES, assert_invariants, assert_protected_blocks_whole, exact_token_count
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, chunk_markdown, parse_markdown
from chunkline.strategies.regex_split import RegexTimeoutError

SMALL_SECTIONS = """# Guide

A short introduction.

## Install

Run the installer.

## Configure

Edit the file.

```sh
# not a heading: a shell comment in a fence
echo done
```

## Run

Start it.

### Flags

Use --fast.

## Stop

Press Ctrl+C.
"""


def config_for(max_tokens: int, min_tokens: int = 0, **params) -> ChunkConfig:
    """``sections`` with these parameters, packing sections by itself (``min_tokens: 0``, no fragment
    merging after it) unless ``min_tokens`` is given."""
    return ChunkConfig.from_dict(
        # The strategy's own packing at the whole budget: no embed_text context takes a share of it.
        {
            "strategy": "sections",
            "max_tokens": max_tokens,
            "overlap_tokens": 0,
            "embed_context": "none",
            "min_tokens": min_tokens,
            "sections": params,
        }
    )


def section_starts(text: str) -> list[int]:
    return [section.start_char for section in parse_markdown(text).sections]


def test_small_sections_are_packed_together_and_kept_whole(counter):
    config = config_for(30)

    chunks = chunk_markdown(SMALL_SECTIONS, config)

    starts = section_starts(SMALL_SECTIONS)
    assert 1 < len(chunks) < len(starts)
    for chunk in chunks:
        assert chunk.start_char in starts and (chunk.end_char in starts or chunk.end_char == len(SMALL_SECTIONS))
        assert not chunk.is_sub_split
    # Each chunk is as long as it can be: the next section would not fit.
    for chunk, following in zip(chunks, chunks[1:]):
        assert exact_token_count(counter, SMALL_SECTIONS[chunk.start_char : following.end_char]) > 30
    assert_invariants(SMALL_SECTIONS, chunks, config)


def test_a_chunk_takes_the_heading_path_of_the_section_it_starts_in():
    chunks = chunk_markdown(SMALL_SECTIONS, config_for(14))

    paths = {chunk.text.split("\n", 1)[0]: chunk.heading_path for chunk in chunks}
    assert paths["## Run"] == ("Guide", "Run")
    assert all(chunk.heading_path for chunk in chunks)


def test_everything_fits_in_one_chunk_when_the_budget_allows():
    chunks = chunk_markdown(SMALL_SECTIONS, config_for(4096))

    assert [(chunk.start_char, chunk.end_char) for chunk in chunks] == [(0, len(SMALL_SECTIONS))]


def test_hash_lines_in_fences_do_not_start_sections():
    config = config_for(8)

    chunks = chunk_markdown(SMALL_SECTIONS, config)

    comment = SMALL_SECTIONS.index("# not a heading")
    assert all(chunk.start_char != comment for chunk in chunks if not chunk.is_sub_split)
    assert all(chunk.heading_path[-1:] != ("not a heading: a shell comment in a fence",) for chunk in chunks)
    assert_invariants(SMALL_SECTIONS, chunks, config)


def test_hash_fixture_headings_in_code_and_html_are_ignored(read_fixture):
    text = read_fixture("hash_lines_in_code_and_html.md")
    config = config_for(4096)

    chunks = chunk_markdown(text, config)

    assert len(chunks) == 1
    assert_invariants(text, chunks, config)


def test_a_section_over_the_budget_is_split_at_paragraph_boundaries(counter):
    paragraphs = [f"Paragraph {number} explains one step of the rebuild in a few plain words." for number in range(10)]
    text = "# Small\n\nFits.\n\n# Big\n\n" + "\n\n".join(paragraphs) + "\n\n# Tail\n\nEnd.\n"
    config = config_for(60)

    chunks = chunk_markdown(text, config)

    big_start, tail_start = text.index("# Big"), text.index("# Tail")
    pieces = [chunk for chunk in chunks if big_start <= chunk.start_char < tail_start]
    assert len(pieces) > 1 and all(chunk.is_sub_split for chunk in pieces)
    for chunk in pieces[1:]:
        assert chunk.text.startswith("Paragraph ")  # cut between paragraphs
    assert all(chunk.heading_path == ("Big",) for chunk in pieces)
    assert_invariants(text, chunks, config)
    assert_protected_blocks_whole(text, chunks, 60, counter)


def test_overlap_repeats_whole_sections():
    config = config_for(40, overlap=1)

    chunks = chunk_markdown(SMALL_SECTIONS, config)

    starts = section_starts(SMALL_SECTIONS)
    overlapping = 0
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk.start_char in starts and chunk.start_char <= previous.end_char < chunk.end_char
        overlapping += chunk.start_char < previous.end_char
    assert overlapping >= 2
    assert_invariants(SMALL_SECTIONS, chunks, config)


def test_no_overlap_by_default():
    config = ChunkConfig(strategy="sections", max_tokens=30, overlap_tokens=0)

    chunks = chunk_markdown(SMALL_SECTIONS, config)

    assert config.params.overlap == 0 and config.params.heading_pattern is None
    assert all(previous.end_char == chunk.start_char for previous, chunk in zip(chunks, chunks[1:]))


def test_setext_headings_and_a_preamble_are_sections():
    text = "Some preamble.\n\nTitle\n=====\n\nBody one.\n\nSub\n---\n\nBody two.\n"
    config = config_for(6)

    chunks = chunk_markdown(text, config)

    assert chunks[0].heading_path == ()
    assert {chunk.start_char for chunk in chunks} >= {0, text.index("Title"), text.index("Sub")}
    assert_invariants(text, chunks, config)


# ---------------------------------------------------------------------------------- custom headings

CUSTOM = """Contract overview, before any section.

SECTION 1: Definitions
Words mean what they say.

SECTION 2: Payment
Pay on time.
```
SECTION 9: inside a fence is not a section
```

    SECTION 8: indented code is not a section either

SECTION 3: Termination
Either party may end it.
"""


def test_custom_heading_pattern_sets_the_break_points_and_paths():
    config = config_for(40, heading_pattern=r"^(SECTION \d+): (.+)$")

    chunks = chunk_markdown(CUSTOM, config)

    # The preamble and section 1 fit together; section 2 (with its fence) and section 3 alone.
    assert [chunk.start_char for chunk in chunks] == [0, CUSTOM.index("SECTION 2"), CUSTOM.index("SECTION 3")]
    assert [chunk.heading_path for chunk in chunks] == [(), ("Payment",), ("Termination",)]
    assert not any(chunk.is_sub_split for chunk in chunks)
    assert_invariants(CUSTOM, chunks, config)


def test_custom_sections_over_the_budget_are_split_and_keep_their_path():
    config = config_for(12, heading_pattern=r"^(SECTION \d+): (.+)$")

    chunks = chunk_markdown(CUSTOM, config)

    paths = {chunk.start_char: chunk.heading_path for chunk in chunks}
    assert paths[CUSTOM.index("SECTION 1")] == ("Definitions",)
    assert all(
        chunk.heading_path == ("Payment",)
        for chunk in chunks
        if CUSTOM.index("SECTION 2") <= chunk.start_char < CUSTOM.index("SECTION 3")
    )
    assert CUSTOM.index("SECTION 9") not in paths and CUSTOM.index("    SECTION 8") not in paths
    assert_invariants(CUSTOM, chunks, config)


def test_custom_pattern_packs_small_sections_like_markdown_headings():
    config = config_for(4096, heading_pattern=r"^(SECTION \d+): (.+)$")

    chunks = chunk_markdown(CUSTOM, config)

    assert [(chunk.start_char, chunk.end_char) for chunk in chunks] == [(0, len(CUSTOM))]


def test_custom_levels_from_repeated_symbols_and_dotted_numbers():
    text = "1 Intro\ntext\n1.1 Scope\ntext\n1.2 Terms\ntext\n2 Body\ntext\n"
    chunks = chunk_markdown(text, config_for(5, heading_pattern=r"^(\d+(?:\.\d+)*) (.+)$"))

    paths = {chunk.start_char: chunk.heading_path for chunk in chunks}
    assert paths[0] == ("Intro",)
    assert paths[text.index("1.1 Scope")] == ("Intro", "Scope")
    assert paths[text.index("1.2 Terms")] == ("Intro", "Terms")
    assert paths[text.index("2 Body")] == ("Body",)

    text = "== Top\na\n=== Inner\nb\n== Next\nc\n"
    chunks = chunk_markdown(text, config_for(4, heading_pattern=r"^(=+) (.+)$"))
    paths = {chunk.start_char: chunk.heading_path for chunk in chunks}
    assert [paths[text.index(line)] for line in ("== Top", "=== Inner", "== Next")] == [
        ("Top",),
        ("Top", "Inner"),
        ("Next",),
    ]


def test_a_custom_heading_inside_a_fitting_list_item_does_not_split_it(counter):
    text = "- item\n- item two\nSECTION 4: Custom\n\nSECTION 5: Next\nBody.\n"
    config = config_for(9, heading_pattern=r"^(SECTION \d+): (.+)$")

    chunks = chunk_markdown(text, config)

    assert_protected_blocks_whole(text, chunks, 9, counter)
    assert any(chunk.start_char == text.index("SECTION 5") for chunk in chunks)
    assert_invariants(text, chunks, config)


def test_custom_pattern_works_with_crlf_and_cr_line_endings():
    for ending in ("\r\n", "\r"):
        text = CUSTOM.replace("\n", ending)
        config = config_for(12, heading_pattern=r"^(SECTION \d+): (.+)$")

        chunks = chunk_markdown(text, config)

        paths = {chunk.start_char: chunk.heading_path for chunk in chunks}
        assert [paths[text.index(f"SECTION {number}")] for number in (1, 2, 3)] == [
            ("Definitions",),
            ("Payment",),
            ("Termination",),
        ]
        assert_invariants(text, chunks, config)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"^(SECTION \d+: (.+)$", "not a valid regular expression"),
        (r"^SECTION \d+: (.+)$", "exactly two capture groups"),
        (r"^(S)(E)(C)$", "exactly two capture groups"),
    ],
)
def test_a_bad_heading_pattern_is_refused_with_the_pattern_named(pattern, message):
    with pytest.raises(ConfigError, match=message) as raised:
        config_for(100, heading_pattern=pattern)

    assert pattern in str(raised.value) or repr(pattern) in str(raised.value)


def test_a_catastrophic_heading_pattern_times_out():
    text = "a" * 5000 + "b\n"
    config = config_for(100, heading_pattern=r"^((a|aa)+)$", timeout_seconds=0.2)
    started = time.perf_counter()

    with pytest.raises(RegexTimeoutError, match="0.2 s") as raised:
        chunk_markdown(text, config)

    assert "heading_pattern '^((a|aa)+)$'" in str(raised.value)
    assert time.perf_counter() - started < 3


@pytest.mark.parametrize("bad", [0, -1, True, "fast"])
def test_timeout_must_be_positive(bad):
    with pytest.raises(ConfigError, match="timeout_seconds"):
        config_for(100, timeout_seconds=bad)


# ------------------------------------------------------------------------------------------ invariants


@pytest.mark.parametrize("max_tokens", [4, 16, 64, 512])
@pytest.mark.parametrize("overlap", [0, 1])
def test_fixture_documents_keep_every_invariant(read_fixture, counter, max_tokens, overlap):
    config = config_for(max_tokens, overlap=overlap)
    for path in sorted(FIXTURES.glob("*.md")):
        text = read_fixture(path.name)
        chunks = chunk_markdown(text, config)

        assert_invariants(text, chunks, config)
        assert_protected_blocks_whole(text, chunks, max_tokens, counter)


_BLOCKS = st.sampled_from(
    [
        "# Title\n",
        "## Sub\n",
        "### Deep\n",
        "Setext\n===\n",
        "Some prose. More prose.\n",
        "\n",
        "```\n# fenced\n```\n",
        "- item\n- item two\n",
        "| a | b |\n| - | - |\n| 1 | 2 |\n",
        "> # quoted\n",
        "    # indented\n",
        "<div>\n# html\n</div>\n",
        "SECTION 4: Custom\n",
        "漢字の文。\n",
        "\r\n",
    ]
)


@settings(max_examples=300)
@given(
    blocks=st.lists(_BLOCKS, max_size=25),
    max_tokens=st.integers(4, 80),
    overlap=st.integers(0, 2),
    custom=st.booleans(),
)
@pytest.mark.slow
def test_generated_documents_keep_every_invariant(blocks, max_tokens, overlap, custom, counter):
    text = "".join(blocks)
    params = {"overlap": overlap}
    if custom:
        params["heading_pattern"] = r"^(SECTION \d+): (.+)$"
    config = config_for(max_tokens, **params)

    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    assert_protected_blocks_whole(text, chunks, max_tokens, counter)
