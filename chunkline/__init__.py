"""chunkline: markdown chunking for retrieval pipelines, with exact positions and token-exact limits.

The engine (this package's top level) imports no Apache Beam. Beneath the Beam code, ``chunkline.dataset``
holds everything about the published dataset (storage, layout, manifest, publishing, lock, rebuilds,
inputs); ``chunkline.transforms`` holds the Beam transforms and ``chunkline.pipelines`` the pipeline and
the command line. The names below load on first use, so importing a leaf such as ``chunkline.schemas``
does not load the engine.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "ChunkConfig": "chunkline.config",
    "ConfigError": "chunkline.config",
    "load_chunk_config": "chunkline.config",
    "ReconstructionError": "chunkline.engine",
    "chunk_document": "chunkline.engine",
    "chunk_document_with_sections": "chunkline.engine",
    "chunk_markdown": "chunkline.engine",
    "chunk_markdown_with_sections": "chunkline.engine",
    "reconstruct": "chunkline.engine",
    "Chunk": "chunkline.record",
    "ChunkSpan": "chunkline.record",
    "ChunkedDocument": "chunkline.record",
    "SectionRecord": "chunkline.record",
    "Strategy": "chunkline.registry",
    "StrategyError": "chunkline.registry",
    "available_strategies": "chunkline.registry",
    "get_strategy": "chunkline.registry",
    "register_strategy": "chunkline.registry",
    "MarkdownDocument": "chunkline.structure",
    "Section": "chunkline.structure",
    "parse_markdown": "chunkline.structure",
    "sections_by_pattern": "chunkline.structure",
    "TokenizerUnavailableError": "chunkline.tokenizers",
    "get_token_counter": "chunkline.tokenizers",
    # The dataset readers need pyarrow and fsspec but not Beam.
    "read_dataset": "chunkline.dataset",
    "read_manifest": "chunkline.dataset",
    "dataset_files": "chunkline.dataset",
    "list_snapshots": "chunkline.dataset",
    "snapshots_after": "chunkline.dataset",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chunkline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(_EXPORTS)
