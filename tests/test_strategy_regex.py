"""The ``regex`` strategy: a chunk starts at every match of the user's pattern, within a time limit."""

from __future__ import annotations

import time

import pytest
from conftest import FIXTURES, assert_invariants
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, chunk_markdown
from chunkline.strategies.regex_split import RegexParams, RegexTimeoutError

DOC = """# Release notes

Intro before the first part.

## Part one

Alpha.

## Part two

Beta.
## not at a line start? It is: every line start counts.

```
## inside a fence also matches: the pattern is the user's, not markdown's
```
"""


def config_for(max_tokens: int = 512, overlap_tokens: int = 0, **params) -> ChunkConfig:
    return ChunkConfig.from_dict(
        {"strategy": "regex", "max_tokens": max_tokens, "overlap_tokens": overlap_tokens, "regex": params}
    )


def line_starts_of(text: str, prefix: str) -> list[int]:
    starts = [0] + [index + 1 for index, character in enumerate(text) if character == "\n"]
    return [start for start in starts if text.startswith(prefix, start)]


def test_a_chunk_starts_at_every_match():
    config = config_for(pattern=r"^## ")

    chunks = chunk_markdown(DOC, config)

    assert [chunk.start_char for chunk in chunks] == [0, *line_starts_of(DOC, "## ")]
    assert chunks[0].text.startswith("# Release notes") and chunks[1].text.startswith("## Part one\n")
    assert not any(chunk.is_sub_split for chunk in chunks)
    assert_invariants(DOC, chunks, config)


def test_localvectordb_separator_example():
    text = "Part one\n---\nPart two\n---\nPart three"
    config = config_for(pattern=r"\n---\n")

    chunks = chunk_markdown(text, config)

    assert [chunk.text for chunk in chunks] == ["Part one", "\n---\nPart two", "\n---\nPart three"]


def test_section_pattern_with_groups():
    text = "Preamble.\nSECTION 1: One\nbody\nSECTION 2: Two\nbody\n"
    chunks = chunk_markdown(text, config_for(pattern=r"^(SECTION \d+): "))

    assert [chunk.text.split("\n", 1)[0] for chunk in chunks] == ["Preamble.", "SECTION 1: One", "SECTION 2: Two"]


def test_multiline_off_anchors_at_the_document_start_only():
    chunks = chunk_markdown(DOC, config_for(pattern=r"^## ", multiline=False))

    assert len(chunks) == 1


def test_ignore_case():
    text = "note: a\nNOTE: b\nNote: c\n"

    assert len(chunk_markdown(text, config_for(pattern=r"^note: "))) == 1
    assert len(chunk_markdown(text, config_for(pattern=r"^note: ", ignore_case=True))) == 3


def test_a_piece_over_the_budget_is_split_within_the_limit():
    long_part = "## Long\n\n" + "".join(f"Sentence number {number} of the long part. " for number in range(60)) + "\n"
    text = "## Short\n\nTiny.\n\n" + long_part + "## End\n\nDone.\n"
    config = config_for(40, 8, pattern=r"^## ")

    chunks = chunk_markdown(text, config)

    long_start, end_start = text.index("## Long"), text.index("## End")
    pieces = [chunk for chunk in chunks if long_start <= chunk.start_char < end_start]
    assert len(pieces) > 2 and all(chunk.is_sub_split for chunk in pieces)
    assert pieces[0].start_char == long_start and pieces[-1].end_char == end_start
    assert [chunk.start_char for chunk in chunks if not chunk.is_sub_split] == [0, end_start]
    assert_invariants(text, chunks, config)


def test_merge_small_packs_consecutive_pieces():
    text = "".join(f"- item {number}\n" for number in range(40))
    config = config_for(30, pattern=r"^- ", merge_small=True)

    chunks = chunk_markdown(text, config)

    assert 1 < len(chunks) < 40
    assert all(text.startswith("- item", chunk.start_char) for chunk in chunks)
    assert_invariants(text, chunks, config)
    assert len(chunk_markdown(text, config_for(30, pattern=r"^- "))) == 40


def test_a_pattern_that_never_matches_gives_one_piece():
    config = config_for(pattern=r"^NEVER$")

    assert [(c.start_char, c.end_char) for c in chunk_markdown(DOC, config)] == [(0, len(DOC))]


def test_a_pattern_that_matches_the_empty_string_everywhere_still_keeps_the_invariants():
    text = "ab\ncd\n"
    config = config_for(pattern=r"x*")

    chunks = chunk_markdown(text, config)

    assert [chunk.text for chunk in chunks] == list(text)
    assert_invariants(text, chunks, config)


# ---------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("pattern", [r"^(## ", r"[a-", r"*a", r"a{2,1}"])
def test_a_bad_pattern_is_refused_with_the_pattern_named(pattern):
    with pytest.raises(ConfigError) as raised:
        config_for(pattern=pattern)

    message = str(raised.value)
    assert "chunking.regex" in message and repr(pattern) in message and "not a valid regular expression" in message


def test_the_pattern_is_required():
    with pytest.raises(ConfigError, match="chunking.regex.pattern"):
        ChunkConfig.from_dict({"strategy": "regex", "regex": {}})
    with pytest.raises(ValueError, match="pattern"):
        RegexParams(pattern="")


@pytest.mark.parametrize("bad", [0, -0.5, True, "soon"])
def test_timeout_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match="timeout_seconds"):
        config_for(pattern="x", timeout_seconds=bad)


# ------------------------------------------------------------------------------------------- timeout


@pytest.mark.parametrize("multiline", [True, False])
def test_a_catastrophic_pattern_times_out_quickly_with_a_clear_error(multiline):
    text = "a" * 5000 + "b"
    config = config_for(pattern=r"(a+)+$", timeout_seconds=0.2, multiline=multiline)
    started = time.perf_counter()

    with pytest.raises(RegexTimeoutError) as raised:
        chunk_markdown(text, config)

    elapsed = time.perf_counter() - started
    assert elapsed < 3, elapsed
    message = str(raised.value)
    assert "'(a+)+$'" in message and "0.2 s" in message
    assert isinstance(raised.value, ValueError)


def test_the_time_limit_covers_the_whole_document_not_each_match():
    # Each match alone is quick, but there are many of them; the limit is for the document.
    text = ("a" * 20 + "b\n") * 400
    config = config_for(pattern=r"(a|aa)+c|b", timeout_seconds=0.05)

    with pytest.raises(RegexTimeoutError):
        chunk_markdown(text, config)


def test_an_ordinary_pattern_on_a_large_document_is_fast():
    text = "## Heading\n\nSome text in a paragraph.\n\n" * 5000
    config = config_for(pattern=r"^## ", timeout_seconds=5.0)

    chunks = chunk_markdown(text, config)

    assert len(chunks) == 5000


# ------------------------------------------------------------------------------------------ invariants


@pytest.mark.parametrize("pattern", [r"^#", r"^- ", r"\. ", r"^"])
@pytest.mark.parametrize("merge_small", [False, True])
@pytest.mark.parametrize(("max_tokens", "overlap_tokens"), [(8, 0), (32, 6), (512, 50)])
@pytest.mark.slow
def test_fixture_documents_keep_every_invariant(read_fixture, pattern, merge_small, max_tokens, overlap_tokens):
    config = config_for(max_tokens, overlap_tokens, pattern=pattern, merge_small=merge_small)
    for path in sorted(FIXTURES.glob("*.md")):
        text = read_fixture(path.name)

        assert_invariants(text, chunk_markdown(text, config), config)


@settings(max_examples=200)
@given(
    text=st.text(st.sampled_from("ab #-.\n\r\t漢👩\u200d"), max_size=80),
    pattern=st.sampled_from([r"^#", r"a+", r"\s", r"(?=b)", r"^$", r"\r?\n"]),
    max_tokens=st.integers(4, 30),
    merge_small=st.booleans(),
)
def test_generated_text_keeps_every_invariant(text, pattern, max_tokens, merge_small):
    config = config_for(max_tokens, pattern=pattern, merge_small=merge_small)

    assert_invariants(text, chunk_markdown(text, config), config)
