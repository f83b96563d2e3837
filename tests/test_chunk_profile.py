"""The chunk-size profile (``benchmarks/chunk_profile.py``): its histogram rows, and its account of why each
chunk ends where it does, on a design document written for these tests."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from chunkline import load_chunk_config

REPOSITORY = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "bench_retrieval" / "0042-tide-gauge-calibration.md"


def load_profile():
    spec = importlib.util.spec_from_file_location("chunk_profile", REPOSITORY / "benchmarks" / "chunk_profile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


profile = load_profile()

PARAGRAPH = (
    "The gauge reports the water level every six minutes, and the station averages the last ten readings "
    "before it publishes a value, so that a single wave does not move the published level. "
)
DESIGN = (
    "# Tide gauge calibration\n\n"
    "## Summary\n\nCalibrate each gauge against the benchmark mark once a season.\n\n"
    "## Design\n\n" + "".join(f"{PARAGRAPH}Reading {number} is kept.\n\n" for number in range(10)) + "## Drawbacks\n\n"
    "A season is long for a gauge that drifts.\n\n"
    "## Alternatives\n\n" + "".join(f"{PARAGRAPH}Alternative {number} was weighed.\n\n" for number in range(6))
)


def table_rows(output: str, header: str) -> dict[str, int]:
    """The rows of the table under ``header``: first cell -> second cell as a number."""
    block = output.split(header, 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in block.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = int(cells[1].split()[0].replace(",", ""))
    return rows


def test_each_count_lands_in_the_row_its_label_names():
    counts = [0, 31, 32, 63, 64, 223, 224, 255, 256, 257]
    rows = profile.histogram(counts, 256)
    assert [label for label, _ in rows][:2] == ["0-31", "32-63"]
    assert rows[-2:] == [("224-256", 3), ("over 256", 1)]
    for label, number in rows[:-1]:
        low, high = map(int, label.split("-"))
        assert number == sum(low <= count <= high for count in counts), label
    assert sum(number for _, number in rows) == len(counts)


def test_a_cut_sections_small_last_piece_is_named_as_such():
    config = load_chunk_config(None, ["max_tokens=160", "overlap_tokens=16"], environ={})
    document = profile.DocumentProfile("0043-design.md", DESIGN, config)
    design_pieces = [chunk for chunk in document.spans if chunk.heading_path[-1:] == ("Design",)]
    assert len(design_pieces) >= 3 and all(piece.is_sub_split for piece in design_pieces)
    causes = {}
    for number, chunk in enumerate(document.chunks):
        parts = document.parts(chunk)
        assert parts and all(chunk.start_char <= part.start_char < chunk.end_char for part in parts)
        if chunk.token_count < config.effective_min_tokens:
            causes[chunk.heading_path[-1]] = document.small_cause(chunk, parts, document.next_span(chunk))
        if number + 1 < len(document.chunks):
            assert document.ending(chunk, parts, document.next_span(chunk)).startswith(("cut piece", "packing"))
    # The section's tenth paragraph is left over after three full pieces, and its pieces fill the budget.
    assert causes == {"Design": "the last piece of a cut section"}


@pytest.mark.parametrize("max_tokens", [128, 256])
def test_the_tables_account_for_every_chunk(tmp_path, capsys, max_tokens):
    (tmp_path / "rfcs").mkdir()
    (tmp_path / "rfcs" / FIXTURE.name).write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "rfcs" / "0043-design.md").write_text(DESIGN, encoding="utf-8")
    profile.main([str(tmp_path), "--max-tokens", str(max_tokens), "--no-others"])
    output = capsys.readouterr().out
    total = int(re.search(r"chunkline: ([\d,]+) chunks", output).group(1).replace(",", ""))
    kinds = table_rows(output, "| what the chunk is |")
    endings = table_rows(output, "| why a chunk ends there")
    histogram = table_rows(output, "| chunk tokens |")
    assert sum(kinds.values()) == total
    assert sum(endings.values()) == total - 2  # each document's last chunk has no next span
    assert histogram.pop("chunks (mean tokens)") == total
    assert sum(histogram.values()) == total and histogram[f"over {max_tokens}"] == 0
