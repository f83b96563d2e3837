"""What the embedding model sees of each chunk: ``title``, ``embed_text`` and ``embed_token_count``.

The context line (``chunking.embed_context``), front matter left out, a split table's header repeated,
and the budget: ``embed_token_count`` is exact and never over ``max_tokens``, while ``text`` stays the
verbatim slice. (Every strategy's chunks are also checked by ``conftest.assert_invariants``, which the
strategy contract tests run with cl100k_base and with Hugging Face tokenizers.)
"""

from __future__ import annotations

import pytest
from conftest import assert_invariants, assert_protected_blocks_whole, exact_token_count
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, chunk_markdown, load_chunk_config, parse_markdown
from chunkline.embed_text import title_from_doc_id
from chunkline.engine import span_budget
from chunkline.tokenizers import get_token_counter

RUNBOOK = """---
title: Harbour Telemetry Runbook
owner: ops
---
# Harbour Telemetry

The telemetry service collects tide gauge readings every ten minutes.

## Installation

Install the collector on the gauge host.

### Linux

Run the installer as root and restart the service.

## Operations

Check the dashboard each morning.
"""


def chunks_of(text: str, **settings) -> list:
    """Chunks with ``settings``; one chunk per section (``min_tokens: 0``) unless ``min_tokens`` is given, so
    that each section's own context line can be looked at."""
    settings.setdefault("min_tokens", 0)
    config = ChunkConfig(**settings)
    chunks = chunk_markdown(text, config, doc_id="runbook.md")
    assert_invariants(text, chunks, config, doc_id="runbook.md")
    return chunks


def by_path(chunks) -> dict[tuple[str, ...], object]:
    return {chunk.heading_path: chunk for chunk in chunks}


# ------------------------------------------------------------------------------------------ title


def test_the_title_comes_from_the_front_matter_first():
    chunks = chunks_of(RUNBOOK)
    assert {chunk.title for chunk in chunks} == {"Harbour Telemetry Runbook"}


def test_without_a_front_matter_title_the_first_h1_is_the_title():
    text = "---\nowner: ops\ntags: [gauges]\n---\n## Before\n\nText.\n\n# Tide Gauges\n\nMore.\n\n# Later\n"
    assert {chunk.title for chunk in chunks_of(text)} == {"Tide Gauges"}
    # An empty or non-text front matter title does not count; a setext H1 is an H1.
    assert {chunk.title for chunk in chunks_of('---\ntitle: ""\n---\nGauges\n======\n\nText.\n')} == {"Gauges"}
    assert {chunk.title for chunk in chunks_of("---\ntitle: 42\n---\n# Gauges\n")} == {"Gauges"}


def test_without_front_matter_title_or_h1_the_file_name_is_the_title():
    text = "```\n# not a heading\n```\n\n## Only a second level\n\nText.\n"
    chunks = chunks_of(text)  # doc_id runbook.md
    assert {chunk.title for chunk in chunks} == {"runbook"}
    assert by_path(chunks)[("Only a second level",)].embed_text.startswith("runbook > Only a second level\n\n## Only")
    untitled = chunk_markdown(text, ChunkConfig(min_tokens=0))  # no doc_id: no title at all
    assert {chunk.title for chunk in untitled} == {""}
    assert untitled[-1].embed_text.startswith("Only a second level\n\n## Only")


@pytest.mark.parametrize(
    ("doc_id", "title"),
    [
        ("rust-rfcs/0001-private-fields.md", "private fields"),
        ("book/ch03-02-data-types.md", "data types"),
        ("docs/install/_index.md", "install"),
        ("guides/tides/README.md", "tides"),
        ("README.md", ""),
        ("appendix-01-keywords.md", "appendix 01 keywords"),
        ("2024-01-05.md", ""),
        ("notes/tide_gauge calibration.markdown", "tide gauge calibration"),
    ],
)
def test_the_title_a_file_name_gives(doc_id, title):
    assert title_from_doc_id(doc_id) == title
    document = "Gauges are read every ten minutes.\n"
    assert {chunk.title for chunk in chunk_markdown(document, doc_id=doc_id)} == {title}


def test_with_the_default_packing_small_sections_share_one_context_line_and_the_front_matter_is_left_out():
    chunks = chunks_of(RUNBOOK, min_tokens=None)
    assert len(chunks) < 4 and chunks[0].start_char == 0
    first = chunks[0]
    assert first.heading_path == ("Harbour Telemetry",)
    assert first.embed_text.startswith("Harbour Telemetry Runbook > Harbour Telemetry\n\n# Harbour Telemetry\n")
    assert "owner: ops" in first.text and "owner: ops" not in first.embed_text


# ---------------------------------------------------------------------------------- context line


def test_the_default_context_is_the_breadcrumb_of_title_and_heading_path():
    chunks = by_path(chunks_of(RUNBOOK))
    linux = chunks[("Harbour Telemetry", "Installation", "Linux")]
    assert linux.embed_text == (
        "Harbour Telemetry Runbook > Harbour Telemetry > Installation > Linux\n\n"
        "### Linux\n\nRun the installer as root and restart the service.\n\n"
    )
    assert linux.text == "### Linux\n\nRun the installer as root and restart the service.\n\n"


def test_the_title_is_left_out_of_the_breadcrumb_when_it_is_the_first_heading():
    text = "# Tide Gauges\n\nIntro.\n\n## Calibration\n\nSteps.\n"
    chunks = by_path(chunks_of(text))
    assert (
        chunks[("Tide Gauges", "Calibration")].embed_text == "Tide Gauges > Calibration\n\n## Calibration\n\nSteps.\n"
    )
    assert chunks[("Tide Gauges",)].embed_text == "Tide Gauges\n\n# Tide Gauges\n\nIntro.\n\n"


@pytest.mark.parametrize(
    "template, expected",
    [
        ("{title}", "Harbour Telemetry Runbook"),
        ("{heading_path}", "Harbour Telemetry > Installation > Linux"),
        (
            "Document: {title} | Section: {heading_path}",
            "Document: Harbour Telemetry Runbook | Section: Harbour Telemetry > Installation > Linux",
        ),
        ("{title}\n{heading_path}", "Harbour Telemetry Runbook\nHarbour Telemetry > Installation > Linux"),
        ("{{{title}}}", "{Harbour Telemetry Runbook}"),
    ],
)
def test_a_template_renders_its_placeholders(template, expected):
    chunk = by_path(chunks_of(RUNBOOK, embed_context=template))[("Harbour Telemetry", "Installation", "Linux")]
    assert chunk.embed_text == expected + "\n\n" + chunk.text


def test_a_line_that_renders_empty_adds_nothing():
    # The preamble has no heading path: "{heading_path}" renders empty, so no blank line leads its text.
    text = "Notes before any heading.\n\n# Gauges\n\nText.\n"
    chunks = chunks_of(text, embed_context="{heading_path}")
    assert chunks[0].heading_path == () and chunks[0].embed_text == chunks[0].text
    assert chunks[1].embed_text == "Gauges\n\n# Gauges\n\nText.\n"


def test_none_adds_nothing_and_keeps_the_whole_budget():
    chunks = chunks_of(RUNBOOK, embed_context="none")
    assert chunks[0].embed_text == ""  # the preamble is the front matter alone
    for chunk in chunks[1:]:
        assert chunk.embed_text == chunk.text and chunk.embed_token_count == chunk.token_count
    assert span_budget(parse_markdown(RUNBOOK), ChunkConfig(embed_context="none")) == 512


@pytest.mark.parametrize(
    "template, named",
    [
        ("{title} > {section}", "{section}"),
        ("{chapter} {heading}", "{chapter}, {heading}"),
        ("{}", "{}"),
        ("{title.upper}", "{title.upper}"),
    ],
)
def test_unknown_placeholders_are_refused_by_name(template, named):
    with pytest.raises(ConfigError) as raised:
        ChunkConfig(embed_context=template)
    message = str(raised.value)
    assert message.startswith("chunking.embed_context: unknown placeholder") and named in message
    assert "{breadcrumb}" in message


def test_a_malformed_template_is_refused():
    with pytest.raises(ConfigError, match="chunking.embed_context: .* is not a template"):
        ChunkConfig(embed_context="{title")
    with pytest.raises(ConfigError, match="chunking.embed_context"):
        ChunkConfig(embed_context=3)


def test_the_template_comes_from_files_environment_and_overrides(tmp_path):
    config_file = tmp_path / "chunkline.yaml"
    config_file.write_text("chunking:\n  embed_context: 'Doc: {title}'\n")
    assert load_chunk_config(config_file, environ={}).embed_context == "Doc: {title}"
    environ = {"CHUNKLINE_CHUNK_EMBED_CONTEXT": "{heading_path}"}
    assert load_chunk_config(config_file, environ=environ).embed_context == "{heading_path}"
    assert load_chunk_config(config_file, ["embed_context=none"], environ=environ).embed_context == "none"
    with pytest.raises(ConfigError, match="unknown placeholder {path}"):
        load_chunk_config(None, ["chunking.embed_context={path}"], environ={})


def test_the_template_is_part_of_the_fingerprint():
    fingerprints = {
        ChunkConfig(embed_context=template).fingerprint() for template in ("{breadcrumb}", "none", "{title}")
    }
    assert len(fingerprints) == 3
    assert ChunkConfig.from_dict(ChunkConfig(embed_context="{title}").to_dict()).embed_context == "{title}"


# ------------------------------------------------------------------------------- front matter, tables


def test_front_matter_is_left_out_of_embed_text():
    text = "---\ntitle: Gauge notes\nowner: ops\n---\n\nThe collector reads every gauge.\n\nIt never writes.\n"
    chunks = chunks_of(text)
    assert len(chunks) == 1 and chunks[0].text == text
    assert chunks[0].embed_text == "Gauge notes\n\nThe collector reads every gauge.\n\nIt never writes.\n"
    # Under headings, the front matter is the preamble: its text to embed is the title alone.
    assert chunks_of(RUNBOOK)[0].embed_text == "Harbour Telemetry Runbook"


def test_a_byte_order_mark_and_leading_blank_lines_are_left_out():
    text = "\ufeff# Gauges\n\nText.\n"
    assert chunks_of(text)[0].embed_text == "Gauges\n\n# Gauges\n\nText.\n"


def station_table(rows: int) -> str:
    lines = ["| Station | Latitude | Longitude | Datum | Last calibrated |", "| --- | ---: | ---: | --- | --- |"]
    lines += [
        f"| Gauge {n:03d} | {50 + n / 100:.2f} | {-4 - n / 100:.2f} | chart datum | 2024-03-{n % 28 + 1:02d} |"
        for n in range(rows)
    ]
    return "\n".join(lines) + "\n"


TABLE_HEADER = "| Station | Latitude | Longitude | Datum | Last calibrated |\n| --- | ---: | ---: | --- | --- |\n"


def test_a_chunk_that_starts_inside_a_split_table_repeats_its_header():
    text = "# Tide Gauges\n\n## Stations\n\nEvery gauge on the coast:\n\n" + station_table(60) + "\nEnd of list.\n"
    counter = get_token_counter()
    assert exact_token_count(counter, station_table(60)) > 256  # the table does not fit: it is split
    chunks = chunks_of(text, max_tokens=256, overlap_tokens=0)
    table_start = text.index("| Station")
    table_end = text.index("\nEnd of list")
    inside = [chunk for chunk in chunks if table_start + len(TABLE_HEADER) <= chunk.start_char < table_end]
    assert len(inside) >= 2
    for chunk in inside:
        assert chunk.embed_text == "Tide Gauges > Stations\n\n" + TABLE_HEADER + chunk.text
        assert chunk.embed_token_count <= 256
    # The chunk that holds the header itself does not repeat it.
    first = next(chunk for chunk in chunks if chunk.start_char <= table_start < chunk.end_char)
    assert first.embed_text.count("| Station |") == 1


def test_a_table_that_fits_is_never_split_by_the_reserve():
    # A table just under max_tokens: the context reserve shrinks the strategy's budget, never below it.
    counter = get_token_counter()
    rows = 1
    while exact_token_count(counter, station_table(rows + 1).rstrip()) <= 200:
        rows += 1
    table = station_table(rows)
    text = "# A Very Long Title About Tide Gauges On The Northern Coast\n\n## Stations And Their Datums\n\n" + table
    config = ChunkConfig(max_tokens=200, overlap_tokens=0)
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert assert_protected_blocks_whole(text, chunks, 200, counter) == 1
    holder = next(chunk for chunk in chunks if table.rstrip() in chunk.text)
    assert holder.embed_token_count <= 200


# ------------------------------------------------------------------------------------ the budget


def test_the_strategy_gets_the_budget_less_the_context():
    text = "# Tide Gauges\n\n## Calibration\n\n" + "The gauge is checked against the staff every week. " * 80
    config = ChunkConfig(max_tokens=128, overlap_tokens=16)
    budget = span_budget(parse_markdown(text), config)
    counter = get_token_counter()
    line = exact_token_count(counter, "Tide Gauges > Calibration\n\n")
    assert budget == 128 - line
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert max(chunk.token_count for chunk in chunks) <= budget
    calibration = [chunk for chunk in chunks if chunk.heading_path == ("Tide Gauges", "Calibration")]
    assert len(calibration) > 3
    assert all(chunk.embed_text == "Tide Gauges > Calibration\n\n" + chunk.text for chunk in calibration)
    assert max(chunk.embed_token_count for chunk in chunks) > budget  # the context fills what was kept for it


def test_a_context_line_over_its_share_is_shortened_outer_headings_first():
    headings = [
        "Harbour Operations Manual For The Northern Coast",
        "Gauges",
        "Calibration Procedures In Detail",
        "Weekly",
    ]
    text = "".join(f"{'#' * (level + 1)} {heading}\n\nShort text.\n\n" for level, heading in enumerate(headings))
    text += "A longer paragraph about checking the staff against the gauge. " * 30
    chunks = chunks_of(text, max_tokens=48, overlap_tokens=0)
    deepest = [chunk for chunk in chunks if chunk.heading_path == tuple(headings)]
    assert deepest
    for chunk in deepest:
        line = chunk.embed_text[: -len(chunk.text)] if chunk.embed_text != chunk.text else ""
        # Whatever fits: the innermost heading survives longest.
        assert line == "" or line.rstrip("\n").endswith("Weekly")
        assert chunk.embed_token_count <= 48


@st.composite
def deep_documents(draw) -> str:
    words = st.sampled_from(
        ["gauge", "tide", "datum", "Calibration", "harbour", "staff", "ÉTÉ", "潮位", "/usr/bin", "`code`"]
    )
    parts = []
    for level in range(1, draw(st.integers(1, 6)) + 1):
        heading = " ".join(draw(st.lists(words, min_size=1, max_size=12)))
        parts.append(f"{'#' * level} {heading}\n\n")
        parts.append(" ".join(draw(st.lists(words, min_size=0, max_size=60))) + "\n\n")
    if draw(st.booleans()):
        parts.insert(0, f"---\ntitle: {' '.join(draw(st.lists(words, min_size=1, max_size=20)))}\n---\n")
    return "".join(parts)


@settings(max_examples=80)
@given(
    text=deep_documents(),
    max_tokens=st.integers(4, 40),
    template=st.sampled_from(["{breadcrumb}", "{title}: {heading_path}"]),
)
@pytest.mark.slow
def test_long_heading_paths_near_a_tiny_budget_stay_within_it(text, max_tokens, template):
    config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=0, embed_context=template)
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)  # embed_token_count exact and <= max_tokens


@settings(max_examples=40)
@given(text=deep_documents(), max_tokens=st.integers(16, 120))
def test_text_positions_and_reconstruction_do_not_depend_on_the_context(text, max_tokens):
    # The context changes only the budget: both chunkings keep every invariant, and without context the
    # text to embed is the chunk's text.
    for template in ("{breadcrumb}", "none"):
        config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=max_tokens // 8, embed_context=template)
        chunks = chunk_markdown(text, config)
        assert_invariants(text, chunks, config)
        if template == "none":
            assert all(chunk.embed_token_count <= chunk.token_count or chunk.embed_text == "" for chunk in chunks)


@pytest.mark.parametrize("special", [False, True], ids=["text-only", "with-special-tokens"])
@pytest.mark.slow
def test_the_limit_holds_in_the_llama_tokenizer_with_its_special_tokens(special):
    from test_huggingface_tokenizer import llama_tokenizer_path

    path = llama_tokenizer_path()
    if path is None:
        pytest.skip("the wordllama package (which ships a Llama-2 tokenizer.json) is not installed")
    text = (
        RUNBOOK + "\n## Maintenance\n\n" + "Replace the float switch when the readings drift by more than 2 cm. " * 40
    )
    text += "\n" + station_table(40)
    for max_tokens in (24, 64, 200):
        config = ChunkConfig(
            max_tokens=max_tokens,
            overlap_tokens=4,
            tokenizer="huggingface",
            tokenizer_file=str(path),
            count_special_tokens=special,
        )
        chunks = chunk_markdown(text, config)
        assert_invariants(text, chunks, config)  # counts by the tokenizer loaded on its own
        assert any(chunk.embed_text.startswith("Harbour Telemetry Runbook > ") for chunk in chunks)


@pytest.mark.parametrize("strategy", ["lines", "words", "characters", "headings"])
def test_chunks_that_start_with_indentation_or_a_slash_are_counted_exactly(strategy):
    # Chunks that start with spaces, a tab or "/" join their context line where the counter gives no
    # clean cut: their counts are checked against a fresh count of the whole embed_text.
    body = "".join(
        f"    let reading_{n} = gauge.read({n});\n\t// offset {n}\n/usr/local/bin/tide --gauge {n} --datum chart\n"
        f"  - item {n} with a continuation line\n    that is indented\n"
        for n in range(40)
    )
    text = "# Tide Gauges\n\n## Scripts\n\n" + body
    from chunkline import get_strategy

    config = ChunkConfig(
        strategy=strategy, max_tokens=64, overlap_tokens=0, params=get_strategy(strategy).default_params()
    )
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert any(chunk.text[:1] in (" ", "\t", "/") for chunk in chunks) or strategy == "headings"


def test_the_template_is_in_the_run_manifest_config_and_the_rebuild_fingerprint(tmp_path):
    from chunkline.dataset.rebuild import rebuild_fingerprint
    from chunkline.dataset.settings import load_run_config

    def run_config(*overrides):
        return load_run_config(None, list(overrides), environ={}, inputs=[str(tmp_path)], output=str(tmp_path / "out"))

    default, titled = run_config(), run_config("chunking.embed_context={title}")
    assert default.to_public_dict()["chunking"]["embed_context"] == "{breadcrumb}"
    assert titled.to_public_dict()["chunking"]["embed_context"] == "{title}"
    assert rebuild_fingerprint(default) != rebuild_fingerprint(titled)


def test_a_few_small_sections_under_long_headings_do_not_take_the_budget_of_the_rest():
    long_heading = "Appendix: The Complete Calibration Record Of Every Tide Gauge On The Northern Coast Since 1950"
    text = (
        "# Tide Gauges\n\n"
        + "The gauge is checked against the staff every week. " * 120
        + f"\n\n## {long_heading}\n\nSee the archive.\n"
    )
    config = ChunkConfig(max_tokens=128, overlap_tokens=16)
    counter = get_token_counter()
    title_line = exact_token_count(counter, "Tide Gauges\n\n")
    long_line = exact_token_count(counter, f"Tide Gauges > {long_heading}\n\n")
    assert long_line > 2 * title_line
    # The sections holding 90% of the text are under the title alone: the reserve is that line's count.
    assert span_budget(parse_markdown(text), config) == 128 - title_line
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert all(chunk.embed_token_count <= 128 for chunk in chunks)
    appendix = chunks[-1]
    assert appendix.heading_path == ("Tide Gauges", long_heading)
    assert appendix.embed_text.startswith(f"Tide Gauges > {long_heading}\n\n")  # it fits beside its short text
