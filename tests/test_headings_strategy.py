"""The ``headings`` strategy: mdvdb's heading split, heading paths, and the token size guard."""

from __future__ import annotations

import math

import pytest
from conftest import (
    assert_invariants,
    assert_protected_blocks_whole,
    cut_positions,
    exact_token_count,
    is_word_boundary,
    word_around,
)

import chunkline
import chunkline.context
from chunkline import ChunkConfig, chunk_markdown, parse_markdown
from chunkline.engine import span_budget

#: The heading split alone: small sections are not packed together (``min_tokens: 0``), so that the tests
#: of the split see one chunk per section, as mdvdb makes them.
HEADING_SPLIT = ChunkConfig(min_tokens=0)


def headings_config(**params) -> ChunkConfig:
    """The default config with ``chunking.headings`` parameters (and max/overlap/min tokens, embed_context) set;
    the heading split alone (``min_tokens: 0``) unless ``min_tokens`` is given."""
    keys = ("max_tokens", "overlap_tokens", "min_tokens", "embed_context")
    common = {key: params.pop(key) for key in keys if key in params}
    return ChunkConfig.from_dict({"min_tokens": 0, **common, "headings": params})


def paths(chunks) -> list[list[str]]:
    return [list(chunk.heading_path) for chunk in chunks]


def api_reference_section(sentences: int = 100) -> str:
    """One heading over plain prose of ~1350 tokens (mdvdb's "API Reference is 1200 tokens" example)."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron".split()
    body = " ".join(
        f"Endpoint {i} accepts a {words[i % 12]} request and returns the {words[i * 5 % 12]} record."
        for i in range(sentences)
    )
    return f"# API Reference\n\n{body}\n"


# --------------------------------------------------------------------------------------------------
# Stage 1: heading split (mdvdb's examples)
# --------------------------------------------------------------------------------------------------


def test_mdvdb_setup_example_gives_three_chunks_with_heading_paths(read_fixture):
    text = read_fixture("mdvdb_setup.md")
    chunks = chunk_markdown(text, HEADING_SPLIT, doc_id="docs/setup.md")

    assert paths(chunks) == [["Installation"], ["Installation", "From Source"], ["Installation", "Using Docker"]]
    assert [chunk.chunk_id for chunk in chunks] == ["docs/setup.md#0", "docs/setup.md#1", "docs/setup.md#2"]
    assert [chunk.text for chunk in chunks] == [
        "# Installation\n\nDownload and install mdvdb.\n\n",
        "## From Source\n\nBuild from source with Cargo.\n\n",
        "## Using Docker\n\nPull the Docker image.\n",
    ]
    assert [(chunk.start_line, chunk.end_line) for chunk in chunks] == [(1, 4), (5, 8), (9, 11)]
    assert not any(chunk.is_sub_split for chunk in chunks)
    assert [chunk.section_index for chunk in chunks] == [0, 1, 2]
    assert_invariants(text, chunks, doc_id="docs/setup.md")


def test_mdvdb_heading_hierarchy_pops_the_stack_at_same_or_higher_level(read_fixture):
    text = read_fixture("mdvdb_heading_hierarchy.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [
        ["Getting Started"],
        ["Getting Started", "Installation"],
        ["Getting Started", "Installation", "From Source"],
        ["Getting Started", "Configuration"],
        ["API Reference"],
    ]
    assert [chunk.text.splitlines()[0] for chunk in chunks] == [
        "# Getting Started",
        "## Installation",
        "### From Source",
        "## Configuration",
        "# API Reference",
    ]
    assert_invariants(text, chunks)


def test_preamble_before_first_heading_is_chunk_zero_with_empty_path(read_fixture):
    text = read_fixture("preamble_then_sections.md")
    chunks = chunk_markdown(text, HEADING_SPLIT, doc_id="notes.md")

    assert paths(chunks) == [[], ["First Section"], ["Second Section"]]
    assert chunks[0].text == "This is preamble text.\n\n"
    assert chunks[0].chunk_id == "notes.md#0"
    assert_invariants(text, chunks, doc_id="notes.md")


def test_whitespace_before_first_heading_joins_the_first_chunk():
    text = "\n  \n# Only\n\nBody.\n"
    chunks = chunk_markdown(text)

    assert [(chunk.start_char, chunk.end_char) for chunk in chunks] == [(0, len(text))]
    assert paths(chunks) == [["Only"]]
    assert_invariants(text, chunks)


def test_file_without_headings_is_one_chunk_with_empty_path(read_fixture):
    text = read_fixture("no_headings.md")
    chunks = chunk_markdown(text)

    assert len(chunks) == 1
    assert chunks[0].text == text
    assert chunks[0].heading_path == ()
    assert not chunks[0].is_sub_split
    assert_invariants(text, chunks)


def test_empty_file_is_exactly_one_empty_chunk(read_fixture):
    text = read_fixture("empty.md")
    assert text == ""
    chunks = chunk_markdown(text, doc_id="empty.md")

    assert len(chunks) == 1
    chunk = chunks[0]
    assert (chunk.text, chunk.token_count, chunk.char_count, chunk.heading_path) == ("", 0, 0, ())
    assert (chunk.start_char, chunk.end_char, chunk.start_byte, chunk.end_byte) == (0, 0, 0, 0)
    assert (chunk.start_line, chunk.start_column, chunk.end_line, chunk.end_column) == (1, 1, 1, 1)
    assert chunk.chunk_id == "empty.md#0"
    assert chunkline.reconstruct(chunks) == ""
    assert_invariants(text, chunks, doc_id="empty.md")


def test_hash_lines_in_fences_indented_code_and_html_are_not_headings(read_fixture):
    text = read_fixture("hash_lines_in_code_and_html.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [["Real heading"], ["Real heading", "Second real heading"]]
    first = chunks[0].text
    for line in (
        "# install dependencies",
        "# a comment, not a heading",
        "# inside a nested fence",
        "# still inside the four-backtick fence",
        "    # indented code line",
        "# inside an HTML block",
        "# inside an HTML comment",
    ):
        assert line in first
    assert_invariants(text, chunks)


def test_setext_headings_split_and_nest(read_fixture):
    text = read_fixture("setext_headings.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [["Project Title"], ["Project Title", "Usage"], ["Multi-line setext heading"]]
    assert chunks[1].text.startswith("Usage\n-----\n")
    # A "---" after a blank line is a thematic break: it stays inside the last chunk.
    assert chunks[2].text.endswith("the rule\n\n---\n\nTrailing paragraph after a thematic break.\n")
    assert_invariants(text, chunks)


def test_headings_inside_block_quotes_and_list_items_do_not_split(read_fixture):
    text = read_fixture("headings_in_quotes_and_list_items.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [["Guide"], ["Guide", "Real subsection"]]
    assert "> # Quoted heading" in chunks[0].text
    assert "- # Heading in a list item" in chunks[0].text
    assert "1. ### Numbered item heading" in chunks[0].text
    assert_invariants(text, chunks)


def test_yaml_front_matter_is_a_preamble_and_not_headings(read_fixture):
    text = read_fixture("front_matter_yaml.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [[], ["Document Heading"]]
    assert chunks[0].text.startswith("---\ntitle: Front Matter Title\n")
    assert chunks[0].text.endswith("without front matter\n---\n")
    assert_invariants(text, chunks)


def test_heading_text_is_plain_text_without_inline_markup():
    text = "# The `chunk` API and *emphasis*\n\n## [Linked](https://example.com) **bold** title ##\n\nBody.\n"
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert paths(chunks) == [["The chunk API and emphasis"], ["The chunk API and emphasis", "Linked bold title"]]


# --------------------------------------------------------------------------------------------------
# min/max heading levels
# --------------------------------------------------------------------------------------------------


def test_max_heading_level_keeps_deeper_headings_inside_their_parent(read_fixture):
    text = read_fixture("heading_levels_1_to_6.md")
    chunks = chunk_markdown(text, headings_config(max_heading_level=2))

    assert paths(chunks) == [["Level One"], ["Level One", "Level Two"], ["Level One", "Second Level Two"]]
    assert "### Level Three" in chunks[1].text and "###### Level Six" in chunks[1].text
    assert_invariants(text, chunks, headings_config(max_heading_level=2))


def test_min_heading_level_merges_shallower_headings_into_the_preamble(read_fixture):
    text = read_fixture("heading_levels_1_to_6.md")
    config = headings_config(min_heading_level=2, max_heading_level=3)
    chunks = chunk_markdown(text, config)

    assert paths(chunks) == [[], ["Level Two"], ["Level Two", "Level Three"], ["Second Level Two"]]
    assert chunks[0].text == "# Level One\n\none\n\n"
    assert "#### Level Four" in chunks[2].text and "###### Level Six" in chunks[2].text
    assert_invariants(text, chunks, config)


def test_every_level_splits_by_default(read_fixture):
    text = read_fixture("heading_levels_1_to_6.md")
    chunks = chunk_markdown(text, HEADING_SPLIT)

    assert [len(path) for path in paths(chunks)] == [1, 2, 3, 4, 5, 6, 2]
    assert paths(chunks)[5] == ["Level One", "Level Two", "Level Three", "Level Four", "Level Five", "Level Six"]
    assert_invariants(text, chunks)


# --------------------------------------------------------------------------------------------------
# Stage 2: the token size guard
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(512, 50), (128, 20), (128, 0), (64, 10), (40, 39)])
def test_long_section_is_sub_split_within_the_limit(read_fixture, max_tokens, overlap_tokens):
    text = read_fixture("long_section_with_code_and_table.md")
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    long_path = ("Nightly Rebuild Runbook", "Starting a run by hand")
    long_section = [chunk for chunk in chunks if chunk.heading_path == long_path]
    assert len(long_section) >= 2
    assert all(chunk.is_sub_split for chunk in long_section)
    assert long_section[0].text.startswith("## Starting a run by hand\n")
    assert long_section[-1].end_char == len(text)
    assert all(chunk.token_count <= max_tokens for chunk in chunks)


def test_section_under_the_limit_is_not_sub_split(read_fixture):
    text = read_fixture("long_section_with_code_and_table.md")
    chunks = chunk_markdown(text)

    first = [chunk for chunk in chunks if chunk.heading_path == ("Nightly Rebuild Runbook",)]
    assert len(first) == 1 and not first[0].is_sub_split
    assert first[0].text.startswith("# Nightly Rebuild Runbook\n") and first[0].text.endswith("sit idle.\n\n")


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(512, 50), (160, 30), (128, 0), (96, 20)])
def test_code_blocks_tables_and_list_items_that_fit_are_never_split(read_fixture, counter, max_tokens, overlap_tokens):
    text = read_fixture("long_section_with_code_and_table.md")
    chunks = chunk_markdown(text, ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens))

    kinds = {block.kind for block in parse_markdown(text).blocks}
    assert kinds >= {"fence", "table", "list_item"}
    # The two fences, the table and the four list items fit even the smallest budget here.
    assert assert_protected_blocks_whole(text, chunks, max_tokens, counter) >= 7


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(512, 50), (128, 20), (64, 0), (24, 8), (12, 3)])
def test_sub_split_cuts_fall_between_words(read_fixture, counter, max_tokens, overlap_tokens):
    text = read_fixture("long_section_with_code_and_table.md")
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    chunks = chunk_markdown(text, config)
    # The strategy's budget: max_tokens less what the embed_text context of each chunk takes.
    budget = span_budget(parse_markdown(text), config)

    assert any(chunk.is_sub_split for chunk in chunks)
    for cut in cut_positions(chunks):
        if is_word_boundary(text, cut):
            continue
        word = word_around(text, cut)  # only a word over the whole budget may be cut
        context = f"{text[cut - 20 : cut]!r}|{text[cut : cut + 20]!r}"
        assert exact_token_count(counter, word) > budget, f"cut at {cut} inside {word!r}: {context}"


def test_a_word_longer_than_the_budget_is_cut_inside_and_still_fits(counter):
    long_word = "".join(f"{n:x}" for n in range(0x1000, 0x1200))  # one 2048-char word, hundreds of tokens
    text = f"# Hashes\n\nThe digest is {long_word} and nothing else.\n"
    config = ChunkConfig(max_tokens=32, overlap_tokens=4)
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    inside_word = [cut for cut in cut_positions(chunks) if not is_word_boundary(text, cut)]
    assert inside_word, "a word far over the budget has to be cut"
    assert all(word_around(text, cut) == long_word for cut in inside_word)


def test_consecutive_sub_split_chunks_overlap_when_overlap_is_configured(counter):
    text = api_reference_section()
    config = ChunkConfig(max_tokens=128, overlap_tokens=20)
    chunks = chunk_markdown(text, config)

    assert len(chunks) >= 10 and all(chunk.is_sub_split for chunk in chunks)
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk.start_char < previous.end_char, "no overlap"
        shared = text[chunk.start_char : previous.end_char]
        # The overlap is sized on the document's tokenization; a slice can differ by a token at its edge.
        assert 0 < exact_token_count(counter, shared) <= config.overlap_tokens + 1
        assert is_word_boundary(text, chunk.start_char)
    assert_invariants(text, chunks, config)


@pytest.mark.parametrize("sub_split", ["boundaries", "window"])
def test_zero_overlap_sub_split_chunks_only_touch(sub_split):
    text = api_reference_section()
    config = headings_config(max_tokens=100, overlap_tokens=0, sub_split=sub_split)
    chunks = chunk_markdown(text, config)

    assert len(chunks) >= 10
    assert all(chunk.start_char == previous.end_char for previous, chunk in zip(chunks, chunks[1:]))
    assert_invariants(text, chunks, config)


def test_long_section_overlap_never_exceeds_the_overlap_budget(read_fixture, counter):
    text = read_fixture("long_section_with_code_and_table.md")
    config = ChunkConfig(max_tokens=128, overlap_tokens=20)
    chunks = chunk_markdown(text, config)

    overlaps = [
        exact_token_count(counter, text[chunk.start_char : previous.end_char])
        for previous, chunk in zip(chunks, chunks[1:])
        if chunk.start_char < previous.end_char
    ]
    assert overlaps, "some consecutive pieces of the long section share text"
    assert max(overlaps) <= config.overlap_tokens + 1


# --------------------------------------------------------------------------------------------------
# sub_split: window (mdvdb's sliding token window)
# --------------------------------------------------------------------------------------------------


def test_window_mode_matches_mdvdb_sliding_window_arithmetic(counter):
    text = api_reference_section()
    total = exact_token_count(counter, text)
    assert 974 < total <= 1436  # three 512-token windows with a stride of 462, as in mdvdb's 1200-token example
    # mdvdb's arithmetic holds for the whole budget: no context line takes a share of it.
    config = headings_config(sub_split="window", embed_context="none")
    chunks = chunk_markdown(text, config)

    assert len(chunks) == 1 + math.ceil((total - 512) / (512 - 50)) == 3
    assert all(chunk.is_sub_split and chunk.heading_path == ("API Reference",) for chunk in chunks)
    assert [chunk.token_count for chunk in chunks[:-1]] == [512, 512]
    for previous, chunk in zip(chunks, chunks[1:]):
        assert exact_token_count(counter, text[chunk.start_char : previous.end_char]) == 50
    assert_invariants(text, chunks, config)


@pytest.mark.parametrize("max_tokens, overlap_tokens", [(512, 50), (64, 16), (16, 15), (9, 0)])
def test_window_mode_keeps_every_invariant(read_fixture, max_tokens, overlap_tokens):
    emoji_section = "\n## Émoji 👩\u200d💻 and 漢字\n\n" + "ñandú 🐦 鳥 " * 60
    text = read_fixture("long_section_with_code_and_table.md") + emoji_section
    config = headings_config(max_tokens=max_tokens, overlap_tokens=overlap_tokens, sub_split="window")
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    assert sum(chunk.is_sub_split for chunk in chunks) >= 3


# --------------------------------------------------------------------------------------------------
# An overlap that re-emits most of every piece of a split section
# --------------------------------------------------------------------------------------------------


def test_pieces_cut_at_boundaries_that_repeat_most_of_their_text_warn_once(overlap_warnings):
    text = api_reference_section()
    config = headings_config(max_tokens=200, overlap_tokens=150)
    assert span_budget(parse_markdown(text), config) == 197

    chunks = chunk_markdown(text, config)
    chunk_markdown(text + "\n## Errors\n\n" + api_reference_section(60), config)

    # The pieces overlap by up to 150 tokens at a sentence start: 30 pieces of ~190 tokens for ~1,350.
    assert (len(chunks), sum(chunk.token_count for chunk in chunks)) == (30, 5682)
    assert overlap_warnings() == [
        "overlap_tokens 150 re-emits 76% of the text in every chunk of up to 197 tokens (max_tokens 200 less 3 "
        "for the context line); lower overlap_tokens to 98 or less (100 or less with embed_context: none)"
    ]


def test_sliding_windows_that_advance_by_under_half_the_budget_warn_with_the_stride(overlap_warnings):
    text = api_reference_section()
    config = headings_config(max_tokens=200, overlap_tokens=150, sub_split="window", embed_context="none")

    chunks = chunk_markdown(text, config)

    assert len(chunks) == 25 and all(chunk.is_sub_split for chunk in chunks)
    assert overlap_warnings() == [
        "overlap_tokens 150 leaves windows of 200 tokens (max_tokens 200) advancing 50 tokens: each token of text "
        "lands in about 4 chunks; lower overlap_tokens to 100 or less"
    ]


@pytest.mark.parametrize("sub_split", ["boundaries", "window"])
@pytest.mark.parametrize("max_tokens, overlap_tokens", [(512, 50), (128, 20), (200, 90)])
def test_an_overlap_under_half_the_budget_does_not_warn(overlap_warnings, sub_split, max_tokens, overlap_tokens):
    text = api_reference_section()
    config = headings_config(max_tokens=max_tokens, overlap_tokens=overlap_tokens, sub_split=sub_split)

    chunks = chunk_markdown(text, config)

    assert sum(chunk.is_sub_split for chunk in chunks) >= 3
    assert overlap_warnings() == []


# --------------------------------------------------------------------------------------------------
# determinism and the registry
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub_split", ["boundaries", "window"])
def test_same_input_twice_gives_identical_chunks(read_fixture, sub_split):
    text = read_fixture("long_section_with_code_and_table.md")
    config = headings_config(max_tokens=64, overlap_tokens=8, sub_split=sub_split)

    first = chunk_markdown(text, config, doc_id="docs/runbook.md", source_uri="gs://bucket/docs/runbook.md")
    second = chunk_markdown(text, config, doc_id="docs/runbook.md", source_uri="gs://bucket/docs/runbook.md")
    assert first == second
    assert [chunk.to_dict() for chunk in first] == [chunk.to_dict() for chunk in second]
    assert_invariants(text, first, config, doc_id="docs/runbook.md", source_uri="gs://bucket/docs/runbook.md")


def test_ids_depend_on_doc_id_and_position_not_on_heading_text(read_fixture):
    text = read_fixture("mdvdb_setup.md")
    renamed = text.replace("## Using Docker", "## Using Containers")

    before = chunk_markdown(text, HEADING_SPLIT, doc_id="docs/setup.md")
    after = chunk_markdown(renamed, HEADING_SPLIT, doc_id="docs/setup.md")
    assert [c.chunk_uuid for c in before] == [c.chunk_uuid for c in after]
    assert [c.content_sha256 for c in before][:2] == [c.content_sha256 for c in after][:2]
    assert before[2].content_sha256 != after[2].content_sha256


def test_headings_is_the_registered_default_strategy():
    assert "headings" in chunkline.available_strategies()
    strategy = chunkline.get_strategy("headings")
    assert ChunkConfig().strategy == "headings"
    assert isinstance(ChunkConfig().params, strategy.params_type)
    assert {name for name, _, _ in strategy.parameters()} == {"min_heading_level", "max_heading_level", "sub_split"}


# --------------------------------------------------------------------------------------------------
# Minimal reproductions of boundary cases found while writing this suite
# --------------------------------------------------------------------------------------------------


def test_a_word_that_fits_the_budget_is_not_cut(counter):
    text = "Use --output gs://docs-bucket/scratch/rebuild-manual for it.\n"
    url = "gs://docs-bucket/scratch/rebuild-manual"
    config = ChunkConfig(max_tokens=12, overlap_tokens=0)
    assert exact_token_count(counter, url) <= config.max_tokens
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    assert len(chunks) >= 2
    assert any(url in chunk.text for chunk in chunks), [chunk.text for chunk in chunks]


def test_window_mode_respects_max_tokens_with_multi_token_characters(counter):
    text = "🐦🐦🐦🐦🐦"  # each bird is 3 tokens: any window of 4 tokens holds exactly one
    config = headings_config(max_tokens=4, overlap_tokens=2, sub_split="window")
    chunks = chunk_markdown(text, config)

    assert [chunk.token_count for chunk in chunks if chunk.token_count > config.max_tokens] == []
    assert_invariants(text, chunks, config)
