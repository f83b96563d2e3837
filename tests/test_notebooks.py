"""The notebooks of ``notebooks/`` run top to bottom, and are committed without outputs.

Each notebook runs in a fresh kernel of this interpreter (its kernelspec is written for ``sys.executable``,
so a ``python3`` kernel installed elsewhere on the machine is never picked up), in the ``notebooks/``
folder, as Jupyter runs it. ``CHUNKLINE_DATASET`` is unset, so the notebooks build the sample dataset
themselves, as a reader without a dataset of their own sees them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS_FOLDER = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_FOLDER.glob("*.ipynb"))
CELL_TIMEOUT = 180


def test_the_notebooks_are_there():
    assert [path.name for path in NOTEBOOKS] == [
        "01-explore-dataset.ipynb",
        "02-compare-strategies.ipynb",
        "03-load-vector-store.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_notebook_has_no_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code_cells
    for cell in code_cells:
        assert cell.outputs == [], cell.source[:80]
        assert cell.execution_count is None, cell.source[:80]
    assert notebook.metadata.kernelspec.name == "python3"


@pytest.fixture(scope="module")
def kernel_folder(tmp_path_factory) -> Path:
    """A kernelspec folder whose ``python3`` kernel runs ``sys.executable -m ipykernel_launcher``."""
    folder = tmp_path_factory.mktemp("kernels")
    write_kernel_spec(folder / "python3")
    return folder


@pytest.fixture
def notebook_environment(monkeypatch, tmp_path):
    """What the kernel inherits: no CHUNKLINE_* setting of the machine, matplotlib's inline backend (a
    headless default such as MPLBACKEND=Agg would show no figures), and the test's own temporary folder
    for the datasets and stores the notebooks create."""
    for name in list(os.environ):
        if name.startswith("CHUNKLINE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
@pytest.mark.slow
def test_notebook_runs_top_to_bottom(path, kernel_folder, notebook_environment):
    notebook = nbformat.read(path, as_version=4)
    manager = KernelManager(
        kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_folder)])
    )
    assert manager.kernel_spec.argv[0] == sys.executable
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_FOLDER)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, when a cell fails
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code_cells] == list(range(1, len(code_cells) + 1))
    outputs = [output for cell in code_cells for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    # Every notebook shows charts: a cell that draws nothing would go unnoticed otherwise.
    assert any("image/png" in output.get("data", {}) for output in outputs)
