"""chunkline from a Beam YAML pipeline: the provider listing chunkline ships, run offline on the FnApiRunner.

The pipelines are Beam YAML text, expanded by Beam's own ``expand_pipeline`` (what ``python -m
apache_beam.yaml.main`` does) with the listing included from ``providers``. A guard refuses every network
connection while they run: a ``type: python`` provider without ``packages`` imports chunkline in this process
and installs nothing.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import apache_beam as beam
import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.yaml import main as yaml_main
from apache_beam.yaml import yaml_provider
from apache_beam.yaml.yaml_transform import expand_pipeline

import chunkline
from chunkline import ChunkConfig
from chunkline.transforms.yaml_provider import PROVIDER_LISTING, ChunkMarkdownRows

pytestmark = pytest.mark.timeout(300)

GUIDE = """\
---
title: Release checklist
---
Read this before tagging a release.

# Release checklist

## Before tagging

Run the full test suite and update the changelog with every user-visible change since the last tag.

## Publishing

| step   | command             |
| ------ | ------------------- |
| build  | `python -m build`   |
| upload | `twine upload dist/*` |

```bash
git tag -s v1.4.0 -m "v1.4.0"
git push --tags
```
"""

NOTES = "# Notes\n\nShort notes without front matter.\n\n## Later\n\nMore notes.\n"

CHUNKING = {"max_tokens": 48, "min_tokens": 0, "overlap_tokens": 8}


@pytest.fixture
def no_network(monkeypatch):
    """Every socket connection fails while the pipeline runs (Unix sockets excepted)."""
    original_connect = socket.socket.connect

    def refuse(self, address):
        if self.family == socket.AF_UNIX:
            return original_connect(self, address)
        raise OSError(f"network use refused in this test: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda *args, **kwargs: refuse(socket.socket(), args[0]))


def run_yaml(pipeline_yaml: str) -> None:
    options = PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=options) as pipeline:
        expand_pipeline(pipeline, pipeline_yaml)


def read_json_rows(path: Path) -> list[dict]:
    (written,) = path.parent.glob(path.name + "*")
    return [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines()]


def create_elements(documents: dict[str, str]) -> str:
    return json.dumps([{"doc_id": doc_id, "text": text} for doc_id, text in documents.items()])


def test_the_listing_names_an_in_process_python_provider_without_packages():
    (spec,) = yaml.safe_load(Path(PROVIDER_LISTING).read_text(encoding="utf-8"))
    assert spec["type"] == "python" and "packages" not in spec.get("config", {})
    (provider,) = yaml_provider.load_providers(PROVIDER_LISTING)
    assert isinstance(provider, yaml_provider.InlineProvider)
    assert set(provider.provided_transforms()) == {"ChunkMarkdownRows"}
    assert provider.create_transform("ChunkMarkdownRows", {"chunking": CHUNKING}, None)._config == ChunkConfig(
        **CHUNKING
    )


@pytest.mark.slow
def test_a_yaml_pipeline_chunks_rows_as_chunk_markdown_does(tmp_path, no_network):
    output = tmp_path / "chunks.json"
    run_yaml(
        f"""
pipeline:
  type: chain
  transforms:
    - type: Create
      config:
        elements: {create_elements({"docs/release.md": GUIDE, "notes.md": NOTES})}
    - type: ChunkMarkdownRows
      config:
        chunking: {json.dumps(CHUNKING)}
    - type: Filter
      config:
        language: python
        keep: "token_count > 0"
    - type: WriteToJson
      config:
        path: {output}
providers:
  - include: {PROVIDER_LISTING}
"""
    )
    rows = sorted(read_json_rows(output), key=lambda row: (row["doc_id"], row["chunk_index"]))
    config = ChunkConfig(**CHUNKING)
    expected = sorted(
        (
            chunk.to_dict()
            for doc_id, text in {"docs/release.md": GUIDE, "notes.md": NOTES}.items()
            for chunk in chunkline.chunk_markdown(text, config, doc_id=doc_id)
        ),
        key=lambda row: (row["doc_id"], row["chunk_index"]),
    )
    assert len(expected) > 3
    assert rows == expected
    preamble = next(row for row in rows if row["text"].startswith("---") or row["text"].startswith("Read this"))
    assert preamble["heading_path"] == []


@pytest.mark.slow
def test_a_document_that_cannot_be_chunked_goes_to_the_error_output_it_names(tmp_path, no_network):
    chunks, errors = tmp_path / "chunks.json", tmp_path / "errors.json"
    elements = json.dumps([{"doc_id": "notes.md", "text": NOTES}, {"doc_id": "broken.md", "text": "---\na: [x\n---\n"}])
    run_yaml(
        f"""
pipeline:
  transforms:
    - type: Create
      name: Documents
      config:
        elements: {elements}
    - type: ChunkMarkdownRows
      name: Chunk
      input: Documents
      config:
        chunking: {json.dumps(CHUNKING)}
        error_handling:
          output: failed
    - type: WriteToJson
      name: WriteChunks
      input: Chunk.good
      config:
        path: {chunks}
    - type: MapToFields
      name: Messages
      input: Chunk.failed
      config:
        language: python
        fields:
          doc_id: element.doc_id
          msg: msg
    - type: WriteToJson
      name: WriteErrors
      input: Messages
      config:
        path: {errors}
providers:
  - include: {PROVIDER_LISTING}
"""
    )
    assert {row["chunk_id"] for row in read_json_rows(chunks)} == {
        chunk.chunk_id for chunk in chunkline.chunk_markdown(NOTES, ChunkConfig(**CHUNKING), doc_id="notes.md")
    }
    ((error,),) = [read_json_rows(errors)]
    assert error["doc_id"] == "broken.md"
    assert "document 'broken.md': invalid front matter" in error["msg"]


@pytest.mark.slow
def test_beams_yaml_command_runs_a_pipeline_file_that_includes_the_listing(tmp_path, no_network):
    """What the README shows: ``python -m apache_beam.yaml.main --yaml_pipeline_file ... --runner FnApiRunner``
    over documents read from JSON lines."""
    documents, chunks = tmp_path / "documents.jsonl", tmp_path / "chunks.jsonl"
    documents.write_text(json.dumps({"doc_id": "docs/release.md", "text": GUIDE}) + "\n", encoding="utf-8")
    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text(
        f"""
pipeline:
  type: chain
  transforms:
    - type: ReadFromJson
      config: {{path: {documents}}}
    - type: ChunkMarkdownRows
      config:
        chunking: {json.dumps(CHUNKING)}
    - type: WriteToJson
      config: {{path: {chunks}}}
providers:
  - include: {PROVIDER_LISTING}
""",
        encoding="utf-8",
    )
    yaml_main.run(argv=[f"--yaml_pipeline_file={pipeline_file}", "--runner=FnApiRunner"])
    expected = chunkline.chunk_markdown(GUIDE, ChunkConfig(**CHUNKING), doc_id="docs/release.md")
    rows = sorted(read_json_rows(chunks), key=lambda row: row["chunk_index"])
    assert rows == [chunk.to_dict() for chunk in expected]


def test_a_bad_chunking_setting_fails_when_the_pipeline_is_built():
    with pytest.raises(chunkline.ConfigError, match="max_tokens"):
        ChunkMarkdownRows(chunking={"max_tokens": 2})
