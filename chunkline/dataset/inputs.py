"""The inputs of a run, with no Beam: listing, matching, doc ids and reading a matched file.

:func:`match_input` lists every file an input URL names (a folder, a glob or a single file, on any fsspec
protocol, chained ones included) as a :class:`SourceFile` with its doc_id: its POSIX path relative to the
input's root (the folder, the part of a glob before its first wildcard, or a single file's folder). A file
whose name leads out of that root (an archive member named ``../evil.md``) is never read: it comes out with
a ``problem`` under a doc_id of the form ``_outside_input/<12 hex>/evil.md``; so is a name that some OS
reads as absolute (``C:/x.md``, ``\\\\server\\share\\x.md``, a member named ``/x.md``).
:func:`choose_source` settles two inputs that hold the same doc_id and :func:`read_source` reads one
matched file; a file that cannot be read is not an exception but a :class:`SourceFile` with ``problem`` set.

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

import fnmatch
import hashlib
import os
import posixpath
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

import fsspec
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import glob_translate

from chunkline.dataset.settings import InputConfig
from chunkline.dataset.storage import StorageError, scrub_secrets, with_storage_retries

__all__ = [
    "UNLISTED_FOLDER",
    "UNTRUSTED_METADATA_PROTOCOLS",
    "FileProblem",
    "ListedEntry",
    "SourceFile",
    "choose_source",
    "doc_id_of",
    "change_tokens",
    "glob_root",
    "listing_is_trusted",
    "match_input",
    "read_source",
    "utf8_name",
    "walk_local_folder",
]

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
    mtime_ns: int | None = None
    etag: str | None = None
    version: str | None = None
    """The store's change tokens for it (see :class:`SourceFile`)."""
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
    for folder, found in _walk_local_folders(root, maxdepth):
        for item in found:
            if type(item) is ListedEntry:
                yield item
                continue
            name, status = item
            yield ListedEntry(
                _posix(f"{folder}{name}"),
                "file",
                size_bytes=status.st_size,
                modified_time=_utc(status.st_mtime),
                mtime_ns=status.st_mtime_ns,
            )


#: What :func:`_walk_local_folders` lists in one folder, in name order: a plain file (not a link) as its
#: name and ``lstat``, anything else (a link, a folder that could not be listed) as its ``ListedEntry``.
_FolderItems = list["ListedEntry | tuple[str, os.stat_result]"]


def _walk_local_folders(root: str, maxdepth: int | None = None) -> Iterator[tuple[str, _FolderItems]]:
    """The walk of :func:`walk_local_folder`, one folder at a time: (the folder's path as listed, ending in
    ``/``; what it holds). The plain files, nearly all of a corpus, stay name and ``lstat`` so that a caller
    builds what it needs from them once, with the folder's part of the path worked out once per folder."""
    root = root.rstrip("/") or "/"
    root_real = os.path.realpath(root)
    # (folder as listed, its real path, the real paths of the folders it is inside, its depth)
    pending: list[tuple[str, str, frozenset[str], int]] = [(root, root_real, frozenset({root_real}), 1)]
    first = True
    while pending:
        folder, folder_real, ancestors, depth = pending.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=_entry_name)
        except OSError as error:
            if first:
                raise
            yield folder, [ListedEntry(_posix(folder), "unlisted", detail=f"{type(error).__name__}: {error}")]
            continue
        first = False
        prefix = f"{folder.rstrip('/')}/"
        found: _FolderItems = []
        subfolders = []
        for entry in entries:
            name = entry.name
            try:
                if entry.is_file(follow_symlinks=False):  # most entries: asked first
                    found.append((name, entry.stat(follow_symlinks=False)))
                elif entry.is_symlink():
                    path = prefix + name
                    target = os.path.realpath(path)
                    is_folder = os.path.isdir(target)
                    if not _inside(target, root_real):
                        found.append(ListedEntry(_posix(path), "link_outside", is_folder=is_folder, detail=target))
                    elif is_folder and target in ancestors:
                        found.append(ListedEntry(_posix(path), "link_loop", is_folder=True, detail=target))
                    elif is_folder:
                        subfolders.append((path, target))
                    else:
                        linked = _file_entry(path)
                        if linked is not None:
                            found.append(linked)
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append((prefix + name, os.path.join(folder_real, name)))
            except FileNotFoundError:  # gone between the listing and the look at it
                continue
        yield prefix, found
        if maxdepth is None or depth < maxdepth:
            # Pushed in reverse so that folders are walked in sorted order.
            for path, real in reversed(subfolders):
                pending.append((path, real, ancestors | {real}, depth + 1))


def _entry_name(entry: os.DirEntry) -> str:
    return entry.name


def _file_entry(link: str) -> ListedEntry | None:
    """A link to a file inside the root, as that file (None for a pipe, socket or device, which is no
    document and whose read could block)."""
    try:
        status = os.stat(link)
    except OSError:  # a dangling link: listed, and its read says what is wrong
        return ListedEntry(_posix(link), "file")
    if not stat.S_ISREG(status.st_mode):
        return None
    return ListedEntry(
        _posix(link),
        "file",
        size_bytes=status.st_size,
        modified_time=_utc(status.st_mtime),
        mtime_ns=status.st_mtime_ns,
    )


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _posix(path: str) -> str:
    return path.replace(os.sep, "/") if os.sep != "/" else path


_GLOB_CHARACTERS = "*?["


@dataclass(frozen=True)
class FileProblem:
    """Why a file could not be read (or was skipped)."""

    stage: str
    error_type: str
    message: str
    skipped: bool = False


@dataclass(frozen=True)
class SourceFile:
    """A matched file, and its bytes once read."""

    doc_id: str
    source_uri: str
    input_index: int
    """Position of the input (in ``input.paths``) the file was found under."""
    path: str
    """The file's path in its filesystem (what ``fs.open`` takes)."""
    size_bytes: int | None
    modified_time: datetime | None
    data: bytes | None = None
    problem: FileProblem | None = None
    mtime_ns: int | None = None
    """Modification time as the store lists it, in nanoseconds since the epoch (a local file's
    ``st_mtime_ns``; another store's time at its own precision); None when it reports none."""
    etag: str | None = None
    """The store's entity tag (S3 ``ETag``, Azure ``etag``, GCS ``etag``), as listed; None when it has none."""
    version: str | None = None
    """The store's version of the object (GCS ``generation``, S3 ``VersionId``, Azure ``version_id``)."""

    @property
    def has_change_token(self) -> bool:
        """Whether the listing gave something that moves when the file is written (a modification time, an
        ETag or a version): without one, only its bytes can tell whether it changed."""
        return self.mtime_ns is not None or self.etag is not None or self.version is not None


def _modified_time(info: dict[str, Any]) -> datetime | None:
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: Stores whose listing is not trusted to say whether a file changed: an HTTP server's ETag may be weak,
#: missing or rewritten by a proxy, and its Last-Modified optional. Their files are always read and hashed.
UNTRUSTED_METADATA_PROTOCOLS = ("http", "https")


def listing_is_trusted(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs``'s listing can say that a file is unchanged (false for :data:`UNTRUSTED_METADATA_PROTOCOLS`:
    their files are read and hashed on every run)."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return not any(protocol in UNTRUSTED_METADATA_PROTOCOLS for protocol in protocols)


def change_tokens(info: dict[str, Any]) -> tuple[int | None, str | None, str | None]:
    """(modification time in nanoseconds, ETag, version) of a file from its fsspec ``info``: local ``mtime``,
    s3fs ``LastModified``/``ETag``/``VersionId``, gcsfs ``updated``/``etag``/``generation``, adlfs
    ``last_modified``/``etag``/``version_id``, memory ``created`` (set anew by every write)."""
    modified = _modified_time(info)
    mtime_ns = None if modified is None else (modified - _EPOCH) // timedelta(microseconds=1) * 1000
    raw_mtime = info.get("mtime")
    if isinstance(raw_mtime, (int, float)) and not isinstance(raw_mtime, bool):
        # Seconds as a float, taken at their shortest decimal form (not rounded to microseconds).
        mtime_ns = int(Decimal(repr(raw_mtime)) * 1_000_000_000)
    etag = next((str(info[key]) for key in ("ETag", "etag", "e_tag") if info.get(key) is not None), None)
    version = next(
        (str(info[key]) for key in ("VersionId", "version_id", "generation") if info.get(key) is not None), None
    )
    return mtime_ns, etag, version


def glob_root(path: str) -> str:
    parts = path.split("/")
    for number, part in enumerate(parts):
        if any(character in part for character in _GLOB_CHARACTERS):
            return "/".join(parts[:number])
    return path


def _safe_doc_id(path: str, root: str, *, archive: bool = False) -> str | None:
    """``path`` relative to ``root`` as a clean POSIX path, or None if it escapes the root.

    Both are normalized first and compared as they are, never against the working folder (which
    ``relpath`` would bring in for an absolute name under a relative root). A ``..`` between backslashes
    escapes too: a consumer on Windows would read it as a parent folder; so does a name that any OS reads
    as absolute (``C:/x.md``, ``C:\\x.md``, ``\\\\server\\share\\x.md``), and in an archive a member
    named ``/x.md``, whose name is absolute where it would be unpacked."""
    root = posixpath.normpath(root) if root else ""
    if root and root != ".":
        path = posixpath.normpath(path)
        prefix = root.rstrip("/") + "/"
        if path != root and not path.startswith(prefix):
            return None
        # Both are normalized and ``path`` lies below ``root``: what relpath would give, without its walk.
        relative = path[len(prefix) :] if path != root else "."
    else:
        if archive and path.startswith(("/", "\\")):
            return None
        relative = posixpath.normpath(path.lstrip("/"))
    if (
        relative in (".", "")
        or relative.startswith(("/", "\\"))
        or _DRIVE.match(relative)
        or (".." in relative and ".." in _PATH_PARTS.split(relative))  # split only a name holding ".."
    ):
        return None
    return relative


# A Windows drive (``C:``) at the start of a name: absolute (``C:/``, ``C:\\``) or drive-relative (``C:x``).
_DRIVE = re.compile(r"[A-Za-z]:")
_PATH_PARTS = re.compile(r"[/\\]")
_OUTSIDE_FOLDER = "_outside_input"


def _outside_doc_id(path: str) -> str:
    """The doc_id of a file whose name leaves the input's root: ``_outside_input/<12 hex>/<name>``.

    ``<name>`` is the file's name with its empty, ``.`` and ``..`` parts dropped (``/`` and ``\\`` both
    separate parts) and ``<12 hex>`` the start of the sha256 of the name as listed, so the id is the same on
    every run, two names that climb differently get two ids, and no id is the clean path of a file inside the
    input that it could be mistaken for (or take the place of as a duplicate)."""
    digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    parts = [part for part in _PATH_PARTS.split(path) if part not in ("", ".", "..")]
    return utf8_name("/".join([_OUTSIDE_FOLDER, digest, *(parts or ["unnamed"])]))


def doc_id_of(path: str, root: str, *, archive: bool = False) -> str:
    """The doc_id of the file listed as ``path`` below the input root ``root``: its clean POSIX path
    relative to the root as valid UTF-8 (:func:`utf8_name`), or, for a name that leads out of the root, the
    ``_outside_input/<12 hex>/<name>`` id it is reported under. ``chunkline run`` and ``chunkline chunk``
    both name files with it."""
    return _doc_id_of_relative(path, _safe_doc_id(path, root, archive=archive))


def _doc_id_of_relative(path: str, relative: str | None) -> str:
    return utf8_name(relative) if relative is not None else _outside_doc_id(path)


def _outside_problem(path: str, root: str) -> FileProblem:
    where = f"the input's root {root!r}" if root else "the input's root"
    return FileProblem(
        "match",
        "PathOutsideInput",
        f"{path!r} is not read: its name leads out of {where} through a '..' part or an absolute path, as "
        "in a zip-slip archive; rename it inside the input to chunk it",
    )


def _selected(doc_id: str, config: InputConfig) -> bool:
    if config.include and not any(fnmatch.fnmatchcase(doc_id, pattern) for pattern in config.include):
        return False
    return not any(fnmatch.fnmatchcase(doc_id, pattern) for pattern in config.exclude)


#: ``FileProblem.error_type`` of a folder below an input that could not be listed (see :func:`match_input`).
UNLISTED_FOLDER = "UnlistableFolder"


def match_input(url: str, input_index: int, config: InputConfig, *, ordered: bool = True) -> Iterator[SourceFile]:
    """Every file an input URL names, with its doc_id, size and modification time.

    A local folder or glob is walked with :func:`walk_local_folder`: links
    inside the root are followed; a link out of the root (``LinkOutsideInput``) or to a folder it is inside
    (``LinkLoop``) comes out with a ``problem`` and is never read. A folder below the root that cannot be
    listed comes out as one ``SourceFile`` with an empty ``path``, the doc_id of the folder followed by
    ``/`` and a problem of type :data:`UNLISTED_FOLDER`: its documents are not known, which is not the
    same as gone. Every doc_id and source_uri is valid UTF-8 (see :func:`utf8_name`);
    ``path`` is the name as listed. An input whose root is missing raises ``FileNotFoundError``, one whose
    root cannot be listed the listing's error.

    The files come sorted by path; with ``ordered=False``, in the order the walk finds them, one at a time
    (a caller that sorts them itself then never holds the whole input's entries)."""
    fs, path = url_to_fs(url, **config.storage_options)
    local = isinstance(fs, LocalFileSystem)
    trusted = listing_is_trusted(fs)
    if local:
        path = posixpath.normpath(path)
    path = path.rstrip("/") if path not in ("", "/") else path
    archive = isinstance(fs, AbstractArchiveFileSystem)
    extensions = tuple(extension.lower() for extension in config.extensions)
    if any(character in path for character in _GLOB_CHARACTERS):
        root = glob_root(path)
        if local:
            listed = _local_glob(path, root)
        else:
            found = fs.glob(path, detail=True)
            listed = [_listed(name, info) for name, info in found.items() if info.get("type") == "file"]
    elif fs.isdir(path):
        root = path
        if _plain_local_folder(fs, path, url, extensions):
            yield from _local_folder_sources(fs, path, url, input_index, config, extensions, ordered=ordered)
            return
        if local:
            entries = walk_local_folder(path)
        else:
            entries = (_listed(name, info) for name, info in _find_files(fs, path, url).items())
        listed = (
            entry
            for entry in entries
            if entry.kind == "unlisted" or entry.is_folder or entry.path.lower().endswith(extensions)
        )
    elif fs.isfile(path):
        root = posixpath.dirname(path)
        listed = [_local_file(path) if local else _listed(path, fs.info(path))]
    else:
        raise FileNotFoundError(f"input {url} does not exist")
    for entry in sorted(listed, key=lambda entry: entry.path) if ordered else listed:
        if not trusted:
            entry = replace(entry, mtime_ns=None, etag=None, version=None)
        yield from _source_files(entry, fs, root, url, input_index, config, archive=archive)


def _listed(name: str, info: dict[str, Any]) -> ListedEntry:
    size = info.get("size")
    mtime_ns, etag, version = change_tokens(info)
    return ListedEntry(
        name,
        "file",
        size_bytes=int(size) if size is not None else None,
        modified_time=_modified_time(info),
        mtime_ns=mtime_ns,
        etag=etag,
        version=version,
    )


def _local_file(path: str) -> ListedEntry:
    """A local file given as an input of its own, with its modification time to the nanosecond."""
    status = os.stat(path)
    return ListedEntry(
        path,
        "file",
        size_bytes=status.st_size,
        modified_time=_utc(status.st_mtime),
        mtime_ns=status.st_mtime_ns,
    )


def _find_files(fs: fsspec.AbstractFileSystem, path: str, url: str) -> dict[str, dict[str, Any]]:
    """The files below ``path``. fsspec's own walk leaves out a folder it cannot list; here such a folder
    fails the whole listing instead (the filesystem does not say which folder it was), so that its
    documents are never taken for deleted ones."""
    failures: list[BaseException] = []
    if type(fs).find is fsspec.AbstractFileSystem.find:
        found = fs.find(path, detail=True, on_error=failures.append)
    else:
        found = fs.find(path, detail=True)
    if failures:
        error = failures[0]
        raise OSError(f"cannot list every folder of input {url}: {type(error).__name__}: {error}")
    return {name: info for name, info in found.items() if info.get("type") == "file"}


def _plain_local_folder(fs: fsspec.AbstractFileSystem, path: str, url: str, extensions: tuple[str, ...]) -> bool:
    """Whether the folder input ``path`` is listed by :func:`_local_folder_sources`: a folder on the local
    disk of a POSIX system, named by an absolute path (what ``url_to_fs`` gives for every local URL), not
    through a chain of filesystems, with extensions that are plain suffixes of a name."""
    return (
        type(fs) is LocalFileSystem
        and os.sep == "/"
        and path.startswith("/")
        and "::" not in url
        and not any("/" in extension for extension in extensions)
    )


def _local_folder_sources(
    fs: LocalFileSystem,
    root: str,
    url: str,
    input_index: int,
    config: InputConfig,
    extensions: tuple[str, ...],
    *,
    ordered: bool = True,
) -> Iterator[SourceFile]:
    """:func:`match_input` for a local folder (see :func:`_plain_local_folder`), sorted by path as it sorts;
    with ``ordered=False``, folder by folder as the walk finds them (one folder's files held at a time).

    What every file of one folder shares (its doc_id's folder part, the ``file://`` URL of the folder, as
    valid UTF-8) is worked out once per folder; a plain file whose name needs nothing of its own (no
    backslash, no drive letter at the root) becomes its ``SourceFile`` at once, with the ``lstat`` of the
    walk. Anything else (links, folders that could not be listed, odd names) goes through
    :func:`_source_files`, as in every other listing, so both ways give the same files."""
    found: list[tuple[str, SourceFile]] = []
    include, exclude = config.include, config.exclude
    root_prefix = root.rstrip("/") + "/"
    for folder, items in _walk_local_folders(root):
        relative = folder[len(root_prefix) :] if folder != root_prefix else ""
        # The folder's part of every doc_id below it, when its own parts leave the root nowhere.
        folder_doc_id = utf8_name(relative) if _safe_doc_id(f"{folder}x", root) == f"{relative}x" else None
        folder_uri = utf8_name(f"file://{folder}")
        for item in items:
            if type(item) is ListedEntry:
                if item.kind == "unlisted" or item.is_folder or item.path.lower().endswith(extensions):
                    found.extend(
                        (item.path, source)
                        for source in _source_files(item, fs, root, url, input_index, config, archive=False)
                    )
                continue
            name, status = item
            if not name.lower().endswith(extensions):
                continue
            path = folder + name
            if folder_doc_id is None or "\\" in name or (not relative and _DRIVE.match(name)):
                entry = ListedEntry(
                    path,
                    "file",
                    size_bytes=status.st_size,
                    modified_time=_utc(status.st_mtime),
                    mtime_ns=status.st_mtime_ns,
                )
                found.extend(
                    (path, source) for source in _source_files(entry, fs, root, url, input_index, config, archive=False)
                )
                continue
            plain_name = name if name.isascii() and "%" not in name else utf8_name(name)
            doc_id = folder_doc_id + plain_name
            if (include or exclude) and not _selected(doc_id, config):
                continue
            found.append((path, _local_source_file(doc_id, folder_uri + plain_name, input_index, path, status)))
        if not ordered:
            for _, source in found:
                yield source
            found.clear()
    if ordered:
        found.sort(key=_listed_path)
        for _, source in found:
            yield source


def _listed_path(pair: tuple[str, SourceFile]) -> str:
    return pair[0]


def _local_source_file(doc_id: str, source_uri: str, input_index: int, path: str, status: os.stat_result) -> SourceFile:
    """The ``SourceFile`` of a plain local file from its ``lstat`` (fields given by position: a frozen
    dataclass's ``__init__`` is a noticeable part of a listing of many small files, and keywords add to it)."""
    return SourceFile(
        doc_id,
        source_uri,
        input_index,
        path,
        status.st_size,
        _fromtimestamp(status.st_mtime, _UTC),
        None,  # data
        None,  # problem
        status.st_mtime_ns,
    )


_fromtimestamp = datetime.fromtimestamp
_UTC = timezone.utc


def _local_glob(pattern: str, root: str) -> list[ListedEntry]:
    """A glob over a local folder, walked as a folder input is, down to the glob's depth."""
    matches = re.compile(glob_translate(pattern)).match
    depth = None if "**" in pattern else len(pattern[len(root) :].strip("/").split("/"))
    if not os.path.isdir(root):
        raise FileNotFoundError(f"input {pattern} does not exist: its folder {root} is missing")
    listed = []
    for entry in walk_local_folder(root, maxdepth=depth):
        if entry.kind == "unlisted" or matches(entry.path):
            listed.append(entry)
        elif entry.is_folder and (depth is None or len(entry.path[len(root) :].strip("/").split("/")) < depth):
            listed.append(entry)  # a folder link the glob would have walked into
    return listed


def _source_files(
    entry: ListedEntry,
    fs: fsspec.AbstractFileSystem,
    root: str,
    url: str,
    input_index: int,
    config: InputConfig,
    *,
    archive: bool,
) -> Iterator[SourceFile]:
    """The ``SourceFile`` of one listed entry (none if the input's include/exclude patterns leave it out)."""
    name = entry.path
    relative = _safe_doc_id(name, root, archive=archive)
    doc_id = _doc_id_of_relative(name, relative)
    # A name that climbs out of the root is never read, but is reported under an id of its own.
    problem = _outside_problem(name, root) if relative is None else None
    source_uri = utf8_name(_source_uri(fs, name, url))
    if entry.kind == "unlisted":
        # Left out only when an exclude pattern covers the folder: its files would be left out anyway.
        doc_id += "/"
        if any(fnmatch.fnmatchcase(doc_id, pattern) for pattern in config.exclude):
            return
        message = (
            f"folder {source_uri} could not be listed ({entry.detail}); the documents published from it "
            "before are kept as they were. Make it readable (or move it out of the input) and run again"
        )
        yield SourceFile(
            doc_id, source_uri, input_index, "", None, None, problem=FileProblem("match", UNLISTED_FOLDER, message)
        )
        return
    if (config.include or config.exclude) and not _selected(doc_id, config):
        return
    if problem is None and entry.kind == "link_outside":
        what = "folder" if entry.is_folder else "file"
        problem = FileProblem(
            "match",
            "LinkOutsideInput",
            f"{source_uri} is not read: it is a link to the {what} {utf8_name(entry.detail)!r}, outside the "
            f"input's root {utf8_name(root)!r}; copy it into the input, or give its folder as an input of its own",
        )
    elif problem is None and entry.kind == "link_loop":
        problem = FileProblem(
            "match",
            "LinkLoop",
            f"{source_uri} is not followed: it is a link to {utf8_name(entry.detail)!r}, a folder it is inside, "
            "whose files are read under their own path; leave it out with input.exclude",
        )
    yield SourceFile(
        doc_id=doc_id,
        source_uri=source_uri,
        input_index=input_index,
        path=name,
        size_bytes=entry.size_bytes,
        modified_time=entry.modified_time,
        problem=problem,
        mtime_ns=entry.mtime_ns,
        etag=entry.etag,
        version=entry.version,
    )


def _source_uri(fs: fsspec.AbstractFileSystem, path: str, input_url: str) -> str:
    """A URL that fsspec can open: for a chained input (``zip::file:///corpus.zip``) the member is named
    inside the chain (``zip://docs/a.md::file:///corpus.zip``)."""
    if "::" in input_url:
        first, rest = input_url.split("::", 1)
        protocol = first.split("://", 1)[0]
        return f"{protocol}://{path.lstrip('/')}::{rest}"
    if type(fs) is LocalFileSystem and os.sep == "/" and path.startswith("/") and not path.endswith("/"):
        # What ``unstrip_protocol`` returns for such a path (already absolute and POSIX), without its
        # normalizing, which cost a third of the listing's time per file.
        return f"file://{path}"
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # a filesystem that cannot say; the path is still useful
        return path


def choose_source(doc_id: str, matches: Any) -> tuple[SourceFile, list[SourceFile]]:
    """The file a doc_id is read from (the first input's), and the others reported as skipped duplicates."""
    candidates = sorted(matches, key=lambda source: (source.input_index, source.source_uri))
    chosen = candidates[0]
    # The same file reached through two inputs (a folder and a glob over it) is one document.
    skipped = [
        replace(
            other,
            problem=FileProblem(
                "match",
                "DuplicateDocId",
                f"doc_id {doc_id} is also in input {chosen.input_index + 1} "
                f"({chosen.source_uri}), which is used instead",
                skipped=True,
            ),
        )
        for other in candidates[1:]
        if other.source_uri != chosen.source_uri
    ]
    return chosen, skipped


def read_source(
    source: SourceFile, fs: fsspec.AbstractFileSystem, max_file_bytes: int, secrets: tuple[str, ...]
) -> SourceFile:
    """``source`` with its bytes, or with a ``read`` problem (too large, vanished, unreadable).

    A regular file on the local disk is read with the operating system's calls alone (open, fstat, one
    read, close: :func:`_read_local_file`); anything else, and any local read that fails, goes through the
    filesystem with retries, which reports the error as always."""
    limit = max_file_bytes
    if source.size_bytes is not None and source.size_bytes > limit:
        return replace(source, problem=_too_large(source.size_bytes, limit))
    if type(fs) is LocalFileSystem:
        data = _read_local_file(source.path, limit)
        if data is not None:
            if len(data) > limit:
                return replace(source, problem=_too_large(None, limit))
            return replace(source, data=data, size_bytes=len(data))

    def read() -> bytes:
        with fs.open(source.path, "rb") as handle:
            return handle.read(limit + 1)

    try:
        data = with_storage_retries(read, source.source_uri, "read", secrets=secrets)
    except StorageError as error:  # a transient storage failure that lasted: the message names the file
        return replace(source, problem=FileProblem("read", type(error).__name__, scrub_secrets(str(error), secrets)))
    except Exception as error:  # vanished, unreadable, permission denied
        message = scrub_secrets(f"cannot read {source.source_uri}: {error}", secrets)
        return replace(source, problem=FileProblem("read", type(error).__name__, message))
    if len(data) > limit:
        return replace(source, problem=_too_large(None, limit))
    return replace(source, data=data, size_bytes=len(data))


def _read_local_file(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file at local ``path``, at most ``limit + 1`` of them; None when it is not a
    regular file or any call fails (the caller then reads it the usual way, and reports what is wrong).
    Opened without blocking, so that a pipe put in the file's place cannot hang the read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return None
        expected = min(status.st_size, limit)
        pieces = []
        held = 0
        while held <= limit:
            room = limit + 1 - held
            # One byte more than the file holds: a read that stops short at the size fstat gave is its end.
            request = min(room, expected + 1 - held) if held <= expected else min(room, 1 << 16)
            piece = os.read(descriptor, request)
            if not piece:
                break
            pieces.append(piece)
            held += len(piece)
            if held == status.st_size and len(piece) < request:
                break
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _too_large(size: int | None, limit: int) -> FileProblem:
    size_text = f"{size:,} bytes" if size is not None else "more"
    return FileProblem(
        "read",
        "FileTooLarge",
        f"file has {size_text}, over input.max_file_bytes ({limit:,}); raise the limit to chunk it",
    )
