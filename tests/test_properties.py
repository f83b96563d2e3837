"""Property tests: markdown generated from a grammar of blocks, chunked with random budgets.

Every generated document must keep the invariants of conftest.assert_invariants; in addition the
heading split must match the document's sections, protected blocks that fit are never split (boundary
mode), and chunking is deterministic.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, chunk_markdown, parse_markdown
from chunkline.tokenizers import get_token_counter
from conftest import assert_invariants, assert_protected_blocks_whole, exact_token_count, heading_paths_of_sections

# ------------------------------------------------------------------------------------------------
# The grammar
# ------------------------------------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "the", "chunk", "token", "limit", "Beam", "pipeline", "naïve", "Grüße", "漢字",
        "日本語の文章です。",
        "emoji👩\u200d💻", "🐦", "e\u0301", "x=1;", "`code`", "**bold**", "_it_", "[link](http://a.b/c)",
        "#hash", "<b>", "&amp;", "1.", "-", "|", "...", "?!", "\t", "\u2028", "\x85", "\x0c", "\x00",
        "a-very-long-identifier_with_many_parts_and_no_spaces_at_all_0123456789",
    ]
)
# Any character except surrogates; line breaks included, so raw text can break the block structure.
ANY_CHARACTER = st.characters(blacklist_categories=("Cs",))
NO_BREAK_CHARACTER = st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n")

inline = st.one_of(
    st.lists(WORDS, min_size=1, max_size=14).map(" ".join),
    st.text(NO_BREAK_CHARACTER, min_size=1, max_size=30),
)
lines = st.lists(inline, min_size=1, max_size=4)


def line_block(items: list[str]) -> str:
    return "\n".join(items) + "\n"


atx_heading = st.builds(
    lambda level, text, closing: f"{'#' * level} {text}{' ' + '#' * level if closing else ''}\n",
    st.integers(1, 6),
    inline,
    st.booleans(),
)
setext_heading = st.builds(
    lambda text, char, width: f"{text}\n{char * width}\n",
    st.lists(WORDS, min_size=1, max_size=5).map(" ".join),
    st.sampled_from("=-"),
    st.integers(1, 12),
)
paragraph = lines.map(line_block)


@st.composite
def fenced_code(draw) -> str:
    char = draw(st.sampled_from("`~"))
    width = draw(st.integers(3, 5))
    body = draw(st.lists(st.one_of(inline, st.just("# not a heading"), st.just("```"), st.just("")), max_size=8))
    info = draw(st.sampled_from(["", "python", "bash", "markdown"]))
    closing = char * draw(st.integers(width, width + 2)) if draw(st.integers(0, 9)) else ""  # rarely unclosed
    return f"{char * width}{info}\n" + "".join(f"{line}\n" for line in body) + (f"{closing}\n" if closing else "")


indented_code = st.lists(st.one_of(inline, st.just("# not a heading")), min_size=1, max_size=5).flatmap(
    lambda items: st.sampled_from(["    ", "\t"]).map(lambda indent: "".join(f"{indent}{item}\n" for item in items))
)


@st.composite
def bullet_list(draw) -> str:
    marker = draw(st.sampled_from(["-", "*", "+", "1.", "2)"]))
    out = []
    for _ in range(draw(st.integers(1, 5))):
        out.append(f"{marker} {draw(st.one_of(inline, st.just('# heading in an item')))}\n")
        for continuation in draw(st.lists(inline, max_size=2)):
            out.append(f"{' ' * (len(marker) + 1)}{continuation}\n")
        for child in draw(st.lists(inline, max_size=3)):
            out.append(f"{' ' * (len(marker) + 1)}- {child}\n")
        if draw(st.integers(0, 5)) == 0:
            out.append("\n")  # a loose list
    return "".join(out)


@st.composite
def table(draw) -> str:
    columns = draw(st.integers(1, 4))
    cell = st.lists(WORDS, min_size=1, max_size=3).map(" ".join).map(lambda s: s.replace("|", "/"))
    rows = draw(st.lists(st.lists(cell, min_size=columns, max_size=columns), min_size=1, max_size=6))
    align = draw(st.lists(st.sampled_from(["---", ":--", "--:", ":-:"]), min_size=columns, max_size=columns))
    return "".join("| " + " | ".join(row) + " |\n" for row in [rows[0], align, *rows[1:]])


block_quote = st.lists(st.one_of(inline, st.just("# quoted heading"), st.just("")), min_size=1, max_size=4).map(
    lambda items: "".join(f"> {item}\n" for item in items)
)
html_block = st.one_of(
    lines.map(lambda items: "<div>\n" + line_block(items) + "</div>\n"),
    lines.map(lambda items: "<!--\n" + line_block(items) + "-->\n"),
)
thematic_break = st.sampled_from(["***\n", "---\n", "___\n", " - - -\n"])
raw_text = st.text(ANY_CHARACTER, min_size=1, max_size=60)

block = st.one_of(
    atx_heading, atx_heading, setext_heading, paragraph, paragraph, fenced_code(), indented_code,
    bullet_list(), table(), block_quote, html_block, thematic_break, raw_text,
)

front_matter = st.one_of(
    st.just(""),
    st.dictionaries(
        st.sampled_from(["title", "tags", "draft", "weight"]), st.one_of(st.integers(0, 9), WORDS), max_size=3
    ).map(lambda data: "---\n" + "".join(f"{key}: {value!r}\n" for key, value in data.items()) + "---\n"),
)


@st.composite
def markdown_documents(draw) -> str:
    """A non-empty markdown document (the empty document has its own test) with random line endings."""
    blocks = draw(st.lists(block, min_size=1, max_size=12))
    separators = draw(st.lists(st.sampled_from(["\n", "", "\n\n"]), min_size=len(blocks), max_size=len(blocks)))
    text = draw(front_matter) + "".join(b + separator for b, separator in zip(blocks, separators))
    pieces = text.split("\n")
    endings = draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(pieces) - 1, max_size=len(pieces) - 1))
    if draw(st.booleans()):  # often one ending for the whole document, as real files have
        endings = [endings[0]] * len(endings) if endings else endings
    text = pieces[0] + "".join(ending + piece for ending, piece in zip(endings, pieces[1:]))
    if draw(st.integers(0, 9)) == 0:
        text = "\ufeff" + text
    return text


@st.composite
def budgets(draw, sub_split: str) -> ChunkConfig:
    max_tokens = draw(st.integers(8, 300))
    overlap_tokens = draw(st.integers(0, max_tokens - 1))
    return ChunkConfig.from_dict(
        {"max_tokens": max_tokens, "overlap_tokens": overlap_tokens, "headings": {"sub_split": sub_split}}
    )


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------


def assert_heading_split_matches_sections(text: str, chunks, config: ChunkConfig) -> None:
    """With every heading level splitting, each section is one chunk when it fits, or several sub-split
    chunks covering exactly that section when it does not; every chunk carries its section's path."""
    counter = get_token_counter(config.tokenizer)
    document = parse_markdown(text)
    expected_paths = heading_paths_of_sections(document)
    for chunk in chunks:
        assert chunk.heading_path == expected_paths[chunk.section_index], chunk.chunk_index
    for number, section in enumerate(document.sections):
        inside = [c for c in chunks if section.start_char <= c.start_char < section.end_char]
        assert inside, f"section {number} has no chunk"
        assert inside[0].start_char == section.start_char and inside[-1].end_char == section.end_char
        assert all(c.section_index == number for c in inside)
        if exact_token_count(counter, text[section.start_char : section.end_char]) <= config.max_tokens:
            assert [(c.start_char, c.end_char, c.is_sub_split) for c in inside] == [
                (section.start_char, section.end_char, False)
            ]
        else:
            assert len(inside) >= 2 and all(c.is_sub_split for c in inside)


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


@settings(max_examples=1000)
@given(text=markdown_documents(), config=budgets("boundaries"))
def test_boundary_sub_split_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config, doc_id="docs/generated.md")

    assert_invariants(text, chunks, config, doc_id="docs/generated.md")
    assert_heading_split_matches_sections(text, chunks, config)
    assert_protected_blocks_whole(text, chunks, config.max_tokens, get_token_counter(config.tokenizer))


@settings(max_examples=500)
@given(text=markdown_documents(), config=budgets("window"))
def test_window_sub_split_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config, doc_id="docs/generated.md")

    assert_invariants(text, chunks, config, doc_id="docs/generated.md")
    assert_heading_split_matches_sections(text, chunks, config)


@settings(max_examples=150)
@given(
    text=markdown_documents(),
    config=st.builds(
        lambda levels, max_tokens, sub_split: ChunkConfig.from_dict(
            {
                "max_tokens": max_tokens,
                "overlap_tokens": max_tokens // 5,
                "headings": {
                    "min_heading_level": min(levels),
                    "max_heading_level": max(levels),
                    "sub_split": sub_split,
                },
            }
        ),
        st.tuples(st.integers(1, 6), st.integers(1, 6)),
        st.integers(16, 200),
        st.sampled_from(["boundaries", "window"]),
    ),
)
def test_heading_level_range_keeps_every_invariant(text, config):
    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    params = config.params
    starts = {c.start_char for c in chunks if not c.is_sub_split}
    for heading in parse_markdown(text).headings:
        in_range = params.min_heading_level <= heading.heading_level <= params.max_heading_level
        if in_range and text[: heading.start_char].strip():
            assert any(c.start_char == heading.start_char for c in chunks), heading
        if not in_range:
            assert heading.start_char not in starts or heading.start_char == 0


@settings(max_examples=100)
@given(text=markdown_documents(), config=st.sampled_from(["boundaries", "window"]).flatmap(budgets))
def test_chunking_is_deterministic(text, config):
    first = chunk_markdown(text, config, doc_id="a/b.md", source_uri="memory://a/b.md")
    second = chunk_markdown(text, config, doc_id="a/b.md", source_uri="memory://a/b.md")

    assert first == second
    assert [c.to_dict() for c in first] == [c.to_dict() for c in second]
