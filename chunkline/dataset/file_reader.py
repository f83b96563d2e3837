"""Reading a matched document's file, without Beam: the read step of a run.

:class:`MatchedFileReader` takes ``(doc_id, matched files)`` (the driver's listing, or the matches grouped
by ``doc_id`` in a pipeline), or a list of them (a batch, read into one list of its files), settles which
file is the document's (:func:`~chunkline.dataset.inputs.choose_source`: the others are reported as
skipped) and reads it (:func:`~chunkline.dataset.inputs.read_source`). The Beam
DoFn of :class:`~chunkline.transforms.ReadMarkdown` subclasses it; a run without a runner calls it
directly (:func:`chunkline.dataset.bundle.run_bundle`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.core import split_protocol

from chunkline.dataset.bundle import BundleStep
from chunkline.dataset.inputs import SourceFile, choose_source, read_source
from chunkline.dataset.settings import InputConfig
from chunkline.dataset.storage import fresh_filesystem

__all__ = ["MatchedFileReader"]


class MatchedFileReader(BundleStep):
    """Reads one matched file; filesystems are built once per worker and input."""

    def __init__(self, config: InputConfig, secrets: tuple[str, ...], by_url: bool = False):
        self._config = config
        self._secrets = secrets
        self._by_url = by_url
        self._filesystems: dict[Any, fsspec.AbstractFileSystem] = {}

    def setup(self) -> None:
        self._filesystems = {
            index: fresh_filesystem(url, self._config.storage_options)[0]
            for index, url in enumerate(self._config.paths)
        }

    def _filesystem(self, source: SourceFile) -> fsspec.AbstractFileSystem:
        if not self._by_url:
            return self._filesystems[source.input_index]
        # Inputs that came as a PCollection: one filesystem per protocol (a chained URL's, per URL).
        key = source.source_uri if "::" in source.source_uri else split_protocol(source.source_uri)[0]
        if key not in self._filesystems:
            self._filesystems[key] = fresh_filesystem(source.source_uri, self._config.storage_options)[0]
        return self._filesystems[key]

    def process(self, element: tuple[str, Any] | list[tuple[str, Any]]) -> Iterator[SourceFile | list[SourceFile]]:
        if isinstance(element, list):  # a batch of documents: one element of all their files
            yield [source for document in element for source in self._read(document)]
            return
        yield from self._read(element)

    def _read(self, element: tuple[str, Any]) -> Iterator[SourceFile]:
        doc_id, matches = element
        chosen, skipped = choose_source(doc_id, matches)
        yield from skipped
        if chosen.problem is not None:
            yield chosen
            return
        fs = self._filesystem(chosen)
        yield read_source(chosen, fs, self._config.max_file_bytes, self._secrets)
