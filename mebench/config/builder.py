"""YAML -> frozen dataclasses, with one error per mistake naming the key, the value and the rule.

Standalone (no mebench imports): ``build_dataclass`` converts a mapping into a
dataclass by its type hints (nested dataclasses, tuples, optionals, numbers,
strings, booleans, plain dicts); ``read_yaml_file`` reads a file with
``yaml.safe_load``. Both raise ``error(key, value, rule)``; mebench passes its
``ConfigError``. See docs/guide/configs.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

ErrorFactory = Callable[[str, Any, str], Exception]


class SchemaError(ValueError):
    """The default error: ``key`` (dotted), ``value`` and ``rule`` in words."""

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key, self.value, self.rule = key, value, rule
        super().__init__(f"config key '{key}' = {value!r}: {rule}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(tp: Any, value: Any, key: str, error: ErrorFactory) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key, error)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise error(key, value, f"must be a mapping with keys {', '.join(f.name for f in dataclasses.fields(tp))}")
        return build_dataclass(tp, value, key, error)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise error(key, value, "must be a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{key}[{i}]", error) for i, v in enumerate(value))
        if len(value) != len(args):
            raise error(key, value, f"must be a list of {len(args)} values")
        return tuple(_convert(a, v, f"{key}[{i}]", error) for i, (a, v) in enumerate(zip(args, value)))
    if tp is dict or origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise error(key, value, "must be a mapping")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise error(key, value, "must be true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise error(key, value, "must be an integer")
        return value
    if tp is float:
        if isinstance(value, bool):
            raise error(key, value, "must be a number")
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise error(key, value, "must be a number") from None
            if not math.isfinite(number):
                raise error(key, value, "must be a finite number")
            return number
        if not isinstance(value, (int, float)):
            raise error(key, value, "must be a number")
        if not math.isfinite(value):
            raise error(key, value, "must be a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise error(key, value, "must be a string")
        return value
    if tp is Any:
        return value
    raise TypeError(f"unsupported config type {_type_name(tp)} at {key}")


def build_dataclass(cls: type, raw: Mapping[str, Any], prefix: str, error: ErrorFactory = SchemaError) -> Any:
    """Build dataclass ``cls`` from a mapping; an unknown or missing key or a wrong type raises ``error``.

    ``prefix`` is the dotted key of ``raw`` in the whole file (``"attack.params"``),
    so every message names the full key.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in raw:
        if k not in fields:
            close = difflib.get_close_matches(str(k), list(fields), n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            key = f"{prefix}.{k}" if prefix else str(k)
            raise error(key, raw[k], f"unknown key{hint} (valid: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in raw:
            kwargs[name] = _convert(hints[name], raw[name], key, error)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise error(key, None, "is required")
    return cls(**kwargs)


def read_yaml_file(path: Path, missing: str, error: ErrorFactory = SchemaError) -> Any:
    """``yaml.safe_load`` of a file; a missing, unreadable or invalid file is one ``error`` (key ``<file>``)."""
    if not path.is_file():
        raise error("<file>", str(path), missing)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise error("<file>", str(path), f"not valid YAML: {_yaml_problem(e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error("<file>", str(path), f"cannot be read as UTF-8 text ({type(e).__name__})") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is not None and problem:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(e).split())
