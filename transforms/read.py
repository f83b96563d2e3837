"""``ReadMarkdown``: find markdown files on any fsspec storage and read their bytes.

What a file is, its doc_id, and how it is matched and read are the dataset floor's
(:mod:`chunkline.dataset.inputs`); this module spreads that work over Beam workers. The transform matches
files in a DoFn, groups the matches by ``doc_id`` (which spreads the reads across workers and settles two
inputs that hold the same ``doc_id``: the first input wins, the others are reported as skipped), then reads
each file in a DoFn that builds its filesystems once per worker. A transient storage error is retried (see
:func:`chunkline.dataset.storage.with_storage_retries`); a file that still cannot be read is not an
exception: it comes out as a :class:`~chunkline.dataset.inputs.SourceFile` with ``problem`` set. An input
is judged as ``chunkline run`` judges it (:func:`chunkline.dataset.rebuild.list_input_or_refuse`): one whose
root is missing or cannot be listed, or that matches no file, fails the pipeline with
:class:`~chunkline.dataset.rebuild.PublishRefusedError` naming it, before anything is read or written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.transforms.core import RestrictionProvider

from chunkline.dataset import listing as staged_listing
from chunkline.dataset.bundle import batched, run_bundle
from chunkline.dataset.file_reader import MatchedFileReader
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.listing import RANGE_BYTES, ListedDocument, largest_first, listing_size_bytes, read_listing_range
from chunkline.dataset.rebuild import list_input_or_refuse
from chunkline.dataset.settings import InputConfig, RunConfig

__all__ = ["ReadMarkdown"]


class _MatchFilesFn(beam.DoFn):
    def __init__(self, config: InputConfig, secrets: tuple[str, ...]):
        self._config = config
        self._secrets = secrets

    def process(self, element: tuple[int, str]) -> Iterator[tuple[str, SourceFile]]:
        input_index, url = element
        # An input that is missing, cannot be listed or matches nothing fails the pipeline here, before
        # anything is read or written, as it fails ``chunkline run``: never a snapshot without its documents.
        for source in list_input_or_refuse(url, input_index, self._config, self._secrets):
            yield source.doc_id, source


class _ReadFileFn(MatchedFileReader, beam.DoFn):
    """:class:`~chunkline.dataset.file_reader.MatchedFileReader` as a Beam step."""


_OWN_RESTRICTIONS = beam.DoFn.RestrictionParam()
"""A restriction parameter without a provider: the DoFn that declares it provides its restrictions."""


class _ListedDocumentsFn(beam.DoFn, RestrictionProvider):
    """The documents of a listing staged by :func:`chunkline.dataset.listing.write_listing`, in its order.

    A splittable DoFn over the file's bytes, and its own restriction provider (sizing the file needs the
    storage options): the whole file is split into ranges of about ``range_bytes``, each giving the
    documents whose lines start in it (:func:`chunkline.dataset.listing.read_listing_range`), so a runner
    spreads a long listing over its workers instead of one worker reading and holding it all. Each line is
    claimed before its document goes out, which lets a runner split a range while it is being read; a batch
    never spans two ranges. A runner that does not split reads the whole file as one range.

    With ``batch_lines``, a batch goes out as the span of its lines in the file (:class:`ListedLines`), which
    :class:`_ListedLinesFn` reads back as the batch: a reshuffle in between then moves a few numbers per
    batch, not its documents (the FnApiRunner holds what a reshuffle moves in the driver's memory)."""

    def __init__(
        self,
        storage_options: dict | None,
        secrets: tuple[str, ...],
        batch_documents: int = 0,
        range_bytes: int = RANGE_BYTES,
        batch_lines: bool = False,
    ):
        self._storage_options = storage_options
        self._secrets = secrets
        self._batch_documents = batch_documents
        self._range_bytes = range_bytes
        self._batch_lines = batch_lines

    def initial_restriction(self, listing_url: str) -> OffsetRange:
        return OffsetRange(0, listing_size_bytes(listing_url, self._storage_options, self._secrets))

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, listing_url: str, restriction: OffsetRange) -> Iterator[OffsetRange]:
        yield from restriction.split(self._range_bytes)

    def restriction_size(self, listing_url: str, restriction: OffsetRange) -> int:
        return restriction.size()

    def process(self, listing_url: str, tracker=_OWN_RESTRICTIONS) -> Iterator[Any]:
        lines = self._claimed(listing_url, tracker)
        if self._batch_documents < 2:
            yield from (document for _, document in lines)
        elif self._batch_lines:
            for batch in batched(lines, _line_bytes, self._batch_documents):
                # Lines starting from the batch's first one up to its last one's start: the batch's lines.
                yield ListedLines(listing_url, batch[0][0], batch[-1][0] + 1)
        else:
            for batch in batched(lines, _line_bytes, self._batch_documents):
                yield [document for _, document in batch]

    def _claimed(self, listing_url: str, tracker: OffsetRestrictionTracker) -> Iterator[tuple[int, ListedDocument]]:
        """The range's documents with their lines' offsets, each line claimed before its document is given
        out."""
        restriction = tracker.current_restriction()
        listed = read_listing_range(
            listing_url, restriction.start, restriction.stop, self._storage_options, self._secrets
        )
        for line_start, document in listed:
            if not tracker.try_claim(line_start):
                return  # the rest of the range went to another reader
            yield line_start, document
        # No line starts in the rest of the range: claim its end, so the runner sees the range done.
        tracker.try_claim(tracker.current_restriction().stop)


def _listed_bytes(document: tuple[str, list[SourceFile]]) -> int:
    files = document[1]
    return (files[0].size_bytes or 0) if files else 0


def _line_bytes(line: tuple[int, ListedDocument]) -> int:
    return _listed_bytes(line[1])


@dataclass(frozen=True)
class ListedLines:
    """A batch of a staged listing as the span of its lines: those starting in ``[start_byte, stop_byte)``."""

    listing_url: str
    start_byte: int
    stop_byte: int


class _ListedLinesFn(beam.DoFn):
    """The batch of documents a :class:`ListedLines` spans, read from the staged listing."""

    def __init__(self, storage_options: dict | None, secrets: tuple[str, ...]):
        self._storage_options = storage_options
        self._secrets = secrets

    def process(self, lines: ListedLines) -> Iterator[list[ListedDocument]]:
        listed = staged_listing.read_listing_range(
            lines.listing_url, lines.start_byte, lines.stop_byte, self._storage_options, self._secrets
        )
        yield [document for _, document in listed]


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
    and the others are reported as skipped. Either way an input that is missing, cannot be listed or
    matches no file fails the pipeline (:class:`~chunkline.dataset.rebuild.PublishRefusedError`, naming it).

    With ``matched`` (``(doc_id, matched files)`` pairs already listed by the driver: every document of a
    full run, the changed ones of an incremental run) only those documents are read, spread over the
    workers by a reshuffle; without it the transform lists the inputs itself. ``listing_url``, the same
    pairs staged by :func:`chunkline.dataset.listing.write_listing` (which orders them as
    :func:`~chunkline.dataset.listing.largest_first` does), keeps a long list out of the job's graph: only
    the URL travels in it, read with ``listing_storage_options`` in byte ranges that a runner can split over
    its workers. With a ``listing_url`` and ``batch_documents`` of 2 or more, the output's elements are lists
    of up to that many :class:`~chunkline.dataset.inputs.SourceFile` (fewer once they hold
    :data:`~chunkline.dataset.bundle.BATCH_BYTES`), each list one element through the reshuffle and the
    steps after it (:class:`~chunkline.transforms.ChunkMarkdown` chunks a list into one element of all its
    documents' rows): a run of many small documents pays the runner's cost per element once per batch."""

    def __init__(
        self,
        inputs: RunConfig | InputConfig | str | Sequence[str] = (),
        secrets: tuple[str, ...] = (),
        matched: list[tuple[str, list[SourceFile]]] | None = None,
        listing_url: str | None = None,
        listing_storage_options: dict | None = None,
        batch_documents: int = 0,
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
        self._listing_url = listing_url
        self._listing_storage_options = listing_storage_options
        self._batch_documents = batch_documents

    def expand(self, pipeline: beam.pvalue.PBegin | beam.PCollection[str]) -> beam.PCollection[SourceFile]:
        if isinstance(pipeline, beam.PCollection):
            grouped = (
                pipeline
                | "AsInputs" >> beam.Map(lambda url: (0, url))
                | "MatchFiles" >> beam.ParDo(_MatchFilesFn(self._config, self._secrets))
                | "GroupByDocId" >> beam.GroupByKey()
            )
            return grouped | "ReadFiles" >> beam.ParDo(_ReadFileFn(self._config, self._secrets, by_url=True))
        if not self._config.paths and self._matched is None and self._listing_url is None:
            raise ValueError("ReadMarkdown needs at least one input path (or a PCollection of URLs)")
        if self._listing_url is not None:
            batches = self._batch_documents >= 2
            grouped = (
                pipeline
                | "Listing" >> beam.Create([self._listing_url], reshuffle=False)
                | "ListedFiles"
                >> beam.ParDo(
                    _ListedDocumentsFn(
                        self._listing_storage_options,
                        self._secrets,
                        self._batch_documents,
                        RANGE_BYTES,
                        batch_lines=batches,
                    )
                )
                | "SpreadReads" >> beam.Reshuffle()
            )
            if batches:  # the reshuffle moved each batch's span of lines: read the batch after it
                grouped = grouped | "ListedBatches" >> beam.ParDo(
                    _ListedLinesFn(self._listing_storage_options, self._secrets)
                )
        elif self._matched is not None:
            grouped = (
                pipeline
                | "MatchedFiles" >> beam.Create(largest_first(self._matched), reshuffle=False)
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
