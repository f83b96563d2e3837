"""A hypothesis grammar of markdown documents: headings of all kinds, fences, lists, tables, quotes, HTML,
front matter, random unicode and line endings. Shared by the property tests and the strategy contract."""

from __future__ import annotations

from hypothesis import strategies as st

# ------------------------------------------------------------------------------------------------
# The grammar
# ------------------------------------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "the",
        "chunk",
        "token",
        "limit",
        "Beam",
        "pipeline",
        "naïve",
        "Grüße",
        "漢字",
        "日本語の文章です。",
        "emoji👩\u200d💻",
        "🐦",
        "e\u0301",
        "x=1;",
        "`code`",
        "**bold**",
        "_it_",
        "[link](http://a.b/c)",
        "#hash",
        "<b>",
        "&amp;",
        "1.",
        "-",
        "|",
        "...",
        "?!",
        "\t",
        "\u2028",
        "\x85",
        "\x0c",
        "\x00",
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
    atx_heading,
    atx_heading,
    setext_heading,
    paragraph,
    paragraph,
    fenced_code(),
    indented_code,
    bullet_list(),
    table(),
    block_quote,
    html_block,
    thematic_break,
    raw_text,
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


#: Single markdown lines (headings, fences, list items, tables, quotes, HTML, CJK) to join into documents
#: that break and open blocks in every order.
MARKDOWN_LINES = st.sampled_from(
    [
        "# Heading one",
        "## Heading two",
        "Setext",
        "======",
        "plain words in a line",
        "a much longer line of prose with several words that wrap around the window more than once or twice",
        "",
        "   ",
        "- list item",
        "  continued item",
        "1. ordered item",
        "```",
        "~~~",
        "    indented code",
        "***",
        "> quoted # text",
        "| a | b |",
        "| - | - |",
        "<div>",
        "émoji 🦀 and CJK 日本語。",
    ]
)
