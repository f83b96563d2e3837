"""chunkline inside Beam's RAG package (``apache_beam.ml.rag``): chunking and embedding for ``MLTransform``.

:class:`ChunklineChunker` is a ``ChunkingTransformProvider``: it chunks each input document with chunkline's
engine and yields Beam's ``Chunk`` objects, so that it slots in where ``LangChainChunker`` does, in front of
Beam's embedding managers and vector-database writers. :class:`WordLlamaTextEmbeddings` is an
``EmbeddingsManager`` over the static embedding model the ``wordllama`` wheel ships, so a whole pipeline runs
offline::

    import apache_beam as beam
    from apache_beam.ml.rag.ingestion.base import VectorDatabaseWriteTransform
    from apache_beam.ml.rag.ingestion.qdrant import QdrantConnectionParameters, QdrantWriteConfig
    from apache_beam.ml.transforms.base import MLTransform

    from chunkline import ChunkConfig
    from chunkline.transforms.rag import ChunklineChunker, WordLlamaTextEmbeddings

    with beam.Pipeline(runner=...) as pipeline:
        _ = (
            pipeline
            | beam.Create([{"doc_id": "guide.md", "text": markdown_text, "source": "wiki"}])
            | MLTransform(write_artifact_location=artifacts)
            .with_transform(ChunklineChunker(ChunkConfig(max_tokens=256), metadata_fields=["source"]))
            .with_transform(WordLlamaTextEmbeddings())
            | VectorDatabaseWriteTransform(QdrantWriteConfig(QdrantConnectionParameters.local(path), "docs"))
        )

Each ``Chunk`` is one chunk record of :func:`chunkline.chunk_markdown`:

- ``id`` is the record's ``chunk_uuid`` (UUIDv5 of ``<doc_id>#<chunk_index>``): the same document chunks to
  the same ids on every run and every retry, so writing again upserts instead of duplicating (Beam's own
  chunkers draw random ``uuid4`` ids);
- ``content.text`` is the record's ``embed_text`` (the title and heading path as context, the text without
  front matter), or its ``text`` when ``embed_text`` is empty;
- ``index`` is ``chunk_index``;
- ``metadata`` holds the other columns of the record: ``chunk_id``, ``doc_id``, ``source_uri``, ``chunk_index``,
  ``text`` (the verbatim slice, what a reader is handed: Beam's Qdrant writer stores only ``metadata`` as the
  point's payload), ``start_char``/``end_char``, ``start_byte``/``end_byte``,
  ``start_line``/``start_column``/``end_line``/``end_column``, ``heading_path`` (a list of strings, outermost
  first; **empty for a preamble chunk**, the text before the first heading, and for a document without
  headings: stores that refuse empty lists, such as Chroma, need it dropped or joined), ``section_index``,
  ``token_count``, ``embed_token_count``, ``char_count``, ``is_sub_split``, ``strategy``, ``content_sha256``,
  ``title`` and ``section_id`` (the section the chunk starts in); then the input element's
  ``metadata_fields``, copied to every chunk of the document.

A document chunkline cannot chunk (its text field missing or not a string, no ``doc_id``, front matter that
does not parse, a strategy that fails on it) raises :class:`DocumentChunkingError`, whose message names the
document. Without exception handling that fails the run with that message; with
``MLTransform(...).with_exception_handling()`` the document goes to MLTransform's error output (a ``Row`` of
``element``, ``msg`` and ``stack``) and the other documents go on: Beam's own dead letter, not a silent skip.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import ModelHandler, RunInference
from apache_beam.ml.rag.chunking.base import ChunkingTransformProvider
from apache_beam.ml.rag.embeddings.base import create_text_adapter
from apache_beam.ml.rag.types import Chunk, Content
from apache_beam.ml.transforms.base import EmbeddingsManager, _TextEmbeddingHandler

from chunkline.config import ChunkConfig
from chunkline.engine import chunk_document
from chunkline.evaluation.retrieval import WordLlamaEmbedder, load_wordllama_embedder
from chunkline.record import Chunk as ChunkRecord
from chunkline.structure import parse_markdown
from chunkline.tokenizers import TokenCounter, counter_for

__all__ = [
    "CHUNK_METADATA_KEYS",
    "ChunklineChunker",
    "DocumentChunkingError",
    "WordLlamaTextEmbeddings",
    "chunk_element",
    "chunk_from_record",
]

#: The columns of a chunk record that go into a ``Chunk``'s metadata: all but ``chunk_uuid`` (the ``id``),
#: ``embed_text`` (the ``content``) and the links that may be null or an empty list (``prev_chunk_id``,
#: ``next_chunk_id``, ``parent_section_ids``), which stores such as Chroma refuse in metadata.
CHUNK_METADATA_KEYS: tuple[str, ...] = tuple(
    name
    for name in ChunkRecord.__slots__
    if name not in ("chunk_uuid", "embed_text", "prev_chunk_id", "next_chunk_id", "parent_section_ids")
)


class DocumentChunkingError(ValueError):
    """One input document could not be chunked; the message names it."""


def chunk_from_record(record: ChunkRecord, extra_metadata: Mapping[str, Any] | None = None) -> Chunk:
    """Beam's ``Chunk`` for one chunkline chunk record (see the module's documentation for the fields)."""
    row = record.to_dict()
    metadata = {name: row[name] for name in CHUNK_METADATA_KEYS}
    if extra_metadata:
        metadata.update(extra_metadata)
    return Chunk(
        content=Content(text=record.embed_text or record.text),
        id=record.chunk_uuid,
        index=record.chunk_index,
        metadata=metadata,
    )


class ChunklineChunker(ChunkingTransformProvider):
    """Chunks documents with chunkline for ``MLTransform``: each input element (a dict or ``beam.Row``)
    holds one markdown document; the output is its chunks as Beam ``Chunk`` objects.

    Args:
        config: How to chunk; chunkline's defaults when ``None``.
        text_field: The element's field holding the markdown text (a ``str``).
        doc_id_field: The element's field holding the document's id, which the chunk ids are made from:
            give each document its own (its path, say), or the chunks of two documents share ids.
        metadata_fields: Fields of the element copied into every chunk's metadata; none may be named like
            a chunk column (``CHUNK_METADATA_KEYS``).
    """

    def __init__(
        self,
        config: ChunkConfig | None = None,
        *,
        text_field: str = "text",
        doc_id_field: str = "doc_id",
        metadata_fields: Sequence[str] = (),
    ):
        # Ids are always chunk_uuid: no chunk_id_fn, so no random or caller-made ids.
        super().__init__(chunk_id_fn=None)
        if config is not None and not isinstance(config, ChunkConfig):
            raise TypeError(f"config must be a chunkline.ChunkConfig, got {type(config).__name__}")
        if not text_field or not isinstance(text_field, str):
            raise ValueError("text_field must name the element's field holding the markdown text")
        if not doc_id_field or not isinstance(doc_id_field, str):
            raise ValueError("doc_id_field must name the element's field holding the document's id")
        if isinstance(metadata_fields, str):
            raise TypeError(f"metadata_fields must be a list of field names, got the string {metadata_fields!r}")
        clashes = sorted(set(metadata_fields) & set(CHUNK_METADATA_KEYS))
        if clashes:
            raise ValueError(
                f"metadata_fields {clashes} are named like chunk columns that chunkline already puts in the "
                "metadata; rename them in the input"
            )
        self.config = config or ChunkConfig()
        self.text_field = text_field
        self.doc_id_field = doc_id_field
        self.metadata_fields = tuple(metadata_fields)

    def get_splitter_transform(self) -> beam.PTransform[beam.PCollection[Any], beam.PCollection[Chunk]]:
        # A ParDo, so that MLTransform.with_exception_handling() reaches it (the base class names it).
        return beam.ParDo(_ChunklineSplitFn(self.config, self.text_field, self.doc_id_field, self.metadata_fields))


class _ChunklineSplitFn(beam.DoFn):
    def __init__(self, config: ChunkConfig, text_field: str, doc_id_field: str, metadata_fields: tuple[str, ...]):
        self._config = config
        self._text_field = text_field
        self._doc_id_field = doc_id_field
        self._metadata_fields = metadata_fields

    def setup(self) -> None:
        self._counter = counter_for(self._config)

    def process(self, element: Any) -> Iterator[Chunk]:
        doc_id, records = chunk_element(
            element,
            self._config,
            self._counter,
            text_field=self._text_field,
            doc_id_field=self._doc_id_field,
        )
        missing = [name for name in self._metadata_fields if _field(element, name, _MISSING) is _MISSING]
        if missing:
            raise DocumentChunkingError(f"document {doc_id!r}: the metadata fields {missing} are missing")
        extra_metadata = {name: _field(element, name) for name in self._metadata_fields}
        yield from [chunk_from_record(record, extra_metadata) for record in records]


def chunk_element(
    element: Any, config: ChunkConfig, counter: TokenCounter, *, text_field: str, doc_id_field: str
) -> tuple[str, list[ChunkRecord]]:
    """The document id and chunk records of one input element (a dict, ``beam.Row`` or named tuple holding a
    markdown document); raises :class:`DocumentChunkingError`, naming the document, when it cannot be
    chunked. The records are all built before any is returned: no document is half chunked."""
    doc_id = _field(element, doc_id_field)
    if not isinstance(doc_id, str) or not doc_id:
        raise DocumentChunkingError(
            f"an input element has no document id: its field {doc_id_field!r} is {doc_id!r}, "
            "expected a non-empty string (the chunk ids are made from it)"
        )
    text = _field(element, text_field)
    if not isinstance(text, str):
        raise DocumentChunkingError(
            f"document {doc_id!r}: its field {text_field!r} is "
            f"{'missing' if text is None else type(text).__name__}, expected the markdown text as a str"
            + ("; decode the bytes first" if isinstance(text, bytes) else "")
        )
    try:
        document = parse_markdown(text, config.parser)
        front_matter = document.front_matter
        if front_matter is not None and front_matter.error is not None:
            raise DocumentChunkingError(f"document {doc_id!r}: invalid front matter: {front_matter.error}")
        return doc_id, chunk_document(document, config, counter, doc_id=doc_id)
    except DocumentChunkingError:
        raise
    except Exception as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        raise DocumentChunkingError(f"document {doc_id!r} could not be chunked: {detail}") from error


_MISSING = object()


def _field(element: Any, name: str, default: Any = None) -> Any:
    """A field of a dict, a ``beam.Row`` or a named tuple."""
    if isinstance(element, Mapping):
        return element.get(name, default)
    return getattr(element, name, default)


class _WordLlamaModelHandler(ModelHandler):
    """Loads the wordllama model from its installed wheel (once per process, no download) and embeds
    batches of texts into L2-normalised 256-dimensional vectors."""

    def __init__(self, min_batch_size: int | None = None, max_batch_size: int | None = None):
        super().__init__()
        self._min_batch_size = min_batch_size
        self._max_batch_size = max_batch_size

    def load_model(self) -> WordLlamaEmbedder:
        return load_wordllama_embedder()

    def run_inference(
        self, batch: Sequence[str], model: WordLlamaEmbedder, inference_args: dict[str, Any] | None = None
    ) -> np.ndarray:
        return model.embed(batch)

    def batch_elements_kwargs(self) -> Mapping[str, Any]:
        sizes = {}
        if self._min_batch_size:
            sizes["min_batch_size"] = self._min_batch_size
        if self._max_batch_size:
            sizes["max_batch_size"] = self._max_batch_size
        return sizes

    def __repr__(self) -> str:
        return "WordLlamaTextEmbeddings"


class WordLlamaTextEmbeddings(EmbeddingsManager):
    """Dense text embeddings of Beam ``Chunk`` objects with the static model the ``wordllama`` wheel ships
    (``l2_supercat``, 256 dimensions, L2-normalised; a text without tokens gets all zeros), for
    ``MLTransform``. Runs offline: the weights and tokenizer are read from the installed package.

    Each chunk's ``content.text`` is embedded into ``chunk.embedding.dense_embedding``, as Beam's
    ``HuggingfaceTextEmbeddings`` does. Keyword arguments are ``EmbeddingsManager``'s (``min_batch_size``,
    ``max_batch_size``). Needs the ``wordllama`` package (``pip install -e '.[evaluate]'`` in chunkline's folder).
    """

    def __init__(self, **kwargs: Any):
        super().__init__(type_adapter=create_text_adapter(), **kwargs)

    @staticmethod
    def vector_size() -> int:
        """The length of every vector (what a vector store's collection is created with); loads the model."""
        return int(load_wordllama_embedder().embed([""]).shape[1])

    def get_model_handler(self) -> ModelHandler:
        return _WordLlamaModelHandler(self.min_batch_size, self.max_batch_size)

    def get_ptransform_for_processing(self, **kwargs: Any) -> beam.PTransform:
        # No output type of Chunk (Beam's HuggingfaceTextEmbeddings sets one): under
        # MLTransform.with_exception_handling() RunInference outputs a (good, bad) pair, which that type
        # refuses at construction.
        return RunInference(model_handler=_TextEmbeddingHandler(self), inference_args=self.inference_args)
