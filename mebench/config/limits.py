"""The largest value a plugin parameter may hold: one table for every registered attack, defense,
probe and adaptive strategy (issue 52), torch-free.

A plugin's own ``check_params`` states its lower bounds and its rules (``> 0``, a fraction, ...);
this table adds what no rule said: every number is finite (``mebench.config.builder`` refuses
NaN and infinities for every float) and at most an upper bound a real run could use, so a mistyped
``batch_size: 1000000000000`` or ``kd_lr: 1e30`` is one line before any work. A parameter is
bounded by its name here; a name the table does not know gets the generic bound of its type, so a
new plugin is checked the day it is registered (``contract_tests/test_param_limits.py`` fuzzes every
field of every registry and checks every default against its bound). See docs/guide/configs.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

#: A batch: at most the contract's largest budget of images.
BATCH = 1_000_000
#: Passes over data, epochs, patience: beyond this no run ends.
EPOCHS = 100_000
#: Steps and iterations of one phase, counts of draws or candidates.
STEPS = 10_000_000
#: Network widths and latent sizes.
WIDTH = 65_536
#: How many models a plugin trains or keeps side by side (students, inits, reference members).
MODELS = 1_000
#: A learning rate.
LR = 10.0
#: The generic bounds: an integer or a float whose name the table does not know.
ANY_INT = 100_000_000
ANY_FLOAT = 1e6

_GROUPS: dict[float, tuple[str, ...]] = {
    BATCH: ("batch_size", "chunk_size", "cl_batch_size", "cl_labeled_batch_size", "clone_batch_size",
            "kd_batch_size", "query_batch", "step_batch"),
    EPOCHS: ("epochs", "cl_epochs", "cl_final_epochs", "clone_epochs", "divgan_epochs", "final_epochs", "gan_epochs",
             "kd_epochs", "max_epochs", "round_epochs", "schedule_epochs", "passes", "cl_epoch_stride", "cl_lr_period",
             "lr_step", "patience", "rounds", "max_empty_rounds", "epoch_iterations"),
    STEPS: ("g_steps", "generator_steps", "query_steps", "replay_steps", "student_steps", "max_steps", "pgd_steps",
            "dfal_max_iter", "iter_clone", "iter_exp", "iter_gen", "ema_interval", "test_every", "grad_m", "ndirs",
            "num_erasings", "kde_splits", "diversity_window", "candidate_factor", "images", "replay_size",
            "gan_pool_size", "calibration_size", "unlabeled_initial", "unlabeled_step", "initial_budget",
            "benign_streams"),
    WIDTH: ("nz", "generator_width", "disc_width", "feat_dim", "latent_dim", "field_size", "crop_pad"),
    MODELS: ("ensemble_size", "num_students", "inits", "references"),
    LR: ("lr", "lr_g", "lr_gen", "lr_generator", "lr_student", "lr_clone", "student_lr", "gan_lr", "kd_lr", "cl_lr",
         "round_lr", "final_lr", "clone_lr"),
}
#: Upper bound by parameter name.
UPPER: dict[str, float] = {name: bound for bound, names in _GROUPS.items() for name in names}


def upper_bound(name: str, value: Any) -> float:
    """The largest value parameter ``name`` may hold (by name, else by the type of ``value``)."""
    if name in UPPER:
        return UPPER[name]
    return ANY_FLOAT if isinstance(value, float) else ANY_INT


def check_limits(params: Any, prefix: str, error: Callable[[str, Any, str], Exception]) -> None:
    """Raise ``error(key, value, rule)`` for the first numeric field of dataclass ``params`` (lists of
    numbers included) that is not finite or lies beyond its upper bound (in absolute value)."""
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        items = value if isinstance(value, (list, tuple)) else (value,)
        for i, v in enumerate(items):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            key = f"{prefix}.{f.name}" + (f"[{i}]" if items is value else "")
            if isinstance(v, float) and not math.isfinite(v):
                raise error(key, v, "must be a finite number")
            bound = upper_bound(f.name, v)
            if abs(v) > bound:
                shown = f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
                raise error(key, v, f"must be at most {shown} in absolute value (mebench.config.limits: "
                                    "larger than any run could use)")
