"""The declared torch range is the tested range (issue 51): the floor in ``pyproject.toml`` is the
version the documented floor check installs, and the running torch lies inside the range."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torchvision
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _floors() -> dict[str, Version]:
    """The ``>=`` floors of torch and torchvision in ``[project] dependencies`` (read without tomllib,
    which Python 3.10 lacks)."""
    deps = re.findall(r'^\s*"((?:torch|torchvision)[<>=!~][^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    reqs = {r.name: r for r in map(Requirement, deps)}
    return {name: Version(next(s.version for s in reqs[name].specifier if s.operator == ">="))
            for name in ("torch", "torchvision")}


def test_the_floor_is_what_the_floor_check_installs():
    check = (ROOT / "docs" / "guide" / "tests.md").read_text()
    pins = dict(re.findall(r'"(torch|torchvision)==([0-9.]+)"', check))
    assert {k: Version(v) for k, v in pins.items()} == _floors()


def test_the_running_torch_is_inside_the_declared_range():
    floors = _floors()
    assert Version(torch.__version__.split("+")[0]) >= floors["torch"]
    assert Version(torchvision.__version__.split("+")[0]) >= floors["torchvision"]
