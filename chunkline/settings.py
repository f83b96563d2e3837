"""Typed settings from plain data: YAML files, environment variables and ``key=value`` overrides.

Settings are frozen dataclasses. :func:`build_dataclass` turns a mapping into one, checking every key and
value and naming a bad one by its dotted path (``chunking.headings.max_heading_level``). Values that arrive
as strings (from the environment or the command line) are read as YAML scalars first, so ``1024`` is an
int, ``true`` a bool and ``null`` None.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

__all__ = [
    "ConfigError",
    "build_dataclass",
    "deep_merge",
    "env_overrides",
    "parse_scalar",
    "read_yaml_mapping",
    "set_dotted",
    "parse_assignments",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A setting is unknown, missing or has a value of the wrong type or range."""


def parse_scalar(raw: str) -> Any:
    """A string from the environment or command line read as a YAML scalar (``"12"`` -> 12)."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        stripped = raw.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            # [*.md, drafts/*]: YAML reads * as an alias; take the items as plain text.
            return [item.strip() for item in stripped[1:-1].split(",") if item.strip()]
        return raw
    if isinstance(value, (dict, list)) and not raw.strip().startswith(("{", "[")):
        return raw
    return value


def read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Safely load a YAML file that must hold a mapping."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, found {type(data).__name__}")
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
    """``["chunking.max_tokens=256", ...]`` as a nested mapping.

    With ``default_section``, a key whose first part is not a section name is taken to be in that section
    (``max_tokens=256`` is ``chunking.max_tokens=256``).
    """
    data: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, raw = assignment.partition("=")
        key = key.strip()
        if not separator or not key:
            raise ConfigError(f"--set expects key=value, got {assignment!r}")
        if default_section and "." not in key:
            key = f"{default_section}.{key}"
        set_dotted(data, key, parse_scalar(raw))
    return data


def env_overrides(environ: Mapping[str, str], prefixes: Mapping[str, str]) -> dict[str, Any]:
    """Settings from environment variables, mdvdb style.

    ``prefixes`` maps a variable prefix to a section, e.g. ``{"CHUNKLINE_CHUNK_": "chunking"}``:
    ``CHUNKLINE_CHUNK_MAX_TOKENS=1024`` sets ``chunking.max_tokens``, and a double underscore nests,
    ``CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LEVEL=3`` sets ``chunking.headings.max_heading_level``.
    """
    data: dict[str, Any] = {}
    for name in sorted(environ):
        for prefix, section in prefixes.items():
            if name.startswith(prefix) and len(name) > len(prefix):
                path = ".".join(part.lower() for part in name[len(prefix) :].split("__"))
                set_dotted(data, f"{section}.{path}", parse_scalar(environ[name]))
    return data


def build_dataclass(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """An instance of the dataclass ``cls`` from ``data``, every key and value checked.

    Nested dataclass fields take nested mappings. Unknown keys, missing required keys and values of the
    wrong type raise :class:`ConfigError` naming the dotted path. The class's own ``__post_init__`` checks
    run last, and their ``ValueError`` is reported with the path too.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping, got {type(data).__name__}")
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"unknown setting {where}{unknown[0]}; known settings here: {', '.join(sorted(fields))}"
        )
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
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{path or cls.__name__}: {error}") from None


def coerce(value: Any, annotation: Any, path: str) -> Any:
    """``value`` checked against ``annotation`` (and converted where that is unambiguous)."""
    origin = get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
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
    if origin is Literal:
        allowed = get_args(annotation)
        if value not in allowed:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        item_type = get_args(annotation)[0] if get_args(annotation) else Any
        items = [coerce(item, item_type, f"{path}[{number}]") for number, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        return build_dataclass(annotation, value, path)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected a whole number, got {value!r}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{path}: expected text, got {value!r}")
    if isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise ConfigError(f"{path}: unsupported value {value!r} for {annotation}")
