"""Apache Beam transforms of chunkline: put its reading, chunking and dataset writing in your own pipeline.

Three transforms make the pipeline ``chunkline run`` runs; any step of your own can go between them::

    import apache_beam as beam
    from chunkline.dataset.settings import load_run_config
    from chunkline.transforms import ChunkMarkdown, ReadMarkdown, WriteChunkDataset

    config = load_run_config("configs/default.yaml", inputs=["sample_corpus"], output="out/my-pipeline")
    with beam.Pipeline(options=...) as pipeline:
        chunked = pipeline | ReadMarkdown(config) | ChunkMarkdown(config)
        kept = chunked.chunks | beam.Filter(lambda chunk: chunk.token_count > 0)   # your own step
        _ = chunked.with_chunks(kept) | WriteChunkDataset(config)

:class:`ReadMarkdown`
    Matches the input URLs (folders, files or globs on any fsspec storage: a
    :class:`~chunkline.dataset.settings.RunConfig`, an :class:`~chunkline.dataset.settings.InputConfig` or
    plain URLs), or a PCollection of URLs, and reads each file once:
    :class:`~chunkline.dataset.inputs.SourceFile` elements.
:class:`ChunkMarkdown`
    Chunks each file with one config (a ``RunConfig`` or a :class:`~chunkline.ChunkConfig`). Its
    :class:`~chunkline.transforms.chunk.ChunkMarkdownResult` has ``.chunks``, ``.sections``, ``.documents``
    and ``.errors`` (also ``result["errors"]``): schema'd PCollections of :data:`ChunkRow`,
    :data:`SectionRow`, :data:`DocumentRow` and :data:`ErrorRow`, so ``beam.Select``, ``to_dataframe``, Beam SQL and Beam's own writers work on
    them. Bad input never fails the pipeline: it is a ``documents`` row with status ``error`` and its
    ``errors`` rows.
:class:`WriteChunkDataset`
    Writes and publishes the dataset ``chunkline run`` writes (part files byte for byte, ``changes/``
    against the previous snapshot, the manifest commit, the output lock at publishing, kept snapshots;
    incremental carry-over with a ``plan``). A pipeline that fails publishes nothing.

Row types come from the Arrow schemas (:func:`row_type_for`; :func:`chunk_row_type` gives the one class of
a ``chunks`` schema), so a ``chunks`` table with more columns gets a row type with them. Metrics (namespace ``chunkline``: documents by status, carried over, chunks,
tokens, bytes) are in :mod:`chunkline.transforms.metrics`.
"""

from chunkline.transforms.chunk import ChunkMarkdown, ChunkMarkdownResult
from chunkline.transforms.dataset import WriteChunkDataset
from chunkline.transforms.read import ReadMarkdown
from chunkline.transforms.rows import ChunkRow, DocumentRow, ErrorRow, SectionRow, chunk_row_type, row_type_for

__all__ = [
    "ChunkMarkdown",
    "ChunkMarkdownResult",
    "ChunkRow",
    "DocumentRow",
    "ErrorRow",
    "ReadMarkdown",
    "SectionRow",
    "WriteChunkDataset",
    "chunk_row_type",
    "row_type_for",
]
