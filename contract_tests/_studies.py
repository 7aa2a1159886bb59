"""The study scripts under ``studies/`` (not a package) loaded as modules, for the tests that check them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def study(folder: str, script: str) -> ModuleType:
    """``studies/<folder>/<script>`` as a module."""
    spec = importlib.util.spec_from_file_location(f"study_{folder}_{Path(script).stem}", STUDIES / folder / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
