"""Where mebench keeps what it may reuse across runs on one machine (torch-free).

Some work does not depend on the run seed and costs minutes: the independent reference models of
transferability, and the cost estimate's measured step times. They are kept on disk, one file per
*key*: a JSON-able description of everything the result depends on (spec, device, threads, data
fingerprint, and the code identity, so that a code change never reuses an old entry). The key's
digest names the file, and the key itself is stored beside it so an entry can be audited.

The folder is ``$MEBENCH_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/mebench``, else
``~/.cache/mebench``. Deleting it is always safe: every entry is recomputed on demand.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENV = "MEBENCH_CACHE_DIR"


def cache_root() -> Path:
    """The machine-wide cache folder (not created here)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mebench"


def key_digest(key: Any) -> str:
    """sha256 of the key's canonical JSON (sorted keys, no whitespace); 16 hex digits name a file."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_path(kind: str, key: Any, suffix: str) -> Path:
    """``<cache_root>/<kind>/<digest><suffix>``; the caller writes it atomically."""
    return cache_root() / kind / f"{key_digest(key)}{suffix}"
