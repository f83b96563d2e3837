"""The fast parser (markdown-it-pyrs) held equal to the reference (markdown-it-py).

Over the sample corpus, CommonMark spec-style examples, generated markdown and the hostile corpus, both
parsers must give the same document structure: the same blocks (kinds, depths, heading levels and texts,
exact character ranges), headings, sections, front matter, table ranges and title; and
``chunk_markdown`` must give the same chunks under both. Inputs the fast parser leaves to the reference
(lone surrogates, nesting too deep) are checked to be left to it, and to give the same structure.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import hostile_corpus
import pytest
from commonmark_examples import COMMONMARK_EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_grammar import MARKDOWN_LINES, markdown_documents

from chunkline import ChunkConfig, chunk_markdown
from chunkline.pyrs_blocks import MAX_PREFIX_COLUMNS, has_tab_in_line_prefix, nests_too_deep_to_parse
from chunkline.structure import (
    FAST_PARSER,
    MAX_CONTAINER_DEPTH,
    REFERENCE_PARSER,
    parse_markdown,
)

SAMPLE_CORPUS = Path(__file__).parent.parent / "sample_corpus"
FIXTURES = Path(__file__).parent / "fixtures" / "markdown"

#: Configs whose chunks depend on the blocks: small budgets split sections at block boundaries.
CONFIGS = {
    "headings-64": {"max_tokens": 64, "overlap_tokens": 8},
    "headings-512": {},
    "scored-48": {"strategy": "scored", "max_tokens": 48, "overlap_tokens": 0},
    "sections-40": {"strategy": "sections", "max_tokens": 40, "overlap_tokens": 0},
}


def structure_of(text: str, parser: str) -> tuple:
    document = parse_markdown(text, parser)
    return (
        document.blocks,
        document.headings,
        document.sections,
        document.front_matter,
        document.table_ranges(),
        document.title,
    )


def assert_same_structure(text: str) -> None:
    fast, reference = structure_of(text, FAST_PARSER), structure_of(text, REFERENCE_PARSER)
    if fast != reference:  # name the first block that differs, with its text
        for fast_block, reference_block in zip(fast[0], reference[0]):
            assert fast_block == reference_block, (
                repr(text[fast_block.start_char : fast_block.end_char]),
                repr(text[reference_block.start_char : reference_block.end_char]),
            )
    assert fast == reference


def assert_same_chunks(text: str, settings_name: str = "headings-64") -> None:
    fast = chunk_markdown(text, ChunkConfig(parser=FAST_PARSER, **CONFIGS[settings_name]), doc_id="d.md")
    reference = chunk_markdown(text, ChunkConfig(parser=REFERENCE_PARSER, **CONFIGS[settings_name]), doc_id="d.md")
    assert fast == reference
    assert "".join(chunk.text for chunk in fast) == text or any(chunk.is_sub_split for chunk in fast)


def sample_files() -> list[Path]:
    return sorted(SAMPLE_CORPUS.rglob("*.md")) + sorted(FIXTURES.glob("*.md"))


@pytest.mark.parametrize("path", sample_files(), ids=lambda path: path.name)
@pytest.mark.slow
def test_sample_corpus_same_structure_and_chunks(path):
    text = path.read_text(encoding="utf-8")
    assert parse_markdown(text, FAST_PARSER).parser == FAST_PARSER
    assert_same_structure(text)
    for settings_name in CONFIGS:
        assert_same_chunks(text, settings_name)


@pytest.mark.parametrize("name", sorted(COMMONMARK_EXAMPLES))
@pytest.mark.slow
def test_commonmark_examples_same_structure(name):
    markdown = COMMONMARK_EXAMPLES[name]
    for text in (markdown, markdown.replace("\n", "\r\n"), markdown.replace("\n", "\r"), "# Doc\n\n" + markdown):
        assert_same_structure(text)


def test_commonmark_examples_are_parsed_by_the_fast_parser_but_for_tabs_and_quotes():
    """The fast parser parses the examples itself, except some with a tab in a line prefix or a quote
    (a lazy continuation line, a table right after it), which it leaves to the reference."""
    left = [name for name, markdown in COMMONMARK_EXAMPLES.items() if parse_markdown(markdown).parser != FAST_PARSER]
    assert all(has_tab_in_line_prefix(COMMONMARK_EXAMPLES[name]) or ">" in COMMONMARK_EXAMPLES[name] for name in left)
    assert len(left) <= len(COMMONMARK_EXAMPLES) // 15, left


def test_commonmark_examples_joined_same_chunks():
    text = "\n".join(f"## {name}\n\n{markdown}" for name, markdown in sorted(COMMONMARK_EXAMPLES.items()))
    assert_same_structure(text)
    for settings_name in CONFIGS:
        assert_same_chunks(text, settings_name)


def hostile_text(name: str) -> str:
    data = hostile_corpus.HOSTILE_FILES[name]()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")  # as input.encoding_errors: replace reads it


@pytest.mark.parametrize("name", sorted(hostile_corpus.HOSTILE_FILES))
@pytest.mark.slow
def test_hostile_corpus_same_structure_and_chunks(name):
    text = hostile_text(name)
    assert_same_structure(text)
    assert_same_chunks(text, "headings-512")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_documents())
@pytest.mark.slow
def test_generated_documents_same_structure(text):
    assert_same_structure(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["", "  ", "    ", "> ", "- ", "  - ", "1. ", ">> ", "\t", " > ", "> - ", "- > ", ">", "-", "2) "]
            ),
            MARKDOWN_LINES,
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
)
@pytest.mark.slow
def test_generated_lines_in_containers_same_structure(lines, line_break):
    text = line_break.join(prefix + line for prefix, line in lines) + line_break
    assert_same_structure(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_documents(), st.sampled_from(sorted(CONFIGS)))
@pytest.mark.slow
def test_generated_documents_same_chunks(text, settings_name):
    assert_same_chunks(text, settings_name)


# ------------------------------------------------------------------------ what the reference parses


def test_a_table_right_after_a_quote_is_left_to_the_reference():
    """markdown-it-py reads the header row as a lazy continuation line of the quote's paragraph, markdown-it.rs
    as the start of a table."""
    text = "> quoted\n| a | b |\n| - | - |\n| 1 | 2 |\n\n# After\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert [block.kind for block in parse_markdown(text, FAST_PARSER).blocks] == ["blockquote", "paragraph", "heading"]
    assert_same_structure(text)
    assert parse_markdown("> quoted\n\n| a | b |\n| - | - |\n", FAST_PARSER).parser == FAST_PARSER


@pytest.mark.parametrize("line_break", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize(
    "lines",
    [["- # Heading one", "\tSetext", "# Heading one"], ["- item", "\tcontinued", "# Next"], ["> \tquoted code"]],
)
def test_a_block_in_a_container_on_a_tab_indented_line_is_left_to_the_reference(lines, line_break):
    """markdown-it.rs counts a tab in a container's indentation as the columns it expands to in its byte
    ranges: the paragraph after ``- # Heading one`` on ``\tSetext`` would end on the next line."""
    text = line_break.join(lines) + line_break
    assert has_tab_in_line_prefix(text)
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert_same_structure(text)


@pytest.mark.parametrize("text", ["\tcode\n\tmore code\n\n# After\n", "# Go\n\n```go\nfunc f() {\n\treturn\n}\n```\n"])
def test_tabs_outside_containers_stay_with_the_fast_parser(text):
    assert has_tab_in_line_prefix(text)
    assert parse_markdown(text, FAST_PARSER).parser == FAST_PARSER
    assert_same_structure(text)
    assert not has_tab_in_line_prefix("a\tb\n- item\twith a tab inside\n")


def test_a_setext_heading_that_could_be_a_table_is_left_to_the_reference():
    """markdown-it-py tries tables before setext headings: ``a|`` over ``--`` is a one-column table there, a
    heading in markdown-it.rs."""
    text = "# Notes\n\na|\n--\n\nSetext heading\n--\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert_same_structure(text)
    assert parse_markdown("# Notes\n\nSetext heading\n--\n", FAST_PARSER).parser == FAST_PARSER


@pytest.mark.parametrize("row", ["-", "\u2028", "\xa0"])
def test_a_table_with_a_row_that_could_end_it_is_left_to_the_reference(row):
    """The parsers disagree on which lines end a table: markdown-it-py strips rows with ``str.strip`` and
    ends a table at an empty list item, markdown-it.rs keeps both as rows."""
    text = f"| a | b |\n| - | - |\n| 1 | 2 |\n{row}\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert_same_structure(text)


@pytest.mark.parametrize("row", ["> quote", "1. item", "## heading", "```", "- item"])
def test_a_table_ends_at_a_block_in_both_parsers(row):
    text = f"| a | b |\n| - | - |\n| 1 | 2 |\n{row}\n"
    assert parse_markdown(text, FAST_PARSER).parser == FAST_PARSER
    assert_same_structure(text)
    assert parse_markdown("| a | b |\n| - | - |\n| 1 | 2 |\nrow | 3\n", FAST_PARSER).parser == FAST_PARSER


def test_a_table_without_a_pipe_in_its_header_row_is_left_to_the_reference():
    """markdown-it.rs makes ``a`` over ``-|`` a one-column table; markdown-it-py wants a pipe in the header."""
    text = "# Notes\n\na\n-|\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert [block.kind for block in parse_markdown(text, FAST_PARSER).blocks] == ["heading", "paragraph"]
    assert_same_structure(text)


@pytest.mark.parametrize(
    ("text", "parser"),
    [
        (">> Setext\n> - \n", REFERENCE_PARSER),  # lazy for the inner quote
        ("> - > a\n> b\n", REFERENCE_PARSER),
        ("> quoted # text\n2) > quoted # text\n", REFERENCE_PARSER),
        ("> - > a\n>   > b\n", FAST_PARSER),
        (" > a\n  > b\n", FAST_PARSER),
        (">> a\n>> b\n", FAST_PARSER),
    ],
)
def test_nested_quote_lines_count_their_markers(text, parser):
    """A line of a quote needs as many ``>`` before anything but indentation as the quote's first line has
    up to its own marker; one with fewer is a lazy line, and the reference decides."""
    assert parse_markdown(text, FAST_PARSER).parser == parser
    assert_same_structure(text)


@pytest.mark.parametrize("lazy_line", ["-", "| a | b |\n| - | - |", "continued text"])
def test_a_quote_with_a_lazy_continuation_line_is_left_to_the_reference(lazy_line):
    text = f"> quoted text\n{lazy_line}\n\n# After\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert_same_structure(text)
    quoted = "".join(f"> {line}\n" for line in lazy_line.split("\n"))
    assert parse_markdown(f"> quoted text\n{quoted}\n# After\n", FAST_PARSER).parser == FAST_PARSER


def test_text_with_lone_surrogates_is_left_to_the_reference():
    text = "# Title \ud800 here\n\n- item \udfff\n- item two\n\n## Next\n\nbody\n"
    assert parse_markdown(text, FAST_PARSER).parser == REFERENCE_PARSER
    assert_same_structure(text)
    assert_same_chunks(text)


@pytest.mark.parametrize("depth", [MAX_CONTAINER_DEPTH // 2 - 1, MAX_CONTAINER_DEPTH // 2])
def test_lists_nested_to_the_depth_limit(depth):
    """A list nested ``depth`` levels by indentation (two markdown-it levels each): below the limit the fast
    parser parses it; at the limit, where markdown-it-py parses the content with leaf rules only, the
    reference does."""
    text = "# Lists\n\n" + "".join("  " * level + f"- level {level}\n" for level in range(depth)) + "\n## After\n"
    expected = FAST_PARSER if 2 * (depth - 1) < MAX_CONTAINER_DEPTH else REFERENCE_PARSER
    assert parse_markdown(text, FAST_PARSER).parser == expected
    assert_same_structure(text)


@pytest.mark.parametrize("depth", [MAX_CONTAINER_DEPTH - 1, MAX_CONTAINER_DEPTH, MAX_CONTAINER_DEPTH + 1])
def test_quotes_nested_to_the_depth_limit(depth):
    text = f"# Quotes\n\n{'> ' * depth}innermost\n{'> ' * depth}# heading inside\n\n## After\n"
    expected = FAST_PARSER if depth - 1 < MAX_CONTAINER_DEPTH else REFERENCE_PARSER
    assert parse_markdown(text, FAST_PARSER).parser == expected
    assert_same_structure(text)


@pytest.mark.slow
def test_ten_thousand_nested_lists_are_left_to_the_reference_before_parsing():
    """markdown-it.rs recurses once per nesting level with no limit: 10,000 nested lists overflow its stack
    and end the process. The text's line prefixes bound the nesting, so such a text never reaches it."""
    text = "".join("  " * level + "- a\n" for level in range(10_000)) + "\n# After\n"
    assert nests_too_deep_to_parse(text)
    document = parse_markdown(text, FAST_PARSER)
    assert document.parser == REFERENCE_PARSER
    assert [heading.heading_text for heading in document.headings] == ["After"]


@pytest.mark.parametrize(
    ("prefix", "too_deep"),
    [
        (" " * (MAX_PREFIX_COLUMNS - 1), False),
        (" " * MAX_PREFIX_COLUMNS, True),
        ("\t" * (MAX_PREFIX_COLUMNS // 4), True),
        ("\t" * (MAX_PREFIX_COLUMNS // 4 - 1) + "  ", False),
        ("> " * (MAX_PREFIX_COLUMNS // 2), True),
        ("- " * (MAX_PREFIX_COLUMNS // 2 - 1) + "x", False),
    ],
)
@pytest.mark.parametrize("line_break", ["\n", "\r\n", "\r"])
def test_prefix_columns_bound_the_nesting(prefix, too_deep, line_break):
    assert nests_too_deep_to_parse(f"{prefix}text{line_break}") is too_deep
    assert nests_too_deep_to_parse(f"first line{line_break}{prefix}text{line_break}") is too_deep
    assert nests_too_deep_to_parse(f"first line {prefix}text{line_break}") is False  # not at a line start


def test_the_fast_parser_parses_in_other_threads():
    """Beam runners chunk in worker threads: the one markdown-it-pyrs parser is shared by all of them."""
    text = (SAMPLE_CORPUS / "README.md").read_text(encoding="utf-8")
    expected = structure_of(text, FAST_PARSER)
    found: list[tuple] = []
    threads = [threading.Thread(target=lambda: found.append(structure_of(text, FAST_PARSER))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert found == [expected] * 4


def test_the_benchmark_comparison_finds_the_sample_corpus_identical():
    spec = importlib.util.spec_from_file_location(
        "bench_chunking", SAMPLE_CORPUS.parent / "benchmarks" / "bench_chunking.py"
    )
    bench_chunking = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench_chunking  # its dataclasses look their module up
    spec.loader.exec_module(bench_chunking)
    corpus = bench_chunking.load_corpus([SAMPLE_CORPUS])
    comparison = bench_chunking.compare_parsers(corpus.documents, ChunkConfig(max_tokens=64, overlap_tokens=8))
    assert comparison.files == len(corpus.documents) > 0
    assert comparison.identical == comparison.files and comparison.differing == []
    assert "identical" in comparison.summary()
