"""The structure of a document as data: ``chunk_markdown_with_sections`` and the chunks' section links.

Every registered strategy, on the fixtures, the sample corpus, the hostile corpus and generated markdown,
must give sections and chunk links that agree with the text and with each other:

* the root (``<doc_id>#s0``) spans the document; each heading's section is the verbatim slice from its
  heading line to the next heading of the same or a higher level, with exact byte offsets and lines;
* parents come before their children, enclose them, and sit one step up their heading path;
* every chunk's ``section_id`` is the innermost section holding its start, ``parent_section_ids`` are
  the sections around that one, and ``prev_chunk_id``/``next_chunk_id`` chain the document's chunks;
* ``chunk_count``, ``first_chunk_index`` and ``last_chunk_index`` count the chunks that start inside;
* token counts are exact, and ``embed_text`` is there exactly when the section's text fits ``max_tokens``.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from bisect import bisect_left, bisect_right
from pathlib import Path

import pytest
from conftest import FIXTURES, exact_token_count, reference_body, reference_byte_offset, reference_positions
from hostile_corpus import HOSTILE_FILES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents
from test_strategy_contract import config_for

import chunkline
from chunkline import ChunkConfig, available_strategies, chunk_markdown, chunk_markdown_with_sections
from chunkline.record import CHUNK_UUID_NAMESPACE, ChunkedDocument, SectionRecord
from chunkline.tokenizers import counter_for

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
STRATEGIES = available_strategies()
MAX_TOKENS, OVERLAP_TOKENS = 512, 50

#: Hostile files too large to check for every strategy in the fast lane (each is checked in the slow one).
LARGE_HOSTILE_FILES = {
    "single_line_1mb.md",
    "base64_blob_300kb.md",
    "nested_block_quotes_5000.md",
    "nested_list_levels_2000.md",
    "headings_20000.md",
    "section_of_60000_sentences.md",
    "code_block_20000_lines.md",
}


@functools.cache
def hostile_text(name: str) -> str | None:
    """A hostile file's text, or None for the files that are not UTF-8 (the pipeline refuses those)."""
    try:
        return HOSTILE_FILES[name]().decode("utf-8")
    except UnicodeDecodeError:
        return None


HOSTILE_UTF8 = [name for name in HOSTILE_FILES if hostile_text(name) is not None]


def contains_start(section, position: int, length: int) -> bool:
    """Whether a chunk starting at ``position`` starts inside ``section`` (a chunk at the very end of the
    document, an empty one, starts in every section that ends there)."""
    return section.start_char <= position < section.end_char or position == section.end_char == length


def assert_sections(text: str, result: ChunkedDocument, config: ChunkConfig, doc_id: str) -> None:
    """Every contract of the sections and of the chunks' section links."""
    counter = counter_for(config)
    sections, chunks = result.sections, result.chunks
    length = len(text)
    positions = reference_positions(text)
    by_id = {section.section_id: section for section in sections}
    assert len(by_id) == len(sections)

    root = sections[0]
    assert (root.section_id, root.parent_section_id, root.level, root.heading, root.heading_path) == (
        f"{doc_id}#s0",
        None,
        0,
        None,
        (),
    )
    assert (root.start_char, root.end_char) == (0, length)
    document = chunkline.parse_markdown(text)
    front_matter_end = document.front_matter.end_char if document.front_matter else 0

    for ordinal, section in enumerate(sections):
        where = f"section {section.section_id} ({section.start_char}..{section.end_char})"
        assert isinstance(section, SectionRecord)
        assert section.section_ordinal == ordinal and section.section_id == f"{doc_id}#s{ordinal}", where
        assert section.section_uuid == str(uuid.uuid5(CHUNK_UUID_NAMESPACE, section.section_id)), where
        assert section.doc_id == doc_id, where
        assert section.text == text[section.start_char : section.end_char], where
        assert section.char_count == len(section.text), where
        assert section.content_sha256 == hashlib.sha256(section.text.encode("utf-8", "surrogatepass")).hexdigest()
        assert section.start_byte == reference_byte_offset(text, section.start_char), where
        assert section.end_byte == reference_byte_offset(text, section.end_char), where
        assert section.start_line == positions[section.start_char][0], where
        last = section.end_char - 1 if section.end_char > section.start_char else section.start_char
        assert section.end_line == positions[last][0], where
        assert section.token_count == exact_token_count(counter, section.text), where
        assert section.title == chunks[0].title, where
        # The text to embed: there exactly when the section fits, built as a chunk's is.
        if section.embed_text is not None:
            assert section.embed_token_count == exact_token_count(counter, section.embed_text) <= config.max_tokens
            body = reference_body(text, front_matter_end, section.start_char, section.end_char)
            assert section.embed_text.endswith(body) or section.embed_text == section.text, where
        else:
            assert section.embed_token_count is None, where
            assert section.token_count > config.max_tokens, where
        if ordinal == 0:
            continue
        # A heading subtree: from a heading line to the next heading of the same or a higher level.
        assert section.level >= 1 and section.heading is not None, where
        assert section.start_char == 0 or text[section.start_char - 1] in "\r\n", where
        next_start = next((other.start_char for other in sections[ordinal + 1 :] if other.level <= section.level), None)
        assert section.end_char == (length if next_start is None else next_start), where
        parent = by_id[section.parent_section_id]
        assert parent.section_ordinal < ordinal, where
        assert parent.start_char <= section.start_char <= section.end_char <= parent.end_char, where
        assert parent.level < section.level, where
        assert section.heading_path == (*parent.heading_path, section.heading), where
    # Headings in document order, on lines of their own.
    starts = [section.start_char for section in sections[1:]]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)

    chunk_starts = [chunk.start_char for chunk in chunks]
    assert chunk_starts == sorted(chunk_starts)
    for section in sections:
        first = bisect_left(chunk_starts, section.start_char)
        after = bisect_left(chunk_starts, section.end_char)
        if section.end_char == length:
            after = bisect_right(chunk_starts, length)
        inside = list(range(first, after))
        assert section.chunk_count == len(inside), section.section_id
        assert section.first_chunk_index == (inside[0] if inside else None), section.section_id
        assert section.last_chunk_index == (inside[-1] if inside else None), section.section_id
    assert root.chunk_count == len(chunks)

    children: dict[str, list[SectionRecord]] = {}
    for section in sections[1:]:
        children.setdefault(section.parent_section_id, []).append(section)
    for number, chunk in enumerate(chunks):
        where = f"chunk {chunk.chunk_id} ({chunk.start_char}..{chunk.end_char})"
        section = by_id[chunk.section_id]
        assert contains_start(section, chunk.start_char, length), where
        # The innermost: no section inside it holds the chunk's start.
        inner = children.get(section.section_id, [])
        assert not [child for child in inner if contains_start(child, chunk.start_char, length)], where
        ancestors = []
        parent_id = section.parent_section_id
        while parent_id is not None:
            ancestors.insert(0, parent_id)
            parent_id = by_id[parent_id].parent_section_id
        assert chunk.parent_section_ids == tuple(ancestors), where
        assert chunk.prev_chunk_id == (chunks[number - 1].chunk_id if number else None), where
        assert chunk.next_chunk_id == (chunks[number + 1].chunk_id if number + 1 < len(chunks) else None), where
        assert chunk.to_dict()["parent_section_ids"] == list(ancestors)


def check_document(text: str, config: ChunkConfig, doc_id: str = "doc.md") -> ChunkedDocument:
    result = chunk_markdown_with_sections(text, config, doc_id=doc_id, source_uri=f"file:///{doc_id}")
    # The chunks are chunk_markdown's, exactly.
    assert result.chunks == chunk_markdown(text, config, doc_id=doc_id, source_uri=f"file:///{doc_id}")
    assert_sections(text, result, config, doc_id)
    return result


# --------------------------------------------------------------------------------------------------
# What a document's sections are
# --------------------------------------------------------------------------------------------------

NESTED = (
    "---\ntitle: Harbour operations\n---\n"  # front matter: the root's, before any heading
    "Read this first.\n\n"
    "# Tides\n\nThe gauge reports every minute.\n\n"
    "## Gauges\n\nNorth quay.\n\n"
    "#### Calibration\n\nMonthly.\n\n"  # a level skipped: its parent is still Gauges
    "## Alerts\n\nWhen the water rises.\n\n"
    "# Cranes\n\nWind limits.\n"
)


def test_a_nested_document_has_a_root_and_one_subtree_per_heading():
    config = ChunkConfig(max_tokens=64, overlap_tokens=0)
    result = check_document(NESTED, config)
    rows = [(s.section_id, s.parent_section_id, s.level, s.heading, s.chunk_count) for s in result.sections]
    assert [row[:4] for row in rows] == [
        ("doc.md#s0", None, 0, None),
        ("doc.md#s1", "doc.md#s0", 1, "Tides"),
        ("doc.md#s2", "doc.md#s1", 2, "Gauges"),
        ("doc.md#s3", "doc.md#s2", 4, "Calibration"),
        ("doc.md#s4", "doc.md#s1", 2, "Alerts"),
        ("doc.md#s5", "doc.md#s0", 1, "Cranes"),
    ]
    tides = result.sections[1]
    assert tides.text.startswith("# Tides\n") and tides.text.endswith("When the water rises.\n\n")
    assert tides.heading_path == ("Tides",)
    assert result.sections[3].heading_path == ("Tides", "Gauges", "Calibration")
    assert result.sections[3].embed_text.startswith("Harbour operations > Tides > Gauges > Calibration\n\n")
    first = result.chunks[0]
    assert first.prev_chunk_id is None and first.section_id == "doc.md#s0" and first.parent_section_ids == ()


def test_a_document_without_headings_is_its_root():
    text = "Plain prose.\n\nNo heading at all.\n"
    result = check_document(text, ChunkConfig(max_tokens=8, overlap_tokens=0))
    assert len(result.sections) == 1 and result.sections[0].chunk_count == len(result.chunks) > 1
    assert {chunk.section_id for chunk in result.chunks} == {"doc.md#s0"}


@pytest.mark.parametrize("text", ["", "   \n\n", "# Only a heading", "\ufeff# Heading after a BOM\n\nBody.\n"])
def test_edge_documents(text):
    result = check_document(text, ChunkConfig())
    assert result.sections[0].end_char == len(text)


def test_whitespace_before_the_first_heading_belongs_to_its_section():
    # As the engine's sections have it, so that a chunk's section_id, section_index and heading path agree.
    text = "\n\n# Title\n\nBody.\n"
    result = check_document(text, ChunkConfig())
    assert (result.sections[1].start_char, result.chunks[0].section_id) == (0, "doc.md#s1")
    assert result.chunks[0].heading_path == ("Title",)


def test_a_custom_section_pattern_makes_the_sections():
    text = "Intro.\n\nPART 1: Setup\n\nInstall.\n\nPART 1.1: Ports\n\nOpen 443.\n\nPART 2: Use\n\nRun it.\n"
    config = ChunkConfig(max_tokens=16, overlap_tokens=0, section_pattern=r"^PART ([\d.]+): (.+)$")
    result = check_document(text, config)
    assert [(s.heading, s.level, s.parent_section_id) for s in result.sections[1:]] == [
        ("Setup", 1, "doc.md#s0"),
        ("Ports", 2, "doc.md#s1"),
        ("Use", 1, "doc.md#s0"),
    ]


def test_a_section_too_large_to_embed_has_no_embed_text():
    text = "# Big\n\n" + " ".join(f"word{number}" for number in range(400)) + "\n\n## Small\n\nFits.\n"
    result = check_document(text, ChunkConfig(max_tokens=128, overlap_tokens=0))
    big, small = result.sections[1], result.sections[2]
    assert big.embed_text is None and big.embed_token_count is None and big.token_count > 128
    assert small.embed_text == "Big > Small\n\n## Small\n\nFits.\n"  # the title is the first heading


def test_the_result_is_frozen_and_deterministic():
    config = ChunkConfig(max_tokens=64, overlap_tokens=0)
    first = chunk_markdown_with_sections(NESTED, config, doc_id="a.md")
    assert first == chunk_markdown_with_sections(NESTED, config, doc_id="a.md")
    with pytest.raises(AttributeError):
        first.sections[0].level = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# Every strategy, on realistic and hostile files
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_links_chunks_to_sections_on_the_fixtures(strategy):
    config = config_for(strategy, MAX_TOKENS, OVERLAP_TOKENS)
    for path in sorted(FIXTURES.glob("*.md")):
        check_document(path.read_text(encoding="utf-8"), config, doc_id=path.name)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_links_chunks_to_sections_on_the_sample_corpus(strategy):
    config = config_for(strategy, MAX_TOKENS, OVERLAP_TOKENS)
    for path in sorted(SAMPLE_CORPUS.rglob("*.md")):
        check_document(path.read_text(encoding="utf-8"), config, doc_id=str(path.relative_to(SAMPLE_CORPUS)))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_links_chunks_to_sections_on_the_small_hostile_files(strategy):
    config = config_for(strategy, MAX_TOKENS, OVERLAP_TOKENS)
    for name in HOSTILE_UTF8:
        if name not in LARGE_HOSTILE_FILES:
            check_document(hostile_text(name), config, doc_id=name)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_links_chunks_to_sections_on_the_large_hostile_files(strategy):
    config = config_for(strategy, MAX_TOKENS, OVERLAP_TOKENS)
    for name in sorted(LARGE_HOSTILE_FILES & set(HOSTILE_UTF8)):
        text = hostile_text(name)
        assert_sections(text, chunk_markdown_with_sections(text, config, doc_id=name), config, name)


@pytest.mark.slow
@given(text=markdown_documents(), strategy=st.sampled_from(STRATEGIES), max_tokens=st.integers(64, 300))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sections_of_generated_markdown(text, strategy, max_tokens):
    check_document(text, config_for(strategy, max_tokens, 0))


# --------------------------------------------------------------------------------------------------
# The tables' schemas
# --------------------------------------------------------------------------------------------------


def test_the_sections_schema_is_the_section_record_without_its_text():
    from chunkline.schemas import SECTION_COLUMNS, SECTIONS_SCHEMA, TABLE_SCHEMAS

    assert list(SECTION_COLUMNS) == [name for name in SectionRecord.__slots__ if name != "text"]
    assert TABLE_SCHEMAS["sections"] == (SECTIONS_SCHEMA, ("doc_id", "section_ordinal"))
    nullable = {field.name for field in SECTIONS_SCHEMA if field.nullable}
    assert nullable == {
        "parent_section_id",
        "heading",
        "first_chunk_index",
        "last_chunk_index",
        "embed_text",
        "embed_token_count",
    }
    upserts = TABLE_SCHEMAS["changes/section_upserts"][0]
    assert upserts.names == [*SECTION_COLUMNS, "embedding_changed"]
    assert TABLE_SCHEMAS["changes/section_deletes"][0].names == ["doc_id", "section_id", "section_uuid"]
    # The rows the pipeline stores convert to the schema with no cast.
    import pyarrow as pa

    from chunkline.dataset.document_rows import section_row

    result = chunk_markdown_with_sections(NESTED, ChunkConfig(max_tokens=64, overlap_tokens=0), doc_id="doc.md")
    table = pa.Table.from_pylist([section_row(section) for section in result.sections], schema=SECTIONS_SCHEMA)
    assert table.column("heading_path").to_pylist()[3] == ["Tides", "Gauges", "Calibration"]


ROWS_CASES = {
    "nested": NESTED.encode(),
    "front matter, CRLF, non-ASCII": (
        b"---\r\ntitle: Caf\xc3\xa9\r\n---\r\n\r\nIntro \xf0\x9f\x8c\x8a\r\n\r\n# \xc3\x9cber\r\n\r\ntext\r\n"
        b"## B\xc3\xa9\r\n\r\nmore\r\n"
    ),
    "invalid bytes replaced": b"# A \xff\xfe head\n\nbody \xc3 bytes\n\n## B\n\n\xed\xa0\x80 tail\n",
}


@pytest.mark.parametrize("case", sorted(ROWS_CASES))
@pytest.mark.parametrize("strategy", ["headings", "sections"])
def test_the_table_rows_are_the_records_without_their_text(case, strategy):
    """The pipeline's rows (built without each section's text) are the records' rows, field for field."""
    from chunkline.dataset.decoding import decode_file
    from chunkline.dataset.document_rows import section_row
    from chunkline.engine import chunk_document_with_section_rows, chunk_document_with_sections
    from chunkline.record import SECTION_ROW_FIELDS
    from chunkline.structure import parse_markdown

    text, _, replaced_bytes = decode_file(ROWS_CASES[case], "replace")
    config = config_for(strategy, 64, 0)
    counter = counter_for(config)
    arguments = dict(doc_id="d.md", source_uri="file:///d.md", replaced_bytes=replaced_bytes)
    chunked = chunk_document_with_sections(parse_markdown(text), config, counter, **arguments)
    chunks, rows = chunk_document_with_section_rows(parse_markdown(text), config, counter, **arguments)
    assert chunks == chunked.chunks and len(rows) == len(chunked.sections) > 1
    assert [dict(zip(SECTION_ROW_FIELDS, row)) for row in rows] == [
        section_row(section) for section in chunked.sections
    ]
    for row in map(dict, (zip(SECTION_ROW_FIELDS, row) for row in rows)):
        section_text = text[row["start_char"] : row["end_char"]]
        assert row["content_sha256"] == hashlib.sha256(section_text.encode("utf-8", "surrogatepass")).hexdigest()
    if case == "invalid bytes replaced":
        assert replaced_bytes and rows[-1][12] == len(ROWS_CASES[case])  # end_byte counts the file's bytes


def test_the_chunks_schema_gains_the_links_after_its_columns():
    from chunkline.schemas import CHUNKS_SCHEMA

    chunk_fields = list(chunkline.Chunk.__slots__)
    assert CHUNKS_SCHEMA.names == chunk_fields
    assert chunk_fields[-4:] == ["section_id", "prev_chunk_id", "next_chunk_id", "parent_section_ids"]
    assert {field.name for field in CHUNKS_SCHEMA if field.nullable} >= {"prev_chunk_id", "next_chunk_id"}
    assert not CHUNKS_SCHEMA.field("section_id").nullable
