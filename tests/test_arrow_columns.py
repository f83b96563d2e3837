"""The Arrow arrays the rerun plan builds from its buffers are those ``pyarrow.array`` builds from the same
Python values (nulls, empty strings, any Unicode, the int64 range), without importing pandas."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from chunkline.dataset.arrow_columns import bool_array, int64_array, string_array

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


@given(st.lists(st.none() | TEXT, max_size=60))
def test_string_array_is_pyarrows(values):
    built = string_array(values)
    assert built.type == pa.string() and built.equals(pa.array(values, pa.string()))
    built.validate(full=True)


@given(st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=60))
def test_int64_array_is_pyarrows(values):
    built = int64_array(values)
    assert built.equals(pa.array(values, pa.int64()))
    built.validate(full=True)


@given(st.lists(st.none() | st.booleans(), max_size=60))
def test_bool_array_is_pyarrows(values):
    built = bool_array(values)
    assert built.equals(pa.array(values, pa.bool_()))
    built.validate(full=True)


def test_building_them_imports_no_pandas():
    probe = (
        "import sys\n"
        "from chunkline.dataset.arrow_columns import bool_array, int64_array, string_array\n"
        "string_array(['a', None, 'é']); int64_array([1, None]); bool_array([True, None])\n"
        "print('pandas' in sys.modules)\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert completed.stdout.strip() == "False"
