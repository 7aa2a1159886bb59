"""Byte pins that say where they hold (issue 51).

A float result's bytes depend on the torch build, the device, the CPU (its model, not only its
instruction set: an Intel Xeon and an AMD EPYC, both AVX-512, gave other bytes for five tiny runs) and
the thread count, so a pin is a set of values recorded *per environment*: ``data/pins/<name>.json``
holds ``{"environments": [{"environment": {...}, "values": {...}}, ...]}``. In an environment that
has an entry, a pinned test compares against it; elsewhere it skips with a reason naming the
environments the pins were recorded in and this one (it cannot tell a changed number from a
changed kernel), and the everywhere-checks beside it (the same run twice gives the same bytes;
every metric finite and in range; the files' columns and shapes) still run.

Record the current environment's values with ``MEBENCH_PIN_WRITE=1 pytest <the pinned test>``
(serially: one writer per file); only for a deliberate change in numbers or a new environment.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any, Optional

import pytest

PINS_DIR = Path(__file__).parent / "data" / "pins"
#: What every recorded environment names; ``contract_tests/test_pins.py`` fails on an entry without one.
ENVIRONMENT_KEYS: tuple[str, ...] = ("torch", "device", "cpu_model", "cpu_capability", "machine", "torch_threads")


def environment(**extra: str) -> dict[str, Any]:
    """This process's pin environment: the torch build (``torch.__version__``, local tag included),
    the device type, the CPU model (as records name it), the instruction set of torch's CPU kernels,
    the machine architecture and the
    torch thread count the pinned runs use (one); ``extra`` adds what else a pin depends on (the
    victim checkpoint's digest for the real-data pins)."""
    import torch

    from mebench.support.runinfo import cpu_model, isa_overrides, overrides_text

    caps = overrides_text(isa_overrides())  # named only where set: entries recorded without them still match
    return {"torch": torch.__version__, "device": "cpu", "cpu_model": cpu_model() or "unknown",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "torch_threads": 1, **({"isa_overrides": caps} if caps else {}), **extra}


def describe(env: dict[str, Any]) -> str:
    """One environment in a line: ``torch 2.15.0 / cpu / AMD EPYC / AVX2 / x86_64 / 1 thread``."""
    parts = [f"torch {env.get('torch')}", str(env.get("device")), str(env.get("cpu_model")), str(env.get("cpu_capability")),
             str(env.get("machine")), f"{env.get('torch_threads')} thread(s)"]
    return " / ".join(parts + [f"{k} {v}" for k, v in sorted(env.items()) if k not in ENVIRONMENT_KEYS])


def load(name: str) -> list[dict[str, Any]]:
    """The recorded entries of pin file ``name`` (empty when the file does not exist)."""
    path = PINS_DIR / f"{name}.json"
    return json.loads(path.read_text())["environments"] if path.is_file() else []


def expected(name: str, key: str, **extra: str) -> Any:
    """The value pinned for ``key`` in this environment; skips, naming both, where none was recorded."""
    env = environment(**extra)
    for entry in load(name):
        if entry["environment"] == env and key in entry["values"]:
            return entry["values"][key]
    recorded = "; ".join(describe(e["environment"]) for e in load(name)) or "none"
    pytest.skip(f"{name}[{key}] is pinned for {recorded}; this is {describe(env)} "
                f"(record it with MEBENCH_PIN_WRITE=1)")


def record_if_asked(name: str, key: str, value: Any, **extra: str) -> None:
    """With ``MEBENCH_PIN_WRITE=1``: store ``value`` as ``key``'s pin for this environment."""
    if not os.environ.get("MEBENCH_PIN_WRITE"):
        return
    env = environment(**extra)
    entries = load(name)
    entry: Optional[dict[str, Any]] = next((e for e in entries if e["environment"] == env), None)
    if entry is None:
        entry = {"environment": env, "values": {}}
        entries.append(entry)
    entry["values"][key] = value
    PINS_DIR.mkdir(parents=True, exist_ok=True)
    (PINS_DIR / f"{name}.json").write_text(json.dumps({"environments": entries}, indent=1, sort_keys=True) + "\n")


def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    """Two empty folders for running the same pinned case twice (the everywhere-checks)."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    return one, two
