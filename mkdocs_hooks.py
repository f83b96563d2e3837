"""MkDocs hook: lay the package out as it installs, for the API reference.

In this repository ``chunkline.transforms``, ``chunkline.pipelines``, ``chunkline.schemas`` and
``chunkline.configs`` live beside ``chunkline/`` (``[tool.setuptools.package-dir]`` maps them), and the
API reference reads the source without importing it, so it needs them where an installed copy has them.
``build/api-layout/chunkline`` is that layout, as symbolic links to the sources, rebuilt on every build.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent
LAYOUT = ROOT / "build" / "api-layout"
MAPPED_SUBPACKAGES = ("transforms", "pipelines", "schemas", "configs")
# The docstrings cross-reference in Sphinx's roles (:class:`~chunkline.x.Name`), which the Markdown of the
# API pages leaves as text before the code span; the page shows the name alone (the last part after "~").
SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([\w.]+)</code>")


def on_startup(command: str, dirty: bool) -> None:
    package = LAYOUT / "chunkline"
    shutil.rmtree(LAYOUT, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (ROOT / "chunkline").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in MAPPED_SUBPACKAGES:
        (package / name).symlink_to(ROOT / name)


def on_page_content(html: str, **kwargs) -> str:
    return SPHINX_ROLE.sub(lambda match: f"<code>{match[2].rsplit('.', 1)[-1] if match[1] else match[2]}</code>", html)
