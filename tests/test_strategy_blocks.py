"""The ``blocks`` strategy: atomic blocks packed up to a soft size target, a chunk per heading (seed 001)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, assert_invariants, assert_protected_blocks_whole, exact_token_count
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import MARKDOWN_LINES

import chunkline
from chunkline import ChunkConfig, ConfigError, ReconstructionError, chunk_markdown, get_token_counter, parse_markdown
from chunkline.strategies.blocks import (
    SOFT_LIMIT_KINDS,
    BlocksParams,
    atomic_blocks,
    is_soft_limit_chunk,
    soft_limit_spans,
)

GUIDE = """\
---
title: Field guide
---

Preamble paragraph before any heading, with a few words in it.

# Installing the toolchain

The toolchain ships as one installer per platform. Read the whole section before running anything, since
some steps depend on choices made earlier. Café owners and 🦀 fans alike will find the defaults sensible.

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

Behind a proxy, set `HTTPS_PROXY` before running the installer.

    # indented code, not a heading
    export HTTPS_PROXY=http://proxy.example:3128

> A quote with a line that looks like
> # a heading but is only quoted text.

<details>
<summary>Raw HTML block</summary>
</details>

[rustup]: https://rustup.rs "a link reference definition"

## Troubleshooting

If `rustc --version` prints nothing, open a new terminal. 日本語のテキストも正しく扱われます。
"""


def blocks_config(**params) -> ChunkConfig:
    """``blocks`` with these parameters, packing atoms by itself (``min_tokens: 0``, no fragment merging)
    unless ``min_tokens`` is given."""
    common = {key: params.pop(key) for key in ("max_tokens", "min_tokens") if key in params}
    common.setdefault("min_tokens", 0)
    return ChunkConfig(strategy="blocks", params=BlocksParams(**params), overlap_tokens=0, **common)


def assert_partition(text: str, chunks) -> None:
    """Every character is in exactly one chunk: the chunks tile the text end to end."""
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(text)
    for previous, chunk in zip(chunks, chunks[1:]):
        assert previous.end_char == chunk.start_char


def assert_within_limit_or_soft(text: str, chunks, max_tokens: int) -> None:
    """No chunk is over ``max_tokens`` unless it is exactly one top-level code block (the soft bound)."""
    document = parse_markdown(text)
    soft = soft_limit_spans(document)
    for chunk in chunks:
        if chunk.token_count > max_tokens:
            assert (chunk.start_char, chunk.end_char) in soft, chunk
            assert is_soft_limit_chunk(document, chunk.start_char, chunk.end_char)


def long_fence(lines: int) -> str:
    return "```rust\n" + "".join(f"let value_{n} = compute({n}); // step {n}\n" for n in range(lines)) + "```\n"


# --------------------------------------------------------------------------------------------------
# Atoms
# --------------------------------------------------------------------------------------------------


def test_atoms_partition_the_text_and_split_lists_into_items():
    document = parse_markdown(GUIDE)
    atoms = atomic_blocks(document)
    assert atoms[0].start_char == 0 and atoms[-1].end_char == len(GUIDE)
    assert all(a.end_char == b.start_char for a, b in zip(atoms, atoms[1:]))
    kinds = [atom.kind for atom in atoms]
    assert kinds[0] == "front_matter"
    assert kinds.count("list_item") == 3
    assert kinds.count("heading") == len(document.headings) == 5  # setext included, '#' in code and quote not
    for kind in ("fence", "code_block", "table", "blockquote", "html_block", "hr", "paragraph"):
        assert kind in kinds
    # Blank lines and the link reference definition belong to the atom before them.
    html = next(atom for atom in atoms if atom.kind == "html_block")
    assert GUIDE[html.start_char : html.end_char].endswith('rustup.rs "a link reference definition"\n\n')


def test_empty_and_blank_documents():
    assert atomic_blocks(parse_markdown("")) == [(0, 0, None)]
    for text in ("", "\n\n  \n"):
        chunks = chunk_markdown(text, ChunkConfig(strategy="blocks"))
        assert len(chunks) == 1 and chunks[0].text == text


# --------------------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------------------


def test_every_heading_starts_a_chunk_with_its_path(check_invariants):
    config = ChunkConfig(strategy="blocks", min_tokens=0)
    chunks = chunk_markdown(GUIDE, config)
    check_invariants(GUIDE, chunks, config)
    assert_partition(GUIDE, chunks)
    starts = {chunk.start_char: chunk for chunk in chunks}
    paths = {
        "# Installing": ("Installing the toolchain",),
        "## Prerequisites": ("Installing the toolchain", "Prerequisites"),
        "Configuration\n---": ("Installing the toolchain", "Configuration"),
        "### Proxies": ("Installing the toolchain", "Configuration", "Proxies"),
        "## Troubleshooting": ("Installing the toolchain", "Troubleshooting"),
    }
    for heading, path in paths.items():
        chunk = starts[GUIDE.index(heading)]
        assert chunk.heading_path == path
        assert len(chunk.text) > len(heading) + 20  # the heading sticks to the content after it
    assert chunks[0].heading_path == ()
    assert "Preamble" in chunks[0].text


def test_atoms_are_packed_up_to_the_byte_target():
    paragraphs = "".join(f"Paragraph {n} has a handful of words to weigh about eighty bytes.\n\n" for n in range(40))
    text = "# Packed\n\n" + paragraphs
    chunks = chunk_markdown(text, blocks_config(max_bytes=300))
    assert_partition(text, chunks)
    assert len(chunks) > 5
    for chunk in chunks:
        assert len(chunk.text.encode("utf-8")) <= 300
        assert chunk.text.endswith("\n\n")  # cut between paragraphs, never inside one
    # Greedy: each chunk but the last is full enough that the next paragraph would not fit.
    for chunk, following in zip(chunks, chunks[1:]):
        next_paragraph = following.text.split("\n\n")[0] + "\n\n"
        assert len((chunk.text + next_paragraph).encode("utf-8")) > 300


def test_one_atom_over_the_target_is_a_chunk_of_its_own_not_cut():
    table = "| a | b |\n| - | - |\n" + "".join(f"| row {n} | value {n} |\n" for n in range(30))
    text = "Intro.\n\n" + table + "\nOutro.\n"
    chunks = chunk_markdown(text, blocks_config(max_bytes=100, max_tokens=1000))
    assert [chunk.text for chunk in chunks] == ["Intro.\n\n", table + "\n", "Outro.\n"]


def test_a_code_block_over_the_target_is_alone_with_its_heading():
    fence = long_fence(20)
    text = "# Listing\n\n" + fence + "\nAfter the listing.\n\nMore words.\n"
    chunks = chunk_markdown(text, blocks_config(max_bytes=200, max_tokens=2000))
    assert chunks[0].text == "# Listing\n\n" + fence + "\n"
    assert [chunk.text for chunk in chunks[1:]] == ["After the listing.\n\nMore words.\n"]
    # Later in a section, the code block is alone.
    text = "# Listing\n\nBefore.\n\n" + fence + "\nAfter.\n"
    chunks = chunk_markdown(text, blocks_config(max_bytes=200, max_tokens=2000))
    assert [chunk.text for chunk in chunks] == ["# Listing\n\nBefore.\n\n", fence + "\n", "After.\n"]


def test_fence_over_max_tokens_is_kept_whole_as_the_soft_bound(counter):
    fence = long_fence(60)
    text = "# Listing\n\nBefore the code.\n\n" + fence + "\nAfter the code.\n"
    config = blocks_config(max_tokens=100)
    chunks = chunk_markdown(text, config)
    assert_partition(text, chunks)
    over = [chunk for chunk in chunks if chunk.token_count > 100]
    assert len(over) == 1 and over[0].text == fence + "\n"
    assert not over[0].is_sub_split
    assert over[0].token_count == exact_token_count(counter, over[0].text)
    assert_within_limit_or_soft(text, chunks, 100)
    assert chunkline.reconstruct(chunks) == text
    assert {"fence", "code_block"} == SOFT_LIMIT_KINDS


@pytest.mark.parametrize("target", ["bytes", "tokens"])
@pytest.mark.parametrize("after", ["", "\nAfter the code.\n", "\n\n\nAfter the code.\n"])
def test_fence_of_exactly_max_tokens_is_whole_and_its_blank_lines_do_not_push_it_over(counter, target, after):
    fence = long_fence(8)
    max_tokens = exact_token_count(counter, fence.rstrip())
    assert exact_token_count(counter, fence + "\n") > max_tokens  # the line break after the fence costs a token
    text = "# Listing\n\nBefore the code.\n\n" + fence + "\n" + after
    config = blocks_config(target=target, max_tokens=max_tokens)
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert_partition(text, chunks)
    assert max(chunk.token_count for chunk in chunks) <= max_tokens
    assert any(chunk.text.startswith(fence.rstrip()) for chunk in chunks)
    assert assert_protected_blocks_whole(text, chunks, max_tokens, counter) == 1


def test_code_under_the_byte_target_but_over_max_tokens_is_kept_whole_on_its_own():
    fence = long_fence(60)
    before = "Before the code, a paragraph of a few words.\n\n"
    after = "After the code, another paragraph.\n"
    text = before + fence + "\n" + after
    chunks = chunk_markdown(text, blocks_config(max_bytes=100_000, max_tokens=100))
    assert [chunk.text for chunk in chunks] == [before, fence + "\n", after]
    assert_within_limit_or_soft(text, chunks, 100)


def test_heading_is_split_off_a_code_block_over_max_tokens():
    fence = long_fence(60)
    text = "## Only code\n\n" + fence
    chunks = chunk_markdown(text, blocks_config(max_tokens=100))
    assert [chunk.text for chunk in chunks] == ["## Only code\n\n", fence]
    assert all(chunk.heading_path == ("Only code",) for chunk in chunks)


def test_indented_code_over_max_tokens_is_kept_whole_too():
    code = "".join(f"    line {n} of indented code with some words\n" for n in range(80))
    text = "Intro paragraph.\n\n" + code + "\nOutro.\n"
    chunks = chunk_markdown(text, blocks_config(max_tokens=64))
    assert any(chunk.text == code + "\n" and chunk.token_count > 64 for chunk in chunks)
    assert_within_limit_or_soft(text, chunks, 64)


def test_without_never_split_code_every_chunk_keeps_the_limit(check_invariants):
    text = "# Listing\n\nBefore the code.\n\n" + long_fence(60) + "\nAfter the code.\n"
    config = blocks_config(max_tokens=100, never_split_code=False)
    chunks = chunk_markdown(text, config)
    check_invariants(text, chunks, config)
    assert_partition(text, chunks)
    assert any(chunk.is_sub_split for chunk in chunks)


def test_small_code_inside_a_chunk_over_max_tokens_is_not_cut(counter):
    """A chunk over max_tokens is split, but code (and tables, list items) that fit stay whole."""
    fence = long_fence(5)
    words = "".join(f"Sentence {n} is a short sentence in a long paragraph. " for n in range(60)) + "\n\n"
    text = words + fence + "\n" + words
    config = blocks_config(max_bytes=100_000, max_tokens=200)
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert_partition(text, chunks)
    assert assert_protected_blocks_whole(text, chunks, 200, counter) >= 1


def test_token_target_packs_up_to_max_tokens(check_invariants, counter):
    text = GUIDE * 4
    config = blocks_config(target="tokens", max_tokens=120)
    chunks = chunk_markdown(text, config)
    check_invariants(text, chunks, config)
    assert_partition(text, chunks)
    assert_protected_blocks_whole(text, chunks, 120, counter)
    assert max(chunk.token_count for chunk in chunks) > 60


def test_strip_headings_leaves_headings_to_the_breadcrumb():
    config = blocks_config(strip_headings=True)
    chunks = chunk_markdown(GUIDE, config)
    document = parse_markdown(GUIDE)
    for heading in document.headings:
        for chunk in chunks:
            assert not (chunk.start_char <= heading.start_char < chunk.end_char)
    proxies = next(chunk for chunk in chunks if chunk.text.startswith("Behind a proxy"))
    assert proxies.heading_path == ("Installing the toolchain", "Configuration", "Proxies")
    # Without the heading lines, the document cannot be rebuilt: reconstruct() reports the gap.
    with pytest.raises(ReconstructionError):
        chunkline.reconstruct(chunks)
    # Everything but the heading atoms is still there, once.
    kept = "".join(chunk.text for chunk in chunks)
    assert len(kept) == len(GUIDE) - sum(
        atom.end_char - atom.start_char for atom in atomic_blocks(document) if atom.kind == "heading"
    )


@pytest.mark.parametrize(
    "text",
    [
        "x",
        "\ufeff# BOM heading\r\n\r\nline one\r\nline two\r\n" * 30,
        "tab\there\x00nul and e\u0301 combining 👩‍👩‍👧 family\r" * 100,
        "```\nunclosed fence\n" + "code line\n" * 50,
        "| a | b |\n| - | - |\n" + "| cell | cell |\n" * 300,
        "- item\n" * 400,
        "Setext\n===\n\n" + "# ATX\n" * 20,
    ],
)
@pytest.mark.parametrize("target", ["bytes", "tokens"])
def test_invariants_on_edge_cases(check_invariants, text, target):
    config = blocks_config(target=target, max_bytes=200, max_tokens=400)
    chunks = chunk_markdown(text, config)
    check_invariants(text, chunks, config)
    assert_partition(text, chunks)


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.md")))
def test_invariants_on_every_fixture(check_invariants, read_fixture, counter, name):
    text = read_fixture(name)
    for config in [
        ChunkConfig(strategy="blocks"),
        blocks_config(max_bytes=200, max_tokens=400),
        blocks_config(target="tokens", max_tokens=64, never_split_code=False),
    ]:
        chunks = chunk_markdown(text, config)
        check_invariants(text, chunks, config)
        assert_partition(text, chunks)
        assert_protected_blocks_whole(text, chunks, config.max_tokens, counter)
    # With the soft bound, only whole top-level code blocks may be over the limit.
    chunks = chunk_markdown(text, blocks_config(target="tokens", max_tokens=64))
    assert_partition(text, chunks)
    assert_within_limit_or_soft(text, chunks, 64)


def test_defaults_on_realistic_markdown(check_invariants):
    text = GUIDE * 10
    config = ChunkConfig(strategy="blocks")
    chunks = chunk_markdown(text, config, doc_id="guide.md")
    check_invariants(text, chunks, config, doc_id="guide.md")
    assert_partition(text, chunks)
    assert chunks == chunk_markdown(text, config, doc_id="guide.md")  # deterministic


@settings(max_examples=60)
@given(
    lines=st.lists(MARKDOWN_LINES, max_size=80),
    newline=st.sampled_from(["\n", "\r\n"]),
    target=st.sampled_from(["bytes", "tokens"]),
    never_split_code=st.booleans(),
)
def test_generated_markdown_keeps_the_partition_and_the_limit(lines, newline, target, never_split_code):
    text = newline.join(lines)
    config = blocks_config(target=target, max_bytes=150, max_tokens=40, never_split_code=never_split_code)
    chunks = chunk_markdown(text, config)
    assert_partition(text, chunks)
    assert chunkline.reconstruct(chunks) == text
    counter = get_token_counter("cl100k_base")
    for chunk in chunks:
        assert chunk.text == text[chunk.start_char : chunk.end_char]
        assert chunk.token_count == exact_token_count(counter, chunk.text)
    if never_split_code:
        assert_within_limit_or_soft(text, chunks, 40)
    else:
        assert_invariants(text, chunks, config)
    document = parse_markdown(text)
    for block in document.blocks:
        if block.depth == 0 and block.kind in SOFT_LIMIT_KINDS and never_split_code:
            assert any(c.start_char <= block.start_char and block.end_char <= c.end_char for c in chunks)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        ({"target": "words"}, "target"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_bytes": -5}, "max_bytes"),
        ({"max_bytes": "1000"}, "max_bytes"),
        ({"never_split_code": "yes"}, "never_split_code"),
        ({"strip_headings": 1}, "strip_headings"),
    ],
)
def test_invalid_parameters_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        BlocksParams(**params)
    with pytest.raises(ConfigError, match=message):
        ChunkConfig.from_dict({"strategy": "blocks", "blocks": params})


def test_strategy_is_registered_with_its_parameters():
    strategy = chunkline.get_strategy("blocks")
    assert [name for name, _, _ in strategy.parameters()] == [
        "target",
        "max_bytes",
        "never_split_code",
        "strip_headings",
    ]
    config = ChunkConfig.from_dict({"strategy": "blocks", "blocks": {"target": "tokens", "strip_headings": True}})
    assert config.params == BlocksParams(target="tokens", strip_headings=True)
