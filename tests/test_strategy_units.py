"""The unit strategies: sentences, paragraphs, words, lines and characters (LocalVectorDB's methods).

Units partition the text and are packed within ``max_tokens``; overlap is counted in the method's own
unit; fitting fenced code (and other protected blocks) is never cut by sentences, paragraphs or words.
"""

from __future__ import annotations

import logging

import pytest
from conftest import assert_invariants, assert_protected_blocks_whole, exact_token_count
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, chunk_markdown, parse_markdown
from chunkline.strategies import units

UNIT_STRATEGIES = ["sentences", "paragraphs", "words", "lines", "characters"]
STRUCTURED = ["sentences", "paragraphs", "words"]

# LocalVectorDB's sentence example, verbatim (a leading and a trailing line break).
SEED_TEXT = """
This is the first sentence. This is the second sentence about something important.
This is the third sentence with more details. This concludes the paragraph.
"""
SEED_CHUNKS = [
    "This is the first sentence. This is the second sentence about something important.",
    "This is the second sentence about something important. This is the third sentence with more details.",
    "This is the third sentence with more details. This concludes the paragraph.",
]

REALISTIC = """---
title: Rebuild runbook
---
# Nightly rebuild

The rebuild reads every file. It splits each one into chunks! Does it count tokens? Yes, exactly.
Readers never see a half-written table, because the manifest is written last.

## Starting a run by hand

1. Check the errors table first. It has one row per problem.
2. Start the run: the command below overrides the limit.

```bash
chunkline run gs://docs/corpus/ --output gs://docs/scratch \\
  --set chunking.max_tokens=384   # Not a sentence. Not a heading either.

# a comment line, not a heading
```

| Stage | Reads | Writes |
| --- | --- | --- |
| chunk | each file | chunk rows |
| publish | staging | the manifest |

- A list item with two sentences. The second one is here.
- Émoji 👩‍💻 and combining e\u0301 marks survive; so do tabs\tand NUL \x00 bytes.

日本語の文章です。二つ目の文です！三つ目？ Mixed text follows.

> A quote. With two sentences.

Final paragraph with a very long tail of words to pack into several chunks when the budget is small,
written over two lines so that lines and words differ from sentences here.
"""


def config_for(strategy: str, max_tokens: int, overlap: int | None = None, **common) -> ChunkConfig:
    section = {} if overlap is None else {"overlap": overlap}
    return ChunkConfig.from_dict(
        {"strategy": strategy, "max_tokens": max_tokens, "overlap_tokens": 0, strategy: section, **common}
    )


# ------------------------------------------------------------------------------------ the seed example


def test_seed_sentence_example_with_overlap_one_matches_localvectordb():
    config = config_for("sentences", 20, 1)

    chunks = chunk_markdown(SEED_TEXT, config)

    # LocalVectorDB prints its chunks with whitespace collapsed; ours are verbatim slices.
    assert [" ".join(chunk.text.split()) for chunk in chunks] == SEED_CHUNKS
    assert chunks[1].text.startswith("This is the second sentence")
    assert chunks[2].text.startswith("This is the third sentence")
    assert_invariants(SEED_TEXT, chunks, config)


def test_seed_example_without_overlap_only_touches():
    chunks = chunk_markdown(SEED_TEXT, config_for("sentences", 20, 0))

    assert [" ".join(chunk.text.split()) for chunk in chunks] == [SEED_CHUNKS[0], SEED_CHUNKS[2]]
    assert all(previous.end_char == chunk.start_char for previous, chunk in zip(chunks, chunks[1:]))


def test_default_overlaps_follow_localvectordb():
    defaults = {name: ChunkConfig(strategy=name).params.overlap for name in UNIT_STRATEGIES}

    assert defaults == {"sentences": 1, "paragraphs": 1, "words": 20, "lines": 3, "characters": 50}


# ----------------------------------------------------------------------------------- unit boundaries


def test_sentence_ends_include_closers_cjk_and_skip_ordered_list_markers():
    text = '1. Install it. Then run.\n2. Go! "Quoted." Next 。下一句。'

    cuts = units.sentence_cuts(text)

    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if a < b]
    assert pieces == ["1. Install it. ", "Then run.\n", "2. Go! ", '"Quoted." ', "Next 。", "下一句。"]


def test_paragraph_cuts_treat_whitespace_only_lines_as_blank_for_every_line_ending():
    text = "a\n\nb\r\n\r\nc\r\nd\n  \n\t\ne\rf\r\rg"

    cuts = units.paragraph_cuts(text)

    assert [text[cut] for cut in cuts] == ["b", "c", "e", "g"]


def test_word_cuts_put_indentation_with_the_next_line():
    text = "one two\n    three\n\n four  five"

    cuts = units.word_cuts(text)

    assert [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])] == [
        "one ",
        "two\n",
        "    three\n\n",
        " four  ",
        "five",
    ]


@settings(max_examples=300)
@given(st.text(st.sampled_from("ab \t\n\r\u3000\x85\u2028é"), max_size=40))
def test_word_cuts_match_the_plain_regular_expression(text):
    import re

    gap = re.compile(r"\s*[\r\n]()[^\S\r\n]*|[^\S\r\n]+")
    expected = [
        match.start(1) if match.start(1) >= 0 else match.end()
        for match in gap.finditer(text)
        if match.end() < len(text)
    ]

    assert units.word_cuts(text) == expected


# ------------------------------------------------------------------------------ overlap in own units


def test_words_overlap_repeats_exactly_that_many_words():
    text = " ".join(f"word{number}" for number in range(300))
    config = config_for("words", 40, 5)

    chunks = chunk_markdown(text, config)

    assert len(chunks) > 3
    for previous, chunk in zip(chunks, chunks[1:]):
        shared = text[chunk.start_char : previous.end_char]
        assert len(shared.split()) == 5
        assert previous.text.split()[-5:] == chunk.text.split()[:5]
    assert_invariants(text, chunks, config)


def test_paragraph_overlap_repeats_the_last_paragraph():
    paragraphs = [f"Paragraph {number} says something short about topic {number}." for number in range(12)]
    text = "\n\n".join(paragraphs) + "\n"
    config = config_for("paragraphs", 40, 1)

    chunks = chunk_markdown(text, config)

    assert len(chunks) > 2
    for previous, chunk in zip(chunks, chunks[1:]):
        last_paragraph = previous.text.strip().split("\n\n")[-1]
        assert chunk.text.startswith(last_paragraph)
        assert chunk.end_char > previous.end_char
    assert_invariants(text, chunks, config)


def test_lines_overlap_starts_that_many_lines_before_the_previous_end():
    text = "".join(f"2024-05-01 12:00:{second:02d} INFO request {second} served\r\n" for second in range(60))
    config = config_for("lines", 150, 3)

    chunks = chunk_markdown(text, config)

    assert len(chunks) > 3
    for previous, chunk in zip(chunks, chunks[1:]):
        assert previous.end_line - previous.start_line > 3
        assert chunk.start_line == previous.end_line - 2  # the previous chunk's last 3 lines
        assert text[chunk.start_char : previous.end_char].count("\r\n") == 3
    assert_invariants(text, chunks, config)


def test_characters_overlap_is_counted_in_characters():
    text = "Plain prose without any structure at all, repeated. " * 40
    config = config_for("characters", 30, 12)

    chunks = chunk_markdown(text, config)

    assert len(chunks) > 5
    for previous, chunk in zip(chunks, chunks[1:]):
        assert previous.end_char - chunk.start_char == 12
    assert_invariants(text, chunks, config)


def test_characters_chunks_are_the_longest_prefix_within_the_budget(counter):
    text = "Tokenizers merge frequent byte pairs; rare words split into several tokens. " * 30
    config = config_for("characters", 25, 0)

    chunks = chunk_markdown(text, config)

    for chunk in chunks[:-1]:
        assert chunk.token_count <= 25
        assert exact_token_count(counter, text[chunk.start_char : chunk.end_char + 1]) > 25
    assert_invariants(text, chunks, config)


def test_characters_keep_the_limit_with_multi_token_characters():
    text = "🐦𝔘𝔫𝔦𝔠𝔬𝔡𝔢 " * 50 + "漢字" * 100
    config = config_for("characters", 7, 3)

    assert_invariants(text, chunk_markdown(text, config), config)


def test_characters_with_an_overlap_that_leaves_no_room_still_progress():
    text = "\ufeff# 0\n\n0\n𐀀\n"
    config = config_for("characters", 4, 1)

    assert_invariants(text, chunk_markdown(text, config), config)


def test_an_overlap_that_does_not_fit_with_the_next_unit_adds_no_empty_repeat():
    text = "\ufeff# 0\n\n0000\n"
    config = config_for("words", 4, 1)

    assert_invariants(text, chunk_markdown(text, config), config)


# --------------------------------------------------------------------------------- overlap validation


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
@pytest.mark.parametrize("bad", [-1, True, 1.5, "2"])
def test_overlap_must_be_a_whole_number_of_units(strategy, bad):
    with pytest.raises(ConfigError, match=f"chunking.{strategy}.*overlap"):
        ChunkConfig.from_dict({"strategy": strategy, strategy: {"overlap": bad}})


@pytest.mark.parametrize(
    ("strategy", "overlap", "unit"),
    [("sentences", 50, "sentences"), ("paragraphs", 10, "paragraphs"), ("words", 400, "words"), ("lines", 50, "lines")],
)
def test_an_overlap_sized_like_tokens_logs_a_warning(caplog, strategy, overlap, unit):
    config = config_for(strategy, 120, overlap, embed_context="none")

    with caplog.at_level(logging.WARNING):
        chunks = chunk_markdown(REALISTIC * 3, config)

    assert_invariants(REALISTIC * 3, chunks, config)
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any(f"overlap of {overlap} {unit}" in message and "not tokens" in message for message in messages)


def test_an_overlap_of_most_characters_logs_a_warning(caplog):
    config = config_for("characters", 30, 100, embed_context="none")

    with caplog.at_level(logging.WARNING):
        chunk_markdown(REALISTIC, config)

    assert any("overlap of 100 characters" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
def test_default_overlaps_do_not_warn(caplog, strategy):
    with caplog.at_level(logging.WARNING):
        chunk_markdown(REALISTIC * 4, ChunkConfig.from_dict({"strategy": strategy, "max_tokens": 200}))

    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


# --------------------------------------------------------------------------------- markdown structure


FENCE_DOC = """Intro sentence one. Intro sentence two.

```python
x = 1. ; y = 2.  # Looks like sentences. Is not.

def f():
    return "a b c d e f g h i j k l m n o p"
```

After the fence. More prose here.
"""


@pytest.mark.parametrize("strategy", STRUCTURED)
@pytest.mark.parametrize("max_tokens", [50, 60, 100])  # the fence alone is 48 tokens
def test_a_fitting_fenced_block_is_one_unit_for_structured_units(strategy, max_tokens, counter):
    config = config_for(strategy, max_tokens, 0)
    fence = parse_markdown(FENCE_DOC).blocks
    fence_block = next(block for block in fence if block.kind == "fence")

    chunks = chunk_markdown(FENCE_DOC, config)

    assert any(c.start_char <= fence_block.start_char and fence_block.end_char <= c.end_char for c in chunks)
    assert_protected_blocks_whole(FENCE_DOC, chunks, max_tokens, counter)
    assert_invariants(FENCE_DOC, chunks, config)


def test_lines_are_raw_and_may_cut_inside_a_fence():
    config = config_for("lines", 20, 0)
    fence_block = next(block for block in parse_markdown(FENCE_DOC).blocks if block.kind == "fence")

    chunks = chunk_markdown(FENCE_DOC, config)

    assert any(fence_block.start_char < c.start_char < fence_block.end_char for c in chunks)
    assert_invariants(FENCE_DOC, chunks, config)


def test_sentences_start_at_markdown_blocks_too():
    text = "# Title without a full stop\nA sentence right under it. Another one.\n- item one\n- item two\n"
    config = config_for("sentences", 8, 0)

    chunks = chunk_markdown(text, config)

    starts = {chunk.start_char for chunk in chunks}
    assert text.index("A sentence") in starts
    assert text.index("- item two") in starts or any(c.text.endswith("- item two\n") for c in chunks)
    assert_invariants(text, chunks, config)


def test_a_fence_over_the_budget_is_split_within_the_limit():
    body = "".join(f"value_{number} = compute({number})\n" for number in range(80))
    text = f"Before.\n\n```python\n{body}```\n\nAfter.\n"
    config = config_for("sentences", 50, 1)

    chunks = chunk_markdown(text, config)

    assert any(chunk.is_sub_split for chunk in chunks)
    assert_invariants(text, chunks, config)


def test_heading_paths_come_from_the_section_a_chunk_starts_in():
    config = config_for("paragraphs", 30, 0)

    chunks = chunk_markdown(REALISTIC, config)

    by_start = {chunk.text.split("\n", 1)[0]: chunk.heading_path for chunk in chunks}
    assert by_start["## Starting a run by hand"] == ("Nightly rebuild", "Starting a run by hand")


# ------------------------------------------------------------------------------------------ invariants


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
@pytest.mark.parametrize(("max_tokens", "overlap"), [(8, 0), (16, 1), (40, 2), (120, 3), (4096, 1)])
def test_realistic_markdown_keeps_every_invariant(strategy, max_tokens, overlap, counter):
    config = config_for(strategy, max_tokens, overlap)
    for text in (REALISTIC, REALISTIC.replace("\n", "\r\n"), "\ufeff" + REALISTIC.replace("\n", "\r")):
        chunks = chunk_markdown(text, config, doc_id="docs/runbook.md")

        assert_invariants(text, chunks, config, doc_id="docs/runbook.md")
        if strategy in STRUCTURED:
            assert_protected_blocks_whole(text, chunks, max_tokens, counter)


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
def test_fixture_documents_keep_every_invariant(strategy, read_fixture, counter):
    from conftest import FIXTURES

    config = config_for(strategy, 64, 1)
    for path in sorted(FIXTURES.glob("*.md")):
        text = read_fixture(path.name)
        chunks = chunk_markdown(text, config)

        assert_invariants(text, chunks, config)
        if strategy in STRUCTURED:
            assert_protected_blocks_whole(text, chunks, 64, counter)


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
@pytest.mark.parametrize("text", ["", " ", "\n\n", "one", "\r\n\r\n  x  \r\n"])
def test_tiny_documents(strategy, text):
    config = config_for(strategy, 4, 1)

    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    if not text:
        assert [(c.start_char, c.end_char) for c in chunks] == [(0, 0)]


_PIECES = st.sampled_from(
    [
        "Word",
        "another",
        "end.",
        "Ask?",
        "Wow!",
        '"Quote."',
        "(aside.)",
        "1.",
        "- item",
        "# Head",
        "```",
        "~~~py",
        "| a | b |",
        "> quote",
        "    code",
        "日本語。",
        "次！",
        "👩\u200d💻",
        "e\u0301",
        "\t",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\r\n",
        "\r",
        "\n  \n",
    ]
)


@settings(max_examples=400)
@given(
    pieces=st.lists(_PIECES, max_size=60),
    strategy=st.sampled_from(UNIT_STRATEGIES),
    max_tokens=st.integers(4, 60),
    overlap=st.integers(0, 4),
)
@pytest.mark.slow
def test_generated_text_keeps_every_invariant(pieces, strategy, max_tokens, overlap, counter):
    text = " ".join(pieces)
    config = config_for(strategy, max_tokens, overlap)

    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    if strategy in STRUCTURED:
        assert_protected_blocks_whole(text, chunks, max_tokens, counter)


@pytest.mark.parametrize("strategy", UNIT_STRATEGIES)
def test_same_input_gives_identical_chunks(strategy):
    config = config_for(strategy, 32, 2)

    assert chunk_markdown(REALISTIC, config, doc_id="a.md") == chunk_markdown(REALISTIC, config, doc_id="a.md")
