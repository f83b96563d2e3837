"""Typed settings from plain data: YAML files, environment variables and ``key=value`` overrides.

Settings are frozen dataclasses. :func:`build_dataclass` turns a mapping into one, checking every key and
value and naming a bad one by its dotted path (``chunking.headings.max_heading_level``).

A value that arrives as text (an environment variable, ``--set key=value``) is a :class:`TextValue`, and
is converted by the declared type of the setting it lands on, never guessed at as YAML: ``1024`` is an int
for ``max_tokens``, ``true`` a bool for ``fail_on_error``, ``null`` None for an optional setting, and
``0123`` or ``12:30:45`` stay exactly that text for a text setting. Storage options (``dict[str, Any]``)
declare no types for their values, so ``output.storage_options.password=0123`` is the string ``"0123"``;
only an explicit YAML or JSON mapping for the whole option set
(``output.storage_options={anon: true, max_concurrency: 4}``) gives typed values.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

__all__ = [
    "MAX_WHOLE_NUMBER",
    "ConfigError",
    "ConfigLoader",
    "DuplicateKeyError",
    "TextValue",
    "as_mapping",
    "build_dataclass",
    "check_whole_number",
    "coerce",
    "deep_merge",
    "env_overrides",
    "read_yaml_mapping",
    "set_dotted",
    "parse_assignments",
    "yaml_error_summary",
]

T = TypeVar("T")

#: The largest value of a count or size setting: chunkline's count columns (``token_count``, ``char_count``)
#: are 32-bit, and no useful value comes near it.
MAX_WHOLE_NUMBER = 2**31 - 1

#: A config file is a few lines of YAML; anything larger is not one (and ``/dev/zero`` never ends).
MAX_CONFIG_FILE_BYTES = 1_000_000

_NULL_WORDS = frozenset({"null", "none", "~", ""})
_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})
_WHOLE_NUMBER = re.compile(r"[+-]?\d+(?:_\d+)*")
# Quoted text in a YAML error: source text ('hunter2', "x"), or the parser's own token names ('<block end>')
# and the punctuation it expected (','), which are kept.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


class ConfigError(ValueError):
    """A setting is unknown, missing or has a value of the wrong type or range."""


class TextValue(str):
    """A setting's value as it arrived on the command line or in the environment: text, to be converted
    by the type of the setting it lands on (see the module docstring)."""

    __slots__ = ()


def yaml_error_summary(error: yaml.YAMLError) -> str:
    """Where and what a YAML error is, without quoting the source text (which may hold a credential):
    ``line 3, column 28: mapping values are not allowed here``."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None) or type(error).__name__
    problem = " ".join(_QUOTED.sub(_syntax_only, problem).split())
    if isinstance(error, yaml.constructor.ConstructorError):
        problem += " (only plain YAML is read: no tags such as !!python/...)"
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _syntax_only(quoted: re.Match[str]) -> str:
    content = quoted.group()[1:-1]
    is_syntax = content.startswith("<") or (len(content) == 1 and not content.isalnum())
    return quoted.group() if is_syntax else ""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping of a YAML document gives the same key twice (YAML forbids it; a plain load keeps the last)."""

    def __init__(self, key: Any, first_line: int, second_line: int):
        self.key = key
        self.first_line = first_line
        self.second_line = second_line
        super().__init__(
            f"the key {self.shown_key} is given twice in one mapping (lines {first_line} and {second_line}); keep one"
        )

    @property
    def shown_key(self) -> str:
        shown = repr(self.key)
        return shown if len(shown) <= 80 else shown[:77] + "..."


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain YAML: no ``!!python/...`` tags) that refuses a key given twice in one
    mapping, at any depth, with :class:`DuplicateKeyError`. Keys brought in by a merge (``<<: *defaults``)
    may be overridden, as YAML means them to be."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_key_nodes: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = first_key_nodes.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the safe loader's own error names it
                    continue
                if first is not key_node:
                    raise DuplicateKeyError(key, first.start_mark.line + 1, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Safely load a YAML file that must hold a mapping; every way it can fail is a :class:`ConfigError`
    naming the file (and, for a syntax error, the line and column, never the text there)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            contents = handle.read(MAX_CONFIG_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {name} does not exist; check the --config path") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {name} is a folder; --config takes a YAML file") from None
    except PermissionError:
        raise ConfigError(f"config file {name} cannot be read: permission denied") from None
    except OSError as error:
        raise ConfigError(f"config file {name} cannot be read: {error.strerror or type(error).__name__}") from None
    if len(contents) > MAX_CONFIG_FILE_BYTES:
        raise ConfigError(
            f"config file {name} is over {MAX_CONFIG_FILE_BYTES:,} bytes; a chunkline config is a few lines of YAML"
        )
    try:
        text = contents.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {name} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    try:
        data = yaml.load(text, Loader=ConfigLoader)
    except DuplicateKeyError as error:
        raise ConfigError(f"{name}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{name}: not valid YAML ({yaml_error_summary(error)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping at the top level, found {type(data).__name__}")
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base``; nested mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def set_dotted(data: dict[str, Any], dotted_key: str, value: Any) -> None:
    """Set ``data["a"]["b"]["c"] = value`` for ``dotted_key`` ``"a.b.c"``, creating mappings on the way."""
    parts = dotted_key.split(".")
    if not all(parts):
        raise ConfigError(f"{dotted_key!r} is not a dotted setting name")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def parse_assignments(assignments: Iterable[str], default_section: str | None = None) -> dict[str, Any]:
    """``["chunking.max_tokens=256", ...]`` as a nested mapping of :class:`TextValue` values.

    With ``default_section``, a key whose first part is not a section name is taken to be in that section
    (``max_tokens=256`` is ``chunking.max_tokens=256``). The values are converted later, by the type of the
    setting each one lands on.
    """
    data: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, raw = assignment.partition("=")
        key = key.strip()
        if not separator or not key:
            # Not quoted: an argument without "=" may be a credential typed in the wrong place.
            raise ConfigError("--set expects key=value, e.g. --set max_tokens=256 (one --set is not in that form)")
        if default_section and "." not in key:
            key = f"{default_section}.{key}"
        set_dotted(data, key, TextValue(raw))
    return data


def env_overrides(environ: Mapping[str, str], prefixes: Mapping[str, str]) -> dict[str, Any]:
    """Settings from environment variables, mdvdb style, as :class:`TextValue` values.

    ``prefixes`` maps a variable prefix to a section, e.g. ``{"CHUNKLINE_CHUNK_": "chunking"}``:
    ``CHUNKLINE_CHUNK_MAX_TOKENS=1024`` sets ``chunking.max_tokens``, and a double underscore nests,
    ``CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LEVEL=3`` sets ``chunking.headings.max_heading_level``.
    """
    data: dict[str, Any] = {}
    for name in sorted(environ):
        for prefix, section in prefixes.items():
            if name.startswith(prefix) and len(name) > len(prefix):
                path = ".".join(part.lower() for part in name[len(prefix) :].split("__"))
                set_dotted(data, f"{section}.{path}", TextValue(environ[name]))
    return data


def as_mapping(value: Any, path: str) -> Mapping[str, Any]:
    """The mapping given for the section or dataclass setting at ``path`` (``{}`` for None)."""
    if value is None:
        return {}
    if isinstance(value, TextValue):
        raise ConfigError(f"{path} is a group of settings: set one of them with {path}.NAME=VALUE")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
    return value


def build_dataclass(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """An instance of the dataclass ``cls`` from ``data``, every key and value checked.

    Nested dataclass fields take nested mappings. Unknown keys, missing required keys and values of the
    wrong type raise :class:`ConfigError` naming the dotted path. The class's own ``__post_init__`` checks
    run last, and their ``ValueError`` is reported with the path too.
    """
    data = as_mapping(data, path or cls.__name__)
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(f"unknown setting {where}{unknown[0]}; known settings here: {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        dotted = f"{path}.{name}" if path else name
        if name in data:
            values[name] = coerce(data[name], hints[name], dotted)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing setting {dotted}")
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (ValueError, TypeError, OverflowError) as error:
        raise ConfigError(f"{path or cls.__name__}: {error}") from None


def check_whole_number(value: object, name: str, *, minimum: int, maximum: int = MAX_WHOLE_NUMBER) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not a bool) from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be a whole number from {minimum:,} to {maximum:,}, got {value!r}")


def coerce(value: Any, annotation: Any, path: str) -> Any:
    """``value`` checked against ``annotation`` (and converted where that is unambiguous); a
    :class:`TextValue` is converted by the annotation (see the module docstring)."""
    if isinstance(value, TextValue):
        return _from_text(value, annotation, path)
    if annotation is Any:
        return _plain(value)
    return _coercer(annotation)(value, annotation, path)


def _coercer(annotation: Any) -> Callable[[Any, Any, str], Any]:
    """The step that checks a value against one kind of annotation."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union
    if origin is Literal:
        return _coerce_literal
    if origin in (tuple, list):
        return _coerce_sequence
    if origin in (dict, Mapping) or annotation is dict:
        return _coerce_mapping
    if dataclasses.is_dataclass(annotation):
        return _coerce_dataclass
    return next((step for kind, step in _SCALAR_STEPS if annotation is kind), _coerce_instance)


def _coerce_union(value: Any, annotation: Any, path: str) -> Any:
    options = get_args(annotation)
    if value is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return coerce(value, option, path)
        except ConfigError as error:
            errors.append(str(error))
    raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {value!r} fits none of {annotation}")


def _coerce_literal(value: Any, annotation: Any, path: str) -> Any:
    allowed = get_args(annotation)
    if value not in allowed:
        raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def _coerce_sequence(value: Any, annotation: Any, path: str) -> Any:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{path}: expected a list, got {value!r}")
    item_type = get_args(annotation)[0] if get_args(annotation) else Any
    items = [coerce(item, item_type, f"{path}[{number}]") for number, item in enumerate(value)]
    return tuple(items) if get_origin(annotation) is tuple else items


def _coerce_mapping(value: Any, annotation: Any, path: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
    return _plain(value)


def _coerce_dataclass(value: Any, annotation: Any, path: str) -> Any:
    if isinstance(value, annotation):
        return value
    return build_dataclass(annotation, value, path)


def _coerce_bool(value: Any, annotation: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{path}: expected true or false, got {value!r}")


def _coerce_int(value: Any, annotation: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{path}: expected a whole number, got {value!r}")


def _coerce_float(value: Any, annotation: Any, path: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"{path}: expected a number, got {value!r}")


def _coerce_str(value: Any, annotation: Any, path: str) -> str:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{path}: expected text, got {value!r}")


def _coerce_instance(value: Any, annotation: Any, path: str) -> Any:
    if isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise ConfigError(f"{path}: unsupported value {value!r} for {annotation}")


_SCALAR_STEPS = ((bool, _coerce_bool), (int, _coerce_int), (float, _coerce_float), (str, _coerce_str))


def _from_text(text: TextValue, annotation: Any, path: str) -> Any:
    """``text`` converted by the setting's declared type."""
    origin = get_origin(annotation)
    word = text.strip()
    if annotation is Any or annotation is str:
        return str(text)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in get_args(annotation) if option is not type(None)]
        if len(options) < len(get_args(annotation)) and word.lower() in _NULL_WORDS:
            return None
        errors = []
        for option in options:
            try:
                return _from_text(text, option, path)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: {str(text)!r} fits none of {annotation}")
    if origin is Literal:
        for allowed in get_args(annotation):
            if word == str(allowed):
                return allowed
        raise ConfigError(f"{path}: {word!r} is not one of {', '.join(map(repr, get_args(annotation)))}")
    if origin in (tuple, list):
        return coerce([TextValue(item) for item in _text_items(text, path)], annotation, path)
    if origin in (dict, Mapping) or annotation is dict:
        return _text_mapping(text, path)
    if dataclasses.is_dataclass(annotation):
        as_mapping(text, path)  # raises: a group of settings is set one key at a time
    if annotation is bool:
        if word.lower() in _TRUE_WORDS:
            return True
        if word.lower() in _FALSE_WORDS:
            return False
        raise ConfigError(f"{path}: expected true or false, got {str(text)!r}")
    if annotation is int:
        if _WHOLE_NUMBER.fullmatch(word):
            return int(word)
        raise ConfigError(f"{path}: expected a whole number, got {str(text)!r}")
    if annotation is float:
        try:
            return float(word)
        except ValueError:
            raise ConfigError(f"{path}: expected a number, got {str(text)!r}") from None
    raise ConfigError(f"{path}: cannot be set from text ({annotation})")


def _text_items(text: str, path: str) -> list[str]:
    """The items of a list given as text: ``[a, b]`` (YAML flow syntax, every item kept as text), or one
    item; empty text is an empty list."""
    stripped = text.strip()
    if not stripped:
        return []
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return [text]
    try:
        # BaseLoader resolves no types: "[0123, 12:30]" is ["0123", "12:30"], not [83, 750].
        items = yaml.load(stripped, Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        # [*.md, drafts/*]: YAML reads * as an alias; take the items as plain text.
        items = [item.strip() for item in stripped[1:-1].split(",") if item.strip()]
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{path}: expected a list of plain values such as [a, b]")
    return items


def _text_mapping(text: str, path: str) -> dict[str, Any]:
    """An explicit YAML or JSON mapping given as text (``{anon: true}``), its values typed as YAML types
    them. Messages name ``path`` only: the text may hold credentials."""
    if not text.strip().startswith("{"):
        raise ConfigError(
            f"{path}: expected a mapping such as {{name: value}}, or set one entry with {path}.NAME=VALUE"
        )
    try:
        value = yaml.load(text, Loader=ConfigLoader)
    except DuplicateKeyError as error:
        raise ConfigError(f"{path}: the key {error.shown_key} is given twice; keep one") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not a valid YAML mapping ({yaml_error_summary(error)})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping such as {{name: value}}")
    return _plain(value)


def _plain(value: Any) -> Any:
    """``value`` with every :class:`TextValue` inside it made a plain ``str`` (nested mappings and lists)."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value
