"""The ``code`` strategy: units at function and class definitions, packed with overlap in lines."""

from __future__ import annotations

import logging
import re

import pytest
from conftest import FIXTURES, assert_invariants, assert_protected_blocks_whole
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, chunk_markdown, parse_markdown
from chunkline.strategies.code import guess_language, language_of_info

PYTHON = '''"""A small module."""

import os
from dataclasses import dataclass

LIMIT = 10


@dataclass(frozen=True)
class Point:
    """A point."""

    x: int
    y: int

    def norm(self) -> float:
        return (self.x ** 2 + self.y ** 2) ** 0.5


# Helpers below.
def add(a, b):
    """Add two numbers."""
    total = a + b
    return total


async def fetch(url):
    data = await get(url)
    if data:
        return data
    else:
        return None


class Store:
    def __init__(self):
        self.items = []

    def put(self, item):
        self.items.append(item)

    @property
    def size(self):
        return len(self.items)


if __name__ == "__main__":
    print(add(1, 2))
'''

JAVASCRIPT = """import { readFile } from "fs";

const LIMIT = 10;

/**
 * Adds two numbers.
 */
export function add(a, b) {
  return a + b;
}

export const double = (x) => {
  return x * 2;
};

class Counter {
  constructor() {
    this.count = 0;
  }

  increment() {
    this.count += 1;
  }
}

async function load(path) {
  const text = await readFile(path, "utf8");
  return text.split("\\n");
}

module.exports = { add, double, Counter, load };
"""

JAVA = """package com.example;

import java.util.List;

/**
 * A greeter.
 */
public class Greeter {
    private final String name;

    public Greeter(String name) {
        this.name = name;
    }

    /** Says hello. */
    @Override
    public String toString() {
        return "Hello, " + name;
    }

    public static void main(String[] args) {
        for (String arg : args) {
            System.out.println(new Greeter(arg));
        }
    }

    private List<String> names(int count) {
        return List.of(name);
    }
}
"""

PY_DEFINITION = re.compile(r"[ \t]*(?:@|#|(?:async[ \t]+)?def[ \t]|class[ \t]|if __name__)")
JS_DEFINITION = re.compile(
    r"[ \t]*(?:/\*\*|export[ \t]|class[ \t]|(?:async[ \t]+)?function[ \t]|module\.exports|[\w$]+\(.*\{$)"
)  # the last alternative: a method, where a class over the budget is cut
JAVA_DEFINITION = re.compile(r"[ \t]*(?:/\*\*|@|(?:public|private|protected)[ \t])")


def config_for(max_tokens: int, overlap: int = 0, language: str = "auto") -> ChunkConfig:
    return ChunkConfig.from_dict(
        {
            "strategy": "code",
            "max_tokens": max_tokens,
            "overlap_tokens": 0,
            "embed_context": "none",  # the strategy's own cuts at the whole budget
            "code": {"overlap": overlap, "language": language},
        }
    )


def first_lines(chunks) -> list[str]:
    return [chunk.text.split("\n", 1)[0] for chunk in chunks]


# ------------------------------------------------------------------------------------------ boundaries


@pytest.mark.parametrize("max_tokens", [30, 40, 60, 90])
def test_python_chunks_start_at_definitions(max_tokens):
    config = config_for(max_tokens)

    chunks = chunk_markdown(PYTHON, config)

    assert len(chunks) > 1
    for line in first_lines(chunks)[1:]:
        assert PY_DEFINITION.match(line), line
    assert not any(chunk.is_sub_split for chunk in chunks)
    assert_invariants(PYTHON, chunks, config)


def test_python_decorators_and_comments_stick_to_the_definition_below():
    chunks = chunk_markdown(PYTHON, config_for(30))

    starts = first_lines(chunks)
    assert "@dataclass(frozen=True)" in starts and "class Point:" not in starts
    assert "# Helpers below." in starts and "def add(a, b):" not in starts
    assert "    @property" in starts and "    def size(self):" not in starts


def test_python_statement_after_a_body_starts_a_unit():
    chunks = chunk_markdown(PYTHON, config_for(30))

    assert chunks[-1].text.startswith('if __name__ == "__main__":')


def test_a_class_over_the_budget_is_cut_at_its_methods():
    chunks = chunk_markdown(PYTHON, config_for(30))

    assert "    def norm(self) -> float:" in first_lines(chunks)


@pytest.mark.parametrize("max_tokens", [25, 40, 60])
def test_javascript_chunks_start_at_functions_classes_and_exports(max_tokens):
    config = config_for(max_tokens)

    chunks = chunk_markdown(JAVASCRIPT, config)

    assert len(chunks) > 1
    for chunk, line in zip(chunks[1:], first_lines(chunks)[1:]):
        assert JS_DEFINITION.match(line) or chunk.is_sub_split, line
    assert "/**" in first_lines(chunks) or max_tokens > 30  # the JSDoc block sticks to its function
    assert_invariants(JAVASCRIPT, chunks, config)


@pytest.mark.parametrize("max_tokens", [30, 40, 80])
def test_java_chunks_start_at_declarations_and_methods(max_tokens):
    config = config_for(max_tokens)

    chunks = chunk_markdown(JAVA, config)

    assert len(chunks) > 1
    for chunk, line in zip(chunks[1:], first_lines(chunks)[1:]):
        assert JAVA_DEFINITION.match(line) or chunk.is_sub_split, line
    assert_invariants(JAVA, chunks, config)


def test_java_annotations_and_javadoc_stick_to_the_method():
    chunks = chunk_markdown(JAVA, config_for(30))

    starts = first_lines(chunks)
    assert "    /** Says hello. */" in starts
    assert "    @Override" not in starts and "    public String toString() {" not in starts


def test_generic_code_is_cut_at_blank_lines():
    text = "".join(f"step {number} first line\nstep {number} second line\n\n" for number in range(20))
    config = config_for(30, language="generic")

    chunks = chunk_markdown(text, config)

    assert all(line.startswith("step ") and "first line" in line for line in first_lines(chunks))
    assert_invariants(text, chunks, config)


# -------------------------------------------------------------------------------------- line overlap


@pytest.mark.parametrize("overlap", [1, 2, 3])
def test_each_chunk_starts_overlap_lines_before_the_previous_end(overlap):
    config = config_for(60, overlap)

    chunks = chunk_markdown(PYTHON, config)

    assert len(chunks) > 2
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk.start_char > previous.start_char and chunk.end_char > previous.end_char
        repeated = PYTHON[chunk.start_char : previous.end_char]
        assert repeated.count("\n") <= overlap
    # Where the budget allows, the repeat is exactly `overlap` whole lines.
    exact = [
        (previous, chunk)
        for previous, chunk in zip(chunks, chunks[1:])
        if PYTHON[chunk.start_char : previous.end_char].count("\n") == overlap
    ]
    assert exact
    for previous, chunk in exact:
        assert chunk.start_line == previous.end_line - overlap + 1
    assert_invariants(PYTHON, chunks, config)


def test_no_overlap_chunks_only_touch():
    chunks = chunk_markdown(PYTHON, config_for(40, 0))

    assert all(previous.end_char == chunk.start_char for previous, chunk in zip(chunks, chunks[1:]))


def test_default_overlap_is_two_lines():
    assert ChunkConfig(strategy="code").params.overlap == 2
    assert ChunkConfig(strategy="code").params.language == "auto"


def test_an_overlap_of_most_lines_logs_a_warning(caplog):
    text = "".join(f"value_{number} = {number}\n\n" for number in range(200))
    config = config_for(100, 35, "generic")

    with caplog.at_level(logging.WARNING):
        chunks = chunk_markdown(text, config)

    assert any("overlap of 35 lines" in record.getMessage() for record in caplog.records)
    assert_invariants(text, chunks, config)


@pytest.mark.parametrize("bad", [-1, True, "2"])
def test_overlap_must_be_a_whole_number_of_lines(bad):
    with pytest.raises(ConfigError, match="overlap"):
        config_for(40, bad)


def test_unknown_language_is_refused():
    with pytest.raises(ConfigError, match="language"):
        config_for(40, language="cobol")


# --------------------------------------------------------------------------------- markdown documents

MARKDOWN = f"""# Using the store

Some prose before the code. It explains the store in a paragraph
that spans two lines.

```python
{PYTHON}```

| Method | Purpose |
| --- | --- |
| put | adds an item |

A small snippet that fits:

```js
export const double = (x) => x * 2;
```

- a list item with text
- another one

Closing words.
"""


@pytest.mark.parametrize("max_tokens", [40, 60, 120])
def test_a_fence_over_the_budget_is_cut_at_its_definitions(max_tokens, counter):
    config = config_for(max_tokens)
    fence = next(block for block in parse_markdown(MARKDOWN).blocks if block.kind == "fence")

    chunks = chunk_markdown(MARKDOWN, config)

    inside = [chunk for chunk in chunks if fence.start_char < chunk.start_char < fence.end_char]
    assert inside
    for line in first_lines(inside):
        assert PY_DEFINITION.match(line), line
    assert all(chunk.heading_path == ("Using the store",) for chunk in chunks)
    assert_protected_blocks_whole(MARKDOWN, chunks, max_tokens, counter)
    assert_invariants(MARKDOWN, chunks, config)


def test_fences_tables_and_list_items_that_fit_are_never_split(counter):
    for max_tokens in (20, 30, 50, 200):
        config = config_for(max_tokens, 2)
        chunks = chunk_markdown(MARKDOWN, config)

        assert assert_protected_blocks_whole(MARKDOWN, chunks, max_tokens, counter) >= 3
        assert_invariants(MARKDOWN, chunks, config)


def test_source_files_have_no_markdown_heading_paths():
    text = (
        "# a comment, not a heading\nimport os\n\n\ndef main():\n    return os.getcwd()\n\n\ndef other():\n    pass\n"
    )
    chunks = chunk_markdown(text, config_for(12))

    assert all(chunk.heading_path == () for chunk in chunks)


# ------------------------------------------------------------------------------------------ languages


def test_language_guess_from_keywords():
    assert guess_language(PYTHON) == "python"
    assert guess_language(JAVASCRIPT) == "javascript"
    assert guess_language(JAVA) == "java"
    assert guess_language("Plain prose about classes and functions.\n\nNothing else.\n") == "generic"


@pytest.mark.parametrize(
    ("info", "language"),
    [
        ("python", "python"),
        ("py", "python"),
        ("ts", "javascript"),
        ("JSX", "javascript"),
        ("java", "java"),
        ("rust", "generic"),
        ("", None),
    ],
)
def test_language_from_a_fence_info_string(info, language):
    assert language_of_info(info) == language


def test_an_explicit_language_is_used_for_all_code():
    config = config_for(30, language="python")

    chunks = chunk_markdown(PYTHON, config)

    assert first_lines(chunks) == first_lines(chunk_markdown(PYTHON, config_for(30)))


# ------------------------------------------------------------------------------------------ invariants


@pytest.mark.parametrize("language", ["auto", "python", "javascript", "java", "generic"])
@pytest.mark.parametrize(("max_tokens", "overlap"), [(4, 0), (10, 1), (32, 2), (512, 2)])
@pytest.mark.slow
def test_every_sample_keeps_every_invariant(language, max_tokens, overlap):
    config = config_for(max_tokens, overlap, language)
    for text in (PYTHON, JAVASCRIPT, JAVA, MARKDOWN, MARKDOWN.replace("\n", "\r\n"), PYTHON.replace("\n", "\r")):
        assert_invariants(text, chunk_markdown(text, config), config)


def test_fixture_documents_keep_every_invariant(read_fixture, counter):
    for max_tokens in (8, 64):
        config = config_for(max_tokens, 2)
        for path in sorted(FIXTURES.glob("*.md")):
            text = read_fixture(path.name)
            chunks = chunk_markdown(text, config)

            assert_invariants(text, chunks, config)
            assert_protected_blocks_whole(text, chunks, max_tokens, counter)


_CODE_LINES = st.sampled_from(
    [
        "def f(x):",
        "    return x",
        "class A:",
        "    def m(self):",
        "        pass",
        "@decorator",
        "# comment",
        "function g() {",
        "  return 1;",
        "}",
        "export const h = (a) => {",
        "public class B {",
        "    public void run() {",
        "    }",
        "/**",
        " * doc",
        " */",
        "",
        "    ",
        "x = 1",
        "```python",
        "```",
        "if __name__ == '__main__':",
        "\tindented with a tab",
        "漢字 = '👩\u200d💻'",
    ]
)


@settings(max_examples=300)
@given(
    lines=st.lists(_CODE_LINES, max_size=50),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    language=st.sampled_from(["auto", "python", "javascript", "java", "generic"]),
    max_tokens=st.integers(4, 60),
    overlap=st.integers(0, 4),
)
@pytest.mark.slow
def test_generated_code_keeps_every_invariant(lines, ending, language, max_tokens, overlap):
    text = ending.join(lines)
    config = config_for(max_tokens, overlap, language)

    chunks = chunk_markdown(text, config)

    assert_invariants(text, chunks, config)
    for previous, chunk in zip(chunks, chunks[1:]):
        assert chunk.start_char > previous.start_char and chunk.end_char > previous.end_char
