"""A listed file's doc_id is its path relative to the input's root, taken by cutting the normalized root
off the normalized path: the same as ``posixpath.relpath`` for every name below the root, absolute or
relative, and no id at all for a name outside it."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline.dataset.inputs import _safe_doc_id, doc_id_of

ROOTS = ["/", "/data/corpus", "/data/corpus/", "//share/docs", "docs", "./docs", "../docs", "a/b/../c", "/a/./b"]

# Path parts that normalization treats specially, beside ordinary names.
PARTS = st.lists(st.sampled_from(["guide", "a.md", "b c.md", ".", "..", "", "ü.md", "%41.md", "x..md"]), max_size=6)


@pytest.mark.parametrize("root", ROOTS)
@given(parts=PARTS)
@pytest.mark.slow
def test_the_doc_id_of_a_name_below_the_root_is_what_relpath_gives(root, parts):
    path = posixpath.join(root, *parts) if parts else root
    relative = _safe_doc_id(path, root)
    normalized_root, normalized_path = posixpath.normpath(root), posixpath.normpath(path)
    below = normalized_path != normalized_root and normalized_path.startswith(normalized_root.rstrip("/") + "/")
    if not below:
        assert relative is None  # the root itself, or a name that climbed out of it
        return
    assert relative == posixpath.relpath(normalized_path, normalized_root)


def test_names_outside_the_root_get_an_outside_id():
    assert doc_id_of("/data/corpus/guide/a.md", "/data/corpus") == "guide/a.md"
    assert doc_id_of("/data/other/a.md", "/data/corpus").startswith("_outside_input/")
    assert doc_id_of("/data/corpus-2/a.md", "/data/corpus").startswith("_outside_input/")
    assert doc_id_of("/data/corpus", "/data/corpus").startswith("_outside_input/")
