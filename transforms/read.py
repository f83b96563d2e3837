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

from collections.abc import Iterator, Sequence

import apache_beam as beam

from chunkline.dataset import inputs
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.file_reader import MatchedFileReader
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.settings import InputConfig, RunConfig

__all__ = ["ReadMarkdown"]


class _MatchFilesFn(beam.DoFn):
    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets

    def process(self, element: tuple[int, str]) -> Iterator[tuple[str, SourceFile]]:
        input_index, url = element
        for source in inputs.list_input(url, input_index, self._config, self._secrets):
            yield source.doc_id, source


class _ReadFileFn(MatchedFileReader, beam.DoFn):
    """:class:`~chunkline.dataset.file_reader.MatchedFileReader` as a Beam step."""


def _largest_first(matched: list[tuple[str, list[SourceFile]]]) -> list[tuple[str, list[SourceFile]]]:
    """The listed documents, largest first (then by doc_id). The FnApiRunner deals a stage's elements out to
    its worker processes in turn, each worker one share; dealt in this order, the shares' bytes differ by
    less than the largest file, so the workers finish their reads and chunking together. Unknown sizes go
    last. (The output does not depend on it: the merges sort every row.)"""

    def size(pair: tuple[str, list[SourceFile]]) -> int:
        files = pair[1]
        return -1 if not files or files[0].size_bytes is None else files[0].size_bytes

    return sorted(matched, key=lambda pair: (-size(pair), pair[0]))


class ReadMarkdown(beam.PTransform):
    """Match the inputs' markdown files and read them: a PCollection of
    :class:`~chunkline.dataset.inputs.SourceFile` (``doc_id``, ``source_uri``, the bytes, or the problem
    that kept them from being read).

    ``inputs`` is a :class:`~chunkline.dataset.settings.RunConfig` (its ``input`` section), an
    :class:`~chunkline.dataset.settings.InputConfig`, or plain URLs: ``ReadMarkdown(["docs/**/*.md"])``,
    ``ReadMarkdown("s3://bucket/docs")`` (folders, files or globs, matched as ``input.paths`` are).

    Applied to the pipeline, it reads the configured inputs. Applied to a PCollection of URLs it reads
    those instead, each one an input of its own (the config then gives only the filters, limits and storage
    options); where two of them hold the same ``doc_id`` the one that sorts first by ``source_uri`` is read
    and the others are reported as skipped.

    With ``matched`` (``(doc_id, matched files)`` pairs already listed by the driver: every document of a
    full run, the changed ones of an incremental run) only those documents are read, spread over the
    workers by a reshuffle; without it the transform lists the inputs itself."""

    def __init__(
        self,
        inputs: RunConfig | InputConfig | str | Sequence[str] = (),
        secrets: tuple[str, ...] = (),
        matched: list[tuple[str, list[SourceFile]]] | None = None,
    ):
        super().__init__()
        if isinstance(inputs, RunConfig):
            secrets = tuple(secrets) or tuple(inputs.secrets())
            config = inputs.input
        elif isinstance(inputs, InputConfig):
            config = inputs
        elif isinstance(inputs, str):
            config = InputConfig(paths=(inputs,))
        else:
            config = InputConfig(paths=tuple(inputs))
        self._config = config
        self._secrets = tuple(secrets)
        self._matched = matched

    def expand(self, pipeline: beam.pvalue.PBegin | beam.PCollection[str]) -> beam.PCollection[SourceFile]:
        if isinstance(pipeline, beam.PCollection):
            grouped = (
                pipeline
                | "AsInputs" >> beam.Map(lambda url: (0, url))
                | "MatchFiles" >> beam.ParDo(_MatchFilesFn(self._config, self._secrets))
                | "GroupByDocId" >> beam.GroupByKey()
            )
            return grouped | "ReadFiles" >> beam.ParDo(_ReadFileFn(self._config, self._secrets, by_url=True))
        if not self._config.paths and self._matched is None:
            raise ValueError("ReadMarkdown needs at least one input path (or a PCollection of URLs)")
        if self._matched is not None:
            grouped = (
                pipeline
                | "MatchedFiles" >> beam.Create(_largest_first(self._matched), reshuffle=False)
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
        :func:`chunkline.dataset.bundle.run_bundle`)."""
        if self._matched is None:
            raise ValueError("reading in process needs the matched documents")
        return run_bundle(MatchedFileReader(self._config, self._secrets), self._matched)
