"""Chunk markdown in a Beam pipeline of your own, with a step of yours, and publish chunkline's dataset.

    python examples/beam_pipeline.py sample_corpus out/beam-sample
    python examples/beam_pipeline.py docs/ gs://bucket/chunks --config configs/object-storage.yaml --set max_tokens=256 \\
        --runner DataflowRunner --project P --region R --temp_location gs://bucket/tmp

read -> chunk -> your own step -> write and publish. The dataset it publishes is the one ``chunkline run``
publishes for the same input and config, part file for part file: this example's step looks at every
chunk and passes it on unchanged (put a ``beam.Filter`` or a ``chunk._replace(...)`` there to change
what is written), and a second branch reports tokens per document with ``beam.Select``.

Without ``--runner`` the pipeline runs on Beam's in-process FnApiRunner (Beam's default DirectRunner would
first try to download a Prism binary); any other Beam option goes to Beam as given.
"""

from __future__ import annotations

import argparse
import logging
import sys

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from chunkline.dataset.settings import RunConfig, load_run_config
from chunkline.transforms import ChunkMarkdown, ChunkRow, ReadMarkdown, WriteChunkDataset

LONG_CHUNK_TOKENS = 400
long_chunks = Metrics.counter("my_pipeline", "chunks_over_400_tokens")
# The pipeline's own log lines go through a logger of this script's: importing Beam has already given the
# root logger a handler at WARNING, so logging.basicConfig(level=logging.INFO) here would change nothing.
log = logging.getLogger("beam_pipeline")


def check_chunk(chunk: ChunkRow) -> ChunkRow:
    """Your own step: here it counts the long chunks (a counter in the runner's UI) and keeps every chunk."""
    if chunk.token_count > LONG_CHUNK_TOKENS:
        long_chunks.inc()
    return chunk


def build_pipeline(pipeline: beam.Pipeline, config: RunConfig) -> beam.PCollection:
    """read -> chunk -> check_chunk -> write; returns the PCollection of the published run id."""
    chunked = pipeline | "Read" >> ReadMarkdown(config) | "Chunk" >> ChunkMarkdown(config)

    # chunk_row_type is ChunkRow, with any front-matter columns the config promotes as more fields.
    checked = chunked.chunks | "CheckChunks" >> beam.Map(check_chunk).with_output_types(chunked.chunk_row_type)

    # A branch of your own on the schema'd rows: tokens per document, by field name.
    _ = (
        chunked.chunks
        | "DocAndTokens" >> beam.Select("doc_id", "token_count")
        | "TokensPerDocument" >> beam.GroupBy("doc_id").aggregate_field("token_count", sum, "tokens")
        | "LogTokens" >> beam.Map(lambda row: log.info("%s: %d tokens", row.doc_id, row.tokens))
    )
    _ = chunked.errors | "LogErrors" >> beam.Map(
        lambda error: log.warning("%s [%s] %s", error.doc_id, error.error_type, error.message)
    )

    return chunked.with_chunks(checked) | "Write" >> WriteChunkDataset(config)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="folder, file or glob of markdown (any fsspec URL)")
    parser.add_argument("output", help="where the dataset is published (any fsspec URL)")
    parser.add_argument("--config", help="a chunkline config file (YAML)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    arguments, beam_args = parser.parse_known_args(argv)
    config = load_run_config(arguments.config, arguments.set, inputs=[arguments.input], output=arguments.output)

    has_runner = any(argument.split("=")[0] == "--runner" for argument in beam_args)
    runner = None if has_runner else FnApiRunner()
    with beam.Pipeline(runner=runner, options=PipelineOptions(beam_args)) as pipeline:
        build_pipeline(pipeline, config)
    print(f"published {config.output.url}")
    return 0


if __name__ == "__main__":
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # printed once, by this handler, whatever Beam did to the root logger
    sys.exit(main(sys.argv[1:]))
