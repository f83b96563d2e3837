"""Front matter loaded safely into JSON-safe data, with bounded work.

A document's front matter becomes ``FrontMatter.data``: a mapping that ``json.dumps(data, sort_keys=True)``
always serialises, whatever the YAML or TOML said. What the loaders give is normalised so:

* **Keys keep the text they were written with.** YAML reads ``on``, ``yes``, ``2024``, ``2024-01-01`` and
  ``null`` as a bool, an int, a date or None, which JSON cannot sort alongside strings; here a mapping key
  is its scalar's text (``on: push`` -> ``{"on": "push"}``). A key that is a sequence or a mapping
  (``? [a, b]``) is refused: no JSON key could stand for it faithfully.
* **Values become JSON types.** Dates, datetimes and times -> ISO 8601 strings; ``!!binary`` bytes ->
  their base64 text; a ``!!set`` -> the sorted list of its members; ``!!omap`` -> a mapping;
  ``!!pairs`` -> a list of ``[key, value]`` lists; NaN and infinities -> the strings ``"nan"``, ``"inf"``
  and ``"-inf"``; a lone surrogate from a ``"\\ud800"`` escape -> U+FFFD (a pair of them, the character
  they encode), since the tables are UTF-8.
* **Aliases cannot multiply the work.** Every node of the YAML is converted once; converting one again
  through an alias counts against :data:`MAX_ALIAS_VALUES` values and :data:`MAX_ALIAS_CHARS` characters,
  and front matter that goes past either is refused — a few hundred bytes of nested aliases ("billion
  laughs") would otherwise expand to gigabytes. An alias inside the node it names (a recursive alias)
  and nesting deeper than :data:`MAX_FRONT_MATTER_DEPTH` are refused too.

Only safe loading is used: tags that build Python objects are refused, never run. A refusal is a
:class:`FrontMatterError` whose message names the line and column in the document.
"""

from __future__ import annotations

import base64
import math
import re
from datetime import date, datetime, time
from typing import Any

__all__ = [
    "FrontMatterError",
    "MAX_ALIAS_CHARS",
    "MAX_ALIAS_VALUES",
    "MAX_FRONT_MATTER_DEPTH",
    "NotAMapping",
    "load_front_matter",
]

#: Values (scalars, sequences, mappings) that aliases may add to front matter beyond those written out.
MAX_ALIAS_VALUES = 10_000
#: Characters of scalars that aliases may add to front matter beyond those written out.
MAX_ALIAS_CHARS = 1_000_000
#: Levels of nested sequences and mappings front matter may have; documents use a handful.
MAX_FRONT_MATTER_DEPTH = 64

# The body of front matter starts on the document's second line (after the opening fence).
_FIRST_BODY_LINE = 2

_YAML_TAG = "tag:yaml.org,2002:"
_MAP, _SET, _OMAP, _PAIRS, _SEQ, _MERGE, _STR = (
    _YAML_TAG + name for name in ("map", "set", "omap", "pairs", "seq", "merge", "str")
)


_RECURSIVE_ALIAS = "an alias refers to a collection it is part of (a recursive alias)"


class FrontMatterError(ValueError):
    """Front matter that cannot be loaded safely; the message says why, and where in the document."""


class NotAMapping(Exception):
    """The fenced block loads to something other than a mapping: it is markdown, not front matter."""


def load_front_matter(format_name: str, body: str) -> dict[str, Any]:
    """The JSON-safe mapping of front matter ``body`` (``format_name`` ``"yaml"`` or ``"toml"``).

    Raises :class:`FrontMatterError` for front matter that cannot be loaded or is refused, and
    :class:`NotAMapping` for a block that loads to something other than a mapping."""
    if format_name == "yaml":
        return _load_yaml(body)
    return _load_toml(body)


# --------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------


def _load_yaml(body: str) -> dict[str, Any]:
    flat = flat_yaml(body)
    if flat is not None:
        return flat
    return _load_yaml_safely(body)


# The common front matter, ``key: value`` lines of plain words, quoted text, whole numbers and booleans,
# read without a YAML parser: what PyYAML's safe loader (YAML 1.1) gives for exactly these lines.
_FLAT_KEY = r"[A-Za-z_][A-Za-z0-9_-]*"
# A plain scalar that starts with a letter resolves to a bool, a null or text (YAML 1.1's numbers,
# dates and merge keys start with a digit, a sign, a dot or "<"); its characters cannot start a comment,
# a flow collection or a mapping value.
_FLAT_PLAIN = r"[A-Za-z][A-Za-z0-9 _.,()/'!?&+*=;$%@^~-]*(?<! )"
_FLAT_INT = r"-?(?:0|[1-9][0-9]{0,17})"
# Quoted text on one line, without escapes or its own quote, of characters YAML reads as themselves.
_FLAT_QUOTED_CHARS = r"""[^\\"'\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]*"""
_FLAT_LINE = re.compile(
    rf"({_FLAT_KEY}): +(?:(?P<int>{_FLAT_INT})|(?P<plain>{_FLAT_PLAIN})"
    rf"|\"(?P<double>{_FLAT_QUOTED_CHARS})\"|'(?P<single>{_FLAT_QUOTED_CHARS})')"
)
_YAML_BOOLS = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_YAML_NULLS = frozenset(("null", "Null", "NULL"))


def flat_yaml(body: str) -> dict[str, Any] | None:
    """The mapping of front matter made only of ``key: value`` lines (a key of letters, digits, ``_`` and
    ``-``; a value that is a whole number, a plain word or phrase starting with a letter, or text in
    quotes without escapes), as the safe loader would give it; None for anything else, which the safe
    loader then reads."""
    data: dict[str, Any] = {}
    for line in body.split("\n"):
        if not line:
            continue
        match = _FLAT_LINE.fullmatch(line)
        if match is None:
            return None
        key, number, plain, double, single = match.groups()
        if number is not None:
            data[key] = int(number)
        elif plain is not None:
            if plain in _YAML_BOOLS:
                data[key] = _YAML_BOOLS[plain]
            else:
                data[key] = None if plain in _YAML_NULLS else plain
        else:
            data[key] = double if double is not None else single
    return data or None


def _load_yaml_safely(body: str) -> dict[str, Any]:
    import yaml

    try:
        # libyaml takes UTF-8: a surrogate code point (only a Python string can hold one) cannot reach it.
        body.encode("utf-8")
    except UnicodeEncodeError as error:
        raise FrontMatterError(
            f"it holds a surrogate code point (U+{ord(body[error.start]):04X}), which YAML cannot read"
        ) from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(body)
    try:
        root = loader.get_single_node()
        if root is None:
            return {}
        if not isinstance(root, yaml.MappingNode):
            raise NotAMapping
        return _YamlConverter(loader).convert(root, 0)
    except (NotAMapping, FrontMatterError):
        raise
    except yaml.MarkedYAMLError as error:
        if error.problem and error.problem_mark is not None:
            raise FrontMatterError(_yaml_problem(error.problem, error.problem_mark)) from None
        raise FrontMatterError(" ".join(str(error).split())) from None
    except Exception as error:  # anything else a loader raises is reported, never raised on
        raise FrontMatterError(" ".join(str(error).split()) or type(error).__name__) from None
    finally:
        loader.dispose()


def _yaml_problem(problem: str, mark: Any) -> str:
    """``problem`` with the line and column counted in the document (the body starts on line 2)."""
    if mark is None:
        return problem
    detail = f"{problem} at line {mark.line + _FIRST_BODY_LINE}, column {mark.column + 1}"
    if "constructor" in problem:
        detail += " (tags that build Python objects are refused: front matter is loaded safely)"
    return detail


class _YamlConverter:
    """Turns a composed YAML node graph into JSON-safe data, each node once plus a bounded alias budget."""

    def __init__(self, loader: Any):
        self._loader = loader
        self._converted: set[int] = set()
        self._open: set[int] = set()  # collections being converted: meeting one again is a recursive alias
        self._alias_values = 0
        self._alias_chars = 0

    def _refuse(self, problem: str, node: Any) -> FrontMatterError:
        return FrontMatterError(_yaml_problem(problem, node.start_mark))

    def _count(self, node: Any, chars: int, values: int = 1) -> None:
        """Charge visiting ``node`` again (through an alias) to the alias budget, refusing once it is spent;
        a node's first visit is free, since the text holds it."""
        if id(node) not in self._converted:
            self._converted.add(id(node))
            return
        self._alias_values += values
        self._alias_chars += chars
        if self._alias_values > MAX_ALIAS_VALUES or self._alias_chars > MAX_ALIAS_CHARS:
            raise self._refuse(
                f"aliases expand it past {MAX_ALIAS_VALUES:,} values or {MAX_ALIAS_CHARS:,} characters "
                "(nested aliases multiply); write the values out or use fewer aliases",
                node,
            )

    def convert(self, node: Any, depth: int) -> Any:
        import yaml

        if isinstance(node, yaml.ScalarNode):
            self._count(node, len(node.value))
            return self._scalar(node)
        if id(node) in self._open:
            raise self._refuse(_RECURSIVE_ALIAS, node)
        if depth >= MAX_FRONT_MATTER_DEPTH:
            raise self._refuse(f"it is nested deeper than {MAX_FRONT_MATTER_DEPTH} levels", node)
        self._count(node, 0)
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, depth)
            return self._sequence(node, depth)
        finally:
            self._open.discard(id(node))

    def _scalar(self, node: Any) -> Any:
        import yaml

        if node.tag == _STR:  # most values: text as written, as the constructor would give it, at less cost
            return _valid_text(node.value)
        try:
            value = self._loader.construct_object(node)
        except yaml.MarkedYAMLError:
            raise
        except Exception as error:  # e.g. a date that does not exist: say which value and where
            problem = " ".join(str(error).split()) or type(error).__name__
            raise self._refuse(f"value {_excerpt(node.value)} cannot be read ({problem})", node) from None
        return json_safe_scalar(value)

    def _key(self, node: Any) -> str:
        import yaml

        if not isinstance(node, yaml.ScalarNode):
            kind = "mapping" if isinstance(node, yaml.MappingNode) else "sequence"
            raise self._refuse(f"a key is a {kind}; write each key as plain text", node)
        self._count(node, len(node.value))
        return _valid_text(node.value)

    def _pairs(self, node: Any, depth: int) -> list[tuple[Any, Any]]:
        """The mapping's (key node, value node) pairs with ``<<`` merges applied as PyYAML applies them:
        merged pairs first, the first of several merged mappings winning, and the mapping's own last."""
        import yaml

        merged: list[tuple[Any, Any]] = []
        own: list[tuple[Any, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE:
                own.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in reversed(sources):
                if not isinstance(source, yaml.MappingNode):
                    raise self._refuse("a merge key (<<) takes a mapping or a list of mappings", source)
                if id(source) in self._open:
                    raise self._refuse(_RECURSIVE_ALIAS, source)
                if depth + 1 >= MAX_FRONT_MATTER_DEPTH:
                    raise self._refuse(f"it is nested deeper than {MAX_FRONT_MATTER_DEPTH} levels", source)
                # A merge lists the source's pairs again: charge them all, not one value.
                self._count(source, 0, values=len(source.value))
                self._open.add(id(source))
                try:
                    merged.extend(self._pairs(source, depth + 1))
                finally:
                    self._open.discard(id(source))
        return merged + own

    def _mapping(self, node: Any, depth: int) -> Any:
        if node.tag not in (_MAP, _SET, _OMAP):
            raise self._undefined_tag(node)
        latest: dict[str, Any] = {}
        for key_node, value_node in self._pairs(node, depth):
            latest[self._key(key_node)] = value_node
        if node.tag == _SET:
            return sorted(latest)
        return {key: self.convert(value_node, depth + 1) for key, value_node in latest.items()}

    def _sequence(self, node: Any, depth: int) -> Any:
        import yaml

        if node.tag == _SEQ:
            return [self.convert(item, depth + 1) for item in node.value]
        if node.tag not in (_OMAP, _PAIRS):
            raise self._undefined_tag(node)
        pairs = []
        for item in node.value:
            if not isinstance(item, yaml.MappingNode) or len(item.value) != 1:
                raise self._refuse(f"each item of {node.tag} is a mapping of one key and its value", item)
            self._count(item, 0)
            key_node, value_node = item.value[0]
            pairs.append((self._key(key_node), self.convert(value_node, depth + 1)))
        if node.tag == _OMAP:
            return dict(pairs)
        return [list(pair) for pair in pairs]

    def _undefined_tag(self, node: Any) -> FrontMatterError:
        # The words PyYAML's safe constructor uses for a tag it refuses.
        return self._refuse(f"could not determine a constructor for the tag {node.tag!r}", node)


# --------------------------------------------------------------------------------------------------
# TOML
# --------------------------------------------------------------------------------------------------


def _load_toml(body: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(body)
    except Exception as error:  # a syntax error, or nesting past the parser's recursion
        raise FrontMatterError(" ".join(str(error).split()) or type(error).__name__) from None
    return _json_safe(data, 0)


def _json_safe(value: Any, depth: int) -> Any:
    """``value`` (from a TOML loader: no aliases, keys already strings) with JSON types only."""
    if isinstance(value, (dict, list)):
        if depth >= MAX_FRONT_MATTER_DEPTH:
            raise FrontMatterError(f"it is nested deeper than {MAX_FRONT_MATTER_DEPTH} levels")
        if isinstance(value, dict):
            return {_valid_text(str(key)): _json_safe(item, depth + 1) for key, item in value.items()}
        return [_json_safe(item, depth + 1) for item in value]
    return json_safe_scalar(value)


# --------------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------------


def json_safe_scalar(value: Any) -> Any:
    """A loaded scalar as a JSON value: text, a finite number, a bool or None (see the module's guide)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return sorted(_valid_text(str(item)) for item in value)
    return _valid_text(str(value))


def _excerpt(value: str, limit_chars: int = 40) -> str:
    """``value`` quoted for a message, shortened: a refused scalar may be megabytes long."""
    return repr(value) if len(value) <= limit_chars else repr(value[:limit_chars]) + f"... ({len(value):,} characters)"


def _valid_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: a surrogate pair from escapes becomes its character, a lone
    surrogate U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
