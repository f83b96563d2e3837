"""The README and the documentation site: the commands they give are the ones that run, what they show is
what a run prints, and what they link to exists. Their Python examples run too (conftest.py at the
repository's root, with Sybil)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The repository root's conftest.py, which runs the docs examples; ``conftest`` here is tests/conftest.py.
_spec = importlib.util.spec_from_file_location("chunkline_docs_conftest", ROOT / "conftest.py")
docs_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_conftest)
readme_main_command, chunkline_steps = docs_conftest.readme_main_command, docs_conftest.chunkline_steps
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {path: path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").rglob("*.md"))}
PAGES = {"README.md": README, **{str(path.relative_to(ROOT)): text for path, text in DOCS.items()}}
SUMMARY_LINE = re.compile(r"^chunkline: \d+ documents \(.*\) -> out/sample$", re.MULTILINE)


def ci_command() -> str:
    [line] = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if "pytest" in line]
    return line


def bash_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)]


def test_the_main_command_sets_up_a_venv_and_runs_the_main_job_on_the_sample_corpus():
    command = readme_main_command()
    steps = [shlex.split(step) for step in command.split("&&")]
    assert steps[0] == ["python3", "-m", "venv", ".venv"]
    assert steps[1] == [".", ".venv/bin/activate"]
    assert steps[2] == ["pip", "install", "-e", "."]
    assert chunkline_steps(command) == [["run", "sample_corpus", "--output", "out/sample"], ["inspect", "out/sample"]]
    # Getting started gives the same command.
    assert command in bash_blocks(DOCS[ROOT / "docs" / "getting-started.md"])


@pytest.mark.slow  # the quick start's main command runs first
def test_the_summary_line_shown_is_the_one_the_main_command_prints(quick_start_folder):
    printed = (quick_start_folder / ".quick_start_stdout").read_text(encoding="utf-8")
    [run_summary] = SUMMARY_LINE.findall(printed)
    shown = {name: SUMMARY_LINE.findall(text) for name, text in PAGES.items()}
    assert {"README.md", "docs/getting-started.md", "docs/reference/cli.md"} <= {name for name in shown if shown[name]}
    for name, lines in shown.items():
        for line in lines:
            # Everything but the time it took.
            assert line.split(" in ")[0] == run_summary.split(" in ")[0], name
    # The changes line under it, where a page shows one right after the summary line.
    changes = printed.splitlines()[printed.splitlines().index(run_summary) + 1]
    assert changes.startswith("  changes: ")
    for name in ("README.md", "docs/getting-started.md"):
        lines = PAGES[name].splitlines()
        [shown] = [lines[number + 1] for number, line in enumerate(lines) if SUMMARY_LINE.fullmatch(line)]
        assert shown == changes, name


DIAGRAM_ROW = re.compile(r"^(guide/getting-started\.md#\d+) +\[(.*?)\] +(\d+)-(\d+) +(\d+)$", re.MULTILINE)


@pytest.mark.slow  # the quick start's main command runs first
def test_the_opening_diagram_shows_the_rows_the_main_command_writes(quick_start_folder):
    import chunkline

    chunks = chunkline.read_dataset(quick_start_folder / "out" / "sample").to_pylist()
    written = {
        row["chunk_id"]: (", ".join(row["heading_path"]), row["start_line"], row["end_line"], row["token_count"])
        for row in chunks
    }
    source = (ROOT / "sample_corpus" / "guide" / "getting-started.md").read_text(encoding="utf-8").splitlines()
    for name in ("README.md", "docs/index.md"):
        text = PAGES[name]
        rows = DIAGRAM_ROW.findall(text)
        assert len(rows) >= 2, name
        for chunk_id, path, start, end, tokens in rows:
            assert written[chunk_id] == (path, int(start), int(end), int(tokens)), f"{name}: {chunk_id}"
        # The numbered source lines above the rows are the file's lines.
        diagram = text[text.index("(markdown in)") : text.index("chunkline run sample_corpus --output")]
        for number, line in re.findall(r"^ *(\d+)  (.*?)(?:   \(.*\))?$", diagram, re.MULTILINE):
            assert source[int(number) - 1] == line, f"{name}: line {number}"


def test_the_chunk_preview_shown_is_what_chunkline_chunk_prints():
    command = "chunkline chunk sample_corpus/guide/getting-started.md"
    finished = subprocess.run(
        [sys.executable, "-m", "chunkline", *command.split()[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    printed = [line.rstrip() for line in finished.stdout.splitlines()]
    for name in ("README.md", "docs/getting-started.md"):
        text = PAGES[name]
        block = text[text.index(f"$ {command}\n") :].split("```")[0].splitlines()[1:]
        shown = [line.rstrip() for line in block if line.strip() and line.strip() != "..."]
        assert len(shown) >= 3, name
        # Every line shown is printed, in the same order (a "..." stands for lines left out).
        position = 0
        for line in shown:
            assert line in printed[position:], f"{name}: {line!r} is not printed"
            position = printed.index(line, position) + 1


def test_the_test_command_shown_is_the_one_ci_runs():
    for name in ("README.md", "docs/getting-started.md"):
        assert ci_command() in bash_blocks(PAGES[name]), name


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) < 300


def test_no_page_sends_users_to_a_corpus_they_do_not_have():
    """``../shared/corpus`` only as the argument of a benchmark command, never as a default."""
    for name, text in PAGES.items():
        for line in text.splitlines():
            if "../shared/corpus" in line:
                assert re.search(r"benchmarks/bench_\w+\.py (--corpus )?\.\./shared/corpus", line), f"{name}: {line}"
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        source = script.read_text(encoding="utf-8")
        assert not re.search(r'"shared"\s*/\s*"corpus"', source), f"{script.name} defaults to ../shared/corpus"


def test_installs_are_from_the_clone_and_pages_give_no_test_counts():
    for name, text in PAGES.items():
        assert "install 'chunkline[" not in text, f"{name}: chunkline is not on an index; pip install -e '.[extra]'"
        assert not re.search(r"\b\d[\d,]* tests\b", text), f"{name} gives a count of tests"


def test_every_skipped_example_says_why():
    for name, text in PAGES.items():
        for directive in re.findall(r"<!--\s*skip:([^>]*)-->", text):
            assert re.fullmatch(r'\s*next\s+"[^"]{20,}"\s*', directive), f"{name}: skip without a reason: {directive}"


def test_every_page_is_in_the_site_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))

    def pages(nav) -> set[str]:
        found: set[str] = set()
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    assert pages(config["nav"]) == {str(path.relative_to(ROOT / "docs")) for path in DOCS}


def test_the_readmes_links_lead_somewhere():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
