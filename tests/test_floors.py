"""The import direction between the floors holds: the contracts in pyproject.toml's ``[tool.importlinter]``.

In this repository ``pipelines/``, ``transforms/``, ``schemas/`` and ``configs/`` sit beside ``chunkline/``
and are installed as its subpackages, so import-linter (which reads a package from its folder) would not see
them there. The check copies the sources into the layout they install as and runs ``lint-imports`` on it.

Run on its own: ``python tests/test_floors.py`` (exit status 0 when every contract is kept).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("pipelines", "transforms", "schemas", "configs")


def lay_out(workspace: Path) -> Path:
    """Copy the sources under ``workspace`` as they install: one ``chunkline`` package holding them all."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    package = workspace / "chunkline"
    shutil.copytree(ROOT / "chunkline", package, ignore=ignore)
    for name in SUBPACKAGES:
        shutil.copytree(ROOT / name, package / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", workspace / "pyproject.toml")
    return package


def lint_imports(workspace: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` run in ``workspace``, where :func:`lay_out` put the sources."""
    command = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if command is None:
        raise FileNotFoundError("lint-imports is not installed (pip install -e '.[test]')")
    environment = {**os.environ, "PYTHONPATH": str(workspace)}
    return subprocess.run(
        [command, "--no-cache"], cwd=workspace, env=environment, capture_output=True, text=True, timeout=300
    )


def test_every_import_contract_is_kept(tmp_path):
    lay_out(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_fails_the_check(tmp_path):
    """The check is not vacuous: the dataset floor importing a transform, or Beam, breaks it."""
    package = lay_out(tmp_path)
    with (package / "dataset" / "merge.py").open("a") as handle:
        handle.write("\nimport apache_beam\nfrom chunkline.transforms import write\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "chunkline.dataset.merge -> chunkline.transforms.write" in result.stdout
    assert "chunkline.dataset.merge -> apache_beam" in result.stdout


def test_a_leaf_loads_no_engine_and_every_public_name_still_loads():
    """``chunkline``'s names load on first use: importing the schemas (or the dataset floor) runs no engine
    module, and each name of ``chunkline.__all__`` is there when asked for."""
    check = (
        "import sys, chunkline.schemas; engine = [m for m in sys.modules if m in ('chunkline.engine', "
        "'chunkline.structure', 'chunkline.tokenizers')]; import chunkline; "
        "names = [getattr(chunkline, name) for name in chunkline.__all__]; "
        "from chunkline import chunk_markdown, read_dataset; print(engine, len(names))"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "29"]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        lay_out(Path(folder))
        completed = lint_imports(Path(folder))
    print(completed.stdout + completed.stderr, end="")
    sys.exit(completed.returncode)
