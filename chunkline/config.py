"""``ChunkConfig``: the one frozen, validated object that tells the engine how to chunk.

In YAML it is the ``chunking`` section (see ``configs/default.yaml``)::

    chunking:
      strategy: headings
      max_tokens: 512
      overlap_tokens: 50
      tokenizer: cl100k_base
      headings:              # the parameters of the strategy named above
        min_heading_level: 1
        max_heading_level: 6

Settings are layered: the built-in defaults, then a YAML file, then environment variables
(``CHUNKLINE_CHUNK_MAX_TOKENS=1024``, ``CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LEVEL=3``), then explicit
``key=value`` overrides. Every layer is checked; a bad key is named by its dotted path.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chunkline.embed_text import DEFAULT_EMBED_CONTEXT, check_embed_context
from chunkline.patterns import compile_pattern
from chunkline.registry import get_strategy
from chunkline.settings import (
    ConfigError,
    as_mapping,
    build_dataclass,
    deep_merge,
    env_overrides,
    parse_assignments,
    read_yaml_mapping,
)
from chunkline.structure import DEFAULT_PARSER, PARSERS

__all__ = ["ChunkConfig", "ConfigError", "load_chunk_config", "CHUNK_ENV_PREFIX"]

#: Environment variables with this prefix override ``chunking`` settings.
CHUNK_ENV_PREFIX = "CHUNKLINE_CHUNK_"

#: Sections of a chunkline config file; this module reads ``chunking``, the pipeline reads the others.
_SECTIONS = frozenset({"chunking", "input", "output", "run"})

#: The smallest token budget every strategy can keep: one character is at most 4 UTF-8 bytes, and a
#: byte-level BPE encoding never needs more tokens than bytes.
MIN_MAX_TOKENS = 4

#: ``min_tokens`` when it is not set is ``max_tokens // DEFAULT_MIN_TOKENS_DIVISOR``: half the budget, so
#: that the sections of a document packed together fill toward ``max_tokens`` while a section of half the
#: budget or more stays a chunk of its own. Chosen by the retrieval benchmark (benchmarks/bench_retrieval.py,
#: four question sets, 256 and 512 tokens, BM25, wordllama and hybrid, recall and IoU): of a flat 32 and a
#: quarter, three eighths, a half, five eighths and three quarters of ``max_tokens``, and of packing whole
#: sibling sections toward ``max_tokens`` within their parent, a half gained most in all (KEPs at 512:
#: BM25 recall 47.4 -> 57.7, wordllama 41.1 -> 51.2) and cost least where it cost (at most a point, on
#: the Rust RFCs at 256); Chroma's plain-text set, without headings, is unchanged.
DEFAULT_MIN_TOKENS_DIVISOR = 2

#: The largest token budget: a chunk's ``token_count`` is a 32-bit column.
MAX_MAX_TOKENS = 2**31 - 1

_COMMON_KEYS = (
    "strategy",
    "max_tokens",
    "overlap_tokens",
    "min_tokens",
    "tokenizer",
    "tokenizer_file",
    "tokenizer_sha256",
    "count_special_tokens",
    "section_pattern",
    "embed_context",
    "parser",
)

#: Settings that only a Hugging Face tokenizer reads (left out of a tiktoken config's fingerprint).
_HUGGINGFACE_KEYS = ("tokenizer_sha256", "count_special_tokens")


@dataclass(frozen=True)
class ChunkConfig:
    """How to chunk: the strategy, the token budget, the tokenizer and the strategy's own parameters."""

    strategy: str = "headings"
    """Name of a registered strategy (``chunkline strategies`` lists them)."""
    max_tokens: int = 512
    """No chunk has more tokens than this, counted with ``tokenizer``."""
    overlap_tokens: int = 50
    """Tokens shared by consecutive pieces of one split section (at most; cuts fall on boundaries)."""
    min_tokens: int | None = None
    """Strategies that merge fragments (``chunkline strategies`` marks them) pack a chunk under this many
    tokens with the chunks after it while the result fits, and never leave a heading or front matter as a
    chunk by itself; 0 turns that off. ``None``: half of ``max_tokens`` (:data:`DEFAULT_MIN_TOKENS_DIVISOR`,
    :attr:`effective_min_tokens`)."""
    tokenizer: str = "cl100k_base"
    """A tiktoken encoding name, or ``huggingface`` for a model's own ``tokenizer.json``."""
    tokenizer_file: str | None = None
    """Path or fsspec URL of the encoding's ``.tiktoken`` file, for encodings no installed package bundles;
    of the ``tokenizer.json`` for ``tokenizer: huggingface`` (required then)."""
    tokenizer_sha256: str | None = None
    """For ``tokenizer: huggingface``: the sha256 the ``tokenizer.json`` must have (not checked when unset)."""
    count_special_tokens: bool = False
    """For ``tokenizer: huggingface``: counts include the special tokens the model adds (``[CLS]``,
    ``[SEP]``, ``<s>``...), so that ``max_tokens`` can be the model's window."""
    section_pattern: str | None = None
    """A custom heading line pattern for the sections every chunk's ``section_index`` and derived heading
    path refer to (two groups: level indicator, heading text, e.g. ``^(SECTION \\d+): (.+)$``); markdown
    headings when ``None``."""
    params: Any = field(default=None, compare=True)
    """The strategy's parameter dataclass; its defaults when not given."""
    embed_context: str = DEFAULT_EMBED_CONTEXT
    """The context line at the head of each chunk's ``embed_text``: a template of ``{title}``,
    ``{heading_path}`` (joined with `` > ``) and ``{breadcrumb}`` (the title, then the heading path, the
    title left out when it is the first heading); a chunk that starts inside a table also gets the table's
    header. The strategy chunks to ``max_tokens`` less what these take for the sections that hold most of
    the document's text, and a longer line is shortened, so that ``embed_token_count`` stays within
    ``max_tokens`` too (see :mod:`chunkline.embed_text`). ``none`` adds nothing: ``embed_text`` is
    the text without front matter, and the strategy keeps the whole budget."""
    parser: str = DEFAULT_PARSER
    """The CommonMark parser that finds the blocks: ``markdown-it-pyrs`` (markdown-it.rs, the fast one) or
    ``markdown-it-py`` (the reference). Both give the same blocks, so the same chunks
    (tests/test_parser_differential.py holds them equal); the setting is not part of the fingerprint."""

    def __post_init__(self) -> None:
        if self.parser not in PARSERS:
            raise ConfigError(f"chunking.parser must be one of {', '.join(PARSERS)}, got {self.parser!r}")
        if (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < MIN_MAX_TOKENS
        ):
            raise ConfigError(
                f"chunking.max_tokens must be a whole number >= {MIN_MAX_TOKENS} (one character can take "
                f"{MIN_MAX_TOKENS} tokens), got {self.max_tokens!r}"
            )
        if self.max_tokens > MAX_MAX_TOKENS:
            raise ConfigError(
                f"chunking.max_tokens must be at most {MAX_MAX_TOKENS:,} (token_count is a 32-bit column), "
                f"got {self.max_tokens:,}"
            )
        if (
            isinstance(self.overlap_tokens, bool)
            or not isinstance(self.overlap_tokens, int)
            or not 0 <= self.overlap_tokens < self.max_tokens
        ):
            raise ConfigError(
                f"chunking.overlap_tokens must be >= 0 and less than max_tokens ({self.max_tokens}), "
                f"got {self.overlap_tokens!r}"
            )
        if self.min_tokens is not None and (
            isinstance(self.min_tokens, bool)
            or not isinstance(self.min_tokens, int)
            or not 0 <= self.min_tokens < self.max_tokens
        ):
            raise ConfigError(
                f"chunking.min_tokens must be a whole number >= 0 and less than max_tokens ({self.max_tokens}), "
                f"got {self.min_tokens!r}"
            )
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise ConfigError("chunking.tokenizer must name a tiktoken encoding, e.g. cl100k_base")
        if self.tokenizer == "huggingface":
            if not self.tokenizer_file:
                raise ConfigError(
                    "chunking.tokenizer huggingface needs chunking.tokenizer_file: the path or fsspec URL of "
                    "the model's tokenizer.json"
                )
        elif self.tokenizer_sha256 is not None or self.count_special_tokens:
            raise ConfigError(
                "chunking.tokenizer_sha256 and chunking.count_special_tokens apply to tokenizer: huggingface "
                f"only (tiktoken encoding {self.tokenizer!r} adds no special tokens and checks its own sha256)"
            )
        if self.tokenizer_sha256 is not None and (
            not isinstance(self.tokenizer_sha256, str)
            or len(self.tokenizer_sha256) != 64
            or any(c not in "0123456789abcdefABCDEF" for c in self.tokenizer_sha256)
        ):
            raise ConfigError(f"chunking.tokenizer_sha256 must be 64 hexadecimal digits, got {self.tokenizer_sha256!r}")
        if not isinstance(self.count_special_tokens, bool):
            raise ConfigError(f"chunking.count_special_tokens must be true or false, got {self.count_special_tokens!r}")
        try:
            check_embed_context(self.embed_context)
        except ValueError as error:
            raise ConfigError(f"chunking.embed_context: {error}") from None
        if self.section_pattern is not None:
            try:
                compiled = compile_pattern(self.section_pattern)
            except ValueError as error:
                raise ConfigError(f"chunking.section_pattern: {error}") from None
            if compiled.groups < 2:
                raise ConfigError(
                    f"chunking.section_pattern {self.section_pattern!r} needs two groups: the level indicator "
                    "and the heading text, e.g. ^(SECTION \\d+): (.+)$"
                )
        try:
            strategy = get_strategy(self.strategy)
        except ValueError as error:
            raise ConfigError(f"chunking.strategy: {error}") from None
        if self.params is None:
            try:
                object.__setattr__(self, "params", strategy.params_type())
            except TypeError as error:  # a parameter without a default
                raise ConfigError(
                    f"chunking.{self.strategy} needs parameters of its own ({error}); `chunkline strategies` lists them"
                ) from None
        elif not isinstance(self.params, strategy.params_type):
            raise ConfigError(
                f"chunking.{self.strategy}: expected {strategy.params_type.__name__}, got {type(self.params).__name__}"
            )
        check = getattr(self.params, "check", None)
        if check is not None:
            try:
                check(self)
            except ValueError as error:
                raise ConfigError(f"chunking.{self.strategy}: {error}") from None

    @property
    def effective_min_tokens(self) -> int:
        """``min_tokens``, or its default for this ``max_tokens`` when unset."""
        if self.min_tokens is not None:
            return self.min_tokens
        return self.max_tokens // DEFAULT_MIN_TOKENS_DIVISOR

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "chunking") -> ChunkConfig:
        """A config from the mapping of a ``chunking`` section; strategy sections are checked too."""
        data = dict(as_mapping(data, path))
        common = {key: data.pop(key) for key in _COMMON_KEYS if key in data}
        strategy_name = common.get("strategy", cls.strategy)
        if not isinstance(strategy_name, str):
            raise ConfigError(f"{path}.strategy: expected a strategy name, got {strategy_name!r}")
        sections: dict[str, Any] = {}
        for name, section in data.items():
            try:
                strategy = get_strategy(name)
            except ValueError:
                raise ConfigError(
                    f"unknown setting {path}.{name}; known settings here: "
                    f"{', '.join(_COMMON_KEYS)} and a section per strategy"
                ) from None
            sections[name] = build_dataclass(strategy.params_type, section, f"{path}.{name}")
        checked = build_dataclass(_CommonSettings, common, path)
        try:
            return cls(**dataclasses.asdict(checked), params=sections.get(strategy_name))
        except ConfigError as error:
            raise ConfigError(str(error).replace("chunking.", f"{path}.", 1)) from None

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data, in the shape :meth:`from_dict` reads."""
        data: dict[str, Any] = {key: getattr(self, key) for key in _COMMON_KEYS}
        data[self.strategy] = dataclasses.asdict(self.params)
        return data

    def fingerprint(self) -> str:
        """A stable JSON text of everything that decides the chunks (for caching and manifests)."""
        data = self.to_dict()
        data.pop("tokenizer_file")  # where the file lives does not change the tokens: its sha256 is checked
        data.pop("parser")  # every parser gives the same blocks, so the same chunks
        if get_strategy(self.strategy).merges_fragments:
            data["min_tokens"] = self.effective_min_tokens  # the default and the same value set: same chunks
        else:
            data.pop("min_tokens")  # read only by strategies that merge fragments
        if self.tokenizer == "huggingface":
            # The file's own sha256 (read once, cached with the tokenizer) stands for the tokenizer.
            from chunkline.tokenizers import counter_for

            data["tokenizer_sha256"] = counter_for(self).sha256
        else:
            for key in _HUGGINGFACE_KEYS:
                data.pop(key)
        return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class _CommonSettings:
    strategy: str = ChunkConfig.strategy
    max_tokens: int = ChunkConfig.max_tokens
    overlap_tokens: int = ChunkConfig.overlap_tokens
    min_tokens: int | None = None
    tokenizer: str = ChunkConfig.tokenizer
    tokenizer_file: str | None = None
    tokenizer_sha256: str | None = None
    count_special_tokens: bool = False
    section_pattern: str | None = None
    embed_context: str = ChunkConfig.embed_context
    parser: str = ChunkConfig.parser


def load_chunk_config(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> ChunkConfig:
    """The ``chunking`` settings from defaults, ``config_file``, the environment and ``overrides``.

    ``overrides`` are ``key=value`` strings; a key without a section (``max_tokens=256``) is a
    ``chunking`` key. ``environ`` defaults to ``os.environ``.
    """
    data: dict[str, Any] = {}
    if config_file is not None:
        file_data = read_yaml_mapping(config_file)
        unknown = sorted(set(file_data) - _SECTIONS, key=str)
        if unknown:
            raise ConfigError(f"{config_file}: unknown section {unknown[0]!r}")
        data = dict(as_mapping(file_data.get("chunking"), "chunking"))
    environment = os.environ if environ is None else environ
    data = deep_merge(data, env_overrides(environment, {CHUNK_ENV_PREFIX: "chunking"}).get("chunking", {}))
    assigned = parse_assignments(overrides, default_section="chunking")
    unknown = sorted(set(assigned) - _SECTIONS, key=str)
    if unknown:
        raise ConfigError(f"unknown section {unknown[0]!r} in --set; sections: {', '.join(sorted(_SECTIONS))}")
    data = deep_merge(data, assigned.get("chunking", {}))
    return ChunkConfig.from_dict(data)
