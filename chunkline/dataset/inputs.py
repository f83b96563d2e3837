"""Listing a local input folder, and names that are always valid UTF-8 (no Beam here).

``walk_local_folder(root)`` is how ``chunkline run`` (for local inputs) and ``chunkline chunk`` find the files
below a folder. Unlike fsspec's ``find``, which drops symbolic links and silently leaves out folders it
cannot list, it reports everything it meets:

- a link (to a file or a folder) whose target lies inside the root is followed, and what it leads to is
  listed under the link's own path, as if the link were that file or folder;
- a link whose target lies outside the root is never followed: it is reported (``link_outside``), so that a
  link to ``/etc`` or to another project's docs neither leaks into the dataset nor vanishes unnoticed;
- a link to a folder it is itself inside (a loop) is reported (``link_loop``) instead of being walked again
  and again;
- a folder that cannot be listed (permissions, a vanished mount) is reported (``unlisted``) with its error,
  so that the documents published from it before are never mistaken for deleted ones.

File names on a local disk are bytes; Python lists the ones that are not UTF-8 with lone surrogates in
place of their bad bytes, which no Arrow column, JSON file or Beam string coder accepts.
``utf8_name`` turns such a name into valid UTF-8 text, one-to-one, while the listed path (what ``open``
takes) is kept as it is.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

__all__ = ["ListedEntry", "utf8_name", "walk_local_folder"]

# A '%' that a reader could take for an escaped byte (%80 to %FF) or for an escaped '%' (%25).
_AMBIGUOUS_PERCENT = re.compile(r"%(?=25|[89A-Fa-f][0-9A-Fa-f])")


def utf8_name(name: str) -> str:
    """``name`` as valid UTF-8 text, different names staying different.

    A byte that was not UTF-8 (listed as a lone surrogate U+DC80..U+DCFF) becomes ``%XX``, its value in
    hex (``caf\\udce9.md`` -> ``caf%E9.md``); so that no other name can come out the same, a ``%`` that
    reads as such an escape or as ``%25`` is written ``%25`` (``caf%E9.md`` itself -> ``caf%25E9.md``).
    Every other name is returned unchanged: ``my%20file.md`` stays as it is."""
    if "%" in name:
        name = _AMBIGUOUS_PERCENT.sub("%25", name)
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    pieces = []
    for character in name:
        code = ord(character)
        if 0xDC80 <= code <= 0xDCFF:
            pieces.append(f"%{code - 0xDC00:02X}")
        elif 0xD800 <= code <= 0xDFFF:  # another lone surrogate (a name made in Python, not listed): its bytes
            pieces.append("".join(f"%{byte:02X}" for byte in character.encode("utf-8", "surrogatepass")))
        else:
            pieces.append(character)
    return "".join(pieces)


@dataclass(frozen=True)
class ListedEntry:
    """One thing found below a listed folder."""

    path: str
    """Its path as listed, through any links (what ``open`` takes), with ``/`` separators."""
    kind: Literal["file", "link_outside", "link_loop", "unlisted"]
    """``file``: a file to read (a link to one inside the root included); ``link_outside``: a link whose
    target is outside the root, not followed; ``link_loop``: a link to a folder it is inside, not followed;
    ``unlisted``: a folder whose listing failed."""
    size_bytes: int | None = None
    modified_time: datetime | None = None
    """Its last modification, in UTC."""
    is_folder: bool = False
    """For links: whether the target is a folder (a folder link's name need not end in ``.md``)."""
    detail: str = ""
    """For links, the target; for an unlisted folder, its error (``PermissionError: ...``)."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def walk_local_folder(root: str, maxdepth: int | None = None) -> Iterator[ListedEntry]:
    """Every file below the local folder ``root``, and each link or folder that is not followed (see the
    module docstring), in sorted order; ``maxdepth`` folder levels at most (None: all).

    Raises the ``OSError`` of ``root`` itself when it cannot be listed: an input without a root is no
    input, and the caller says so."""
    root = root.rstrip("/") or "/"
    root_real = os.path.realpath(root)
    # (folder as listed, its real path, the real paths of the folders it is inside, its depth)
    pending: list[tuple[str, str, frozenset[str], int]] = [(root, root_real, frozenset({root_real}), 1)]
    first = True
    while pending:
        folder, folder_real, ancestors, depth = pending.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as error:
            if first:
                raise
            yield ListedEntry(_posix(folder), "unlisted", detail=f"{type(error).__name__}: {error}")
            continue
        first = False
        subfolders = []
        for entry in entries:
            path = f"{folder.rstrip('/')}/{entry.name}"
            try:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    is_folder = os.path.isdir(target)
                    if not _inside(target, root_real):
                        yield ListedEntry(_posix(path), "link_outside", is_folder=is_folder, detail=target)
                    elif is_folder and target in ancestors:
                        yield ListedEntry(_posix(path), "link_loop", is_folder=True, detail=target)
                    elif is_folder:
                        subfolders.append((path, target))
                    else:
                        found = _file_entry(path)
                        if found is not None:
                            yield found
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append((path, os.path.join(folder_real, entry.name)))
                elif entry.is_file(follow_symlinks=False):
                    status = entry.stat(follow_symlinks=False)
                    yield ListedEntry(_posix(path), "file", size_bytes=status.st_size, modified_time=_utc(status.st_mtime))
            except FileNotFoundError:  # gone between the listing and the look at it
                continue
        if maxdepth is None or depth < maxdepth:
            # Pushed in reverse so that folders are walked in sorted order.
            for path, real in reversed(subfolders):
                pending.append((path, real, ancestors | {real}, depth + 1))


def _file_entry(link: str) -> ListedEntry | None:
    """A link to a file inside the root, as that file (None for a pipe, socket or device, which is no
    document and whose read could block)."""
    try:
        status = os.stat(link)
    except OSError:  # a dangling link: listed, and its read says what is wrong
        return ListedEntry(_posix(link), "file")
    if not stat.S_ISREG(status.st_mode):
        return None
    return ListedEntry(_posix(link), "file", size_bytes=status.st_size, modified_time=_utc(status.st_mtime))


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _posix(path: str) -> str:
    return path.replace(os.sep, "/") if os.sep != "/" else path
