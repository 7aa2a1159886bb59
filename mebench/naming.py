"""Naming rules shared by configs, the grid and run folders (no heavy imports: the pytest plugin uses them)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

#: The temporary query store's folder inside a seed or cell folder (§11.2: removed when the run ends).
QUERY_CACHE_DIR = ".query_cache"
QUERY_CACHE_OWNER = "owner"  # inside the cache: the token of the pytest run whose cell made it

#: Attack labels, victim keys and defense labels: letters, digits and '_' ('-' separates cell id parts).
LABEL_RE = re.compile(r"^[A-Za-z0-9_]+$")


def unused_stamp_dir(parent: Path) -> Path:
    """``<parent>/<UTC timestamp>`` that does not exist yet (``-1``, ``-2`` ... when taken); not created."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, i = parent / stamp, 1
    while path.exists():
        path = parent / f"{stamp}-{i}"
        i += 1
    return path
