"""The one JSON normaliser and the one config hash of mebench."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any


def jsonable(value: Any, finite: bool = True) -> Any:
    """A copy in plain JSON types: mappings become dicts with string keys, tuples and lists
    become lists, paths and unknown objects strings, NumPy/torch scalars Python numbers.
    With ``finite`` (the default) NaN and infinities become ``None`` so the text is strict JSON."""
    if isinstance(value, float):  # float subclasses (NumPy float64) become plain floats
        value = float(value)
        return value if (math.isfinite(value) or not finite) else None
    if value is None or type(value) in (str, int, bool):
        return value
    for kind in (bool, int, str):  # subclasses (torch's version string, IntEnum) become the plain type
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, finite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, finite) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # NumPy and torch scalars
        try:
            return jsonable(value.item(), finite)
        except (TypeError, ValueError):
            pass
    return str(value)


def config_hash(config: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the config as canonical JSON (sorted keys): equal configs, equal hash."""
    return hashlib.sha256(json.dumps(jsonable(config), sort_keys=True).encode()).hexdigest()[:16]
