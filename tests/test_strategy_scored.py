"""The ``scored`` strategy: QMD's scored break points, distance-decayed cut choice, chars and exact tokens."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, assert_invariants, assert_protected_blocks_whole, cut_positions, is_word_boundary
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import MARKDOWN_LINES

import chunkline
import chunkline.context
from chunkline import ChunkConfig, ConfigError, chunk_markdown, get_token_counter, parse_markdown, reconstruct
from chunkline.strategies.scored import (
    BLANK_LINE_SCORE,
    FENCE_SCORE,
    HEADING_SCORES,
    LIST_ITEM_SCORE,
    NEWLINE_SCORE,
    THEMATIC_BREAK_SCORE,
    ScoredParams,
    best_cutoff,
    decayed_score,
    scan_break_points,
)

GUIDE = """\
---
title: Field guide
tags: [rust, markdown]
---

# Installing the toolchain

The toolchain ships as one installer per platform. Read the whole section before running anything, since
some steps depend on choices made earlier, and a half-configured toolchain is harder to repair than a
fresh one. Café owners and 🦀 fans alike will find the defaults sensible.

## Prerequisites

- A 64-bit operating system with at least 2 GB of free disk space
  and a working network connection for the first download.
- A shell: bash, zsh or PowerShell.
- Optionally, an editor with language-server support.

```bash
# this is a comment, not a heading
curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
rustup component add clippy rustfmt
```

Configuration
-------------

| key | default | meaning |
| --- | --- | --- |
| channel | stable | which release train to follow |
| profile | default | which components come with it |

***

### Proxies

Behind a proxy, set `HTTPS_PROXY` before running the installer. The installer honours the usual
variables; corporate proxies that rewrite certificates need the company's root certificate too.

~~~~text
## not a heading either
HTTPS_PROXY=http://proxy.example:3128
~~~~

> A quote with a line that looks like
> # a heading but is only quoted text.

1. First ordered step, which is short.
2. Second ordered step, which explains at length why the order of the steps matters and what goes wrong
   when the second step runs before the first one: the shell profile is not yet updated, so the new
   binaries are not on the path and the check in step three fails with a confusing message.
3. Third step.

## Troubleshooting

If `rustc --version` prints nothing, open a new terminal. 日本語のテキストも正しく扱われます。
Still nothing? Check the path, then the profile, then the installer's log.
"""


def scored_config(**params) -> ChunkConfig:
    """``scored`` with these parameters, cutting by itself (``min_tokens: 0``, no fragment merging after
    it) unless ``min_tokens`` is given."""
    common = {key: params.pop(key) for key in ("max_tokens", "overlap_tokens", "min_tokens") if key in params}
    common.setdefault("min_tokens", 0)
    return ChunkConfig(strategy="scored", params=ScoredParams(**params), **common)


def heading_starts(text: str) -> list[int]:
    return [heading.start_char for heading in parse_markdown(text).headings]


def fence_ranges(text: str) -> list[tuple[int, int]]:
    return [(block.start_char, block.end_char) for block in parse_markdown(text).blocks if block.kind == "fence"]


# --------------------------------------------------------------------------------------------------
# Choosing a cut: QMD's findBestCutoff
# --------------------------------------------------------------------------------------------------


def test_decayed_score_is_qmds_quadratic_decay():
    assert decayed_score(90, 0, 800, 0.7) == 90
    assert decayed_score(90, 680, 800, 0.7) == pytest.approx(90 * (1 - 0.85**2 * 0.7))
    assert decayed_score(20, 800, 800, 0.7) == pytest.approx(20 * 0.3)
    assert decayed_score(20, 800, 800, 0.0) == 20


def test_h2_at_85_percent_of_the_window_beats_a_blank_line_at_95_percent():
    """QMD's own example: the h2 (score 90) wins although the blank line (score 20) is closer to the target."""
    window, target = 800, 2000
    h2 = target - round(0.85 * window)  # 85% of the window distance before the target
    blank = target - round(0.95 * window)
    assert best_cutoff([blank, h2], [BLANK_LINE_SCORE, HEADING_SCORES[2]], target, window, 0.7) == h2
    # Read the other way (positions at 85% and 95% of the window, the blank line nearer the target):
    h2_late = target - window + round(0.85 * window)
    blank_late = target - window + round(0.95 * window)
    assert best_cutoff([h2_late, blank_late], [HEADING_SCORES[2], BLANK_LINE_SCORE], target, window, 0.7) == h2_late


def test_close_weak_break_point_beats_far_one_of_the_same_score():
    assert best_cutoff([100, 900], [20, 20], 1000, 800, 0.7) == 900
    # A much stronger boundary far back still wins over a newline at the target.
    assert best_cutoff([300, 1000], [HEADING_SCORES[1], NEWLINE_SCORE], 1000, 800, 0.7) == 300


def test_best_cutoff_window_and_bounds():
    positions, scores = [100, 199, 200, 500, 1000, 1001], [100, 100, 50, 1, 1, 100]
    # Only [target - window, target] is searched; the window edge is included, the far side is not.
    assert best_cutoff(positions, scores, 1000, 800, 0.7) == 200
    assert best_cutoff(positions, scores, 1000, 801, 0.7) == 199
    # after_char (the chunk's start) and before_char (a cut found too long) narrow the candidates.
    assert best_cutoff(positions, scores, 1000, 800, 0.7, after_char=200) == 1000
    assert best_cutoff(positions, scores, 1000, 800, 0.7, after_char=200, before_char=1000) == 500
    assert best_cutoff(positions, scores, 1000, 100, 0.7, after_char=950, before_char=1000) is None
    assert best_cutoff([], [], 1000, 800, 0.7) is None


def test_equal_ratings_keep_the_earlier_break_point():
    assert best_cutoff([400, 600], [20, 20], 500, 800, 0.7) == 400


# --------------------------------------------------------------------------------------------------
# Break points from the CommonMark structure
# --------------------------------------------------------------------------------------------------


def test_break_point_scores_come_from_the_parse():
    text = (
        "intro line\n"  # 0
        "\n"
        "# Title\n"
        "text\n"
        "\n"
        "Setext\n"
        "------\n"
        "- item one\n"
        "- item two\n"
        "\n"
        "***\n"
        "```\n"
        "# not a heading\n"
        "\n"
        "```\n"
        "after\n"
        "#### Deep\n"
    )
    positions, scores = scan_break_points(parse_markdown(text))
    score_at = dict(zip(positions, scores))

    def at(line: str) -> int:
        return score_at[text.index(line)]

    assert at("# Title") == HEADING_SCORES[1]  # a heading after a blank line keeps the higher score
    assert at("text\n") == NEWLINE_SCORE
    assert at("Setext") == HEADING_SCORES[2]  # setext headings are headings
    assert at("- item one") == LIST_ITEM_SCORE
    assert at("- item two") == LIST_ITEM_SCORE
    assert at("***") == THEMATIC_BREAK_SCORE
    assert at("```\n# not") == FENCE_SCORE
    assert at("# not a heading") == NEWLINE_SCORE  # without protection, only a line start
    assert at("#### Deep") == HEADING_SCORES[4]
    assert 0 not in score_at and len(text) not in score_at
    assert positions == sorted(set(positions))


def test_no_break_point_inside_a_protected_fence():
    text = "para\n\n~~~~python\n# comment\n\nx = 1\n~~~~\n\nafter\n"
    fence_start, fence_end = fence_ranges(text)[0]
    positions, _ = scan_break_points(parse_markdown(text), ([fence_start], [fence_end]))
    assert fence_start in positions and fence_end in positions
    assert not [p for p in positions if fence_start < p < fence_end]


# --------------------------------------------------------------------------------------------------
# Chunking through the engine
# --------------------------------------------------------------------------------------------------


def test_a_heading_within_the_window_starts_the_next_chunk():
    filler = "".join(f"Sentence number {n} of the first section goes on a while.\n" for n in range(40))
    text = "# First\n\n" + filler + "\n## Second\n\n" + filler
    second = text.index("## Second")
    # The target (max_chars after the start) lies a little after the h2, which is inside the window.
    chunks = chunk_markdown(
        text, scored_config(max_chars=second + 300, overlap_chars=0, window_chars=800, max_tokens=4000)
    )
    assert chunks[0].end_char == second
    assert chunks[1].start_char == second
    assert chunks[1].heading_path == ("First", "Second")


def test_a_fence_is_never_cut(check_invariants):
    code = "".join(f"    let value_{n} = compute({n});\n" for n in range(30))
    prose = "Some prose that explains the listing below in a few words.\n\n"
    for fence in ("```", "~~~", "`````"):
        text = "# Listing\n\n" + prose * 8 + f"{fence}rust\n{code}{fence}\n\n" + prose * 8
        fences = fence_ranges(text)
        config = scored_config(max_chars=1500, overlap_chars=200, window_chars=600, max_tokens=2000)
        chunks = chunk_markdown(text, config)
        check_invariants(text, chunks, config)
        start, end = fences[0]
        assert end - start <= 1500
        assert any(c.start_char <= start and end <= c.end_char for c in chunks), fence
        for chunk in chunks:
            assert not start < chunk.end_char < end, (fence, chunk.start_char, chunk.end_char)


def test_a_fence_that_fits_is_not_cut_in_token_mode(counter):
    code = "".join(f"    let value_{n} = compute({n});\n" for n in range(25))
    text = "Intro words here.\n" * 20 + "```rust\n" + code + "```\n" + "Closing words here.\n" * 20
    ((start, end),) = fence_ranges(text)
    config = scored_config(mode="tokens", max_tokens=300, overlap_tokens=30)
    assert counter.count(text[start:end]) <= 300
    chunks = chunk_markdown(text, config)
    assert any(c.start_char <= start and end <= c.end_char for c in chunks)
    assert all(c.token_count <= 300 for c in chunks)


def test_character_mode_sizes_and_overlap(check_invariants):
    config = scored_config(max_chars=600, overlap_chars=120, window_chars=300, max_tokens=1000)
    chunks = chunk_markdown(GUIDE, config)
    check_invariants(GUIDE, chunks, config)
    assert len(chunks) > 3
    assert all(chunk.char_count <= 600 for chunk in chunks)
    assert not any(chunk.is_sub_split for chunk in chunks)
    for previous, chunk in zip(chunks, chunks[1:]):
        overlap = previous.end_char - chunk.start_char
        assert 0 <= overlap <= 120
        # An overlapping chunk starts at a line or word start, never mid-word.
        assert chunk.start_char == previous.end_char or GUIDE[chunk.start_char - 1].isspace()
    assert all(is_word_boundary(GUIDE, cut) for cut in cut_positions(chunks))


def test_character_mode_still_keeps_the_token_limit(check_invariants):
    config = scored_config(max_chars=3600, overlap_chars=540, max_tokens=120, overlap_tokens=10)
    chunks = chunk_markdown(GUIDE, config)
    check_invariants(GUIDE, chunks, config)
    assert any(chunk.is_sub_split for chunk in chunks)
    assert all(chunk.token_count <= 120 for chunk in chunks)


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(64, 0), (120, 20), (900, 135)])
def test_token_mode_is_exact(check_invariants, counter, max_tokens, overlap_tokens):
    text = GUIDE * 3
    config = scored_config(mode="tokens", max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)
    check_invariants(text, chunks, config)
    assert_protected_blocks_whole(text, chunks, max_tokens, counter)
    assert all(chunk.token_count <= max_tokens for chunk in chunks)
    assert not any(chunk.is_sub_split for chunk in chunks)
    if max_tokens < 900:
        # Most cuts land on a line start (a scored break point), not inside a line.
        line_cuts = [c.end_char for c in chunks[:-1] if text[c.end_char - 1] == "\n"]
        assert len(line_cuts) >= 0.8 * (len(chunks) - 1)


def test_token_mode_matches_qmd_defaults_through_from_dict():
    config = ChunkConfig.from_dict(
        {"strategy": "scored", "max_tokens": 900, "overlap_tokens": 135, "scored": {"mode": "tokens"}}
    )
    assert config.params == ScoredParams(mode="tokens")
    chunks = chunk_markdown(GUIDE * 20, config)
    assert all(chunk.token_count <= 900 for chunk in chunks)
    assert reconstruct(chunks) == GUIDE * 20


PROSE = "# Harbour logger\n\n## Settings\n" + " ".join(
    f"Setting {n} explains one more option of the harbour logger." for n in range(300)
)


@pytest.mark.parametrize(
    ("max_tokens", "overlap_tokens", "warned"), [(200, 150, True), (200, 90, False), (900, 135, False)]
)
def test_token_mode_warns_once_when_the_overlap_repeats_most_of_every_chunk(
    overlap_warnings, max_tokens, overlap_tokens, warned
):
    config = scored_config(mode="tokens", max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(PROSE, config)
    chunk_markdown(PROSE + "\nOne more line.\n", config)

    repeated = sum(max(0, before.end_char - after.start_char) for before, after in zip(chunks, chunks[1:]))
    emitted = sum(chunk.end_char - chunk.start_char for chunk in chunks)
    assert (repeated * 2 > emitted) == warned
    messages = overlap_warnings()
    assert len(messages) == warned
    if warned:
        assert messages[0].startswith(f"overlap_tokens {overlap_tokens} re-emits {100 * repeated / emitted:.0f}%")
        assert f"(max_tokens {max_tokens} less " in messages[0]


def test_long_lines_without_break_points_are_cut_between_words(check_invariants):
    text = "# One long line\n\n" + " ".join(f"word{n}" for n in range(2000)) + "\n"
    for config in (
        scored_config(max_chars=1000, overlap_chars=100, window_chars=400, max_tokens=1000),
        scored_config(mode="tokens", max_tokens=100, overlap_tokens=10),
    ):
        chunks = chunk_markdown(text, config)
        check_invariants(text, chunks, config)
        assert all(is_word_boundary(text, cut) for cut in cut_positions(chunks))


def test_a_word_that_fills_the_window_moves_the_cut_before_it():
    text = "para one\npara two\nSetextWord"
    config = scored_config(max_chars=25, overlap_chars=0, window_chars=3, max_tokens=100)
    chunks = chunk_markdown(text, config)
    assert [chunk.text for chunk in chunks] == ["para one\npara two\n", "SetextWord"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "\n\n\n",
        "\ufeff# BOM heading\r\n\r\nline one\r\nline two\r\n" * 40,
        "tab\there\x00nul and e\u0301 combining 👩‍👩‍👧 family\r" * 200,
        "```\nunclosed fence\n" + "code line\n" * 500,
        "| a | b |\n| - | - |\n" + "| cell | cell |\n" * 300,
    ],
)
@pytest.mark.parametrize("mode", ["chars", "tokens"])
def test_invariants_on_edge_cases(check_invariants, text, mode):
    config = scored_config(
        mode=mode, max_chars=500, overlap_chars=50, window_chars=200, max_tokens=100, overlap_tokens=10
    )
    chunks = chunk_markdown(text, config)
    check_invariants(text, chunks, config)


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.md")))
def test_invariants_on_every_fixture(check_invariants, read_fixture, counter, name):
    text = read_fixture(name)
    for config in [
        ChunkConfig(strategy="scored"),
        scored_config(max_chars=400, overlap_chars=80, window_chars=200, max_tokens=80, overlap_tokens=10),
        scored_config(mode="tokens", max_tokens=64, overlap_tokens=8),
    ]:
        chunks = chunk_markdown(text, config)
        check_invariants(text, chunks, config)
        assert_protected_blocks_whole(text, chunks, config.max_tokens, counter)


def test_defaults_on_realistic_markdown(check_invariants):
    text = GUIDE * 10
    for config in (ChunkConfig(strategy="scored"), ChunkConfig(strategy="scored", max_tokens=1024)):
        chunks = chunk_markdown(text, config, doc_id="guide.md")
        check_invariants(text, chunks, config, doc_id="guide.md")
        assert chunks == chunk_markdown(text, config, doc_id="guide.md")  # deterministic


@settings(max_examples=60)
@given(
    lines=st.lists(MARKDOWN_LINES, max_size=80),
    newline=st.sampled_from(["\n", "\r\n"]),
    mode=st.sampled_from(["chars", "tokens"]),
)
def test_invariants_hold_on_generated_markdown(lines, newline, mode):
    counter = get_token_counter("cl100k_base")
    text = newline.join(lines)
    config = scored_config(
        mode=mode, max_chars=300, overlap_chars=60, window_chars=150, max_tokens=40, overlap_tokens=5
    )
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert_protected_blocks_whole(text, chunks, 40, counter)
    assert all(is_word_boundary(text, cut) for cut in cut_positions(chunks))
    if mode == "chars":
        assert all(chunk.char_count <= 300 for chunk in chunks)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        ({"mode": "words"}, "mode"),
        ({"max_chars": 0}, "max_chars"),
        ({"max_chars": True}, "max_chars"),
        ({"window_chars": 0}, "window_chars"),
        ({"overlap_chars": -1}, "overlap_chars"),
        ({"overlap_chars": 3600}, "overlap_chars"),
        ({"max_chars": 500, "overlap_chars": 100, "window_chars": 800}, "window_chars"),
        ({"decay": 1.5}, "decay"),
        ({"decay": -0.1}, "decay"),
    ],
)
def test_invalid_parameters_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        ScoredParams(**params)
    with pytest.raises(ConfigError, match=message):
        ChunkConfig.from_dict({"strategy": "scored", "scored": params})


def test_strategy_is_registered_with_its_parameters():
    strategy = chunkline.get_strategy("scored")
    names = [name for name, _, _ in strategy.parameters()]
    assert names == ["mode", "max_chars", "overlap_chars", "window_chars", "decay"]
    assert ScoredParams() == ScoredParams("chars", 3600, 540, 800, 0.7)
