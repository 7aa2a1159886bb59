"""Tiny SYNTH runs whose metrics.csv bytes are pinned (issue 35: outputs stay byte-identical).

Each case is a set of config overrides for ``mebench.testing.synthetic_config``; the digests
(``data/pins/metrics_csv.json``, per environment) were first computed on the code before the run
plan existed (commit 27f4652).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BUDGET = {"max_budget": 300, "checkpoints": [100, 300]}
ACTIVETHIEF_FAST = {"strategy": "k_center", "rounds": 2, "max_steps": 40, "patience": 20, "candidate_factor": 10,
                    "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5.0e-4}}
CASES: dict[str, dict] = {
    "random": {"attack": {"name": "random", "params": {"batch_size": 64}}},
    "dfme": {"dataset": {"data_mode": "data_free", "surrogate_name": None},
             "attack": {"name": "dfme", "params": {"batch_size": 4, "grad_m": 2, "nz": 8, "generator_width": 4,
                                                   "student_steps": 3}}},
    "knockoff_fast": {"attack": {"name": "knockoff", "label": "knockoff_fast", "params": {"epochs": 2, "lr_step": 1}}},
    "activethief_kcenter_fast": {"attack": {"name": "activethief", "label": "activethief_kcenter_fast",
                                            "params": ACTIVETHIEF_FAST}},
    "random_defended": {"attack": {"name": "random", "params": {"batch_size": 64}},
                        "defense": {"name": "gaussian_noise", "params": {"sigma": 0.05}}},
}


def tiny_metrics(tmp_path: Path, victim_path: Path, case: str) -> bytes:
    """The metrics.csv bytes of one tiny single-seed run (1 torch thread)."""
    from mebench.testing import deep_update, synthetic_config_dict

    raw = deep_update(synthetic_config_dict(tmp_path, victim_path), {"budget": BUDGET, **CASES[case]})
    return _one_thread_metrics(raw)


def tiny_metrics_digest(tmp_path: Path, victim_path: Path, case: str) -> str:
    """sha256 of :func:`tiny_metrics`."""
    return hashlib.sha256(tiny_metrics(tmp_path, victim_path, case)).hexdigest()


#: The same five runs on real MNIST with the LeNet-5 victim (``victims/mnist_lenet5.pt``), from
#: ``configs/mnist_lenet5_random_soft.yaml``; the fast variants keep their presets' parameters.
REAL_BASE = "configs/mnist_lenet5_random_soft.yaml"
REAL_BUDGET = {"max_budget": 300, "checkpoints": [100, 300]}
REAL_CASES: dict[str, dict] = {
    "random": {},
    "dfme": {"dataset": {"data_mode": "data_free", "surrogate_name": None},
             "attack": {"name": "dfme", "params": {"batch_size": 16, "grad_m": 1, "student_steps": 2}}},
    "knockoff_fast": {"attack": {"name": "knockoff", "label": "knockoff_fast", "params": {"epochs": 10, "lr_step": 6}}},
    "activethief_kcenter_fast": {"attack": {"name": "activethief", "label": "activethief_kcenter_fast",
                                            "params": {**ACTIVETHIEF_FAST, "rounds": 5, "max_steps": 100}}},
    "random_defended": {"defense": {"name": "gaussian_noise", "params": {"sigma": 0.05}}},
}


def real_metrics_digest(tmp_path: Path, root: Path, case: str, data_root: Path) -> str:
    """sha256 of the metrics.csv bytes of one tiny single-seed real-MNIST run (1 torch thread);
    ``root`` is the repository folder holding ``configs/`` and ``victims/``."""
    import yaml

    from mebench.testing import deep_update

    raw = yaml.safe_load((root / REAL_BASE).read_text())
    raw = deep_update(raw, {"run": {"seeds": [0], "output_dir": str(tmp_path / "runs")},
                            "victim": {"checkpoint_ref": str(root / "victims" / "mnist_lenet5.pt")},
                            "dataset": {"data_root": str(data_root)}, "budget": REAL_BUDGET, **REAL_CASES[case]})
    return hashlib.sha256(_one_thread_metrics(raw)).hexdigest()


def _one_thread_metrics(raw: dict) -> bytes:
    """Run ``raw`` (one seed) with one torch thread; its seed_0 ``metrics.csv`` bytes."""
    import torch

    from mebench.run import engine
    from mebench.config import parse_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = engine.run(parse_config(raw), progress=False)
    finally:
        torch.set_num_threads(threads)
    return (result.directory / "seed_0" / "metrics.csv").read_bytes()
