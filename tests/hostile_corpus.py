"""A corpus of hostile markdown files, generated in code: one small function per kind, named for it.

Every function returns the BYTES of one file and says in its docstring what that file probes. Nothing here
is committed as data: the big files (a 1 MB line, 20,000 headings, 60,000 sentences...) are built on
demand, deterministically (the same bytes on every machine and every run).

``HOSTILE_FILES`` maps each file name to its function; ``EXPECTED_ERRORS`` lists the files that must
become an ``errors`` row, as ``(stage, error_type)``, under the default configuration
(``input.encoding_errors: strict``); every other file must chunk, and its chunks must rebuild it exactly.

Write the corpus into a folder, for the benchmark or for trying it by hand::

    python tests/hostile_corpus.py OUTPUT_FOLDER
"""

from __future__ import annotations

import base64
import random
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "HOSTILE_FILES",
    "EXPECTED_ERRORS",
    "NOT_A_HEADING",
    "PYTHON_OBJECT_MARKER",
    "ordinary_prose",
    "write_hostile_corpus",
]

#: Name of the file that the ``!!python/object/apply:os.system`` front matter would create if a YAML
#: loader ever ran it. ``write_hostile_corpus`` points the payload at this name inside its folder; the file
#: must never exist. (No ``.md`` ending, so the pipeline never reads it.)
PYTHON_OBJECT_MARKER = "front_matter_code_ran.marker"

_PROSE = (
    "The tide gauge on the north quay reports the water level every minute.",
    "Berth radar readings arrive late when the gateway loses its uplink.",
    "Operators compare the anemometer with the forecast before each crane lift.",
    "A reading taken before calibration is flagged and kept apart.",
    "The collector buffers readings on disk while the dashboard is unreachable.",
    "Each ship's mooring plan lists the bollards it uses and the line loads.",
)


def _sentence(number: int) -> str:
    """An ordinary English sentence, numbered so that no two are the same."""
    return f"{_PROSE[number % len(_PROSE)][:-1]} ({number})."


def _prose_sentences(count: int) -> list[str]:
    """``count`` distinct, ordinary English sentences."""
    return [_sentence(number) for number in range(count)]


def ordinary_prose(size_bytes: int) -> bytes:
    """Ordinary markdown prose (a heading and paragraphs of short sentences) of exactly ``size_bytes``
    bytes: the baseline that pathological files of the same size are timed against."""
    paragraphs = []
    length = 0
    number = 0
    while length < size_bytes:
        paragraph = " ".join(_sentence(n) for n in range(number, number + 6)) + "\n\n"
        paragraphs.append(paragraph)
        length += len(paragraph)
        number += 6
    return ("# Harbour notes\n\n" + "".join(paragraphs)).encode("utf-8")[:size_bytes]


# --------------------------------------------------------------------------------------------------
# Empty and degenerate files
# --------------------------------------------------------------------------------------------------


def empty() -> bytes:
    """A file of zero bytes: one empty chunk, no crash on an empty token list."""
    return b""


def whitespace_only() -> bytes:
    """Only spaces, tabs and blank lines (LF, CRLF): no block at all, yet every byte kept."""
    return b"   \n\t\n\r\n  \t  \n\n \x0c \n   "


def heading_without_body() -> bytes:
    """A single heading with nothing under it and no line break after it."""
    return b"# A heading and nothing else"


def no_trailing_newline() -> bytes:
    """Sections whose last line has no line break: the final chunk ends mid-line."""
    return b"# Title\n\nFirst paragraph.\n\n## Last section\n\nThe last line has no line break"


# --------------------------------------------------------------------------------------------------
# Line endings, byte order mark, control bytes
# --------------------------------------------------------------------------------------------------

_LINE_ENDING_DOCUMENT = (
    "# Line endings",
    "",
    "A paragraph of two",
    "lines.",
    "",
    "## Code",
    "",
    "```python",
    "# a comment, not a heading",
    "print('quay')",
    "```",
    "",
    "| a | b |",
    "| - | - |",
    "| 1 | 2 |",
    "",
    "Setext heading",
    "--------------",
    "",
    "- item one",
    "- item two",
    "",
)


def crlf_line_endings() -> bytes:
    """Every line ends in CRLF: positions count CRLF as one line break of two characters."""
    return "\r\n".join(_LINE_ENDING_DOCUMENT).encode("utf-8")


def cr_only_line_endings() -> bytes:
    """Classic Mac line endings (CR alone): CommonMark line breaks that most splitters miss."""
    return "\r".join(_LINE_ENDING_DOCUMENT).encode("utf-8")


def mixed_line_endings() -> bytes:
    """LF, CRLF and CR line endings mixed in one file, including a CR right before a CRLF."""
    endings = ("\n", "\r\n", "\r", "\r\r\n")
    return "".join(line + endings[n % len(endings)] for n, line in enumerate(_LINE_ENDING_DOCUMENT)).encode("utf-8")


def byte_order_mark() -> bytes:
    """A UTF-8 byte order mark before a heading: it stays in the text and byte offsets still match."""
    return "\ufeff# Heading after a BOM\n\nText with a BOM before the heading.\n\n## Second\n\nMore.\n".encode("utf-8")


def nul_bytes() -> bytes:
    """NUL bytes inside valid UTF-8 text (too few to look binary): kept verbatim, counted as characters."""
    lines = [f"Reading {n}: level\x00{n * 0.25:.2f} m, gauge quay-north.\n" for n in range(40)]
    return ("# Readings with NUL bytes\n\n" + "".join(lines) + "\n## After\n\nEnd\x00.\n").encode("utf-8")


# --------------------------------------------------------------------------------------------------
# Files that are not valid UTF-8 text
# --------------------------------------------------------------------------------------------------


def invalid_utf8() -> bytes:
    """Bytes that are not UTF-8: a lone continuation byte, an overlong encoding, an encoded surrogate,
    a byte that never occurs, and a sequence cut off at the end of the file."""
    return (
        b"# Invalid UTF-8\n\n"
        b"A lone continuation byte \x80 here.\n"
        b"An overlong slash \xc0\xaf there.\n"
        b"An encoded surrogate \xed\xa0\x80 and a byte that never occurs \xff.\n"
        b"A character cut off at the end \xe2\x82"
    )


def latin1() -> bytes:
    """Text saved as Latin-1 (ISO-8859-1) by an old tool: accented letters are invalid UTF-8."""
    return "# Café du port\n\nNaïve readings from the old gauge, exported à la main, 12 °C.\n".encode("latin-1")


def binary_png_named() -> bytes:
    """A PNG image saved with a ``.md`` name: a signature, a header chunk and (seeded) random image data."""
    header = struct.pack(">IIBBBBB", 64, 64, 8, 6, 0, 0, 0)
    ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    return b"\x89PNG\r\n\x1a\n" + ihdr + random.Random(20240501).randbytes(4000)


# --------------------------------------------------------------------------------------------------
# Size and nesting
# --------------------------------------------------------------------------------------------------


def single_line_1mb(size_bytes: int = 1_000_000) -> bytes:
    """One line of prose of 1 MB with no line break at all: every cut must fall inside the line."""
    sentences = " ".join(_prose_sentences(size_bytes // 50 + 100))
    return sentences.encode("utf-8")[:size_bytes]


def base64_blob_300kb(size_bytes: int = 300_000) -> bytes:
    """A 300 KB base64 blob with no space or line break (an inlined image): no word boundary anywhere."""
    raw = random.Random(300).randbytes(size_bytes * 3 // 4 + 3)
    blob = base64.b64encode(raw)[: size_bytes - 40]
    return b"# Inlined image\n\n![logo](data:image/png;base64," + blob + b")"


def nested_block_quotes_5000(depth: int = 5000) -> bytes:
    """Block quotes nested 5,000 deep (beyond any parser's nesting limit), with lazy continuation lines
    and a heading in the deepest quote."""
    opening = "> " * depth
    lines = [
        "# Quotes",
        "",
        opening + "The innermost quote.",
        *(f"lazy continuation line {n} of the innermost paragraph" for n in range(50)),
        "",
        opening + "# A heading in the deepest quote",
        "",
        ">" * depth + " quote markers without spaces",
        "",
        "Text after the quotes.",
        "",
    ]
    return "\n".join(lines).encode("utf-8")


def nested_list_levels_2000(depth: int = 2000) -> bytes:
    """Lists nested 2,000 levels deep (``- - - ... item`` opens one list per marker), in bullet and
    ordered flavours, with an indented continuation under the deepest item."""
    lines = [
        "# Lists",
        "",
        "- " * depth + "the deepest bullet item",
        "  continuation of the outer item",
        "* " * depth + "the deepest star item",
        "",
        "1. " * depth + "the deepest ordered item",
        "",
        "+ " * (depth // 2) + "1) " * (depth // 2) + "mixed bullets and ordered markers",
        "",
        "Text after the lists.",
        "",
    ]
    return "\n".join(lines).encode("utf-8")


def headings_20000(count: int = 20_000) -> bytes:
    """20,000 headings of every level (ATX and setext) with one-line bodies: 20,000 tiny sections and
    a deep, constantly changing heading path."""
    lines = []
    for n in range(count):
        level = 1 + n % 6
        if n % 10 == 9:
            lines.append(f"Setext heading {n}\n{('=' if n % 20 == 9 else '-') * 6}")
        else:
            lines.append(f"{'#' * level} Heading {n}")
        if n % 3 == 0:
            lines.append(f"Body of heading {n}.")
        lines.append("")
    return "\n".join(lines).encode("utf-8")


def section_of_60000_sentences(count: int = 60_000) -> bytes:
    """One section holding 60,000 short sentences in paragraphs of 50 (no sub-heading): the size guard
    must split it without quadratic work."""
    sentences = [f"Gauge {n} read {n % 97} cm." if n % 4 else f"Is berth {n} free?" for n in range(count)]
    paragraphs = [" ".join(sentences[start : start + 50]) for start in range(0, count, 50)]
    return ("# One long section\n\n" + "\n\n".join(paragraphs) + "\n").encode("utf-8")


def code_block_20000_lines(count: int = 20_000) -> bytes:
    """One fenced code block of 20,000 lines (far over any token limit), with ``#`` comment lines."""
    body = "".join(
        f"# step {n}: not a heading\n" if n % 5 == 0 else f"reading_{n} = gauge.read(port={n % 8})\n"
        for n in range(count)
    )
    return ("# Generated code\n\nBefore the code.\n\n```python\n" + body + "```\n\nAfter the code.\n").encode("utf-8")


# --------------------------------------------------------------------------------------------------
# Fences, code, HTML and other syntaxes where `#` lines are not headings
# --------------------------------------------------------------------------------------------------


def unclosed_fence() -> bytes:
    """A code fence never closed: it runs to the end of the file, swallowing `#` lines and a tilde fence."""
    return (
        b"# Before the fence\n\nSome text.\n\n"
        b"```python\n"
        b"# NOT A HEADING: a comment in the unclosed fence\n"
        b"def gauge():\n    return 1\n\n"
        b"~~~\n"
        b"## NOT A HEADING: still in the unclosed fence\n"
        b"``\n"
        b"The fence is never closed.\n"
    )


def fences_nested_in_longer_fences() -> bytes:
    """Shorter fences inside longer ones (backticks and tildes): only a fence at least as long closes."""
    return (
        b"# Nested fences\n\n"
        b"`````markdown\n"
        b"````python\n"
        b"```\n"
        b"# NOT A HEADING: inside three fences\n"
        b"```\n"
        b"````\n"
        b"# NOT A HEADING: inside the five-backtick fence\n"
        b"`````\n\n"
        b"~~~~~~\n"
        b"~~~\n"
        b"# NOT A HEADING: inside a tilde fence\n"
        b"~~~\n"
        b"```\n"
        b"~~~~~~\n\n"
        b"## After the fences\n\nText.\n"
    )


def hash_lines_in_code() -> bytes:
    """`#` lines in backtick, tilde and indented code: comments, never headings."""
    return (
        b"# Code\n\n"
        b"```bash\n# NOT A HEADING: shell comment\nls\n```\n\n"
        b"~~~python\n## NOT A HEADING: python comment\nprint(1)\n~~~\n\n"
        b"    # NOT A HEADING: indented code\n"
        b"    ### NOT A HEADING: more indented code\n\n"
        b"\t# NOT A HEADING: code indented with a tab\n\n"
        b"## After the code\n\nText.\n"
    )


def hash_lines_in_html_blocks() -> bytes:
    """`#` lines inside HTML blocks (div, pre with blank lines, script, style): raw HTML, not headings."""
    return (
        b"# HTML\n\n"
        b'<div class="note">\n# NOT A HEADING: in a div\n</div>\n\n'
        b"<pre>\n# NOT A HEADING: in a pre\n\n# NOT A HEADING: after a blank line in the pre\n</pre>\n\n"
        b"<script>\n# NOT A HEADING: in a script\nvar a = 1;\n</script>\n\n"
        b"<style>\n# NOT A HEADING { color: red }\n</style>\n\n"
        b"## After the HTML\n\nText.\n"
    )


def hash_lines_in_html_comments() -> bytes:
    """`#` lines inside HTML comments, one with blank lines in it: a comment ends only at ``-->``."""
    return (
        b"# Comments\n\n"
        b"<!--\n# NOT A HEADING: in a comment\n\n## NOT A HEADING: after a blank line in the comment\n-->\n\n"
        b"<!-- # NOT A HEADING: one-line comment -->\n\n"
        b"## After the comments\n\nText.\n"
    )


def hash_lines_in_math_blocks() -> bytes:
    """``$$`` math blocks with `#` in LaTeX. ``$$`` is not CommonMark: a line starting with `#` inside
    one IS a heading to a CommonMark parser, so the macros below keep `#` away from line starts."""
    return (
        b"# Math\n\n"
        b"$$\n\\newcommand{\\level}[1]{h_{#1}}\n\\level{t} = \\sum_{i=1}^{n} a_i \\# \\text{readings}\n$$\n\n"
        b"Inline $\\#x$ and display:\n\n"
        b"$$\n\\begin{aligned}\n  x &= #1 \\\\\n  y &= \\#2\n\\end{aligned}\n$$\n\n"
        b"## After the math\n\nText.\n"
    )


def hash_lines_in_mdx_jsx() -> bytes:
    """MDX: imports, JSX components and expressions. A JSX tag alone on its line opens an HTML block in
    CommonMark, so `#` lines right under it are not headings."""
    return (
        b"import { Tabs, Tab } from './components'\n"
        b"export const meta = { title: 'Quay' }\n\n"
        b"# MDX page\n\n"
        b'<Tabs defaultValue="bash">\n'
        b"# NOT A HEADING: inside a JSX component\n"
        b'<Tab value="bash">\n'
        b"## NOT A HEADING: inside a nested JSX component\n"
        b"</Tab>\n"
        b"</Tabs>\n\n"
        b"{/* a JSX comment with # in it */}\n\n"
        b'<Callout type="warning" />\n\n'
        b"## After the components\n\nText with <Badge>#1</Badge> inline.\n"
    )


def headings_in_block_quotes() -> bytes:
    """Headings inside block quotes (one and two deep): structure of the quote, not the document."""
    return (
        b"# Document heading\n\n"
        b"> # Quoted heading\n>\n> Quoted text.\n>\n> > ## Doubly quoted heading\n> > Deeper text.\n\n"
        b"> Setext in a quote\n> ==================\n\n"
        b"## Second document heading\n\nText.\n"
    )


def headings_in_list_items() -> bytes:
    """Headings inside list items (bullet, ordered, nested): part of the item, not sections."""
    return (
        b"# Document heading\n\n"
        b"- # Heading in a bullet item\n  Item text.\n"
        b"- ## Another\n  - ### Nested item heading\n    Nested text.\n\n"
        b"1. # Heading in an ordered item\n2. Plain item\n\n"
        b"## Second document heading\n\nText.\n"
    )


# --------------------------------------------------------------------------------------------------
# Front matter
# --------------------------------------------------------------------------------------------------


def front_matter_yaml() -> bytes:
    """YAML front matter with a title, a list, a date and a nested mapping."""
    return (
        b"---\ntitle: Quay operations\ntags: [tide, wind]\nupdated: 2024-05-01\nowner:\n  team: ops\n---\n"
        b"# Quay operations\n\nText.\n"
    )


def front_matter_toml() -> bytes:
    """TOML front matter between ``+++`` fences."""
    return (
        b'+++\ntitle = "Quay operations"\ntags = ["tide", "wind"]\n[owner]\nteam = "ops"\n+++\n'
        b"# Quay operations\n\nText.\n"
    )


def front_matter_unclosed() -> bytes:
    """A ``---`` opening that is never closed: a thematic break and markdown, not front matter."""
    return b"---\ntitle: never closed\ntags: [a, b]\n\n# Heading\n\nText.\n"


def front_matter_python_object(marker: str | Path = f"/tmp/{PYTHON_OBJECT_MARKER}") -> bytes:
    """YAML front matter with ``!!python/object/apply:os.system`` tags: it must be refused, never run
    (if a loader ran it, ``marker`` would be created)."""
    return (
        "---\n"
        f"title: !!python/object/apply:os.system [\"touch '{marker}'\"]\n"
        'author: !!python/object/new:subprocess.check_output [["true"]]\n'
        "---\n"
        "# Looks harmless\n\nBut its front matter asks the YAML loader to run a command.\n"
    ).encode()


def front_matter_odd_keys() -> bytes:
    """YAML front matter whose keys YAML reads as a bool, an int, a date or null (``on: push`` in a CI
    document), with binary, set, NaN and merge values: it must load to JSON-safe data, keys as written."""
    return (
        b"---\n"
        b"name: Deploy the quay dashboard\n"
        b"on:\n  push:\n    branches: [main]\n"
        b"2024: the year the gauges were replaced\n"
        b"yes: confirmed by the harbour master\n"
        b"2024-01-01: new sensors online\n"
        b"null: no reading\n"
        b"defaults: &defaults {unit: cm, every: 60}\n"
        b"tide: {<<: *defaults, every: 30}\n"
        b"logo: !!binary aGFyYm91cg==\n"
        b"labels: !!set {wind, tide}\n"
        b"calibration: .nan\n"
        b"---\n"
        b"# Deploying the dashboard\n\nPushes to main deploy the dashboard.\n"
    )


def front_matter_billion_laughs() -> bytes:
    """A few hundred bytes of YAML front matter whose nested aliases stand for 9**9 strings ("billion
    laughs"): refused as soon as the expansion passes its bound, never expanded."""
    names = "abcdefghi"
    levels = [f"a: &a [{', '.join(['lol'] * 9)}]"]
    for name, previous in zip(names[1:], names):
        levels.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    return ("---\n" + "\n".join(levels) + "\n---\n# Laughs\n\nThe front matter above is refused.\n").encode("utf-8")


def front_matter_recursive_alias() -> bytes:
    """YAML front matter with an alias inside the collection it names: a structure with no end, refused."""
    return b"---\ntitle: Loop\nstations: &stations [north, south, *stations]\n---\n# Loop\n\nText.\n"


# --------------------------------------------------------------------------------------------------
# Tokenizer and Unicode edge cases
# --------------------------------------------------------------------------------------------------


def tiktoken_special_tokens() -> bytes:
    """Text of tiktoken special tokens (``<|endoftext|>``, FIM markers) in prose: ordinary text to count,
    never a special token (tiktoken raises on it by default)."""
    return (
        b"# Special tokens\n\n"
        b"The model stops at <|endoftext|> unless told otherwise.\n\n"
        b"Fill-in-the-middle uses <|fim_prefix|>, <|fim_middle|> and <|fim_suffix|>; prompts end at "
        b"<|endofprompt|>.\n\n"
        b"```text\n<|endoftext|><|endoftext|>\n```\n\n"
        b"## <|endoftext|> in a heading\n\n<|im_start|>user hello<|im_end|>\n"
    )


def emoji_zwj_sequences() -> bytes:
    """Emoji joined by ZERO WIDTH JOINER, skin tones, flags and keycaps: one glyph, many code points."""
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
    rainbow = "\U0001f3f3\ufe0f\u200d\U0001f308"
    technologist = "\U0001f9d1\U0001f3fd\u200d\U0001f4bb"
    flag = "\U0001f1f3\U0001f1f4"
    keycap = "1\ufe0f\u20e3"
    line = f"The crew {family} waved {rainbow} while the {technologist} logged tide {keycap} in {flag}.\n"
    return (f"# Emoji {family}\n\n" + line * 200 + f"\n## {rainbow}\n\n{line}").encode("utf-8")


def combining_marks() -> bytes:
    """Letters followed by combining marks (decomposed accents, stacked diacritics, Zalgo text)."""
    decomposed = "Cafe\u0301 nai\u0308ve re\u0301sume\u0301"
    stacked = "".join(letter + "\u0300\u0301\u0302\u0303\u0308\u0323" for letter in "stacked")
    zalgo = "".join(letter + "\u0336\u0334\u0338" * 5 for letter in "zalgo harbour text")
    line = f"{decomposed}. {stacked}. {zalgo}.\n"
    return (f"# {decomposed}\n\n" + line * 150 + f"\n## {stacked}\n\nEnd.\n").encode("utf-8")


def right_to_left_text() -> bytes:
    """Hebrew and Arabic prose, bidi control characters (RLM, RLO, isolates) and mixed-direction lines."""
    hebrew = "נמל חיפה מודד את גובה המים בכל דקה."
    arabic = "يقيس ميناء الإسكندرية منسوب المياه كل دقيقة."
    controls = "\u200fRLM \u202eoverride\u202c \u2067isolate\u2069 \u200eLRM"
    line = f"{hebrew} {arabic} Mixed: gauge {hebrew[:8]} 42 {controls}.\n"
    return (f"# {arabic}\n\n" + line * 200 + f"\n## {hebrew}\n\nEnd.\n").encode("utf-8")


def line_separator_u2028() -> bytes:
    """U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR, NEL (U+0085) and form feed: line breaks to
    Python's ``str.splitlines``, ordinary characters to CommonMark and to the positions."""
    line = "First part\u2028second part\u2029third part\x85fourth part\x0cfifth part.\n"
    return ("# Separators\u2028in a heading\n\n" + line * 200 + "\n## After\n\nEnd\u2028.\n").encode("utf-8")


# --------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------

#: File name -> the function that returns its bytes.
HOSTILE_FILES: dict[str, Callable[[], bytes]] = {
    "empty.md": empty,
    "whitespace_only.md": whitespace_only,
    "heading_without_body.md": heading_without_body,
    "no_trailing_newline.md": no_trailing_newline,
    "crlf_line_endings.md": crlf_line_endings,
    "cr_only_line_endings.md": cr_only_line_endings,
    "mixed_line_endings.md": mixed_line_endings,
    "byte_order_mark.md": byte_order_mark,
    "nul_bytes.md": nul_bytes,
    "invalid_utf8.md": invalid_utf8,
    "latin1.md": latin1,
    "binary_png_named.md": binary_png_named,
    "single_line_1mb.md": single_line_1mb,
    "base64_blob_300kb.md": base64_blob_300kb,
    "nested_block_quotes_5000.md": nested_block_quotes_5000,
    "nested_list_levels_2000.md": nested_list_levels_2000,
    "headings_20000.md": headings_20000,
    "section_of_60000_sentences.md": section_of_60000_sentences,
    "code_block_20000_lines.md": code_block_20000_lines,
    "unclosed_fence.md": unclosed_fence,
    "fences_nested_in_longer_fences.md": fences_nested_in_longer_fences,
    "hash_lines_in_code.md": hash_lines_in_code,
    "hash_lines_in_html_blocks.md": hash_lines_in_html_blocks,
    "hash_lines_in_html_comments.md": hash_lines_in_html_comments,
    "hash_lines_in_math_blocks.md": hash_lines_in_math_blocks,
    "hash_lines_in_mdx_jsx.md": hash_lines_in_mdx_jsx,
    "headings_in_block_quotes.md": headings_in_block_quotes,
    "headings_in_list_items.md": headings_in_list_items,
    "front_matter_yaml.md": front_matter_yaml,
    "front_matter_toml.md": front_matter_toml,
    "front_matter_unclosed.md": front_matter_unclosed,
    "front_matter_python_object.md": front_matter_python_object,
    "front_matter_odd_keys.md": front_matter_odd_keys,
    "front_matter_billion_laughs.md": front_matter_billion_laughs,
    "front_matter_recursive_alias.md": front_matter_recursive_alias,
    "tiktoken_special_tokens.md": tiktoken_special_tokens,
    "emoji_zwj_sequences.md": emoji_zwj_sequences,
    "combining_marks.md": combining_marks,
    "right_to_left_text.md": right_to_left_text,
    "line_separator_u2028.md": line_separator_u2028,
}

#: Files that must become one ``errors`` row (and a ``documents`` row with status ``error``) under the
#: default configuration, as (stage, error_type). Latin-1 accents are invalid UTF-8; the PNG is caught as
#: binary before decoding is tried.
EXPECTED_ERRORS: dict[str, tuple[str, str]] = {
    "invalid_utf8.md": ("decode", "InvalidUtf8"),
    "latin1.md": ("decode", "InvalidUtf8"),
    "binary_png_named.md": ("decode", "BinaryFile"),
    "front_matter_python_object.md": ("parse", "InvalidFrontMatter"),
    "front_matter_billion_laughs.md": ("parse", "InvalidFrontMatter"),
    "front_matter_recursive_alias.md": ("parse", "InvalidFrontMatter"),
}

#: Text every line that must not be a heading carries (in code, HTML blocks, comments, JSX...).
NOT_A_HEADING = "NOT A HEADING"


def write_hostile_corpus(folder: str | Path) -> Path:
    """Write every file of ``HOSTILE_FILES`` into ``folder`` (created if needed); returns the folder.

    The ``!!python/object`` payload points at ``folder / PYTHON_OBJECT_MARKER``, which must never appear."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, make_bytes in HOSTILE_FILES.items():
        if make_bytes is front_matter_python_object:
            data = front_matter_python_object(folder.resolve() / PYTHON_OBJECT_MARKER)
        else:
            data = make_bytes()
        (folder / name).write_bytes(data)
    return folder


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python tests/hostile_corpus.py OUTPUT_FOLDER", file=sys.stderr)
        return 2
    folder = write_hostile_corpus(argv[0])
    total = sum(path.stat().st_size for path in folder.glob("*.md"))
    print(f"wrote {len(HOSTILE_FILES)} hostile files ({total / 1e6:.1f} MB) to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
