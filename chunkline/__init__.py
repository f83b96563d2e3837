"""chunkline: markdown chunking for retrieval pipelines, with exact positions and token-exact limits.

The engine (this package's top level) imports no Apache Beam; the Beam transforms live in
``chunkline.transforms`` and the pipeline and command line in ``chunkline.pipelines``.
"""

from chunkline.config import ChunkConfig, ConfigError, load_chunk_config
from chunkline.engine import ReconstructionError, chunk_document, chunk_markdown, reconstruct
from chunkline.record import Chunk, ChunkSpan
from chunkline.registry import Strategy, StrategyError, available_strategies, get_strategy, register_strategy
from chunkline.structure import MarkdownDocument, Section, parse_markdown, sections_by_pattern
from chunkline.tokenizers import TokenizerUnavailableError, get_token_counter

__version__ = "0.1.0"

_DATASET_READERS = ("read_dataset", "read_manifest", "dataset_files", "list_snapshots")


def __getattr__(name: str):
    # The dataset readers need pyarrow and fsspec but not Beam; they load on first use, not with the engine.
    if name in _DATASET_READERS:
        from chunkline.pipelines import publish

        return getattr(publish, name)
    raise AttributeError(f"module 'chunkline' has no attribute {name!r}")


__all__ = [
    "Chunk",
    "ChunkConfig",
    "ChunkSpan",
    "ConfigError",
    "MarkdownDocument",
    "ReconstructionError",
    "Section",
    "Strategy",
    "StrategyError",
    "TokenizerUnavailableError",
    "available_strategies",
    "chunk_document",
    "chunk_markdown",
    "dataset_files",
    "get_strategy",
    "get_token_counter",
    "list_snapshots",
    "load_chunk_config",
    "parse_markdown",
    "read_dataset",
    "read_manifest",
    "reconstruct",
    "sections_by_pattern",
    "register_strategy",
]
