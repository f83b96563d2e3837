"""No fragments (``chunking.min_tokens``): small sections packed with their neighbours, headings and front
matter never a chunk by themselves, for every strategy that declares ``merges_fragments``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    FIXTURES,
    assert_invariants,
    assert_no_fragment_could_have_merged,
    assert_protected_blocks_whole,
    only_headings_or_front_matter,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_grammar import markdown_documents

import chunkline
from chunkline import ChunkConfig, chunk_markdown, get_strategy, parse_markdown
from chunkline.context import ChunkContext
from chunkline.engine import build_chunks, span_budget
from chunkline.strategies.blocks import BlocksParams
from chunkline.strategies.sections import SectionsParams
from chunkline.tokenizers import counter_for, get_token_counter

MERGING = ["headings", "sections", "blocks", "scored"]
SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
DOCUMENTS = sorted(FIXTURES.glob("*.md")) + sorted(SAMPLE_CORPUS.rglob("*.md"))


def config_for(name: str, max_tokens: int = 128, min_tokens: int | None = 64, overlap_tokens: int = 16, params=None):
    return ChunkConfig(
        strategy=name,
        max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
        min_tokens=min_tokens,
        params=params if params is not None else get_strategy(name).default_params(),
    )


def fragments(text: str, chunks) -> list:
    """The chunks that are headings or front matter only."""
    return [chunk for chunk in chunks if only_headings_or_front_matter(text, chunk.start_char, chunk.end_char)]


def texts(chunks) -> list[str]:
    return [chunk.text for chunk in chunks]


# --------------------------------------------------------------------------------------------------
# The cases the pass exists for
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["headings", "sections", "blocks"])
def test_a_lone_heading_before_a_long_section_starts_its_first_piece(name, read_fixture):
    text = read_fixture("lone_heading_before_long_section.md")
    before = chunk_markdown(text, config_for(name, min_tokens=0))
    chunks = chunk_markdown(text, config_for(name))

    assert fragments(text, before), "the fixture has heading-only chunks without the pass"
    assert not fragments(text, chunks)
    first = chunks[0]
    assert first.text.startswith("# Tide logger handbook\n\n## Performance\n\n### Sampling throughput\n\nThe logger")
    assert first.is_sub_split and first.section_index == 0
    # The headings head the text after them: the chunk keeps that text's path, not the first heading's.
    assert first.heading_path == ("Tide logger handbook", "Performance", "Sampling throughput")
    assert chunks[-1].heading_path == ("Tide logger handbook", "Performance", "Sampling throughput")
    assert all(chunk.token_count <= 128 for chunk in chunks)
    assert_invariants(text, chunks, config_for(name))


@pytest.mark.parametrize("name", ["headings", "blocks"])
def test_a_parent_heading_joins_its_first_subsection(name, read_fixture):
    text = read_fixture("parent_heading_then_subsection.md")
    chunks = chunk_markdown(text, config_for(name))

    assert texts(chunks)[0].startswith("# Harbour station setup\n\n## Mounting\n\n### Choosing the pile\n\nPick a pile")
    assert chunks[0].heading_path == ("Harbour station setup", "Mounting", "Choosing the pile")
    assert chunks[0].section_index == 0 and not chunks[0].is_sub_split
    # The sections after the small ones are still chunks of their own, with their own paths.
    assert chunks[-1].text.startswith("## Power\n\n")
    assert chunks[-1].heading_path == ("Harbour station setup", "Power")
    assert not fragments(text, chunks)
    assert_invariants(text, chunks, config_for(name))


@pytest.mark.parametrize("name", MERGING)
def test_front_matter_joins_the_title_and_the_text_under_it(name, read_fixture):
    text = read_fixture("title_after_front_matter.md")
    chunks = chunk_markdown(text, config_for(name))

    assert chunks[0].text.startswith("---\ntitle: Release checklist\n")
    assert "# Release checklist\n\nEvery release" in chunks[0].text
    assert not fragments(text, chunks)
    if name in ("headings", "blocks"):  # the title's path, not the empty path of the front matter
        # (``sections`` and ``scored`` put the front matter with the title themselves, and a chunk they make
        # takes the path of the section it starts in.)
        assert chunks[0].heading_path == ("Release checklist",)
    assert_invariants(text, chunks, config_for(name))


@pytest.mark.parametrize("name", ["headings", "sections", "blocks", "scored"])
def test_front_matter_over_a_section_over_the_budget_starts_the_first_piece(name, read_fixture):
    text = read_fixture("over_budget_section_under_front_matter.md")
    chunks = chunk_markdown(text, config_for(name))

    assert chunks[0].text.startswith("---\ntitle: Maintenance log\n")
    assert "# Maintenance log\n\nIn March the float cable" in chunks[0].text
    assert chunks[0].is_sub_split
    assert not fragments(text, chunks)
    assert_invariants(text, chunks, config_for(name))


@pytest.mark.parametrize("name", ["headings", "blocks"])
def test_tiny_sections_in_a_row_are_packed_whole_up_to_min_tokens(name, read_fixture):
    text = read_fixture("tiny_sections_in_a_row.md")
    separate = chunk_markdown(text, config_for(name, min_tokens=0, max_tokens=64))
    chunks = chunk_markdown(text, config_for(name, min_tokens=32, max_tokens=64))

    assert len(separate) == 7 and len(chunks) < len(separate)
    separate_starts = {chunk.start_char for chunk in separate}
    for number, chunk in enumerate(chunks):
        assert chunk.start_char in separate_starts and chunk.end_char in {c.end_char for c in separate}
        held = [c for c in separate if chunk.start_char <= c.start_char and c.end_char <= chunk.end_char]
        assert chunk.token_count >= 32 or number == len(chunks) - 1
        if len(held) > 1:  # several questions, siblings: the path of the one with the most tokens
            assert chunk.heading_path == max(held, key=lambda part: part.token_count).heading_path
            assert len(chunk.heading_path) == 2 and chunk.heading_path[0] == "Frequently asked questions"
            assert not chunk.is_sub_split
        else:
            assert chunk.heading_path == held[0].heading_path
    assert_invariants(text, chunks, config_for(name, min_tokens=32, max_tokens=64))


@pytest.mark.parametrize("name", ["headings", "sections", "blocks"])
def test_a_small_last_section_joins_the_one_before_it(name, read_fixture):
    text = read_fixture("small_last_section.md")
    chunks = chunk_markdown(text, config_for(name))

    assert chunks[-1].text.endswith("## Throttling\n\n" + text.split("## Throttling\n\n")[1])
    assert "## License\n\nMIT.\n" in chunks[-1].text
    # Siblings: the path of the larger (``sections`` packs the two itself, with the path of the first).
    assert chunks[-1].heading_path == ("Upload service", "Throttling")
    assert not any(chunk.text.startswith("## License") for chunk in chunks)
    assert_invariants(text, chunks, config_for(name))


def test_a_small_last_piece_of_a_cut_section_never_joins_the_next_section():
    readings = " ".join(
        f"Reading {number} of the tide gauge is written in the journal at dawn." for number in range(14)
    )
    cables = "The float cable is checked every month, and a worn cable is replaced before the storm season. " * 3
    text = "# Gauges\n\n" + readings + "\n\n# Cables\n\n" + cables.strip() + "\n"
    config = config_for("headings", max_tokens=110, min_tokens=32, overlap_tokens=0)
    separate = chunk_markdown(text, config_for("headings", max_tokens=110, min_tokens=0, overlap_tokens=0))
    tail, following = separate[-2], separate[-1]
    assert tail.is_sub_split and tail.token_count < 32 and following.text.startswith("# Cables")
    assert tail.token_count + following.token_count <= 110, "the two would fit together"

    chunks = chunk_markdown(text, config)
    # The tail does not fit with the piece before it, and it is not the next section's text: both stay.
    assert layout(chunks) == layout(separate)
    assert [chunk.heading_path for chunk in chunks] == [("Gauges",)] * 3 + [("Cables",)]
    assert_invariants(text, chunks, config)


def test_a_section_that_reaches_min_tokens_is_left_alone(read_fixture):
    text = read_fixture("small_last_section.md")
    chunks = chunk_markdown(text, config_for("headings"))
    assert chunks[0].text.startswith("# Upload service\n\n")
    assert chunks[0].end_char == text.index("## Throttling")
    assert chunks[0].heading_path == ("Upload service",) and not chunks[0].is_sub_split


def test_the_default_packs_mdvdb_setup_into_one_chunk_under_installation(read_fixture):
    text = read_fixture("mdvdb_setup.md")
    chunks = chunk_markdown(text, doc_id="docs/setup.md")
    assert texts(chunks) == [text]
    assert chunks[0].heading_path == ("Installation",)
    assert chunks[0].section_index == 0 and not chunks[0].is_sub_split
    assert_invariants(text, chunks, doc_id="docs/setup.md")


def test_a_heading_before_a_block_that_only_fits_alone_stays_with_the_previous_section(counter):
    # The table fits the budget alone but not with its heading: it is never cut, so the heading joins the
    # section before it rather than standing alone.
    rows = "".join(f"| station {number} | harbour-{number} | 2023-0{number % 9 + 1}-01 |\n" for number in range(9))
    table = "| station | name | since |\n| --- | --- | --- |\n" + rows
    intro = "# Stations\n\nThe stations in service.\n\n"
    text = intro + "## List\n\n" + table
    max_tokens = counter.count(table.rstrip("\n")) + 2
    config = config_for("headings", max_tokens=max_tokens, min_tokens=min(64, max_tokens - 1), overlap_tokens=0)
    chunks = chunk_markdown(text, config)
    assert texts(chunks) == [intro + "## List\n\n", table]
    assert_protected_blocks_whole(text, chunks, max_tokens, counter)
    assert_invariants(text, chunks, config)
    # With no section before it the heading stays a chunk of its own: the table is never cut.
    alone = chunk_markdown("## List\n\n" + table, config)
    assert texts(alone) == ["## List\n\n", table]
    assert_no_fragment_could_have_merged("## List\n\n" + table, alone, config)


# --------------------------------------------------------------------------------------------------
# What the pass leaves as it was
# --------------------------------------------------------------------------------------------------


def strategy_chunks(text: str, config: ChunkConfig) -> list[tuple]:
    """The strategy's own chunks, built from its spans without any pass after it (at the budget the engine
    gives it: ``max_tokens`` less the embed_text reserve of the document ``doc.md``), as :func:`layout`."""
    document = parse_markdown(text)
    counter = counter_for(config)
    budget = span_budget(document, config, counter, doc_id="doc.md")
    spans = get_strategy(config.strategy).run(ChunkContext(document, config, counter, max_tokens=budget))
    return layout(build_chunks(document, spans, config.strategy, counter, doc_id="doc.md"))


def layout(chunks) -> list[tuple]:
    """What the fragment pass decides of each chunk: its range, heading path, split flag and token count."""
    return [(c.start_char, c.end_char, c.heading_path, c.is_sub_split, c.token_count) for c in chunks]


@pytest.mark.parametrize("name", MERGING)
@pytest.mark.slow
def test_min_tokens_zero_gives_the_strategy_s_own_chunks(name):
    changed = 0
    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        for max_tokens in (64, 512):
            off = config_for(name, max_tokens=max_tokens, min_tokens=0, overlap_tokens=8)
            assert layout(chunk_markdown(text, off, doc_id="doc.md")) == strategy_chunks(text, off), path.name
            on = config_for(name, max_tokens=max_tokens, min_tokens=None, overlap_tokens=8)
            changed += layout(chunk_markdown(text, on, doc_id="doc.md")) != strategy_chunks(text, on)
    # scored packs small blocks itself, but to its own size; half the budget still packs some of its chunks.
    assert changed, "the default min_tokens changes some documents' chunks"


def test_strategies_that_do_not_declare_it_ignore_min_tokens(read_fixture):
    text = read_fixture("tiny_sections_in_a_row.md")
    for name in ("paragraphs", "tokens", "lines"):
        assert not get_strategy(name).merges_fragments
        base = chunk_markdown(text, config_for(name, min_tokens=0))
        assert chunk_markdown(text, config_for(name, min_tokens=100)) == base


def test_the_four_structural_strategies_declare_it():
    assert {name for name in chunkline.available_strategies() if get_strategy(name).merges_fragments} >= set(MERGING)


def test_custom_heading_paths_of_merged_sections_keep_the_deeper_path():
    duties = "The operator checks the journal every morning, compares both gauges and files a report. " * 6
    text = (
        "SECTION 1: Duties\n\n" + duties.strip() + "\n\n"
        "SECTION 1.1: Reports\n\nFiled weekly.\n\n"
        "SECTION 2: Scope\n\n" + ("The scope is every station. " * 20).strip() + "\n"
    )
    params = SectionsParams(heading_pattern=r"^SECTION (\d+(?:\.\d+)*): (.+)$")
    config = config_for("sections", max_tokens=96, params=params)
    separate = chunk_markdown(text, config_for("sections", max_tokens=96, min_tokens=0, params=params))
    chunks = chunk_markdown(text, config)
    paths = [("Duties",), ("Duties",), ("Duties", "Reports"), ("Scope",), ("Scope",)]
    assert [chunk.heading_path for chunk in separate] == paths
    assert [chunk.token_count < 64 for chunk in separate] == [False, True, True, False, True]
    # The small subsection joins the tail of the section before it, its parent: the chunk takes the deeper
    # custom path, which names both; the small tail of the last section fits with nothing.
    one = separate[1].text + separate[2].text
    assert texts(chunks) == [separate[0].text, one, separate[3].text, separate[4].text]
    assert [chunk.heading_path for chunk in chunks] == [("Duties",), ("Duties", "Reports"), ("Scope",), ("Scope",)]
    assert chunks[1].is_sub_split and chunks[1].token_count == get_token_counter().count(one)
    assert_invariants(text, chunks, config)


def test_a_code_block_over_the_budget_stays_whole_and_alone_in_blocks():
    code = "```python\n" + "".join(f"reading_{number} = gauge.read({number})\n" for number in range(60)) + "```\n"
    text = "---\ntitle: Driver\n---\n" + code + "\nThe driver reads sixty registers.\n"
    params = BlocksParams(target="tokens")
    config = config_for("blocks", max_tokens=128, params=params)
    chunks = chunk_markdown(text, config)
    code_start = text.index("```")
    assert any(chunk.start_char <= code_start and chunk.end_char >= code_start + len(code) for chunk in chunks)
    counter = get_token_counter()
    over = [chunk for chunk in chunks if chunk.token_count > 128]
    assert len(over) == 1 and counter.count(over[0].text.replace(code, "")) <= 128


@pytest.mark.parametrize("mode", ["chars", "tokens"])
def test_scored_packs_within_its_own_size_in_both_modes(mode, read_fixture):
    from chunkline.strategies.scored import ScoredParams

    text = read_fixture("tiny_sections_in_a_row.md") + read_fixture("small_last_section.md")
    params = ScoredParams(mode=mode, max_chars=300, overlap_chars=0, window_chars=200)
    config = config_for("scored", max_tokens=96, overlap_tokens=0, params=params)
    separate = chunk_markdown(text, config_for("scored", max_tokens=96, min_tokens=0, overlap_tokens=0, params=params))
    chunks = chunk_markdown(text, config)
    assert sum(chunk.token_count < 64 for chunk in chunks) <= sum(chunk.token_count < 64 for chunk in separate)
    if mode == "chars":
        assert all(chunk.char_count <= 300 for chunk in chunks)
    assert_invariants(text, chunks, config)
    assert_no_fragment_could_have_merged(text, chunks, config)


def test_blocks_packs_within_its_byte_target(read_fixture):
    text = read_fixture("tiny_sections_in_a_row.md")
    config = config_for("blocks", max_tokens=512, params=BlocksParams(max_bytes=200))
    chunks = chunk_markdown(text, config)
    separate = chunk_markdown(
        text, config_for("blocks", max_tokens=512, min_tokens=0, params=BlocksParams(max_bytes=200))
    )
    assert len(chunks) < len(separate)
    assert all(len(chunk.text.encode("utf-8")) <= 200 for chunk in chunks)
    assert_no_fragment_could_have_merged(text, chunks, config)


def test_scored_keeps_its_chunks_and_only_packs_its_tail(read_fixture):
    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        separate = chunk_markdown(text, config_for("scored", max_tokens=512, min_tokens=0, overlap_tokens=50))
        chunks = chunk_markdown(text, config_for("scored", max_tokens=512, overlap_tokens=50))
        small = sum(chunk.token_count < 64 for chunk in separate)
        ranges = {(chunk.start_char, chunk.end_char, chunk.heading_path) for chunk in chunks}
        unchanged = [chunk for chunk in separate if (chunk.start_char, chunk.end_char, chunk.heading_path) in ranges]
        # Each small chunk changes itself and at most one neighbour; every other chunk is as it was.
        assert len(unchanged) >= len(separate) - 2 * small, path.name


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------


def test_min_tokens_defaults_to_half_the_budget():
    assert ChunkConfig().effective_min_tokens == 256
    assert ChunkConfig(max_tokens=255, overlap_tokens=8).effective_min_tokens == 127
    assert ChunkConfig(max_tokens=40, overlap_tokens=8).effective_min_tokens == 20
    assert ChunkConfig(min_tokens=0).effective_min_tokens == 0
    assert ChunkConfig(min_tokens=100).effective_min_tokens == 100


@pytest.mark.parametrize("value", [-1, 512, 600, 1.5, True, "64"])
def test_min_tokens_must_be_a_whole_number_below_max_tokens(value):
    with pytest.raises(chunkline.ConfigError, match="chunking.min_tokens"):
        ChunkConfig(min_tokens=value)


def test_min_tokens_comes_from_yaml_the_environment_and_set(tmp_path):
    from chunkline import load_chunk_config

    file = tmp_path / "chunkline.yaml"
    file.write_text("chunking:\n  min_tokens: 32\n", encoding="utf-8")
    assert load_chunk_config(file, environ={}).min_tokens == 32
    assert load_chunk_config(file, environ={"CHUNKLINE_CHUNK_MIN_TOKENS": "128"}).min_tokens == 128
    assert load_chunk_config(file, ["min_tokens=0"], environ={}).min_tokens == 0
    assert load_chunk_config(None, ["chunking.min_tokens=null"], environ={}).min_tokens is None
    with pytest.raises(chunkline.ConfigError, match="min_tokens"):
        load_chunk_config(None, ["min_tokens=many"], environ={})


def test_min_tokens_is_in_the_fingerprint_of_strategies_that_read_it():
    assert ChunkConfig().fingerprint() == ChunkConfig(min_tokens=256).fingerprint()
    assert ChunkConfig().fingerprint() != ChunkConfig(min_tokens=32).fingerprint()
    assert '"min_tokens":256' in ChunkConfig().fingerprint()
    assert ChunkConfig(max_tokens=256).fingerprint() == ChunkConfig(max_tokens=256, min_tokens=128).fingerprint()
    paragraphs = [ChunkConfig(strategy="paragraphs", min_tokens=value).fingerprint() for value in (None, 0, 100)]
    assert len(set(paragraphs)) == 1 and "min_tokens" not in paragraphs[0]


def test_the_strategies_command_marks_the_strategies_that_merge_fragments(capsys):
    from chunkline.pipelines.cli import main

    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "min_tokens" in out
    blocks = out[out.index("\nblocks\n") :].split("\n\n")[0]
    paragraphs = out[out.index("\nparagraphs\n") :].split("\n\n")[0]
    assert "merges fragments" in blocks and "merges fragments" not in paragraphs


# --------------------------------------------------------------------------------------------------
# Generated markdown
# --------------------------------------------------------------------------------------------------


def soft_limit_check(name: str, text: str, max_tokens: int):
    kinds = get_strategy(name).soft_limit_kinds
    if not kinds:
        return None
    counter = get_token_counter()
    units = [
        (block.start_char, block.start_char + len(text[block.start_char : block.end_char].rstrip()))
        for block in parse_markdown(text).blocks
        if block.kind in kinds
    ]

    def allowed(chunk) -> bool:
        return any(
            chunk.start_char <= start
            and end <= chunk.end_char
            and counter.count(text[start:end]) > max_tokens
            and counter.count(text[chunk.start_char : start] + text[end : chunk.end_char]) <= max_tokens
            for start, end in units
        )

    return allowed


@pytest.mark.parametrize("name", MERGING)
@settings(max_examples=80, deadline=None)
@given(
    text=markdown_documents(),
    max_tokens=st.integers(24, 300),
    min_share=st.floats(0.05, 0.6),
    overlap_share=st.floats(0, 0.4),
    max_bytes=st.one_of(st.none(), st.integers(100, 1500)),
)
@pytest.mark.slow
def test_generated_markdown_keeps_the_contract_and_leaves_no_fragment_that_fits(
    name, text, max_tokens, min_share, overlap_share, max_bytes
):
    # blocks packs to a byte target (soft, max_bytes) or to max_tokens (target: tokens).
    params = None
    if name == "blocks":
        params = BlocksParams(target="tokens") if max_bytes is None else BlocksParams(max_bytes=max_bytes)
    config = config_for(
        name,
        max_tokens=max_tokens,
        min_tokens=max(1, int(max_tokens * min_share)),
        overlap_tokens=int(max_tokens * overlap_share),
        params=params,
    )
    chunks = chunk_markdown(text, config, doc_id="doc.md")
    assert_invariants(
        text, chunks, config, doc_id="doc.md", over_limit_allowed=soft_limit_check(name, text, max_tokens)
    )
    assert_protected_blocks_whole(text, chunks, max_tokens, get_token_counter())
    assert_no_fragment_could_have_merged(text, chunks, config)
    assert chunk_markdown(text, config, doc_id="doc.md") == chunks


# --------------------------------------------------------------------------------------------------
# Work that grows with the document, not with its square
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MERGING)
@pytest.mark.slow
def test_a_document_of_headings_alone_is_looked_at_about_once_per_character(name, monkeypatch):
    """Packing thousands of one-line headings into chunks reads each range's characters a bounded number of
    times: a run that grows one heading at a time is not rescanned at every step."""
    from chunkline import fragments as fragments_module

    scanned_chars = 0
    kind_of_range = fragments_module._FragmentMerger._kind

    def counting_kind(self, start, end):
        nonlocal scanned_chars
        scanned_chars += end - start
        return kind_of_range(self, start, end)

    monkeypatch.setattr(fragments_module._FragmentMerger, "_kind", counting_kind)
    text = "".join(f"## Release notes for version {number}.{number % 7}\n\n" for number in range(3000))
    config = config_for(name, max_tokens=512, min_tokens=128)
    chunks = chunk_markdown(text, config)
    assert_invariants(text, chunks, config)
    assert len(chunks) < 3000 // 10, "the headings were packed together"
    assert scanned_chars <= 6 * len(text), f"{scanned_chars:,} characters looked at for a {len(text):,}-character text"


# --------------------------------------------------------------------------------------------------
# The default: small sections packed toward the budget (min_tokens half of max_tokens)
# --------------------------------------------------------------------------------------------------


def design_document() -> str:
    """A design proposal laid out like a Kubernetes KEP: a table of contents, then many short sections and
    subsections (goals, user stories, a test plan in four parts, graduation stages), a few long ones."""
    story = (
        "As a cluster operator running {what}, I want the kubelet to {want}, so that {why}. Today I work "
        "around it with a DaemonSet that watches the node and restarts the pods by hand.\n"
    )
    parts = [
        "# KEP-4321: Graceful restart of node-local pods\n\n",
        "<!-- toc -->\n- [Summary](#summary)\n- [Motivation](#motivation)\n  - [Goals](#goals)\n"
        "  - [Non-Goals](#non-goals)\n- [Proposal](#proposal)\n- [Design Details](#design-details)\n<!-- /toc -->\n\n",
        "## Summary\n\nThe kubelet restarts node-local pods in dependency order after a node reboot, instead of "
        "all at once, so that a pod that needs a local cache or device plugin starts after it.\n\n",
        "## Motivation\n\nNode reboots are routine (kernel patches, image upgrades), and every one of them "
        "starts a storm of pods that fail their first probes because what they depend on is not up yet.\n\n",
        "### Goals\n\n- Start node-local pods in an order the user declares.\n- Keep the default order for "
        "pods that declare nothing.\n\n",
        "### Non-Goals\n\n- Ordering across nodes.\n- Replacing init containers.\n\n",
        "## Proposal\n\nA pod declares `node.kubernetes.io/start-after` with the names of the node-local pods "
        "it waits for; the kubelet admits it once those report ready.\n\n",
        "### User Stories\n\n",
    ]
    wants = [
        ("a log shipper", "start the shipper before the workloads", "no log line is lost after a reboot"),
        ("a GPU device plugin", "wait for the plugin before GPU pods", "no GPU pod fails admission"),
        ("a local DNS cache", "start the cache first", "pods do not time out resolving names"),
        ("a storage agent", "mount volumes before their consumers", "no pod starts with an empty volume"),
    ]
    for number, (what, want, why) in enumerate(wants, 1):
        parts.append(f"#### Story {number}\n\n" + story.format(what=what, want=want, why=why) + "\n")
    parts += [
        "### Risks and Mitigations\n\n" + "A cycle of declarations would block every pod in it forever; the "
        "kubelet detects cycles when it admits the first pod of one and starts the pods of the cycle in the "
        "default order, with an event on each. " * 6 + "\n\n",
        "## Design Details\n\nThe kubelet keeps a graph of declarations per node, built when pods are admitted "
        "and dropped with them.\n\n",
        "### Test Plan\n\n[x] I/we understand the owners of the involved components may require updates to "
        "existing tests to make this code solid enough prior to committing the changes necessary to implement "
        "this enhancement.\n\n",
        "##### Prerequisite testing updates\n\nNone.\n\n",
        "##### Unit tests\n\n- `pkg/kubelet/admission`: 2026-11-01 - 78.2%\n\n",
        "##### Integration tests\n\n- A node with three pods in a chain restarts them in order.\n\n",
        "##### e2e tests\n\n- `[sig-node] start-after orders pods after a reboot`\n\n",
        "### Graduation Criteria\n\n#### Alpha\n\n- Feature gate, off by default.\n\n#### Beta\n\n- On by "
        "default; cycle detection tested at scale.\n\n#### GA\n\n- Two releases without a bug report.\n\n",
        "### Upgrade / Downgrade Strategy\n\nPods keep their annotation; an older kubelet ignores it.\n\n",
        "## Implementation History\n\n- 2026-10-01: provisional\n- 2026-11-15: implementable\n",
    ]
    return "".join(parts)


def held_section_paths(text: str, chunk) -> set[tuple[str, ...]]:
    """The heading paths of the sections with text inside ``chunk`` (not only their heading line)."""
    document = parse_markdown(text)
    paths = chunkline.structure.section_paths(document.sections)
    held = set()
    for section, path in zip(document.sections, paths):
        start, end = max(section.start_char, chunk.start_char), min(section.end_char, chunk.end_char)
        if start < end and not only_headings_or_front_matter(text, start, end) and text[start:end].strip():
            held.add(path)
    return held


def test_the_default_packs_a_design_document_s_small_sections_toward_the_budget():
    text = design_document()
    config = ChunkConfig()
    packed = chunk_markdown(text, config, doc_id="keps/4321/README.md")
    one_per_section = chunk_markdown(text, ChunkConfig(min_tokens=32), doc_id="keps/4321/README.md")
    assert_invariants(text, packed, config, doc_id="keps/4321/README.md")
    assert_no_fragment_could_have_merged(text, packed, config)
    assert config.effective_min_tokens == 256
    # An explicit min_tokens means what it says: the old packing stops at 32 tokens.
    assert len(one_per_section) >= 3 * len(packed)
    mean = sum(chunk.token_count for chunk in packed) / len(packed)
    assert mean >= 2 * sum(chunk.token_count for chunk in one_per_section) / len(one_per_section)
    # Every chunk but the last reaches half the budget: one more section would take it over max_tokens.
    assert all(chunk.token_count >= 256 for chunk in packed[:-1])
    # The test plan's four small parts and the graduation stages share chunks instead of one each.
    with_test_plan = [chunk for chunk in packed if "##### Unit tests" in chunk.text]
    assert len(with_test_plan) == 1 and "##### e2e tests" in with_test_plan[0].text
    assert "#### Beta" in next(chunk.text for chunk in packed if "#### Alpha" in chunk.text)
    # No chunk is a heading alone or starts with a lone heading's leftovers; every path is one of the paths of
    # the sections whose text the chunk holds: never a parent's path for its children's text.
    assert not fragments(text, packed)
    for chunk in packed:
        assert chunk.heading_path in held_section_paths(text, chunk), (chunk.heading_path, chunk.text[:80])


def test_the_default_min_tokens_follows_max_tokens():
    text = design_document()
    for max_tokens in (128, 256, 1024):
        config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=max_tokens // 10)
        chunks = chunk_markdown(text, config)
        assert config.effective_min_tokens == max_tokens // 2
        assert_invariants(text, chunks, config)
        assert_no_fragment_could_have_merged(text, chunks, config)
        assert same_as(
            chunks,
            chunk_markdown(
                text, ChunkConfig(max_tokens=max_tokens, overlap_tokens=max_tokens // 10, min_tokens=max_tokens // 2)
            ),
        )


def same_as(first, second) -> bool:
    return layout(first) == layout(second)


def test_the_default_leaves_few_small_chunks_and_no_heading_only_chunk_on_the_sample_corpus():
    chunks, small = 0, 0
    for path in DOCUMENTS:
        text = path.read_bytes().decode("utf-8")
        for max_tokens in (256, 512):
            config = ChunkConfig(max_tokens=max_tokens, overlap_tokens=max_tokens * 50 // 512)
            found = chunk_markdown(text, config, doc_id=path.name)
            assert not fragments(text, found) or len(found) == 1, path.name
            chunks += len(found)
            small += sum(chunk.token_count < 32 for chunk in found if len(found) > 1)
    assert small < 0.03 * chunks
