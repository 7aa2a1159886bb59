"""Adaptive Misinformation: Kariyappa, Qureshi, "Defending Against Model Stealing Attacks with
Adaptive Misinformation", CVPR 2020, section 4; reference code sanjaykariyappa/adaptive_misinformation
@ c2a3e1b (paths below are inside that repository).

The defended answer mixes the victim's probabilities with a misinformation model's, more of the
latter the less in-distribution the query looks (maximum softmax probability against τ). Recipes,
deviations and their measured effect: docs/defenses/adaptive_misinformation.md.
"""
# The defended answer mixes the victim's probabilities y with a misinformation model's ŷ:
#
#     ỹ = (1 - α) y + α ŷ,   α = 1 / (1 + exp(ν (max_i y_i - τ)))      (admis/utils/defense.py:51, 58)
#
# so a query the out-of-distribution detector calls in-distribution (maximum softmax probability
# above τ) gets the victim's answer, and one it calls out-of-distribution gets misinformation. The
# misinformation model has the victim's architecture and minimises -log(1 - ŷ_c)
# (admis/utils/model.py:130-133) on in-distribution batches with their true class c *and* on
# outlier-exposure (OE) batches labelled with the victim's top class (admis/utils/model.py:117-129).
#
# Recipes (``defense.params.recipe``; any single parameter may still be set on top of one):
#
# - ``reference`` (default): the reference's recipe. 20 epochs, batch 128, SGD lr 0.1 with
#   momentum 0.9 and weight decay 5e-4, StepLR(10 epochs, 0.1) (README.md:18;
#   admis/defender/train.py:31; admis/utils/model.py:358-364, 412-414); ν = 10000
#   (admis/utils/defense.py:51); τ = 0.99, the value its README documents (README.md:25-35; the
#   argparse default of ``--defense_levels`` is 0, admis/benign_user/test.py:35-37); one OE batch
#   of the same size per in-distribution batch (admis/utils/model.py:110-118).
# - ``reference_cpu``: the reference with 5 epochs and the lr step after 2.5 (the step at the same
#   fraction of training), for CPU grids; its effect is measured in the docs page.
# - ``mebench_v1``: mebench's recipe before issue 42: in-distribution batches only, 2 epochs,
#   lr 0.01 on a cosine schedule, ν = 1000, τ = 0.9 (the defense grids ran it with τ = 0.7).
#
# Deviations that remain (docs page, "Deviations from the reference that remain", with their measured
# effect): the outlier source defaults to ``synthetic_blobs`` (``mebench.defenses.outliers``; a second
# source, ``synthetic_strokes``, measures the sensitivity) because the reference's KMNIST is absent
# here; OE labels are the *fixed* victim's top class, where the reference trains victim and
# misinformation model together and labels OE images by the victim's current state
# (admis/utils/model.py:117-133; the option ``oe_labels: joint`` approximates that from the victim's
# per-epoch snapshots, ``mebench.victims.snapshots``, to measure the difference); and the detector is
# the maximum softmax probability of whatever victim the cell names: the reference's victim is trained
# with Outlier Exposure (λ = 1, admis/utils/model.py:121, 146; README.md:18), which mebench's ``*_oe``
# victim recipes reproduce (``mebench.victims.outlier_exposure``), while its standard victims are plain.

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import torch

from mebench.defenses.base import DEFENDER_SEED, DefenseContext, Defense, DefenseCost, fit_steps, register_defense
from mebench.defenses.outliers import (NO_OUTLIERS, OUTLIER_SEED, SYNTHETIC_SOURCES, check_outlier_source,
                                       outlier_images, victim_top_class)
from mebench.errors import ConfigError, DivergenceError
from mebench.support.seeding import generator
from mebench.training.loop import OptimizerSpec, batch_indices, train_steps
from mebench.victims.load import sha256_file
from mebench.victims.snapshots import load_snapshots, snapshot_path
from mebench.victims.wrapper import FrozenVictim

REFERENCE = dict(tau=0.99, nu=10000.0, epochs=20.0, batch_size=128, lr=0.1, lr_schedule="step",
                 lr_step=10.0, lr_gamma=0.1, outlier_source="synthetic_blobs")
RECIPES: dict[str, dict[str, Any]] = {
    "reference": REFERENCE,
    "reference_cpu": {**REFERENCE, "epochs": 5.0, "lr_step": 2.5},
    "mebench_v1": dict(tau=0.9, nu=1000.0, epochs=2.0, batch_size=128, lr=0.01, lr_schedule="cosine",
                       lr_step=10.0, lr_gamma=0.1, outlier_source=NO_OUTLIERS),
}
"""Each recipe's value of every parameter left unset; the reference's sources are in the module docstring."""
SCHEDULES = ("step", "cosine")
TRAINING_KEYS = ("epochs", "batch_size", "lr", "lr_schedule", "lr_step", "lr_gamma", "outlier_source", "oe_labels")
OE_LABELS = ("frozen", "joint")
"""Who labels an OE batch: the trained victim (``frozen``), or the victim's snapshot at the matching
point of its own training (``joint``, the reference's joint training approximated per epoch)."""
"""The parameters the misinformation model depends on (τ and ν only act at answer time)."""
_FITTED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
"""Fitted models per victim object and training parameters: cells that differ in τ or ν only
(or spell the same recipe differently) share one fit within a process."""
MOMENTUM, WEIGHT_DECAY = 0.9, 5e-4  # both recipes' (admis/defender/train.py:31, admis/utils/model.py:359-361)


def misinformation_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of -log(1 - p_y): small when the model gives the class y little probability.

    The reference's cross-entropy on log(1 - p) (admis/utils/model.py:132-133) is this loss plus
    the constant log(K - 1), so both have the same gradient."""
    # log(1 - p_y) = log(sum_{k != y} p_k), computed without cancellation
    others = torch.log_softmax(logits, dim=1).scatter(1, labels[:, None], float("-inf"))
    return -torch.logsumexp(others, dim=1).mean()


def step_lr_factor(step: int, batch_size: int, n: int, lr_step: float, gamma: float) -> float:
    """StepLR by epochs on a per-step clock: gamma ** floor(epochs done / lr_step)."""
    return gamma ** math.floor(step * batch_size / n / lr_step + 1e-9)


def snapshot_index(step: int, steps: int, count: int) -> int:
    """The snapshot labelling OE batches at fit step ``step`` (0-based) of ``steps``: floor(step /
    steps · count), so fit progress maps linearly onto the victim's epochs (``count`` snapshots)."""
    return min(count - 1, step * count // steps)


def train_with_outliers(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, x_oe: Optional[torch.Tensor],
                        y_oe: Optional[torch.Tensor], params: Any, g: torch.Generator) -> torch.nn.Module:
    """The reference's training loop for the misinformation model (admis/utils/model.py:100-136).

    Each step takes a shuffled in-distribution batch and the next OE batch of the same size (the
    reference's OE loader does not shuffle and restarts when exhausted), and minimises
    ``misinformation_loss`` over both. ``x``/``x_oe`` are uint8 on the model's device; ``y_oe``
    holds one row of OE labels per victim snapshot (one row: the frozen victim's), row
    ``snapshot_index(step, steps, rows)`` labelling step ``step``.
    """
    n, bs = int(x.shape[0]), params.batch_size
    steps = max(1, round(params.epochs * n / bs))
    opt = torch.optim.SGD(model.parameters(), lr=params.lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    if params.lr_schedule == "step":
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: step_lr_factor(s, bs, n, params.lr_step, params.lr_gamma))
    else:
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    oe_next = torch.arange(bs, device=x.device)
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    model.train()
    for step, idx in enumerate(batch_indices(n, steps, bs, g)):
        idx = idx.to(x.device)
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        if x_oe is not None:
            j = oe_next % x_oe.shape[0]
            labels = y_oe[snapshot_index(step, steps, y_oe.shape[0])]
            xb, yb = torch.cat([xb, x_oe.index_select(0, j)]), torch.cat([yb, labels.index_select(0, j)])
            oe_next = oe_next + bs
        loss = misinformation_loss(model(xb.float().div_(255.0)), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        finite &= torch.isfinite(loss.detach())
    if not bool(finite):
        raise DivergenceError("the misinformation model's loss became NaN or infinite")
    return model.eval()


@register_defense
class AdaptiveMisinformation(Defense):
    name, space = "adaptive_misinformation", "probs"
    paper = "Kariyappa, Qureshi, CVPR 2020"
    fits = True
    output_modes = frozenset({"soft_prob", "hard_top1"})  # misinformation can change the top-1 label too

    @dataclass(frozen=True)
    class Params:
        """Every field left unset (None) takes the value of ``recipe`` (``RECIPES``)."""

        recipe: str = "reference"
        tau: Optional[float] = None           # OOD threshold on the maximum softmax probability
        nu: Optional[float] = None            # sharpness of the switch
        epochs: Optional[float] = None        # passes over the victim's train split
        batch_size: Optional[int] = None      # in-distribution images per step (as many OE images join them)
        lr: Optional[float] = None
        lr_schedule: Optional[str] = None     # step | cosine
        lr_step: Optional[float] = None       # epochs between lr decays (step schedule)
        lr_gamma: Optional[float] = None      # lr decay factor (step schedule)
        outlier_source: Optional[str] = None  # none | synthetic_blobs | a registered dataset (not the pool)
        oe_labels: str = "frozen"             # frozen | joint (victim snapshots; see OE_LABELS)

        def __post_init__(self) -> None:
            if self.recipe not in RECIPES:
                raise ConfigError("defense.params.recipe", self.recipe, f"must be one of {sorted(RECIPES)}")
            for key, value in RECIPES[self.recipe].items():
                if getattr(self, key) is None:
                    object.__setattr__(self, key, value)

    @classmethod
    def cost(cls, params: Any, train_size: int) -> DefenseCost:
        """One more forward per answer (the misinformation model) and its fit: ``epochs`` over the train
        split, twice the images with outlier exposure."""
        outliers = getattr(params, "outlier_source", "none") != "none"
        return DefenseCost(answer_forwards=1.0, fit_steps=fit_steps(params.epochs, train_size, params.batch_size,
                                                                    2 if outliers else 1))

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        p = params
        for key, ok, rule in (
                ("tau", 0.0 <= p.tau <= 1.0, "must be in [0, 1] (a maximum softmax probability)"),
                ("nu", p.nu > 0, "must be > 0"), ("epochs", p.epochs > 0, "must be > 0"),
                ("batch_size", p.batch_size >= 1, "must be at least 1"), ("lr", p.lr > 0, "must be > 0"),
                ("lr_schedule", p.lr_schedule in SCHEDULES, f"must be one of {list(SCHEDULES)}"),
                ("lr_step", p.lr_step > 0, "must be > 0 (epochs)"),
                ("lr_gamma", 0 < p.lr_gamma <= 1, "must be in (0, 1]"),
                ("oe_labels", p.oe_labels in OE_LABELS, f"must be one of {list(OE_LABELS)}"),
                ("oe_labels", p.oe_labels == "frozen" or p.outlier_source != NO_OUTLIERS,
                 "joint labels outlier-exposure batches: it needs an outlier_source other than none")):
            if not ok:
                raise ConfigError(f"defense.params.{key}", getattr(p, key), rule)
        check_outlier_source(p.outlier_source, "defense.params.outlier_source", None, None)

    @classmethod
    def check_run(cls, params, cfg) -> None:
        """The outlier source is never the cell's attacker pool nor the victim's own dataset;
        ``oe_labels: joint`` needs the victim's snapshot file beside its checkpoint."""
        check_outlier_source(params.outlier_source, "defense.params.outlier_source", cfg.dataset.name,
                             cfg.dataset.surrogate_name, (cfg.victim.channels, *cfg.victim.input_size))
        if params.oe_labels == "joint":
            check_snapshots(cfg.victim.checkpoint_ref)

    fit_attrs = ("outlier_record",)

    @classmethod
    def fit_key(cls, params: Any) -> dict[str, Any]:
        """Minutes of training: kept on disk per ``TRAINING_KEYS`` values (τ and ν act at answer time)."""
        return {k: getattr(params, k) for k in TRAINING_KEYS}

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        """The misinformation model: the victim's architecture trained with ``misinformation_loss`` on
        the victim's train split plus, unless ``outlier_source`` is ``none``, OE images labelled with
        the victim's top class. Deterministic: seeded from ``DEFENDER_SEED``; fitted once per victim
        and ``TRAINING_KEYS`` values in a process (``_FITTED``)."""
        key = (tuple(getattr(params, k) for k in TRAINING_KEYS), ctx.input_shape, ctx.num_classes, str(ctx.device))
        fitted = _FITTED.setdefault(ctx.victim, {})
        if key not in fitted:
            t0 = time.perf_counter()
            fitted[key] = cls._fit(params, ctx)
            fitted[key].outlier_record["fit_seconds"] = round(time.perf_counter() - t0, 1)
            fitted[key].outlier_record["torch_threads"] = torch.get_num_threads()
        return fitted[key]

    @classmethod
    def _fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        x, y = ctx.train_split()
        torch.manual_seed(DEFENDER_SEED)
        model = ctx.make_model()
        g = generator(DEFENDER_SEED, cls.name)
        x_oe = outlier_images(params.outlier_source, int(x.shape[0]), ctx.input_shape,
                              ctx.load_split)
        snaps = None
        if x_oe is None and params.lr_schedule == "cosine":  # mebench_v1, bit for bit as before issue 42
            xf = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
            train_steps(model, xf.to(ctx.device), y.to(ctx.device), loss_fn=misinformation_loss,
                        steps=max(1, round(params.epochs * x.shape[0] / params.batch_size)),
                        batch_size=params.batch_size, generator=g,
                        optimizer=OptimizerSpec("sgd", params.lr, MOMENTUM, WEIGHT_DECAY))
        else:
            x = x if x.dtype == torch.uint8 else (x.float() * 255).round().to(torch.uint8)
            y_oe, snaps = oe_label_table(params, ctx, x_oe)
            train_with_outliers(model, x.to(ctx.device), y.to(ctx.device),
                                None if x_oe is None else x_oe.to(ctx.device), y_oe, params, g)
        for p in model.parameters():
            p.requires_grad_(False)
        model.outlier_record = outlier_record(params, x_oe)
        if snaps is not None:
            model.outlier_record["snapshots"] = snaps
        return model.eval()

    def describe(self) -> dict:
        """Adds the outlier set the misinformation model saw and the fit's time (in this process, where the
        fit ran; a cell that reused it reports the same record) to summary.json's ``answer_transforms``."""
        record = getattr(self.state, "outlier_record", None) or outlier_record(self.params, None)
        return {**super().describe(), "outliers": record}

    def alpha(self, probs: torch.Tensor) -> torch.Tensor:
        """The weight of misinformation per row: ~0 in distribution, ~1 out of it."""
        return torch.sigmoid(-self.params.nu * (probs.max(dim=1).values - self.params.tau))

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            mis = torch.softmax(self.state(x.to(scores.device)), dim=1)
        a = self.alpha(scores)[:, None]
        out = (1 - a) * scores + a * mis
        return out / out.sum(dim=1, keepdim=True)


def outlier_record(params: Any, x_oe: Optional[torch.Tensor]) -> dict[str, Any]:
    """What the defense records about the outlier set: its source, kind, size and labelling."""
    source = params.outlier_source
    kind = "none" if source == NO_OUTLIERS else "synthetic" if source in SYNTHETIC_SOURCES else "dataset"
    record: dict[str, Any] = {"source": source, "kind": kind, "recipe": params.recipe}
    if kind != "none":
        record["labels"] = "victim_top_class" if params.oe_labels == "frozen" else "victim_snapshot_top_class"
        record["oe_labels"] = params.oe_labels
        record["size"] = None if x_oe is None else int(x_oe.shape[0])
    if kind == "synthetic":
        record["seed"] = OUTLIER_SEED
    return record


def check_snapshots(checkpoint: str) -> dict:
    """The victim's snapshot file (``mebench.victims.snapshots``), or the one ``ConfigError`` saying
    why ``oe_labels: joint`` cannot run on this victim."""
    path = snapshot_path(checkpoint)
    try:
        return load_snapshots(path)
    except (ValueError, RuntimeError, OSError) as e:
        raise ConfigError("defense.params.oe_labels", "joint",
                          f"needs the victim's per-epoch snapshots ({e}; train the victim with a recipe "
                          f"that sets snapshots: true)") from None


def oe_label_table(params: Any, ctx: DefenseContext, x_oe: Optional[torch.Tensor]
                   ) -> tuple[Optional[torch.Tensor], Optional[dict]]:
    """OE labels, one row per labelling victim state, and (``joint``) what the record says about the snapshots.

    ``frozen``: one row, the trained victim's top class. ``joint``: one row per epoch snapshot, each
    the top class of the victim's weights after that epoch (``train_with_outliers`` picks the row)."""
    if x_oe is None:
        return None, None
    if params.oe_labels == "frozen":
        return victim_top_class(ctx.victim, x_oe)[None].to(ctx.device), None
    payload = check_snapshots(ctx.victim_checkpoint)
    rows = []
    for state in payload["state_dicts"]:
        net = ctx.make_model(payload["arch"])
        net.net.load_state_dict(state)
        rows.append(victim_top_class(FrozenVictim(net, ctx.device), x_oe))
    table = torch.stack(rows).to(ctx.device)
    final = victim_top_class(ctx.victim, x_oe)
    steps = max(1, round(params.epochs * ctx.train_split()[0].shape[0] / params.batch_size))
    return table, {"path": str(snapshot_path(ctx.victim_checkpoint)), "count": len(rows),
                   "victim_steps": [int(s) for s in payload["steps"]],
                   "sha256": sha256_file(snapshot_path(ctx.victim_checkpoint)), "fit_steps": steps,
                   "agree_with_final": [round(float((r == final).float().mean()), 4) for r in rows]}


__all__ = ["AdaptiveMisinformation", "RECIPES", "misinformation_loss", "train_with_outliers"]
