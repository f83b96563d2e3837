"""``RunConfig``: everything ``chunkline run`` needs, from one YAML file with three sections.

::

    input:
      paths: [docs/]                 # or INPUT arguments on the command line
      extensions: [.md, .markdown]   # for folder inputs
      include: []                    # shell patterns on doc_id; empty = everything
      exclude: []
      max_file_bytes: 50000000
      encoding_errors: strict        # strict: invalid UTF-8 is an error row; replace: U+FFFD and chunk
      storage_options: {}            # passed to fsspec (credentials: never written anywhere)
    chunking: {...}                  # see chunkline.config.ChunkConfig
    output:
      url: out/                      # or --output
      shards: 8
      row_group_rows: 65536
      row_group_bytes: 16000000      # a row group also ends at this many bytes of rows (uncompressed)
      keep: 3                        # snapshots kept after a new one is published
      max_deleted_fraction: 0.5      # a run deleting more of the previous snapshot's documents publishes nothing
      front_matter_columns: {}       # front-matter key -> type: typed chunks columns (tags: list<string>)
      front_matter_max_value_bytes: 65536  # a larger promoted value is null, with an errors row
      storage_options: {}
    run:
      workers: auto                  # auto: every core for a large corpus; 0: in-process; N: N worker processes
      fail_on_error: false
      reindex: false                 # chunk every document again instead of carrying unchanged ones over
      verify_content: false          # hash every file to find what changed, not only those whose size/time/ETag moved
      allow_deletes: false           # publish even a snapshot over output.max_deleted_fraction
      in_process_max_documents: 256  # incremental runs this small skip starting the runner

Environment variables override a file section by section: ``CHUNKLINE_INPUT_MAX_FILE_BYTES``,
``CHUNKLINE_CHUNK_MAX_TOKENS``, ``CHUNKLINE_OUTPUT_SHARDS``, ``CHUNKLINE_RUN_WORKERS`` (``__`` nests), and
``--set section.key=value`` overrides both.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote

from chunkline.config import CHUNK_ENV_PREFIX, ChunkConfig
from chunkline.dataset.front_matter_columns import parse_front_matter_columns
from chunkline.schemas import DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES, FrontMatterColumn
from chunkline.settings import (
    ConfigError,
    as_mapping,
    build_dataclass,
    check_whole_number,
    deep_merge,
    env_overrides,
    parse_assignments,
    read_yaml_mapping,
)

__all__ = [
    "InputConfig",
    "OutputConfig",
    "RunSettings",
    "RunConfig",
    "load_run_config",
    "storage_secrets",
    "ENV_PREFIXES",
]

#: Environment variable prefix of each config section.
ENV_PREFIXES = {
    "CHUNKLINE_INPUT_": "input",
    CHUNK_ENV_PREFIX: "chunking",
    "CHUNKLINE_OUTPUT_": "output",
    "CHUNKLINE_RUN_": "run",
}

_SECTIONS = ("input", "chunking", "output", "run")

#: Files per table, at most.
MAX_SHARDS = 10_000

#: Worker processes of the multi-processing DirectRunner, at most (they all run on this machine).
MAX_WORKERS = 256

#: The codecs Parquet files can be written with (pyarrow's names, in any case); ``none`` is uncompressed.
PARQUET_CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "zstd")


def check_compression(name: object) -> None:
    """Raise ``ValueError`` unless ``name`` is a Parquet codec this pyarrow can write, so that a bad
    ``output.compression`` fails when the config is built, not after the whole pipeline has run."""
    import pyarrow

    codec = name.lower() if isinstance(name, str) else None
    if codec not in PARQUET_CODECS:
        raise ValueError(f"compression must be one of {', '.join(PARQUET_CODECS)}, got {name!r}")
    if codec != "none" and not pyarrow.Codec.is_available(codec):
        raise ValueError(f"compression {name!r} is not available in this pyarrow build; use zstd or snappy")


@dataclass(frozen=True)
class InputConfig:
    """Where the markdown comes from and which files count."""

    paths: tuple[str, ...] = ()
    """Folders, files or globs as fsspec URLs (local paths, file://, s3://, gs://, az://, zip::...)."""
    extensions: tuple[str, ...] = (".md", ".markdown")
    """File name endings searched for in folder inputs (case-insensitive)."""
    include: tuple[str, ...] = ()
    """Shell patterns matched against doc_id (``*`` also matches ``/``); empty includes every file."""
    exclude: tuple[str, ...] = ()
    """Shell patterns matched against doc_id; a match is left out."""
    max_file_bytes: int = 50_000_000
    """Larger files become an error row instead of being read."""
    encoding_errors: Literal["strict", "replace"] = "strict"
    """strict: invalid UTF-8 is an error row; replace: invalid bytes become U+FFFD and the file is chunked."""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the inputs (e.g. key/secret/endpoint_url); never written anywhere."""

    def __post_init__(self) -> None:
        check_whole_number(self.max_file_bytes, "max_file_bytes", minimum=1)
        for extension in self.extensions:
            if not isinstance(extension, str) or not extension.startswith("."):
                raise ValueError(f"extensions must start with a dot, got {extension!r}")


@dataclass(frozen=True)
class OutputConfig:
    """Where and how the Parquet dataset is written."""

    url: str | None = None
    """The dataset's location (any fsspec URL)."""
    shards: int = 8
    """Files per table: a document's rows go to the shard picked by a hash of its doc_id."""
    row_group_rows: int = 65_536
    """Rows per Parquet row group, at most."""
    row_group_bytes: int = 16_000_000
    """Bytes of rows per Parquet row group (uncompressed, as Arrow holds them): a row group ends at
    ``row_group_rows`` rows or once its rows reach this many bytes, whichever comes first (see
    :mod:`chunkline.dataset.row_groups`). The merge of a shard gathers and encodes one row group at a time,
    so this bounds its memory whatever the shard's size."""
    compression: str = "zstd"
    """Parquet compression codec."""
    keep: int = 3
    """Published snapshots kept: after a new one is published, older ones beyond this count are removed."""
    lock_expiry_seconds: int = 86_400
    """A lock on the output older than this is taken over (a lock whose run died on this machine is taken
    over at once)."""
    max_deleted_fraction: float = 0.5
    """A run that would delete more than this share of the previous snapshot's documents publishes nothing
    and fails, unless ``run.allow_deletes``; 1.0 never refuses."""
    front_matter_columns: dict[str, Any] = field(default_factory=dict)
    """Front-matter keys promoted to typed ``chunks`` columns: key -> type (``string``, ``list<string>``,
    ``integer``, ``float``, ``boolean``, ``timestamp``), or key -> ``{type: ..., column: NAME}``; see
    :mod:`chunkline.dataset.front_matter_columns`."""
    front_matter_max_value_bytes: int = DEFAULT_FRONT_MATTER_MAX_VALUE_BYTES
    """A promoted front-matter value whose JSON text is larger (in UTF-8) is null in its column, with a
    ``FrontMatterValueTooLarge`` errors row: every chunk of the document carries its promoted values."""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the output; never written anywhere."""

    def __post_init__(self) -> None:
        check_whole_number(self.keep, "keep", minimum=1)  # at least the snapshot just published
        if not 0.0 <= self.max_deleted_fraction <= 1.0:
            raise ValueError(f"max_deleted_fraction must be from 0 to 1, got {self.max_deleted_fraction}")
        check_whole_number(self.lock_expiry_seconds, "lock_expiry_seconds", minimum=1)
        check_whole_number(self.shards, "shards", minimum=1, maximum=MAX_SHARDS)
        check_whole_number(self.row_group_rows, "row_group_rows", minimum=1)
        check_whole_number(self.row_group_bytes, "row_group_bytes", minimum=1)
        check_compression(self.compression)
        check_whole_number(self.front_matter_max_value_bytes, "front_matter_max_value_bytes", minimum=1)
        parse_front_matter_columns(self.front_matter_columns)

    @property
    def promoted_front_matter(self) -> tuple[FrontMatterColumn, ...]:
        """The columns ``front_matter_columns`` adds to ``chunks``, in its order (checked when built)."""
        return parse_front_matter_columns(self.front_matter_columns, self.front_matter_max_value_bytes)


@dataclass(frozen=True)
class RunSettings:
    """How the pipeline runs."""

    workers: int | str = "auto"
    """0: Beam's in-process FnApiRunner; N >= 1: its multi-processing mode with N worker processes; auto:
    one worker per core when the listing holds enough bytes to chunk to pay for them, else in-process (see
    :func:`chunkline.dataset.parallelism.choose_workers`)."""
    fail_on_error: bool = False
    """Exit non-zero when any document produced an error row."""
    reindex: bool = False
    """Chunk every document again, even those whose bytes and config are unchanged since the last snapshot."""
    verify_content: bool = False
    """Read and hash every listed file to decide whether it changed since the last snapshot
    (``--verify-content``), instead of only those whose size, modification time, ETag or version moved; it
    catches an edit that kept a file's size and modification time (see docs/reliability.md)."""
    allow_deletes: bool = False
    """Publish a snapshot that deletes more than ``output.max_deleted_fraction`` of the previous one's
    documents (``--allow-deletes``), for a corpus that really shrank."""
    in_process_max_documents: int = 256
    """An incremental run with at most this many documents to chunk runs the pipeline's DoFns in this
    process instead of starting the runner (whose start-up costs more than chunking a few files); 0: never."""

    def __post_init__(self) -> None:
        if isinstance(self.workers, str) and self.workers != "auto":
            raise ValueError(f"workers must be auto or a whole number from 0 to {MAX_WORKERS}, got {self.workers!r}")
        if self.workers != "auto":
            check_whole_number(self.workers, "workers", minimum=0, maximum=MAX_WORKERS)
        for name in ("fail_on_error", "reindex", "verify_content"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_whole_number(self.in_process_max_documents, "in_process_max_documents", minimum=0)


@dataclass(frozen=True)
class RunConfig:
    """The whole configuration of one ``chunkline run``."""

    input: InputConfig = field(default_factory=InputConfig)
    chunking: ChunkConfig = field(default_factory=ChunkConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    run: RunSettings = field(default_factory=RunSettings)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RunConfig:
        data = dict(as_mapping(data, "config"))
        unknown = sorted(set(data) - set(_SECTIONS), key=str)
        if unknown:
            raise ConfigError(f"unknown section {unknown[0]!r}; sections: {', '.join(_SECTIONS)}")
        return cls(
            input=build_dataclass(InputConfig, data.get("input"), "input"),
            chunking=ChunkConfig.from_dict(data.get("chunking")),
            output=build_dataclass(OutputConfig, data.get("output"), "output"),
            run=build_dataclass(RunSettings, data.get("run"), "run"),
        )

    def to_public_dict(self) -> dict[str, Any]:
        """The config as plain data with every storage option value redacted (for manifests and logs)."""
        return {
            "input": {
                "paths": list(self.input.paths),
                "extensions": list(self.input.extensions),
                "include": list(self.input.include),
                "exclude": list(self.input.exclude),
                "max_file_bytes": self.input.max_file_bytes,
                "encoding_errors": self.input.encoding_errors,
                "storage_options": redact(self.input.storage_options),
            },
            "chunking": self.chunking.to_dict(),
            "output": {
                "url": self.output.url,
                "shards": self.output.shards,
                "row_group_rows": self.output.row_group_rows,
                "row_group_bytes": self.output.row_group_bytes,
                "compression": self.output.compression,
                "keep": self.output.keep,
                "lock_expiry_seconds": self.output.lock_expiry_seconds,
                "max_deleted_fraction": self.output.max_deleted_fraction,
                "front_matter_columns": {
                    column.key: {"type": column.type, "column": column.column}
                    for column in self.output.promoted_front_matter
                },
                "front_matter_max_value_bytes": self.output.front_matter_max_value_bytes,
                "storage_options": redact(self.output.storage_options),
            },
            "run": {
                "workers": self.run.workers,
                "fail_on_error": self.run.fail_on_error,
                "reindex": self.run.reindex,
                "verify_content": self.run.verify_content,
                "allow_deletes": self.run.allow_deletes,
                "in_process_max_documents": self.run.in_process_max_documents,
            },
        }

    def secrets(self) -> list[str]:
        """Every storage option value that could be a credential, for scrubbing messages (see
        :func:`storage_secrets`)."""
        return storage_secrets(self.input.storage_options, self.output.storage_options)


def storage_secrets(*option_sets: Mapping[str, Any]) -> list[str]:
    """The strings to keep out of every message, longest first: each string value of the storage options
    (nested ones too, under any key: ``key``, ``secret``, ``token``, ``account_key``, ``sas_token``,
    ``client_secret``, ``client_kwargs``...), the key and signature fields inside connection strings and SAS
    tokens, and each of these percent-encoded, as a request URL in a storage error would carry it."""
    values: list[str] = []
    for options in option_sets:
        _collect_strings(options, values)
    values += [part for value in values for part in _credential_fields(value)]
    values += [quote(value, safe="") for value in values]
    return sorted({value for value in values if len(value) >= 4}, key=len, reverse=True)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every value replaced by ``"***"`` (nested mappings keep their keys)."""
    return {key: redact(value) if isinstance(value, Mapping) else "***" for key, value in options.items()}


# Fields of a connection string that hold a credential (AccountKey, SharedAccessSignature, ...).
_CREDENTIAL_FIELD = re.compile(r"key|secret|signature|token|password", re.IGNORECASE)


def _credential_fields(value: str) -> list[str]:
    """The credentials inside ``AccountKey=...;SharedAccessSignature=sv=...&sig=...`` style strings (a
    connection string's key and SAS, a SAS token's signature), raw and percent-decoded: a message may
    repeat one of them without the rest of the string."""
    fields: list[str] = []
    for item in value.split(";"):
        name, equals, content = item.partition("=")
        if equals and content and _CREDENTIAL_FIELD.search(name):
            fields += [content, unquote(content)]
    for item in re.split(r"[&?]", value):
        name, equals, content = item.partition("=")
        if equals and content and name.strip().lower() == "sig":
            fields += [content, unquote(content)]
    return fields


def _collect_strings(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect_strings(item, into)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_strings(item, into)


def load_run_config(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    *,
    inputs: Iterable[str] = (),
    output: str | None = None,
    require_inputs: bool = True,
) -> RunConfig:
    """The run settings from ``config_file``, the environment, ``--set`` overrides and the command line's
    inputs and ``--output`` (each layer over the one before). ``require_inputs=False`` for commands that
    only read the output (``chunkline inspect``)."""
    data: dict[str, Any] = read_yaml_mapping(config_file) if config_file is not None else {}
    unknown = sorted(set(data) - set(_SECTIONS), key=str)
    if unknown:
        raise ConfigError(f"{config_file}: unknown section {unknown[0]!r}; sections: {', '.join(_SECTIONS)}")
    for section, value in data.items():
        # Checked before the layers above are merged in, which would replace a section that is no mapping.
        as_mapping(value, f"{config_file}: {section}")
    environment = os.environ if environ is None else environ
    data = deep_merge(data, env_overrides(environment, ENV_PREFIXES))
    data = deep_merge(data, parse_assignments(overrides, default_section="chunking"))
    inputs = list(inputs)
    if inputs:
        data = deep_merge(data, {"input": {"paths": inputs}})
    if output is not None:
        data = deep_merge(data, {"output": {"url": output}})
    config = RunConfig.from_dict(data)
    if require_inputs and not config.input.paths:
        raise ConfigError("no input: give INPUT paths or set input.paths in the config")
    if not config.output.url:
        raise ConfigError("no output: give --output URL or set output.url in the config")
    return config
