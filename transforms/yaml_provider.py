"""chunkline in a Beam YAML pipeline: ``ChunkMarkdownRows``, listed by ``chunkline/configs/beam_yaml_provider.yaml``.

Beam 2.77's YAML runs a transform of an importable Python module when a provider of ``type: python`` lists
it without ``packages``: Beam then imports the named class in the running process (an ``InlineProvider``),
with no virtual environment, no pip and no network. (With ``packages`` it would build a virtual
environment, pip-install them and start an expansion service: not offline.) Include the listing that ships
with chunkline from a pipeline::

    pipeline:
      type: chain
      transforms:
        - type: Create
          config:
            elements:
              - {doc_id: guide.md, text: "# Guide\\n\\nSome text.\\n"}
        - type: ChunkMarkdownRows
          config:
            chunking: {max_tokens: 256}
        - type: WriteToJson
          config: {path: chunks.json}
    providers:
      - include: /path/to/site-packages/chunkline/configs/beam_yaml_provider.yaml

``python -c "import chunkline.transforms.yaml_provider as p; print(p.PROVIDER_LISTING)"`` prints that path.
"""

# No `from __future__ import annotations`: Beam YAML reads the constructor's annotations as types to build
# the transform's config schema.
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.yaml.yaml_errors import exception_handling_args, map_errors_to_standard_format

from chunkline import configs
from chunkline.config import ChunkConfig
from chunkline.record import Chunk as ChunkRecord
from chunkline.tokenizers import counter_for
from chunkline.transforms.rag import chunk_element

__all__ = ["CHUNK_ROW_TYPE", "PROVIDER_LISTING", "ChunkMarkdownRows"]

#: The provider listing to ``include`` from a Beam YAML pipeline's ``providers``.
PROVIDER_LISTING = str(Path(configs.__file__).parent / "beam_yaml_provider.yaml")


def _row_field_type(annotation: Any) -> Any:
    # heading_path is a tuple in the record, a list of strings in a row.
    return Sequence[str] if typing.get_origin(annotation) is tuple else annotation


#: The schema of the output rows: the columns of the ``chunks`` table, in its order.
CHUNK_ROW_TYPE = RowTypeConstraint.from_fields(
    [(name, _row_field_type(annotation)) for name, annotation in typing.get_type_hints(ChunkRecord).items()]
)


class ChunkMarkdownRows(beam.PTransform):
    """Chunks rows holding markdown documents into rows of chunks, one per chunk, with the columns of
    chunkline's ``chunks`` table (chunk_id, chunk_uuid, doc_id, text, positions, heading_path, token counts,
    title, embed_text, ...).

    A document that cannot be chunked (text missing or not a string, no doc id, front matter that does not
    parse) fails the pipeline with a message naming it, unless ``error_handling`` names an output for such
    rows, which then carry ``element``, ``msg`` and ``stack``.

    Args:
      text_field: The input rows' field holding the markdown text.
      doc_id_field: The input rows' field holding each document's id (its path, say): chunk ids are made
        from it, so each document needs its own.
      chunking: chunkline's chunking settings, as the ``chunking`` section of a chunkline config file
        (strategy, max_tokens, overlap_tokens, tokenizer, embed_context, a section per strategy); the
        defaults when left out.
      error_handling: ``{output: NAME}`` sends documents that cannot be chunked to the output NAME.
    """

    def __init__(
        self,
        text_field: str = "text",
        doc_id_field: str = "doc_id",
        chunking: Mapping[str, Any] | None = None,
        error_handling: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        if not text_field or not doc_id_field:
            raise ValueError("text_field and doc_id_field must name fields of the input rows")
        self._config = ChunkConfig.from_dict(chunking or {})  # a bad setting fails here, not on a worker
        self._text_field = text_field
        self._doc_id_field = doc_id_field
        self._exception_handling_args = exception_handling_args(error_handling)

    def expand(self, documents: beam.PCollection) -> Any:
        chunk = beam.ParDo(_ChunkRowsFn(self._config, self._text_field, self._doc_id_field))
        chunk = chunk.with_output_types(CHUNK_ROW_TYPE)
        if self._exception_handling_args is None:
            return documents | "Chunk" >> chunk
        main_tag = self._exception_handling_args.get("main_tag", "good")
        dead_letter_tag = self._exception_handling_args["dead_letter_tag"]
        outputs = documents | "Chunk" >> chunk.with_exception_handling(**self._exception_handling_args)
        errors = outputs[dead_letter_tag] | "Errors" >> map_errors_to_standard_format(documents.element_type)
        return {main_tag: outputs[main_tag], dead_letter_tag: errors}


class _ChunkRowsFn(beam.DoFn):
    def __init__(self, config: ChunkConfig, text_field: str, doc_id_field: str):
        self._config = config
        self._text_field = text_field
        self._doc_id_field = doc_id_field

    def setup(self) -> None:
        self._counter = counter_for(self._config)

    def process(self, element: Any) -> Iterator[beam.Row]:
        _, records = chunk_element(
            element, self._config, self._counter, text_field=self._text_field, doc_id_field=self._doc_id_field
        )
        for record in records:
            yield beam.Row(**record.to_dict())
