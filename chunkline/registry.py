"""The open registry of chunking strategies.

A strategy is a function ``(context) -> list[ChunkSpan]`` with a frozen dataclass of its own parameters;
the :class:`~chunkline.context.ChunkContext` holds the document, the config, the tokenizer and what is
prepared from them once (token offsets, the token budget's :class:`~chunkline.capacity.Capacity`, the
protected blocks that fit). A function ``(document, config, counter)`` is a strategy too. Register one in
code::

    from dataclasses import dataclass
    from chunkline import register_strategy

    @dataclass(frozen=True)
    class ParagraphParams:
        keep_headings: bool = True

    @register_strategy("my-paragraphs", ParagraphParams, description="One chunk per paragraph.")
    def paragraphs(context):
        ...

or from a package, through the entry-point group ``chunkline.strategies`` whose entries point at a
:class:`Strategy` object (or at a module that registers its strategies when imported). Names are unique: a
second registration of a name is refused. Entry points are loaded the first time a strategy is looked up.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from chunkline.record import ChunkSpan

if TYPE_CHECKING:
    from chunkline.context import ChunkContext
    from chunkline.structure import MarkdownDocument
    from chunkline.tokenizers import TokenCounter

__all__ = [
    "ENTRY_POINT_GROUP",
    "Strategy",
    "StrategyError",
    "available_strategies",
    "get_strategy",
    "register_strategy",
]

ENTRY_POINT_GROUP = "chunkline.strategies"


class _Required:
    def __repr__(self) -> str:
        return "(required)"


#: Shown as the default of a parameter that has none.
REQUIRED = _Required()

ChunkFunction = Callable[["MarkdownDocument", Any, "TokenCounter"], "list[ChunkSpan]"]
ContextFunction = Callable[["ChunkContext"], "list[ChunkSpan]"]
SizeTarget = Callable[["ChunkContext", int, int, bool], bool]


class StrategyError(ValueError):
    """A strategy name is unknown, or clashes with one already registered."""


@dataclass(frozen=True)
class NoParams:
    """For strategies without parameters of their own."""


@dataclass(frozen=True)
class Strategy:
    """A registered chunking strategy."""

    name: str
    params_type: type
    """Frozen dataclass of the strategy's own parameters (the ``chunking.<name>`` config section)."""
    chunk: ChunkFunction
    description: str = ""
    keeps_blocks_whole: bool = True
    """Whether fenced code, tables and list items that fit within ``max_tokens`` always land whole in one
    chunk (PRODUCT invariant 3). False for strategies that cut by a raw unit on purpose (token windows,
    characters, lines), as their reference systems do."""
    soft_limit_kinds: frozenset[str] = frozenset()
    """Block kinds a chunk may consist of and still exceed ``max_tokens``: atomic units the strategy
    promises never to split (PRODUCT invariant 2's documented soft bound)."""
    example_params: Any = None
    """Parameters that make a working example when the defaults cannot (a required pattern, say)."""
    chunk_in_context: ContextFunction | None = None
    """The strategy as a function of the document's :class:`~chunkline.context.ChunkContext`, when it is
    written so (``chunk`` then builds the context itself)."""
    merges_fragments: bool = False
    """Whether the engine packs the strategy's chunks under ``chunking.min_tokens`` with their neighbours
    (and never leaves a heading or front matter as a chunk by itself), see :mod:`chunkline.fragments`."""
    size_target: SizeTarget | None = None
    """``(context, start_char, end_char, joins_heading) -> bool``: whether chunks packed together into the
    range keep the strategy's own size target besides ``max_tokens`` (``scored``'s ``max_chars``,
    ``blocks``' ``max_bytes``); ``joins_heading`` when the range puts a chunk of headings or front matter
    only with its neighbour, which a soft target lets go past it."""

    def run(self, context: ChunkContext) -> list[ChunkSpan]:
        """The strategy's chunk spans of the context's document."""
        if self.chunk_in_context is None:
            return self.chunk(context.document, context.config, context.counter)
        return _in_context(self.chunk_in_context, context)

    def default_params(self) -> Any:
        """The defaults, or the example parameters for strategies with required parameters."""
        return self.example_params if self.example_params is not None else self.params_type()

    def parameters(self) -> list[tuple[str, str, Any]]:
        """(name, type, default) of each parameter, for ``chunkline strategies``."""
        rows = []
        for field in dataclasses.fields(self.params_type):
            default = field.default
            if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            elif default is dataclasses.MISSING:
                default = REQUIRED
            type_name = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
            rows.append((field.name, type_name, default))
        return rows


_registry: dict[str, Strategy] = {}
_lock = threading.RLock()
_entry_points_loaded = False


def _add(strategy: Strategy) -> Strategy:
    if not dataclasses.is_dataclass(strategy.params_type):
        raise StrategyError(f"strategy {strategy.name!r}: params_type must be a dataclass")
    with _lock:
        existing = _registry.get(strategy.name)
        if existing is not None and _function(existing) is not _function(strategy):
            raise StrategyError(
                f"a strategy named {strategy.name!r} is already registered "
                f"({existing.chunk.__module__}.{existing.chunk.__qualname__}); choose another name"
            )
        _registry[strategy.name] = strategy
    return strategy


def _function(strategy: Strategy) -> Callable:
    return strategy.chunk_in_context or strategy.chunk


def _in_context(function: ContextFunction, context: ChunkContext) -> list[ChunkSpan]:
    """The spans of a strategy written for a context: an empty document is one empty chunk, whatever the
    strategy."""
    if not context.text:
        return [ChunkSpan(0, 0, token_count=0)]
    return function(context)


def _with_context(function: ContextFunction) -> ChunkFunction:
    """``function`` of a context as a function of the document, config and counter."""

    @functools.wraps(function)
    def chunk(document, config, counter):
        from chunkline.context import ChunkContext

        return _in_context(function, ChunkContext(document, config, counter))

    return chunk


def register_strategy(
    name: str,
    params_type: type = NoParams,
    *,
    description: str = "",
    keeps_blocks_whole: bool = True,
    soft_limit_kinds: frozenset[str] = frozenset(),
    example_params: Any = None,
    merges_fragments: bool = False,
    size_target: SizeTarget | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator that registers a chunk function under ``name`` with its parameter dataclass: a function of
    one :class:`~chunkline.context.ChunkContext`, or of the document, config and counter.

    The keyword arguments describe the strategy's guarantees (see :class:`Strategy`); the contract tests
    hold every registered strategy to them."""

    def decorate(function: Callable) -> Callable:
        takes_context = len(inspect.signature(function).parameters) == 1
        # The built-in strategies register when first needed: loaded now, a name they hold is refused here,
        # at the decorator, and not later, when every strategy would fail. (While they are being loaded,
        # this import is the module already in progress and does nothing.)
        _load_builtins()
        _add(
            Strategy(
                name,
                params_type,
                _with_context(function) if takes_context else function,
                description or (function.__doc__ or "").strip(),
                keeps_blocks_whole,
                frozenset(soft_limit_kinds),
                example_params,
                function if takes_context else None,
                merges_fragments,
                size_target,
            )
        )
        return function

    return decorate


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
            loaded = entry_point.load()
            if isinstance(loaded, Strategy):
                if loaded.name != entry_point.name:
                    raise StrategyError(
                        f"entry point {entry_point.name!r} in {ENTRY_POINT_GROUP} names strategy {loaded.name!r}"
                    )
                _add(loaded)


def _load_builtins() -> None:
    import chunkline.strategies  # noqa: F401  (registers the built-in strategies)


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; an unknown name's error lists the available ones."""
    _load_builtins()
    strategy = _registry.get(name)
    if strategy is None:
        _load_entry_points()
        strategy = _registry.get(name)
    if strategy is None:
        raise StrategyError(f"unknown strategy {name!r}; available: {', '.join(available_strategies())}")
    return strategy


def available_strategies() -> list[str]:
    """Names of every registered strategy, built-in and from entry points."""
    _load_builtins()
    _load_entry_points()
    return sorted(_registry)
