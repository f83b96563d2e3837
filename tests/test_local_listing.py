"""The listing of a local folder input: the per-folder walk that builds each plain file's ``SourceFile`` at
once gives exactly the files, doc_ids, URLs, sizes, times and problems of the general listing (the walk's
entries, each through the same steps as a file of any other store), on folder trees with links inside and
out of the root, link loops, dangling links, folders that cannot be listed, names that are not UTF-8 or
that some OS reads as climbing out (``..\\x.md``, ``C:x.md``), ``%`` in names, extensions in any case, and
include/exclude patterns."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkline.dataset.inputs as inputs
from chunkline.dataset.inputs import SourceFile, match_input, walk_local_folder
from chunkline.dataset.settings import InputConfig

# Names as bytes: the file system's own. Some are not UTF-8; some read as a climb or a drive on Windows.
FILE_NAMES = [
    b"a.md",
    b"B.MD",
    b"notes.markdown",
    b"plain.txt",
    b"a.md.bak",
    b"caf\xc3\xa9.md",
    b"caf\xe9.md",
    b"caf%E9.md",
    b"my%20file.md",
    b"100%.md",
    b"..\\evil.md",
    b"x\\..\\y.md",
    b"C:x.md",
    b"\\\\server.md",
    b"a b.md",
    b"\xf0\x9f\x99\x82.md",
]
FOLDER_NAMES = [b"guide", b"Docs", b"caf\xe9", b"50%", b"C:", b"..\\up", b"a b", b"z"]

LINK_KINDS = ("file_inside", "folder_inside", "file_outside", "folder_outside", "loop", "dangling")


@st.composite
def folder_trees(draw, depth: int = 0):
    """A folder as {name: bytes of a file | a folder}."""
    tree: dict[bytes, object] = {}
    for name in draw(st.lists(st.sampled_from(FILE_NAMES), max_size=5, unique=True)):
        tree[name] = draw(st.binary(min_size=0, max_size=30))
    if depth < 3:
        for name in draw(st.lists(st.sampled_from(FOLDER_NAMES), max_size=3 - depth, unique=True)):
            tree[name] = draw(folder_trees(depth + 1))
    return tree


def write_tree(folder: Path, tree: dict) -> list[Path]:
    """Writes ``tree`` below ``folder``; returns the folders written, ``folder`` first."""
    folders = [folder]
    os.makedirs(folder, exist_ok=True)
    for name, value in tree.items():
        path = os.path.join(os.fsencode(folder), name)
        if isinstance(value, dict):
            folders += write_tree(Path(os.fsdecode(path)), value)
        else:
            with open(path, "wb") as handle:
                handle.write(value)
            os.utime(path, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789 + len(value)))
    return folders


def add_links(root: Path, outside: Path, folders: list[Path], links: list[tuple[int, str]]) -> None:
    files = sorted(path for path in root.rglob("*") if path.is_file() and not path.is_symlink())
    for number, (where, kind) in enumerate(links):
        folder = folders[where % len(folders)]
        target = {
            "file_inside": files[0] if files else root / "missing.md",
            "folder_inside": folders[(where + 1) % len(folders)],
            "file_outside": outside / "secret.md",
            "folder_outside": outside,
            "loop": folders[0],
            "dangling": root / "nowhere.md",
        }[kind]
        os.symlink(target, folder / f"link-{number}-{kind}{'.md' if 'file' in kind or kind == 'dangling' else ''}")


@contextmanager
def unlistable(folders: list[Path]):
    """``folders`` cannot be listed, as for a user without read permission (the tests may run as root)."""
    denied = {os.path.realpath(folder) for folder in folders}
    original = os.scandir

    def scandir(path="."):
        if not isinstance(path, int) and os.path.realpath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return original(path)

    with mock.patch.object(os, "scandir", scandir):
        yield


def general_listing(url: str, input_index: int, config: InputConfig) -> list[SourceFile]:
    """``match_input`` through the general steps every other store's listing takes."""
    with mock.patch.object(inputs, "_plain_local_folder", lambda *arguments: False):
        return list(match_input(url, input_index, config))


CONFIGS = [
    InputConfig(),
    InputConfig(extensions=(".md", ".MARKDOWN", ".txt")),
    InputConfig(include=("guide/*", "*.markdown")),
    InputConfig(exclude=("*/caf*", "Docs/*", "a.md")),
    InputConfig(include=("*%*",), exclude=("_outside_input/*",)),
    InputConfig(exclude=("guide/",)),
]


@settings(max_examples=60)
@given(
    tree=folder_trees(),
    links=st.lists(st.tuples(st.integers(0, 20), st.sampled_from(LINK_KINDS)), max_size=4),
    denied=st.lists(st.integers(1, 20), max_size=2, unique=True),
    config=st.sampled_from(CONFIGS),
    as_url=st.booleans(),
)
def test_a_local_folder_lists_as_the_general_listing_does(tmp_path_factory, tree, links, denied, config, as_url):
    base = tmp_path_factory.mktemp("listing")
    root, outside = base / "corpus", base / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# secret\n")
    folders = write_tree(root, tree)
    add_links(root, outside, folders, links)
    url = root.as_uri() if as_url else str(root)
    with unlistable([folders[number] for number in denied if number < len(folders)]):
        fast = list(match_input(url, 3, config))
        general = general_listing(url, 3, config)
        as_walked = list(match_input(url, 3, config, ordered=False))
    assert fast == general
    assert [source.path for source in fast if source.path] == sorted(source.path for source in fast if source.path)
    # Unordered (as the driver's listing streams it): the same files, in the walk's order.
    assert sorted(as_walked, key=repr) == sorted(fast, key=repr)


def test_a_realistic_tree_lists_every_kind_of_entry(tmp_path):
    """The cases the property test draws at random, all at once, with what each comes out as."""
    root, outside = tmp_path / "corpus", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# secret\n")
    write_tree(
        root,
        {
            b"README.md": b"# read me\n",
            b"caf\xe9.md": b"latin-1 name\n",
            b"..\\evil.md": b"climbs on Windows\n",
            b"C:x.md": b"a drive on Windows\n",
            b"skip.txt": b"not markdown\n",
            b"guide": {b"install.MD": b"# install\n", b"50%": {b"caf%E9.md": b"percent\n"}},
            b"locked": {b"hidden.md": b"# hidden\n"},
        },
    )
    os.symlink(outside, root / "guide" / "elsewhere")
    os.symlink(root / "guide", root / "guide" / "50%" / "up")
    os.symlink(root / "README.md", root / "again.md")
    with unlistable([root / "locked"]):
        fast = list(match_input(str(root), 0, InputConfig()))
        general = general_listing(str(root), 0, InputConfig())
    assert fast == general
    found = {source.doc_id: source.problem.error_type if source.problem else None for source in fast}
    climb = [doc_id for doc_id in found if doc_id.startswith("_outside_input/") and doc_id.endswith("/evil.md")]
    drive = [doc_id for doc_id in found if doc_id.startswith("_outside_input/") and doc_id.endswith("/C:x.md")]
    assert len(climb) == 1 and len(drive) == 1
    assert found == {
        "README.md": None,
        "again.md": None,
        "caf%E9.md": None,
        "guide/install.MD": None,
        "guide/50%/caf%25E9.md": None,
        "guide/50%/up": "LinkLoop",
        "guide/elsewhere": "LinkOutsideInput",
        "locked/": "UnlistableFolder",
        climb[0]: "PathOutsideInput",
        drive[0]: "PathOutsideInput",
    }
    readme = next(source for source in fast if source.doc_id == "README.md")
    status = os.stat(root / "README.md")
    assert (readme.size_bytes, readme.mtime_ns) == (status.st_size, status.st_mtime_ns)
    assert readme.modified_time.timestamp() == pytest.approx(status.st_mtime)
    assert readme.source_uri == (root / "README.md").as_uri() and readme.path == str(root / "README.md")


def test_the_walk_yields_plain_files_with_their_lstat_in_sorted_order(tmp_path):
    write_tree(tmp_path, {b"b.md": b"bb", b"a": {b"z.md": b"z"}, b"a.md": b"a", b"a-b.md": b"ab"})
    entries = list(walk_local_folder(str(tmp_path)))
    assert [entry.path for entry in entries] == [f"{tmp_path}/{name}" for name in ("a-b.md", "a.md", "b.md", "a/z.md")]
    assert [entry.size_bytes for entry in entries] == [2, 1, 2, 1]
    assert all(entry.mtime_ns == os.stat(entry.path).st_mtime_ns for entry in entries)
