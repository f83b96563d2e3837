"""``ChunkMarkdown`` and ``ChunkDocuments``: decode each file and chunk it with the configured strategy.

:class:`ChunkMarkdown` is the public transform: its :class:`ChunkMarkdownResult` gives the ``chunks``,
``documents`` and ``errors`` rows as schema'd PCollections (row types from
:mod:`chunkline.transforms.rows`). Underneath it, :class:`ChunkDocuments` does the work, and
its output has one element per document: the list of its ``(table, row)`` pairs, ``row`` a plain dict of
one of the dataset's tables: ``chunks``, ``documents`` (exactly one row per input document, whatever
became of it) and ``errors``. (One output rather than three tagged ones: the DaskRunner mixes up tagged
outputs. ``ChunkMarkdownResult`` picks each table from it in a step of its own, made only when asked
for, so the writer of ``chunkline run`` takes the per-document lists as they are.)

Bad input never raises: a binary file, invalid UTF-8 under ``encoding_errors: strict``, a file that was too
large or could not be read, front matter that is refused, a document the parser or the strategy fails on,
or rows that the tables cannot hold each become one ``errors`` row and a ``documents`` row with status
``error``, and the run goes on. Every step that looks at a document runs inside that
per-document handling. With promoted front-matter columns (``output.front_matter_columns``), a value that
does not fit its column's type is null there and one ``errors`` row (``FrontMatterTypeMismatch``) of a
document that is chunked all the same (see :mod:`chunkline.dataset.front_matter_columns`).

The per-document work is the dataset floor's and needs no Beam (:mod:`chunkline.dataset.document_rows`;
decoding and the binary check, :mod:`chunkline.dataset.decoding`, are shared with ``chunkline chunk``).
The tokenizer is loaded once per worker in ``DoFn.setup()``, from a local file (never
the network). Each document is counted in the ``chunkline`` metrics (:mod:`chunkline.transforms.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam

from chunkline.config import ChunkConfig
from chunkline.dataset.bundle import run_bundle
from chunkline.dataset.document_rows import CHUNKS, DOCUMENTS, ERRORS, SECTIONS, DocumentChunker
from chunkline.dataset.inputs import SourceFile
from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS, ProcessHooks
from chunkline.dataset.settings import RunConfig
from chunkline.schemas import FrontMatterColumn, table_schemas
from chunkline.transforms.metrics import count_document
from chunkline.transforms.rows import DocumentRow, ErrorRow, SectionRow, row_from_dict
from chunkline.transforms.rows import chunk_row_type as chunk_row_type_for

__all__ = ["CHUNKS", "DOCUMENTS", "ERRORS", "SECTIONS", "ChunkDocuments", "ChunkMarkdown", "ChunkMarkdownResult"]


class _ChunkDocumentsFn(DocumentChunker, beam.DoFn):
    """:class:`~chunkline.dataset.document_rows.DocumentChunker` as a Beam step, counting each document in
    the pipeline's metrics."""

    def count_document(self, document_row: dict[str, Any], chunk_token_counts: list[int]) -> None:
        count_document(document_row, chunk_token_counts)


class ChunkDocuments(beam.PTransform):
    """Chunk each :class:`~chunkline.dataset.inputs.SourceFile` into the list of its ``(table, row)`` pairs for ``chunks``,
    ``documents`` and ``errors``; a list of them (a batch, as :class:`~chunkline.transforms.ReadMarkdown`
    gives with ``batch_documents``) into one list of all their pairs, converted to Arrow together."""

    def __init__(
        self,
        config: ChunkConfig,
        encoding_errors: str = "strict",
        secrets: tuple[str, ...] = (),
        *,
        front_matter_columns: tuple[FrontMatterColumn, ...] = (),
        process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    ):
        super().__init__()
        if encoding_errors not in ("strict", "replace"):
            raise ValueError(f"encoding_errors must be 'strict' or 'replace', got {encoding_errors!r}")
        self._config = config
        self._encoding_errors = encoding_errors
        self._secrets = tuple(secrets)
        self._front_matter_columns = tuple(front_matter_columns)
        self._process_hooks = process_hooks

    def expand(self, sources: beam.PCollection[SourceFile]) -> beam.PCollection[list[tuple[str, dict[str, Any]]]]:
        return sources | "Chunk" >> beam.ParDo(self._fn())

    def chunk_in_process(self, sources: Iterable[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The same chunking without a runner (:func:`chunkline.dataset.bundle.run_bundle`)."""
        return run_bundle(DocumentChunker(*self._arguments(), process_hooks=self._process_hooks), sources)

    def _fn(self) -> _ChunkDocumentsFn:
        return _ChunkDocumentsFn(*self._arguments(), process_hooks=self._process_hooks)

    def _arguments(self) -> tuple[ChunkConfig, str, tuple[str, ...], tuple[FrontMatterColumn, ...]]:
        return self._config, self._encoding_errors, self._secrets, self._front_matter_columns


def _picked(table: str, row_type: type) -> Callable[[list[tuple[str, dict[str, Any]]]], Iterator[Any]]:
    """A function yielding a document's rows of ``table`` as ``row_type`` rows."""

    def rows_of(document_rows: list[tuple[str, dict[str, Any]]]) -> Iterator[Any]:
        for row_table, row in document_rows:
            if row_table == table:
                yield row_from_dict(row_type, row)

    return rows_of


class ChunkMarkdownResult:
    """What :class:`ChunkMarkdown` outputs: ``chunks``, ``sections``, ``documents`` and ``errors``, four
    schema'd PCollections (also ``result["chunks"]`` and so on), and ``per_document``, the one PCollection they are
    picked from (one list of ``(table, row dict)`` pairs per document).

    Each table's PCollection is made the first time it is asked for, so a pipeline that only writes the
    dataset does not convert every chunk to a row and back. Pass the result to
    :class:`~chunkline.transforms.WriteChunkDataset`; after your own step on the chunks, pass
    ``result.with_chunks(your_chunks)``."""

    def __init__(self, per_document: beam.PCollection, row_types: dict[str, type], label: str):
        self.per_document = per_document
        self.pipeline = per_document.pipeline
        self.row_types = dict(row_types)
        self._label = label
        # Shared with the results with_chunks makes, so that each table is picked once.
        self._tables: dict[str, beam.PCollection] = {}
        self._replaced_chunks: beam.PCollection | None = None

    def __or__(self, transform: beam.PTransform) -> Any:
        # Only a writer of the whole result takes it; any other step goes on one of its PCollections.
        if getattr(transform, "takes_chunk_markdown_result", False):
            return transform.__ror__(self)
        raise TypeError(
            "apply your step to result.chunks, result.documents or result.errors; only WriteChunkDataset takes "
            "ChunkMarkdown's whole result"
        )

    @property
    def chunk_row_type(self) -> type:
        """The row type of ``chunks``: :data:`~chunkline.transforms.ChunkRow`, or with a config's promoted
        front-matter columns (``output.front_matter_columns``) a type that also has them as fields. Declare
        it as the output type of a step of yours that passes chunks on."""
        return self.row_types[CHUNKS]

    @property
    def chunks_replaced(self) -> bool:
        """True when :meth:`with_chunks` gave the chunks (the writer then writes those)."""
        return self._replaced_chunks is not None

    def __getitem__(self, table: str) -> beam.PCollection:
        if table not in self.row_types:
            raise KeyError(f"no output {table!r}; the outputs are {', '.join(self.row_types)}")
        if table == CHUNKS and self._replaced_chunks is not None:
            return self._replaced_chunks
        if table not in self._tables:
            row_type = self.row_types[table]
            self._tables[table] = self.per_document | f"{self._label}.{table}" >> beam.FlatMap(
                _picked(table, row_type)
            ).with_output_types(row_type)
        return self._tables[table]

    @property
    def chunks(self) -> beam.PCollection:
        """One row per chunk, of the chunk row type (:data:`~chunkline.transforms.ChunkRow` by default)."""
        return self[CHUNKS]

    @property
    def sections(self) -> beam.PCollection:
        """One :data:`~chunkline.transforms.SectionRow` per document root and per heading subtree."""
        return self[SECTIONS]

    @property
    def documents(self) -> beam.PCollection:
        """One :data:`~chunkline.transforms.DocumentRow` per input document, status ok, error or skipped."""
        return self[DOCUMENTS]

    @property
    def errors(self) -> beam.PCollection:
        """One :data:`~chunkline.transforms.ErrorRow` per problem: the documents that did not chunk."""
        return self[ERRORS]

    def with_chunks(self, chunks: beam.PCollection) -> ChunkMarkdownResult:
        """The same result with ``chunks`` (rows of the chunk row type, e.g. after a step of your own) in
        place of the chunker's: what :class:`~chunkline.transforms.WriteChunkDataset` then writes."""
        if chunks.pipeline is not self.pipeline:
            raise ValueError("with_chunks needs chunks of the same pipeline")
        replaced = ChunkMarkdownResult(self.per_document, self.row_types, self._label)
        replaced._tables = self._tables
        replaced._replaced_chunks = chunks
        return replaced


class ChunkMarkdown(beam.PTransform):
    """Chunk every :class:`~chunkline.dataset.inputs.SourceFile` of :class:`~chunkline.transforms.ReadMarkdown`
    with one config: a :class:`~chunkline.dataset.settings.RunConfig` (its ``chunking`` section, and its
    ``input.encoding_errors`` and storage credentials, kept out of messages) or a
    :class:`~chunkline.ChunkConfig` (strict UTF-8).

    The output is a :class:`ChunkMarkdownResult`: ``.chunks`` (schema'd rows, so ``beam.Select``,
    ``to_dataframe`` and Beam's writers work on them), ``.documents`` and ``.errors``. ``chunk_row_type``
    is the row type of the chunks (by default :data:`~chunkline.transforms.ChunkRow`; see
    :func:`~chunkline.transforms.row_type_for` for a chunks schema with more columns). ``process_hooks`` is for
    a program that owns its process (:mod:`chunkline.dataset.process_hooks`); by default the steps leave it
    alone."""

    def __init__(
        self,
        config: RunConfig | ChunkConfig,
        *,
        chunk_row_type: type | None = None,
        process_hooks: ProcessHooks = NO_PROCESS_HOOKS,
    ):
        super().__init__()
        if isinstance(config, RunConfig):
            chunking, encoding_errors, secrets = config.chunking, config.input.encoding_errors, tuple(config.secrets())
            front_matter_columns = config.output.promoted_front_matter
        elif isinstance(config, ChunkConfig):
            chunking, encoding_errors, secrets, front_matter_columns = config, "strict", (), ()
        else:
            raise TypeError(f"ChunkMarkdown takes a RunConfig or a ChunkConfig, got {type(config).__name__}")
        self._documents = ChunkDocuments(
            chunking, encoding_errors, secrets, front_matter_columns=front_matter_columns, process_hooks=process_hooks
        )
        # The chunks table's schema decides the row type (promoted front-matter columns become fields).
        chunks_schema = table_schemas(front_matter_columns)[CHUNKS][0]
        self._row_types = {
            CHUNKS: chunk_row_type or chunk_row_type_for(chunks_schema),
            DOCUMENTS: DocumentRow,
            ERRORS: ErrorRow,
            SECTIONS: SectionRow,
        }

    def expand(self, sources: beam.PCollection[SourceFile]) -> ChunkMarkdownResult:
        per_document = sources | "ChunkDocuments" >> self._documents
        return ChunkMarkdownResult(per_document, self._row_types, self.label)

    def chunk_in_process(self, sources: Iterable[SourceFile]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The per-document row lists without a runner (see :mod:`chunkline.transforms.in_process`)."""
        return self._documents.chunk_in_process(sources)
