"""Every attack mebench ships can be run with ``mebench run`` from a config in ``configs/``.

* every run config under ``configs/`` (not the grids in ``configs/benchmarks/`` nor the victim
  recipes in ``configs/victims/``) passes validation, except the one kept invalid on purpose to
  show the error (``mnist_lenet5_dfme_hard.yaml``, checked in test_dfme.py);
* every built-in attack has at least one such config;
* the configs in ``configs/pool_attacks/`` are the reference procedures: each sets only the
  parameters that choose the procedure (the strategy or augmentation), never a training knob.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mebench.attacks import ATTACKS
from mebench.config.validation import load_config

ROOT = Path(__file__).resolve().parents[1]
INVALID_ON_PURPOSE = {"mnist_lenet5_dfme_hard.yaml"}
RUN_CONFIGS = sorted(p for p in (ROOT / "configs").rglob("*.yaml")
                     if not {"benchmarks", "victims"} & set(p.relative_to(ROOT / "configs").parts)
                     and p.name not in INVALID_ON_PURPOSE)
# the parameters that name a procedure rather than tune one
PROCEDURE_KEYS = {"knockoff": {"strategy"}, "jbda": {"augmentation", "topk"}, "copycat": set(), "dissector": set()}


def _builtin_attacks() -> set[str]:
    """The attacks mebench's own modules register (not a test's temporary ones, not a third-party plugin)."""
    return {name for name in ATTACKS.names() if ATTACKS.get(name).__module__.startswith("mebench.attacks.")}


def test_run_configs_are_found():
    assert len(RUN_CONFIGS) > 10
    assert any(p.parent.name == "pool_attacks" for p in RUN_CONFIGS)


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_run_config_validates(path):
    cfg = load_config(path, check_files=False)
    assert cfg.attack.name in ATTACKS


def test_every_builtin_attack_has_a_run_config():
    assert {"knockoff", "jbda", "copycat", "dissector", "dfms", "maze"} <= _builtin_attacks()
    covered = {load_config(p, check_files=False).attack.name for p in RUN_CONFIGS}
    missing = _builtin_attacks() - covered
    assert not missing, f"attacks without a config for `mebench run` in configs/: {sorted(missing)}"


POOL = sorted((ROOT / "configs" / "pool_attacks").glob("*.yaml"))


@pytest.mark.parametrize("path", POOL, ids=lambda p: p.stem)
def test_pool_attack_configs_are_reference_presets(path):
    cfg = load_config(path, check_files=False)
    extra = set(cfg.attack.params) - PROCEDURE_KEYS[cfg.attack.name]
    assert not extra, f"{path.name}: a reference preset overrides {sorted(extra)}"
    assert not cfg.attack.label.endswith("_fast")
    assert list(cfg.budget.checkpoints) == [1000, 10000, 50000]  # the grid's budgets
