"""``ReadMarkdown``: find markdown files on any fsspec storage and read their bytes.

Inputs are fsspec URLs: a folder (every file with one of ``extensions`` below it), a glob
(``s3://bucket/docs/**/*.md``) or a single file, on any protocol fsspec knows, chained ones included
(``zip::file:///corpus.zip``). Each file's ``doc_id`` is its POSIX path relative to the input's root (the
folder, the part of a glob before its first wildcard, or a single file's folder). A file whose name leads
out of that root (an archive member named ``../evil.md``) is never read: it comes out with a ``problem``
(an error row that names it) under a doc_id of the form ``_outside_input/<12 hex>/evil.md``; so is a name
that some OS reads as absolute (``C:/x.md``, ``\\\\server\\share\\x.md``, a member named ``/x.md``).
Local folders are walked with :func:`chunkline.dataset.inputs.walk_local_folder`: links inside the root
are followed, links out of it or in a loop are error rows, a folder that cannot be listed is an error row of
its own, and names that are not UTF-8 get percent-escaped ids.

The transform matches files in a DoFn, groups the matches by ``doc_id`` (which spreads the reads across
workers and settles two inputs that hold the same ``doc_id``: the first input wins, the others are
reported as skipped), then reads each file in a DoFn that builds its filesystems once per worker. A
transient storage error is retried (see :func:`chunkline.dataset.storage.with_storage_retries`); a file
that still cannot be read is not an exception: it comes out as a :class:`SourceFile` with ``problem`` set.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import apache_beam as beam
import fsspec
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import glob_translate

from chunkline.dataset.settings import InputConfig
from chunkline.dataset.storage import StorageError, fresh_filesystem, with_storage_retries
from chunkline.dataset.inputs import ListedEntry, utf8_name, walk_local_folder
from chunkline.transforms.in_process import apply_in_process

__all__ = ["ReadMarkdown", "SourceFile", "FileProblem", "UNLISTED_FOLDER", "match_input", "scrub"]

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


def scrub(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every secret value replaced by ``***``."""
    for secret in secrets:
        if secret and secret in message:
            message = message.replace(secret, "***")
    return message


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


def _glob_root(path: str) -> str:
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
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            return None
        relative = posixpath.relpath(path, root)
    else:
        if archive and path.startswith(("/", "\\")):
            return None
        relative = posixpath.normpath(path.lstrip("/"))
    if (
        relative in (".", "")
        or relative.startswith(("/", "\\"))
        or _DRIVE.match(relative)
        or ".." in _PATH_PARTS.split(relative)
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


def match_input(url: str, input_index: int, config: InputConfig) -> Iterator[SourceFile]:
    """Every file an input URL names, with its doc_id, size and modification time.

    A local folder or glob is walked with :func:`chunkline.dataset.inputs.walk_local_folder`: links
    inside the root are followed; a link out of the root (``LinkOutsideInput``) or to a folder it is inside
    (``LinkLoop``) comes out with a ``problem`` and is never read. A folder below the root that cannot be
    listed comes out as one ``SourceFile`` with an empty ``path``, the doc_id of the folder followed by
    ``/`` and a problem of type :data:`UNLISTED_FOLDER`: its documents are not known, which is not the
    same as gone. Every doc_id and source_uri is valid UTF-8 (see :func:`~chunkline.dataset.inputs.utf8_name`);
    ``path`` is the name as listed. An input whose root is missing raises ``FileNotFoundError``, one whose
    root cannot be listed the listing's error."""
    fs, path = url_to_fs(url, **config.storage_options)
    local = isinstance(fs, LocalFileSystem)
    if local:
        path = posixpath.normpath(path)
    path = path.rstrip("/") if path not in ("", "/") else path
    archive = isinstance(fs, AbstractArchiveFileSystem)
    extensions = tuple(extension.lower() for extension in config.extensions)
    if any(character in path for character in _GLOB_CHARACTERS):
        root = _glob_root(path)
        if local:
            listed = _local_glob(path, root)
        else:
            found = fs.glob(path, detail=True)
            listed = [_listed(name, info) for name, info in found.items() if info.get("type") == "file"]
    elif fs.isdir(path):
        root = path
        if local:
            entries = walk_local_folder(path)
        else:
            entries = (_listed(name, info) for name, info in _find_files(fs, path, url).items())
        listed = [
            entry
            for entry in entries
            if entry.kind == "unlisted" or entry.is_folder or entry.path.lower().endswith(extensions)
        ]
    elif fs.isfile(path):
        root = posixpath.dirname(path)
        listed = [_listed(path, fs.info(path))]
    else:
        raise FileNotFoundError(f"input {url} does not exist")
    for entry in sorted(listed, key=lambda entry: entry.path):
        yield from _source_files(entry, fs, root, url, input_index, config, archive=archive)


def _listed(name: str, info: dict[str, Any]) -> ListedEntry:
    size = info.get("size")
    return ListedEntry(name, "file", size_bytes=int(size) if size is not None else None, modified_time=_modified_time(info))


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


def _local_glob(pattern: str, root: str) -> list[ListedEntry]:
    """A glob over a local folder, walked as a folder input is, down to the glob's depth."""
    matches = re.compile(glob_translate(pattern)).match
    depth = None if "**" in pattern else len(pattern[len(root):].strip("/").split("/"))
    if not os.path.isdir(root):
        raise FileNotFoundError(f"input {pattern} does not exist: its folder {root} is missing")
    listed = []
    for entry in walk_local_folder(root, maxdepth=depth):
        if entry.kind == "unlisted" or matches(entry.path):
            listed.append(entry)
        elif entry.is_folder and (depth is None or len(entry.path[len(root):].strip("/").split("/")) < depth):
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
    doc_id = _safe_doc_id(name, root, archive=archive)
    # A name that climbs out of the root is never read, but is reported under an id of its own.
    problem = _outside_problem(name, root) if doc_id is None else None
    doc_id = utf8_name(doc_id) if doc_id is not None else _outside_doc_id(name)
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
        yield SourceFile(doc_id, source_uri, input_index, "", None, None, problem=FileProblem("match", UNLISTED_FOLDER, message))
        return
    if not _selected(doc_id, config):
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
    )


def _source_uri(fs: fsspec.AbstractFileSystem, path: str, input_url: str) -> str:
    """A URL that fsspec can open: for a chained input (``zip::file:///corpus.zip``) the member is named
    inside the chain (``zip://docs/a.md::file:///corpus.zip``)."""
    if "::" in input_url:
        first, rest = input_url.split("::", 1)
        protocol = first.split("://", 1)[0]
        return f"{protocol}://{path.lstrip('/')}::{rest}"
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # a filesystem that cannot say; the path is still useful
        return path


class _MatchFilesFn(beam.DoFn):
    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets

    def process(self, element: tuple[int, str]) -> Iterator[tuple[str, SourceFile]]:
        input_index, url = element
        try:
            # Listed whole before anything is emitted, so that a listing that fails midway is tried again
            # from the start (a transient error would otherwise cost every document of the input).
            sources = with_storage_retries(
                lambda: list(match_input(url, input_index, self._config)), url, "list", secrets=self._secrets
            )
        except Exception as error:  # an unreachable input is an error row, never a crashed run
            message = str(error) if isinstance(error, StorageError) else f"cannot list input {url}: {error}"
            problem = FileProblem("match", type(error).__name__, scrub(message, self._secrets))
            yield url, SourceFile(url, url, input_index, "", None, None, problem=problem)
            return
        for source in sources:
            yield source.doc_id, source


class _ReadFileFn(beam.DoFn):
    """Reads one matched file; filesystems are built once per worker and input."""

    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets
        self._filesystems: dict[int, fsspec.AbstractFileSystem] = {}

    def setup(self) -> None:
        self._filesystems = {
            index: fresh_filesystem(url, self._config.storage_options)[0] for index, url in enumerate(self._config.paths)
        }

    def process(self, element: tuple[str, Any]) -> Iterator[SourceFile]:
        doc_id, matches = element
        candidates = sorted(matches, key=lambda source: (source.input_index, source.source_uri))
        chosen = candidates[0]
        # The same file reached through two inputs (a folder and a glob over it) is one document.
        others = [other for other in candidates[1:] if other.source_uri != chosen.source_uri]
        for other in others:
            yield replace(
                other,
                problem=FileProblem(
                    "match",
                    "DuplicateDocId",
                    f"doc_id {doc_id} is also in input {chosen.input_index + 1} "
                    f"({chosen.source_uri}), which is used instead",
                    skipped=True,
                ),
            )
        if chosen.problem is not None:
            yield chosen
            return
        yield self._read(chosen)

    def _read(self, source: SourceFile) -> SourceFile:
        limit = self._config.max_file_bytes
        if source.size_bytes is not None and source.size_bytes > limit:
            return replace(source, problem=self._too_large(source.size_bytes, limit))
        fs = self._filesystems[source.input_index]

        def read() -> bytes:
            with fs.open(source.path, "rb") as handle:
                return handle.read(limit + 1)

        try:
            data = with_storage_retries(read, source.source_uri, "read", secrets=self._secrets)
        except StorageError as error:  # a transient storage failure that lasted: the message names the file
            return replace(source, problem=FileProblem("read", type(error).__name__, scrub(str(error), self._secrets)))
        except Exception as error:  # vanished, unreadable, permission denied
            message = scrub(f"cannot read {source.source_uri}: {error}", self._secrets)
            return replace(source, problem=FileProblem("read", type(error).__name__, message))
        if len(data) > limit:
            return replace(source, problem=self._too_large(None, limit))
        return replace(source, data=data, size_bytes=len(data))

    @staticmethod
    def _too_large(size: int | None, limit: int) -> FileProblem:
        size_text = f"{size:,} bytes" if size is not None else "more"
        return FileProblem(
            "read",
            "FileTooLarge",
            f"file has {size_text}, over input.max_file_bytes ({limit:,}); raise the limit to chunk it",
        )


class ReadMarkdown(beam.PTransform):
    """Match the inputs' markdown files and read them: a PCollection of :class:`SourceFile`.

    With ``matched`` (``(doc_id, matched files)`` pairs already listed by the driver: every document of a
    full run, the changed ones of an incremental run) only those documents are read, spread over the
    workers by a reshuffle; without it the transform lists the inputs itself."""

    def __init__(
        self,
        config: InputConfig,
        secrets: tuple[str, ...] = (),
        matched: list[tuple[str, list[SourceFile]]] | None = None,
    ):
        super().__init__()
        if not config.paths:
            raise ValueError("ReadMarkdown needs at least one input path")
        self._config = config
        self._secrets = tuple(secrets)
        self._matched = matched

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection[SourceFile]:
        if self._matched is not None:
            grouped = (
                pipeline
                | "MatchedFiles" >> beam.Create(self._matched)
                | "SpreadReads" >> beam.Reshuffle()
            )
        else:
            grouped = (
                pipeline
                | "Inputs" >> beam.Create(list(enumerate(self._config.paths)))
                | "MatchFiles" >> beam.ParDo(_MatchFilesFn(self._config, self._secrets))
                | "GroupByDocId" >> beam.GroupByKey()
            )
        return grouped | "ReadFiles" >> beam.ParDo(_ReadFileFn(self._config, self._secrets))

    def read_in_process(self) -> Iterator[SourceFile]:
        """The same reads without a runner, for the ``matched`` documents (see
        :mod:`chunkline.transforms.in_process`)."""
        if self._matched is None:
            raise ValueError("reading in process needs the matched documents")
        return apply_in_process(_ReadFileFn(self._config, self._secrets), self._matched)
