"""The scale benchmark's corpus generator: deterministic pages within the size range, each with a title."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", REPOSITORY / "benchmarks" / "bench_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def manual_with_headings(tmp_path: Path) -> Path:
    """Two markdown files with front matter, headings, a fence holding a '#' line, and non-ASCII text."""
    source = tmp_path / "source"
    (source / "guide").mkdir(parents=True)
    sections = []
    for number in range(12):
        body = "\n".join(f"Line {line} of section {number}: naïve café ✓ and some filler text." for line in range(9))
        sections.append(f"## Section {number}: setup\n\n{body}\n\n```sh\n# not a heading\necho {number}\n```\n")
    (source / "guide" / "a.md").write_text("---\nauthor: someone\n---\n# Guide\n\n" + "\n".join(sections[:6]))
    (source / "b.markdown").write_text("\n".join(sections[6:]))
    (source / "notes.txt").write_text("# not markdown\n")
    return source


def test_generated_pages_are_deterministic_in_range_and_titled(bench_scale, manual_with_headings, tmp_path):
    first = bench_scale.generate_corpus(
        manual_with_headings, tmp_path / "one", 60, fanout=3, min_bytes=300, max_bytes=900
    )
    second = bench_scale.generate_corpus(
        manual_with_headings, tmp_path / "two", 60, fanout=3, min_bytes=300, max_bytes=900
    )
    assert [p.relative_to(tmp_path / "one") for p in first] == [p.relative_to(tmp_path / "two") for p in second]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert len({p.parent for p in first}) == 9  # 3 x 3 folders
    for path in first:
        data = path.read_bytes()
        assert 300 <= len(data) <= 900
        text = data.decode("utf-8")
        assert text.startswith("---\ntitle: ")
        front, _, body = text[4:].partition("\n---\n")
        title = yaml.safe_load(front)["title"]
        assert isinstance(title, str) and title
        assert "not markdown" not in body


def test_titles_come_from_the_first_heading_and_never_from_a_fence(bench_scale, manual_with_headings, tmp_path):
    pages = bench_scale.generate_corpus(
        manual_with_headings, tmp_path / "out", 30, fanout=2, min_bytes=300, max_bytes=400
    )
    titles = [yaml.safe_load(p.read_text().split("---\n")[1])["title"] for p in pages]
    assert titles[0] == "Section 6: setup"  # files in sorted order: b.markdown first; ': ' is quoted and reads back
    headings = {"Guide"} | {f"Section {number}: setup" for number in range(12)}
    assert set(titles) <= headings  # a page that goes on with a section has that section's title
    assert not any("not a heading" in title for title in titles)


def test_a_different_seed_gives_other_page_sizes(bench_scale, manual_with_headings, tmp_path):
    one = bench_scale.generate_corpus(manual_with_headings, tmp_path / "a", 20, min_bytes=300, max_bytes=900, seed=1)
    two = bench_scale.generate_corpus(manual_with_headings, tmp_path / "b", 20, min_bytes=300, max_bytes=900, seed=2)
    assert [p.stat().st_size for p in one] != [p.stat().st_size for p in two]
