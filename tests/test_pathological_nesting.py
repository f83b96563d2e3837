"""Pathologically deep nesting: what the parse and the splitter make of it.

Quotes and lists are parsed as containers down to ``MAX_CONTAINER_DEPTH`` markdown-it levels; content nested
deeper is parsed with leaf rules only (``chunkline.structure``). That limit bounds the parse's cost (the
speed itself is measured side by side with ordinary prose by ``benchmarks/bench_hostile.py``), and must
change nothing for the document around the deep part: a heading after a list nested 2,000 deep is a
document heading, and the text after it is a paragraph of the document, not part of the deepest item.
Below the limit, the parse is markdown-it's own, token for token.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import hostile_corpus
import pytest
from markdown_it import MarkdownIt

from chunkline.splitting import split_document_range
from chunkline.structure import MAX_CONTAINER_DEPTH, _block_parser, parse_markdown

TESTS = Path(__file__).parent
SAMPLE_CORPUS = TESTS.parent / "sample_corpus"
LIST_LEVELS = MAX_CONTAINER_DEPTH // 2  # a list level is two markdown-it levels (the list and its item)


def stock_parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"maxNesting": 100}).enable("table")
    parser.core.ruler.disable(["inline", "text_join"])
    return parser


def token_signature(tokens) -> list[tuple]:
    return [
        (token.type, token.map, token.level, token.tag, token.content, token.markup, token.info) for token in tokens
    ]


@pytest.mark.parametrize("depth", [LIST_LEVELS - 1, LIST_LEVELS, LIST_LEVELS + 1, 60, 2000])
@pytest.mark.parametrize("marker", ["- ", "1. ", "* "])
def test_a_heading_after_a_list_nested_past_the_limit_is_a_document_heading(depth, marker):
    text = f"# Guide\n\n{marker * depth}the deepest item\n\n## After the list\n\nBody of the section.\n"
    document = parse_markdown(text)
    assert [heading.heading_text for heading in document.headings] == ["Guide", "After the list"]
    assert [section.heading for section in document.sections] == ["Guide", "After the list"]
    body = [block for block in document.blocks if block.kind == "paragraph" and block.depth == 0]
    assert [text[block.start_char : block.end_char] for block in body] == ["Body of the section.\n"]


@pytest.mark.parametrize("depth", [MAX_CONTAINER_DEPTH + 1, 5000])
def test_a_heading_in_a_quote_past_the_limit_stays_in_the_quote(depth):
    text = f"# Quotes\n\n{'> ' * depth}innermost\n{'> ' * depth}# Not a document heading\n\n## After\n\nText.\n"
    assert [heading.heading_text for heading in parse_markdown(text).headings] == ["Quotes", "After"]


def test_the_text_after_nested_lists_is_a_paragraph_of_the_document():
    text = hostile_corpus.HOSTILE_FILES["nested_list_levels_2000.md"]().decode("utf-8")
    top_level = [
        (block.kind, text[block.start_char : block.end_char].split("\n")[0][:8])
        for block in parse_markdown(text).blocks
        if block.depth == 0
    ]
    assert top_level == [
        ("heading", "# Lists"),
        ("bullet_list", "- - - - "),
        ("bullet_list", "* * * * "),
        ("ordered_list", "1. 1. 1."),
        ("bullet_list", "+ + + + "),
        ("paragraph", "Text aft"),
    ]


@pytest.mark.parametrize(
    "path",
    sorted((TESTS / "fixtures" / "markdown").glob("*.md")) + sorted(SAMPLE_CORPUS.rglob("*.md")),
    ids=lambda path: path.name,
)
def test_below_the_limit_the_parse_is_markdown_its_own(path):
    text = path.read_text(encoding="utf-8")
    assert token_signature(_block_parser().parse(text)) == token_signature(stock_parser().parse(text))


@pytest.mark.slow
def test_thematic_breaks_are_recognized_as_markdown_it_does():
    parts = ["-", "*", "_", " ", "\t", "x", "="]
    stock = stock_parser()
    for length in range(1, 6):
        for combination in itertools.product(parts, repeat=length):
            line = "".join(combination)
            for text in (f"{line}\n", f"para\n{line}\n", f"- item\n{line}\n", f"> quote\n{line}\n", f"    {line}\n"):
                assert token_signature(_block_parser().parse(text)) == token_signature(stock.parse(text)), repr(text)


@pytest.mark.parametrize("max_tokens", [40, 100, 512])
def test_pieces_of_a_deep_list_line_fill_the_budget(counter, max_tokens):
    # One 4,000-character line of "- - - ...": every piece but the last ends at the last word boundary
    # that fits, exactly counted.
    text = hostile_corpus.HOSTILE_FILES["nested_list_levels_2000.md"]().decode("utf-8")
    start = text.index("- - ")
    end = text.index("\n", start)
    pieces = split_document_range(parse_markdown(text), start, end, counter, max_tokens, 0)
    assert (pieces[0].start_char, pieces[-1].end_char) == (start, end)
    for piece, following in zip(pieces, pieces[1:]):
        assert piece.end_char == following.start_char
        assert piece.token_count == counter.count(text[piece.start_char : piece.end_char]) <= max_tokens
        next_word = re.compile(r"\s+").search(text, piece.end_char).end()
        assert counter.count(text[piece.start_char : next_word]) > max_tokens
