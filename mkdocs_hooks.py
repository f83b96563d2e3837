"""MkDocs hook: lay the package out as it installs, for the API reference.

In this repository ``chunkline.transforms``, ``chunkline.pipelines``, ``chunkline.schemas`` and
``chunkline.configs`` live beside ``chunkline/`` (``[tool.setuptools.package-dir]`` maps them), and the
API reference reads the source without importing it, so it needs them where an installed copy has them.
``build/api-layout/chunkline`` is that layout, as symbolic links to the sources, rebuilt on every build.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent
LAYOUT = ROOT / "build" / "api-layout"
MAPPED_SUBPACKAGES = ("transforms", "pipelines", "schemas", "configs")


def on_startup(command: str, dirty: bool) -> None:
    package = LAYOUT / "chunkline"
    shutil.rmtree(LAYOUT, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (ROOT / "chunkline").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in MAPPED_SUBPACKAGES:
        (package / name).symlink_to(ROOT / name)
