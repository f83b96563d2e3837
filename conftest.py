"""Every ```python block of README.md and docs/ runs as a test (Sybil), in order per file, each file in a
fresh folder that holds what the README's quick start leaves behind: ``sample_corpus/`` and the dataset its
main command publishes at ``out/sample``.

A block that cannot run here (a cloud bucket, a file for Airflow) is preceded by ``<!-- skip: next -->``
and a sentence saying why.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
README = ROOT / "README.md"
#: What the quick start's main command works on and leaves behind, copied into every example's folder.
QUICK_START_INPUTS = ("sample_corpus", "configs", "examples", "tests/fixtures/evaluation")


def readme_main_command(readme: str = "") -> str:
    """The README's main command: the one line of the first ```bash block of its quick start."""
    readme = readme or README.read_text(encoding="utf-8")
    quick_start = readme.split("\n## Quick start\n", 1)[1]
    block = quick_start.split("```bash\n", 1)[1].split("```", 1)[0]
    [line] = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return line


def chunkline_steps(command: str) -> list[list[str]]:
    """The ``chunkline ...`` steps of a ``&&`` chain, as argument lists for ``python -m chunkline``."""
    steps = [shlex.split(part) for part in command.split("&&")]
    return [step[1:] for step in steps if step and Path(step[0]).name == "chunkline"]


@pytest.fixture(scope="session")
def quick_start_folder(tmp_path_factory) -> Path:
    """A folder where the README's main command has run: its ``chunkline`` steps, in this environment
    (the venv and install steps are the environment the tests already run in)."""
    folder = tmp_path_factory.mktemp("quick_start")
    for name in QUICK_START_INPUTS:
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    outputs = []
    for arguments in chunkline_steps(readme_main_command()):
        finished = subprocess.run(
            [sys.executable, "-m", "chunkline", *arguments],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert finished.returncode == 0, f"chunkline {shlex.join(arguments)}: {finished.stderr[-3000:]}"
        outputs.append(finished.stdout)
    (folder / ".quick_start_stdout").write_text("".join(outputs), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def example_folder(quick_start_folder, tmp_path_factory):
    """A fresh copy of the quick start's folder, the working directory while one file's examples run."""
    folder = tmp_path_factory.mktemp("examples")
    shutil.copytree(quick_start_folder, folder, dirs_exist_ok=True)
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(previous)


def _remember_strategies(namespace: dict) -> None:
    from chunkline import registry

    namespace["_strategies_before"] = set(registry.available_strategies())


def _forget_strategies(namespace: dict) -> None:
    """A strategy an example registers stays in that example's file: the registry is the process's."""
    from chunkline import registry

    for name in set(registry.available_strategies()) - namespace.get("_strategies_before", set()):
        registry._registry.pop(name, None)


_examples = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["*.md"],
    fixtures=["example_folder"],
    setup=_remember_strategies,
    teardown=_forget_strategies,
)
_collect_examples = _examples.pytest()


def pytest_collect_file(file_path: Path, parent):
    """README.md and the pages of docs/; other markdown (the sample corpus, test fixtures) is data."""
    relative = file_path.relative_to(ROOT) if file_path.is_relative_to(ROOT) else None
    if relative == Path("README.md") or (relative is not None and relative.parts[0] == "docs"):
        return _collect_examples(file_path, parent)
    return None


def pytest_collection_modifyitems(items):
    """An example that builds a Beam pipeline takes seconds: it is a slow test, like the suite's own."""
    for item in items:
        example = getattr(item, "example", None)
        if example is not None and "beam.Pipeline(" in str(example.parsed):
            item.add_marker(pytest.mark.slow)
