"""Shared fixtures and the reference checks every chunking test relies on.

The reference helpers here are deliberately naive (one character at a time) so that they are obviously
correct and independent of the engine's own position index.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import uuid
from pathlib import Path

# A strategy installed by another package, found through the chunkline.strategies entry point: the folder
# holds the package and its dist-info, as site-packages would. It must be on the path before anything
# looks strategies up.
STRATEGY_PLUGIN = Path(__file__).parent / "strategy_plugin"
sys.path.insert(0, str(STRATEGY_PLUGIN))

import pytest
from hypothesis import HealthCheck, settings

import chunkline
from chunkline.context import ChunkContext
from chunkline.embed_text import title_from_doc_id
from chunkline.engine import span_budget
from chunkline.record import CHUNK_UUID_NAMESPACE
from chunkline.tokenizers import counter_for, get_token_counter

# Deterministic property tests in CI: the same examples on every run and every machine.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

FIXTURES = Path(__file__).parent / "fixtures" / "markdown"

# Chunk boundaries in CJK prose may follow a full stop without any whitespace after it.
_NON_SPACE = re.compile(r"\S")
_CJK_SENTENCE_END = re.compile(r"[\u3002\uff01\uff1f][\"'\u2019\u201d)\]]*\Z")


# --------------------------------------------------------------------------------------------------
# Reference helpers
# --------------------------------------------------------------------------------------------------


def reference_positions(text: str) -> list[tuple[int, int]]:
    """1-based (line, column) of every character offset 0..len(text), by a plain scan.

    Line breaks are ``\\r\\n``, ``\\r`` and ``\\n`` only; a ``\\r\\n`` pair is one break whose two characters
    sit on the line they end. Every other character (``\\u2028``, ``\\x85``, ``\\x0c``, tabs...) is one column.
    """
    positions = []
    line, column = 1, 1
    for offset, character in enumerate(text):
        positions.append((line, column))
        ends_line = character == "\n" or (character == "\r" and text[offset + 1 : offset + 2] != "\n")
        if ends_line:
            line, column = line + 1, 1
        else:
            column += 1
    positions.append((line, column))
    return positions


def reference_byte_offset(text: str, char_offset: int) -> int:
    # A surrogate code point (which only a Python string can hold) counts as the 3 bytes it would occupy.
    return len(text[:char_offset].encode("utf-8", "surrogatepass"))


def exact_token_count(counter, text: str) -> int:
    """Token count straight from tiktoken, special-token text treated as ordinary text; for a Hugging Face
    counter, straight from its tokenizer (with the special tokens it adds when it counts them)."""
    if not hasattr(counter, "encoding"):
        from chunkline.text_index import as_tokenizers_see_it

        if not text:
            return 0
        seen = as_tokenizers_see_it(text)[0]
        return len(counter.tokenizer.encode(seen, add_special_tokens=counter.count_special_tokens).ids)
    return len(counter.encoding.encode_ordinary(text))


def reference_title(document, doc_id: str = "") -> str:
    """The front matter's non-empty ``title`` text, else the first level-1 heading's text, else the words of
    the file's name (``title_from_doc_id``, held to its examples in test_embed_text.py), else ``""``."""
    data = document.front_matter.data if document.front_matter else None
    if isinstance(data, dict) and isinstance(data.get("title"), str) and data["title"].strip():
        return data["title"].strip()
    first_h1 = next((heading.heading_text for heading in document.headings if heading.heading_level == 1), "")
    return first_h1 or title_from_doc_id(doc_id)


_LEADING_BLANK_LINES = re.compile(r"\A(?:[^\S\r\n]*(?:\r\n|\r|\n))*")


def reference_body(text: str, front_matter_end: int, start: int, end: int) -> str:
    """A chunk's text as its ``embed_text`` ends: without front matter (or a byte order mark) and without
    leading blank lines."""
    skipped = front_matter_end or (1 if text.startswith("\ufeff") else 0)
    return _LEADING_BLANK_LINES.sub("", text[max(start, skipped) : end])


def heading_paths_of_sections(document) -> list[tuple[str, ...]]:
    """Heading path of every section of a parsed document, following the sections' parent links."""
    paths: list[tuple[str, ...]] = []
    for section in document.sections:
        if section.heading is None:
            paths.append(())
        elif section.parent is None:
            paths.append((section.heading,))
        else:
            paths.append(paths[section.parent] + (section.heading,))
    return paths


def is_word_boundary(text: str, position: int) -> bool:
    """A cut at ``position`` cuts no word: it is at an end of the text, next to whitespace, or right
    after a CJK full stop (scripts without spaces break there)."""
    if position <= 0 or position >= len(text):
        return True
    if text[position - 1].isspace() or text[position].isspace():
        return True
    return bool(_CJK_SENTENCE_END.search(text, 0, position))


def word_around(text: str, position: int) -> str:
    """The whitespace-delimited run of characters that contains the cut ``position``."""
    start = position
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    end = position
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[start:end]


#: Blocks that must land whole in one chunk when they fit (product invariant 3, plus the engine's own
#: promise for indented code and HTML blocks).
PROTECTED_KINDS = ("fence", "code_block", "table", "list_item", "html_block")


def assert_protected_blocks_whole(text: str, chunks, max_tokens: int, counter) -> int:
    """Every protected block whose content fits in ``max_tokens`` lies inside at least one chunk.

    A block's content is its lines without the trailing whitespace (line break, blank lines) that the
    parser's block range includes: a block of exactly ``max_tokens`` tokens fits, its line break may not.
    Returns the number of blocks checked."""
    from chunkline import parse_markdown

    checked = 0
    for block in parse_markdown(text).blocks:
        if block.kind not in PROTECTED_KINDS:
            continue
        content = text[block.start_char : block.end_char].rstrip()
        if not content or exact_token_count(counter, content) > max_tokens:
            continue
        start, end = block.start_char, block.start_char + len(content)
        checked += 1
        assert any(c.start_char <= start and end <= c.end_char for c in chunks), (
            f"{block.kind} at {start}..{end} is split: {content!r} "
            f"(chunks {[(c.start_char, c.end_char) for c in chunks]})"
        )
    return checked


def assert_invariants(
    text: str, chunks, config=None, *, doc_id: str = "", source_uri: str = "", over_limit_allowed=None
) -> None:
    """Every contract a list of chunks of ``text`` must keep, whatever the strategy and input.

    ``over_limit_allowed(chunk)`` says whether a chunk over ``max_tokens`` is a strategy's documented soft
    bound (an atomic unit it never splits); without it no chunk may be over."""
    config = config or chunkline.ChunkConfig()
    counter = counter_for(config)
    assert chunks, "every document, even an empty one, has at least one chunk"
    positions = reference_positions(text)
    document = chunkline.parse_markdown(text)
    title = reference_title(document, doc_id)
    front_matter_end = document.front_matter.end_char if document.front_matter else 0

    for number, chunk in enumerate(chunks):
        where = f"chunk {number} ({chunk.start_char}..{chunk.end_char})"
        assert 0 <= chunk.start_char <= chunk.end_char <= len(text), where
        assert chunk.text == text[chunk.start_char : chunk.end_char], where
        assert chunk.char_count == len(chunk.text), where
        assert chunk.token_count == exact_token_count(counter, chunk.text), where
        assert chunk.token_count <= config.max_tokens or (over_limit_allowed and over_limit_allowed(chunk)), where
        assert chunk.start_byte == reference_byte_offset(text, chunk.start_char), where
        assert chunk.end_byte == reference_byte_offset(text, chunk.end_char), where
        assert chunk.end_byte - chunk.start_byte == len(chunk.text.encode("utf-8", "surrogatepass")), where
        assert (chunk.start_line, chunk.start_column) == positions[chunk.start_char], where
        last = chunk.end_char - 1 if chunk.end_char > chunk.start_char else chunk.start_char
        assert (chunk.end_line, chunk.end_column) == positions[last], where
        assert chunk.chunk_index == number, where
        assert chunk.chunk_id == f"{doc_id}#{number}", where
        assert chunk.chunk_uuid == str(uuid.uuid5(CHUNK_UUID_NAMESPACE, chunk.chunk_id)), where
        assert chunk.content_sha256 == hashlib.sha256(chunk.text.encode("utf-8", "surrogatepass")).hexdigest(), where
        assert chunk.doc_id == doc_id and chunk.source_uri == source_uri, where
        assert chunk.strategy == config.strategy, where
        assert isinstance(chunk.heading_path, tuple), where
        assert all(isinstance(heading, str) for heading in chunk.heading_path), where
        # What the embedding model sees: the text without front matter, after a context line; exactly
        # counted, and within the limit unless the chunk's own text is a soft-bound unit over it.
        assert chunk.title == title, where
        body = reference_body(text, front_matter_end, chunk.start_char, chunk.end_char)
        assert chunk.embed_text.endswith(body) or chunk.embed_text == chunk.text, where
        assert chunk.embed_token_count == exact_token_count(counter, chunk.embed_text), where
        assert chunk.embed_token_count <= config.max_tokens or (
            chunk.token_count > config.max_tokens and chunk.embed_text == body
        ), f"{where}: embed_text of {chunk.embed_token_count} tokens"

    # Ordered, gap-free cover of the whole text; every chunk reaches further than the one before.
    assert chunks[0].start_char == 0
    covered = chunks[0].end_char
    for previous, chunk in zip(chunks, chunks[1:]):
        assert previous.start_char <= chunk.start_char, (previous.chunk_index, chunk.chunk_index)
        assert chunk.start_char <= covered, f"gap {covered}..{chunk.start_char} before chunk {chunk.chunk_index}"
        assert chunk.end_char > covered, f"chunk {chunk.chunk_index} adds nothing to chunk {previous.chunk_index}"
        covered = chunk.end_char
    assert covered == len(text)
    assert chunkline.reconstruct(chunks) == text
    assert chunkline.reconstruct(list(reversed(chunks))) == text


def only_headings_or_front_matter(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` has text, all of it in heading lines and front matter (from the parse)."""
    document = chunkline.parse_markdown(text)
    covered = [(heading.start_char, heading.end_char) for heading in document.headings]
    if document.front_matter is not None:
        covered.append((0, document.front_matter.end_char))
    found = False
    for match in _NON_SPACE.finditer(text, start, end):
        if not any(low <= match.start() < high for low, high in covered):
            return False
        found = True
    return found


def assert_no_fragment_could_have_merged(text: str, chunks, config: chunkline.ChunkConfig) -> None:
    """Every chunk under min_tokens, or of headings or front matter only, is the whole document or could
    not have joined either neighbour within the budget (or is cut off from it by a gap); a later piece of a
    cut section only the piece before it."""
    counter = counter_for(config)
    if len(chunks) == 1 or config.effective_min_tokens == 0:  # the whole document, or the pass is off
        return
    size_target = chunkline.get_strategy(config.strategy).size_target
    document = chunkline.parse_markdown(text)
    # The chunk's token budget as the engine gives it to the strategy: max_tokens less the embed_text reserve.
    budget = span_budget(document, config, counter, doc_id=chunks[0].doc_id)
    context = ChunkContext(document, config, counter, max_tokens=budget)

    def fits(start: int, end: int, joins_heading: bool) -> bool:
        within_target = size_target is None or size_target(context, start, end, joins_heading)
        return within_target and counter.count(text[start:end]) <= budget

    for number, chunk in enumerate(chunks):
        small = chunk.token_count < config.effective_min_tokens
        joins_heading = only_headings_or_front_matter(text, chunk.start_char, chunk.end_char)
        if not small and not joins_heading:
            continue
        where = f"chunk {number} {chunk.text!r} ({chunk.token_count} tokens)"
        # A later piece of a section cut at the budget keeps to its section: it may only join the piece before.
        # A piece never joins the next section, whatever path the packed piece before it took; one that overlaps
        # the piece before it is a later piece of that cut (cuts of different sections never overlap).
        previous = chunks[number - 1] if number else None
        following = chunks[number + 1] if number + 1 < len(chunks) else None
        continues_a_cut = (
            previous is not None
            and chunk.is_sub_split
            and previous.is_sub_split
            and chunk.start_char <= previous.end_char
            and (
                chunk.start_char < previous.end_char
                or previous.heading_path == chunk.heading_path
                or (following is not None and following.section_id != chunk.section_id)
            )
        )
        if number + 1 < len(chunks) and not continues_a_cut:
            following = chunks[number + 1]
            if following.start_char <= chunk.end_char:
                assert not fits(chunk.start_char, following.end_char, joins_heading), f"{where} fits with the next"
        if number > 0:
            previous = chunks[number - 1]
            if chunk.start_char <= previous.end_char:
                assert not fits(previous.start_char, chunk.end_char, joins_heading), f"{where} fits with the previous"


def cut_positions(chunks) -> list[int]:
    """Where consecutive chunks meet: each chunk's start and the previous chunk's end (they differ when
    the chunks overlap)."""
    cuts = []
    for previous, chunk in zip(chunks, chunks[1:]):
        cuts.extend(sorted({previous.end_char, chunk.start_char}))
    return cuts


# --------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def overlap_warnings(caplog, monkeypatch):
    """The ``overlap_tokens`` warnings warnings logged by the test (the warning is logged once per process: none has been yet)."""
    monkeypatch.setattr(chunkline.context, "_warned", set())
    caplog.set_level(logging.WARNING, logger="chunkline")

    def messages() -> list[str]:
        return [record.getMessage() for record in caplog.records if "overlap_tokens" in record.getMessage()]

    return messages


@pytest.fixture(scope="session")
def counter():
    """The default tokenizer (cl100k_base), loaded once per test session."""
    return get_token_counter("cl100k_base")


@pytest.fixture(scope="session")
def read_fixture():
    """Text of a fixture document, decoded from its bytes with no newline translation."""

    def read(name: str) -> str:
        return (FIXTURES / name).read_bytes().decode("utf-8")

    return read


@pytest.fixture
def check_invariants():
    return assert_invariants


@pytest.fixture(scope="module")
def network_blocked():
    """Every attempt to open a network connection from Python fails and is recorded; none may happen."""
    import socket

    attempts: list[str] = []

    def refuse(name):
        def refused(*args, **kwargs):
            attempts.append(f"{name}{args}")
            raise OSError(f"network access attempted in an offline test: {name}")

        return refused

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse("socket.connect"))
        patch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
        patch.setattr(socket, "create_connection", refuse("socket.create_connection"))
        patch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
        yield attempts
    assert not attempts, f"network access attempted: {attempts}"


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def import_example(name: str):
    """The example ``examples/<name>.py``, imported from its file as a user who copied it would run it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"chunkline_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def qdrant_points(target: Path) -> list:
    """Every point of the "chunks" collection of the local Qdrant store at ``target``, with payloads and
    vectors, read page by page."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(target))
    try:
        points, offset = [], None
        while True:
            page, offset = client.scroll("chunks", limit=500, offset=offset, with_payload=True, with_vectors=True)
            points += page
            if offset is None:
                break
    finally:
        client.close()
    return points
