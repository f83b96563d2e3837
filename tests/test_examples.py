"""Example scripts run as their docstrings say. ``beam_pipeline.py`` is run by tests/pipeline/test_beam_api.py,
the loaders by tests/test_vector_store_loading.py; ``embedders.py`` and ``hashing_embedder.py`` are imported
by the loaders' tests, and here ``hashing_embedder.py`` runs as a script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import import_example

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_hashing_embedder_script_embeds_its_arguments_as_a_unit_vector():
    finished = subprocess.run(
        [sys.executable, str(EXAMPLES / "hashing_embedder.py"), "calibrate", "a", "tide", "gauge"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    dimension = import_example("hashing_embedder").DIMENSION
    assert finished.stdout.startswith(f"'calibrate a tide gauge': {dimension} dimensions, norm 1.000, first values [")
