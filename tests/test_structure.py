"""``parse_markdown``: CommonMark blocks with exact ranges, front matter, title and sections."""

from __future__ import annotations

import pytest
from conftest import heading_paths_of_sections

from chunkline import parse_markdown

# 27 lines; the block table below names them by 1-based line number.
KITCHEN_SINK_LINES = [
    "# Title",  # 1
    "",
    "Para line one",  # 3
    "line two",
    "",
    "```py",  # 6
    "x = 1",
    "```",
    "",
    "| a | b |",  # 10
    "|---|---|",
    "| 1 | 2 |",
    "",
    "- item one",  # 14
    "- item two",
    "",
    "> quoted",  # 17
    "",
    "    indented code",  # 19
    "",
    "<div>",  # 21
    "html",
    "</div>",
    "",
    "***",  # 25
    "Setext",  # 26
    "---",
]


def line_range(lines: list[str], first: int, last: int, line_break: str = "\n") -> tuple[int, int]:
    """Character range of 1-based lines ``first..last``, line breaks included."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + len(line_break))
    return starts[first - 1], starts[last]


@pytest.mark.parametrize("line_break", ["\n", "\r\n", "\r"])
def test_block_kinds_and_exact_line_ranges(line_break):
    text = line_break.join(KITCHEN_SINK_LINES) + line_break
    document = parse_markdown(text)

    def block(kind, first, last, depth=0, level=0, title=""):
        return (kind, *line_range(KITCHEN_SINK_LINES, first, last, line_break), depth, level, title)

    assert [tuple(b) for b in document.blocks] == [
        block("heading", 1, 1, level=1, title="Title"),
        block("paragraph", 3, 4),
        block("fence", 6, 8),
        block("table", 10, 12),
        block("bullet_list", 14, 16),  # a list keeps the blank line that ends it
        block("list_item", 14, 14, depth=1),
        block("paragraph", 14, 14, depth=2),
        block("list_item", 15, 16, depth=1),
        block("paragraph", 15, 15, depth=2),
        block("blockquote", 17, 17),
        block("paragraph", 17, 17, depth=1),
        block("code_block", 19, 19),
        block("html_block", 21, 23),
        block("hr", 25, 25),
        block("heading", 26, 27, level=2, title="Setext"),
    ]
    assert [h.heading_text for h in document.headings] == ["Title", "Setext"]


def test_blocks_within_a_range_match_the_whole_document_blocks():
    text = "\n".join(KITCHEN_SINK_LINES) + "\n"
    start, end = line_range(KITCHEN_SINK_LINES, 6, 16)

    fresh = parse_markdown(text).blocks_within(start, end)  # before .blocks is ever built
    document = parse_markdown(text)
    assert fresh == [b for b in document.blocks if start <= b.start_char and b.end_char <= end]
    assert [b.kind for b in fresh] == [
        "fence",
        "table",
        "bullet_list",
        "list_item",
        "paragraph",
        "list_item",
        "paragraph",
    ]
    assert document.blocks_within(start, end) == fresh


def test_hash_lines_in_code_and_html_are_not_headings(read_fixture):
    document = parse_markdown(read_fixture("hash_lines_in_code_and_html.md"))

    assert [(h.heading_level, h.heading_text) for h in document.headings] == [
        (1, "Real heading"),
        (2, "Second real heading"),
    ]
    kinds = [b.kind for b in document.blocks]
    assert kinds.count("fence") == 3
    assert kinds.count("code_block") == 1
    assert kinds.count("html_block") == 2


def test_headings_in_quotes_and_list_items_are_blocks_but_not_document_headings(read_fixture):
    document = parse_markdown(read_fixture("headings_in_quotes_and_list_items.md"))

    assert [h.heading_text for h in document.headings] == ["Guide", "Real subsection"]
    nested = [(b.heading_text, b.depth) for b in document.blocks if b.kind == "heading" and b.depth > 0]
    assert [title for title, _ in nested] == [
        "Quoted heading",
        "Heading in a list item",
        "Another one",
        "Numbered item heading",
    ]
    assert all(depth >= 1 for _, depth in nested)


def test_setext_headings(read_fixture):
    document = parse_markdown(read_fixture("setext_headings.md"))

    assert [(h.heading_level, h.heading_text) for h in document.headings] == [
        (1, "Project Title"),
        (2, "Usage"),
        (1, "Multi-line setext heading"),
    ]
    assert "hr" in [b.kind for b in document.blocks]


# --------------------------------------------------------------------------------------------------
# front matter
# --------------------------------------------------------------------------------------------------


def test_yaml_front_matter_is_parsed_and_hides_its_lines_from_markdown(read_fixture):
    text = read_fixture("front_matter_yaml.md")
    document = parse_markdown(text)

    front_matter = document.front_matter
    assert front_matter is not None and front_matter.error is None
    assert front_matter.format == "yaml"
    assert front_matter.data == {
        "title": "Front Matter Title",
        "tags": ["alpha", "beta"],
        "summary": "this line would be a setext heading without front matter",
    }
    assert (front_matter.start_char, front_matter.end_char) == (0, text.index("# Document Heading"))
    # Neither "# a YAML comment" nor the setext-looking "summary: ...\n---" is a heading.
    assert [h.heading_text for h in document.headings] == ["Document Heading"]
    assert document.blocks[0] == ("front_matter", 0, front_matter.end_char, 0, 0, "")
    assert all(b.start_char >= front_matter.end_char for b in document.blocks[1:])
    assert document.title == "Front Matter Title"


def test_toml_front_matter_is_parsed(read_fixture):
    text = read_fixture("front_matter_toml.md")
    document = parse_markdown(text)

    front_matter = document.front_matter
    assert front_matter is not None and front_matter.error is None
    assert front_matter.format == "toml"
    assert front_matter.data == {"title": "TOML Title", "draft": False, "params": {"weight": 3}}
    assert front_matter.end_char == text.index("\nIntro line.")
    assert [h.heading_text for h in document.headings] == ["First"]
    assert document.title == "TOML Title"


@pytest.mark.parametrize(
    "text",
    [
        "---\ntitle: Dots\n...\n# H\n",
        "\ufeff---\ntitle: Dots\n---\n# H\n",
        "---\r\ntitle: Dots\r\n---\r\n# H\r\n",
        "--- \ntitle: Dots\n---  \n# H\n",
    ],
    ids=["dots-closing", "after-bom", "crlf", "trailing-spaces"],
)
def test_front_matter_variants(text):
    document = parse_markdown(text)

    assert document.front_matter is not None
    assert document.front_matter.data == {"title": "Dots"}
    assert document.front_matter.end_char == text.index("# H")
    assert [h.heading_text for h in document.headings] == ["H"]


@pytest.mark.parametrize("text", ["---\n---\n# H\n", "+++\n+++\n# H\n"])
def test_empty_front_matter_is_an_empty_mapping(text):
    document = parse_markdown(text)
    assert document.front_matter.data == {}
    assert document.front_matter.error is None
    assert [h.heading_text for h in document.headings] == ["H"]


def test_yaml_python_tags_are_not_executed(tmp_path):
    marker = tmp_path / "executed"
    text = f'---\nrun: !!python/object/apply:os.system ["touch {marker}"]\n---\n# After\n'
    document = parse_markdown(text)

    assert not marker.exists()
    assert document.front_matter is not None
    assert document.front_matter.data is None
    assert document.front_matter.error and "yaml" in document.front_matter.error
    assert [h.heading_text for h in document.headings] == ["After"]
    assert document.title == "After"


def test_front_matter_that_cannot_be_parsed_is_reported_not_raised():
    document = parse_markdown("---\ntitle: [unclosed\n---\n# H\n")

    assert document.front_matter is not None
    assert document.front_matter.data is None
    assert "could not be parsed" in document.front_matter.error
    assert [h.heading_text for h in document.headings] == ["H"]


@pytest.mark.parametrize(
    "text, headings",
    [
        ("---\n- a list\n- not a mapping\n---\n# H\n", ["H"]),
        ("---\n42\n---\n# H\n", ["42", "H"]),  # "42" underlined by "---" is a setext heading
    ],
)
def test_fenced_block_that_is_not_a_mapping_is_markdown(text, headings):
    document = parse_markdown(text)

    assert document.front_matter is None
    assert [h.heading_text for h in document.headings] == headings


def test_unclosed_front_matter_is_not_front_matter(read_fixture):
    document = parse_markdown(read_fixture("front_matter_unclosed.md"))

    assert document.front_matter is None
    assert [h.heading_text for h in document.headings] == ["Heading After"]


def test_front_matter_only_at_the_very_start():
    document = parse_markdown("\n---\ntitle: late\n---\n")

    assert document.front_matter is None
    # Not front matter, so "title: late" underlined by "---" is a setext heading.
    assert [(h.heading_level, h.heading_text) for h in document.headings] == [(2, "title: late")]


# --------------------------------------------------------------------------------------------------
# title and sections
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, title",
    [
        ("## Sub first\n\n# Main Title\n\n# Another\n", "Main Title"),
        ("Main Setext\n===\n", "Main Setext"),
        ("## Only a level two\n", None),
        ("> # Quoted h1\n", None),
        ("---\ntitle: '  Spaced  '\n---\n# Heading\n", "Spaced"),
        ("---\ntitle: ''\n---\n# Heading\n", "Heading"),
        ("", None),
    ],
)
def test_title_is_front_matter_title_else_first_level_one_heading(text, title):
    assert parse_markdown(text).title == title


def test_sections_have_preamble_and_parent_links(read_fixture):
    text = read_fixture("preamble_then_sections.md")
    document = parse_markdown(text)

    assert [(s.index, s.heading, s.level, s.parent) for s in document.sections] == [
        (0, None, 0, None),
        (1, "First Section", 1, None),
        (2, "Second Section", 1, None),
    ]
    assert document.sections[0].end_char == text.index("# First Section")


def test_section_parents_follow_the_heading_hierarchy(read_fixture):
    text = read_fixture("mdvdb_heading_hierarchy.md")
    document = parse_markdown(text)

    assert [(s.heading, s.level, s.parent) for s in document.sections] == [
        ("Getting Started", 1, None),
        ("Installation", 2, 0),
        ("From Source", 3, 1),
        ("Configuration", 2, 0),
        ("API Reference", 1, None),
    ]
    assert heading_paths_of_sections(document)[2] == ("Getting Started", "Installation", "From Source")
    assert [(s.start_char, s.end_char) for s in document.sections] == [
        (0, text.index("## Installation")),
        (text.index("## Installation"), text.index("### From Source")),
        (text.index("### From Source"), text.index("## Configuration")),
        (text.index("## Configuration"), text.index("# API Reference")),
        (text.index("# API Reference"), len(text)),
    ]


def test_skipped_heading_levels_link_to_the_nearest_shallower_section():
    document = parse_markdown("# A\n### C\n## B\n#### D\n# E\n")

    assert [(s.heading, s.parent) for s in document.sections] == [
        ("A", None),
        ("C", 0),
        ("B", 0),
        ("D", 2),
        ("E", None),
    ]


def test_whitespace_before_the_first_heading_is_not_a_preamble():
    document = parse_markdown("\n\n   \n# First\ntext\n")

    assert [(s.heading, s.start_char) for s in document.sections] == [("First", 0)]


@pytest.mark.parametrize("text", ["", "plain text only\n", "   \n"])
def test_document_without_headings_is_one_preamble_section(text):
    document = parse_markdown(text)

    assert [(s.heading, s.level, s.start_char, s.end_char) for s in document.sections] == [(None, 0, 0, len(text))]


@pytest.mark.parametrize(
    "source",
    [
        "Install `chunkline`",
        "Glued` a `to`  `text",
        "`ChunkConfig.max_tokens` and `min_tokens`",
        "The `` `backtick` `` itself",
        "Spaces kept: ` a ` and `  ` and ` b`",
        "Unclosed `code and ``more`",
        "Runs of other lengths: ```a`` b```",
        "Setext `over\ntwo` lines\r\nand `a\r\nb`",
        "`` ` ``",
        "`\x00`",
    ],
)
def test_heading_text_with_code_spans_reads_them_as_the_inline_parser_does(source):
    from chunkline.structure import heading_plain_text, inline_parse_plain_text

    assert heading_plain_text(source) == inline_parse_plain_text(source)


def test_heading_text_of_code_spans_drops_the_marks_and_one_space_at_each_end():
    document = parse_markdown("# Use` a `then `b`\n\ntext\n\n## The `` x`y `` case\n")

    assert [h.heading_text for h in document.headings] == ["Useathen b", "The x`y case"]
