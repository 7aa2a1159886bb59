"""Command-line value parsers shared by ``mebench`` and the pytest plugin (argparse ``type=``).

Each raises ``argparse.ArgumentTypeError`` with the value and what was expected,
so a bad option fails at start-up, before anything runs. See docs/guide/runs.md.
"""

from __future__ import annotations

import argparse


def int_list(text: str) -> tuple[int, ...]:
    """``"1000,10000"`` -> ``(1000, 10000)``; argparse ``type=`` so bad values fail at start-up."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def budget_list(text: str) -> tuple[int, ...]:
    """``--budgets 1000,10000``: strictly increasing positive image counts (§1.1, §15.2)."""
    values = int_list(text)
    if any(v <= 0 for v in values) or any(a >= b for a, b in zip(values, values[1:])):
        raise argparse.ArgumentTypeError(f"expected increasing positive budgets such as 1000,10000; got {text!r}")
    return values


def gpu_list(text: str) -> tuple[int, ...]:
    """``--gpus 0,2``: GPU indices; ``--gpus`` alone (or ``all``) is ``()``, every visible GPU."""
    if text.strip() == "all":
        return ()
    try:
        return int_list(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"--gpus takes comma-separated GPU indices such as 0,2; got {text!r}") from None


def positive_int(text: str) -> int:
    """``--mebench-threads 4``: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def niceness(text: str) -> int:
    """``--ray-nice 5``: a Unix niceness, -20 (highest priority) to 19 (lowest)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -20 <= value <= 19:
        raise argparse.ArgumentTypeError(f"expected a niceness from -20 (highest priority) to 19 (lowest), got {text!r}")
    return value


def ray_address(text: str) -> str:
    """``--ray`` value: ``auto`` (a running cluster), ``local`` (start one here), ``ray://host:port`` or ``host:port``."""
    value = text.strip()
    if value in ("auto", "local") or value.startswith("ray://") or (":" in value and value.rsplit(":", 1)[1].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"--ray takes auto, local, ray://host:port or host:port; got {text!r}")
