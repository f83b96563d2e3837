"""``ReadMarkdown``: find markdown files on any fsspec storage and read their bytes.

What a file is, its doc_id, and how it is matched and read are the dataset floor's
(:mod:`chunkline.dataset.inputs`); this module spreads that work over Beam workers. The transform matches
files in a DoFn, groups the matches by ``doc_id`` (which spreads the reads across workers and settles two
inputs that hold the same ``doc_id``: the first input wins, the others are reported as skipped), then reads
each file in a DoFn that builds its filesystems once per worker. A transient storage error is retried (see
:func:`chunkline.dataset.storage.with_storage_retries`); a file that still cannot be read is not an
exception: it comes out as a :class:`~chunkline.dataset.inputs.SourceFile` with ``problem`` set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import fsspec

from chunkline.dataset import inputs
from chunkline.dataset.inputs import SourceFile, choose_source, read_source
from chunkline.dataset.settings import InputConfig
from chunkline.dataset.storage import fresh_filesystem
from chunkline.transforms.in_process import apply_in_process

__all__ = ["ReadMarkdown"]


class _MatchFilesFn(beam.DoFn):
    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets

    def process(self, element: tuple[int, str]) -> Iterator[tuple[str, SourceFile]]:
        input_index, url = element
        for source in inputs.list_input(url, input_index, self._config, self._secrets):
            yield source.doc_id, source


class _ReadFileFn(beam.DoFn):
    """Reads one matched file; filesystems are built once per worker and input."""

    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets
        self._filesystems: dict[int, fsspec.AbstractFileSystem] = {}

    def setup(self) -> None:
        self._filesystems = {
            index: fresh_filesystem(url, self._config.storage_options)[0]
            for index, url in enumerate(self._config.paths)
        }

    def process(self, element: tuple[str, Any]) -> Iterator[SourceFile]:
        doc_id, matches = element
        chosen, skipped = choose_source(doc_id, matches)
        yield from skipped
        if chosen.problem is not None:
            yield chosen
            return
        fs = self._filesystems[chosen.input_index]
        yield read_source(chosen, fs, self._config.max_file_bytes, self._secrets)


class ReadMarkdown(beam.PTransform):
    """Match the inputs' markdown files and read them: a PCollection of
    :class:`~chunkline.dataset.inputs.SourceFile`.

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
            grouped = pipeline | "MatchedFiles" >> beam.Create(self._matched) | "SpreadReads" >> beam.Reshuffle()
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
