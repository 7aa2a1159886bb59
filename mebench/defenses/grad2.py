"""GRAD²: Mazeika, Li, Forsyth, "How to Steer Your Adversary: Targeted and Efficient Model Stealing
Defenses with Gradient Redirection", ICML 2022; reference code mmazeika/model-stealing-defenses
@ f125dc3 (paths below are inside that repository).

The defender holds a surrogate of the attacker's model and answers the probability vector within an
L1 ball of radius ε around the victim's that steers the surrogate's parameter gradient toward a
target direction (``target``); the surrogate is fitted once (``fit``). See docs/defenses/grad2.md.
"""
# The defender holds a surrogate of the attacker's model and answers ỹ, the probability vector within
# an L1 ball of radius ε around the victim's y (and on the simplex) that minimises the inner product
# of the surrogate's parameter gradient at ỹ with a target direction t:
#
#     min_ỹ ⟨Gᵀỹ, t⟩,   Gᵀỹ = ∇_θ mean_i Σ_k ỹ_ik log softmax(f_θ(x_i))_k       (defenses.py:82-107, 337)
#
# Gᵀỹ is linear in ỹ, so the objective's gradient g_ik = ⟨∇_θ log p_k(x_i), t⟩ / N (the reference's
# double backprop, defenses.py:312-338; here one forward-mode Jacobian-vector product) is exact and
# the problem is a linear program whose optimum the reference reaches greedily per row
# (defenses.py:347-372): ε/2 of probability mass (at most 1 − y_c) moves onto the class c with the
# smallest g, taken from the classes with the largest g first; the result is floored at 1e-15 and
# renormalised. ``redirect`` does the same for all rows at once.
#
# Targets (``target``): ``all_ones`` (default) is t = −1 over every parameter, the paper's GRAD²
# (parse_results.ipynb cell 3: "ALL-ONES_10 corresponds to the GRAD^2 method in the paper";
# get_queries.py:117-129; makebatches.sh:87); ``min_ip`` is t = Gᵀy of the query batch (the
# untargeted MIN-IP, get_queries.py:181-183), computed over consecutive chunks of ``query_batch``
# rows (the reference's 32 per GPU, get_queries.py:188).
#
# The surrogate (``fit``) has the victim's architecture and is trained on the victim's posteriors
# (distillation at temperature 1, utils.py:55-79; train_surrogate.py:88-91) for 10 epochs of a
# 50-epoch cosine schedule (early stopping, makebatches.sh:50-55; train_surrogate.py:97-107), batch
# 128, SGD lr 0.1, momentum 0.9, Nesterov, weight decay 5e-4 (train_surrogate.py:98-102), with random
# crops (padding 4, utils.py:223-229). Its images: ``surrogate_data``, the victim's own train split
# by default (the reference's ``_s1`` surrogates, get_queries.py:77) or a named dataset; the paper's
# main setting trains on the attacker's transfer set (get_queries.py:75-78), which a config
# reproduces by naming the pool's dataset.

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from mebench.defenses.base import DEFENDER_SEED, Defense, DefenseContext, DefenseCost, fit_steps, register_defense
from mebench.errors import ConfigError
from mebench.support.seeding import generator
from mebench.training.loop import train_steps
from mebench.training.spec import OptimizerSpec

TARGETS = ("all_ones", "min_ip")
VICTIM_DATA = "victim"
FLOOR = 1e-15
"""Answers are floored here before renormalising (defenses.py:372, ``clamp(tmp, 1e-15, 1)``)."""
MOMENTUM, WEIGHT_DECAY, CROP_PADDING = 0.9, 5e-4, 4  # train_surrogate.py:102; utils.py:226
FIT_KEYS = ("surrogate_data", "epochs", "schedule_epochs", "batch_size", "lr", "augment")
"""The parameters the surrogate depends on (ε, the target and ``query_batch`` act at answer time)."""
_FITTED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def redirect(y: torch.Tensor, g: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The optimum of min_ỹ Σ_k g_k ỹ_k over the simplex ∩ {‖ỹ − y‖₁ ≤ ε}, per row: ε/2 of mass (at
    most 1 − y_c) onto c = argmin g, taken from the classes of largest g first (defenses.py:347-372)."""
    y, g = y.double(), g.double()
    rows = torch.arange(y.shape[0], device=y.device)
    receiver = g.argmin(dim=1)
    cap = (1.0 - y[rows, receiver]).clamp(min=0.0, max=epsilon / 2)
    order = torch.argsort(g, dim=1, descending=True, stable=True)
    mass = y.gather(1, order).masked_fill(order == receiver[:, None], 0.0)
    before = mass.cumsum(dim=1) - mass
    take = (cap[:, None] - before).clamp(min=0.0).minimum(mass)
    out = y.clone().scatter_add_(1, order, -take)
    out[rows, receiver] += take.sum(dim=1)
    out = out.clamp(FLOOR, 1.0)
    return out / out.sum(dim=1, keepdim=True)


def class_gradients(model: torch.nn.Module, x: torch.Tensor, direction: dict[str, torch.Tensor]) -> torch.Tensor:
    """g_ik = ⟨∇_θ log softmax(f_θ(x_i))_k, direction⟩ for every row and class, by one forward-mode
    Jacobian-vector product: the reference's double backprop (defenses.py:312-338) up to the factor 1/N."""
    from torch.func import functional_call, jvp

    params = {name: p.detach() for name, p in model.named_parameters()}

    def log_probs(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.log_softmax(functional_call(model, p, (x,)), dim=1)

    return jvp(log_probs, (params,), (direction,))[1]


def batch_gradient(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gᵀy = ∇_θ mean_i Σ_k y_ik log p_ik, per parameter (defenses.py:82-107): MIN-IP's target."""
    from torch.func import functional_call

    names, params = zip(*[(n, p.detach().requires_grad_(True)) for n, p in model.named_parameters()])
    logp = torch.log_softmax(functional_call(model, dict(zip(names, params)), (x,)), dim=1)
    grads = torch.autograd.grad((y.to(logp.dtype) * logp).sum(dim=1).mean(), params)
    return dict(zip(names, grads))


def random_crop(x: torch.Tensor, padding: int, g: torch.Generator) -> torch.Tensor:
    """Each image shifted by its own random offset within a zero padding of ``padding`` pixels
    (torchvision's RandomCrop(size, padding), utils.py:226), without a per-image loop."""
    n, _, h, w = x.shape
    padded = F.pad(x, (padding,) * 4)
    dy = torch.randint(0, 2 * padding + 1, (n,), generator=g).to(x.device)
    dx = torch.randint(0, 2 * padding + 1, (n,), generator=g).to(x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, :]
    return padded[torch.arange(n, device=x.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)


def train_surrogate(model: torch.nn.Module, x: torch.Tensor, p: torch.Tensor, params: Any,
                    g: torch.Generator) -> torch.nn.Module:
    """Distil the victim's posteriors ``p`` on uint8 images ``x`` into ``model`` (train_surrogate.py:22-65):
    soft cross-entropy, Nesterov SGD, a cosine schedule of ``schedule_epochs`` stopped after ``epochs``."""
    per_epoch = int(x.shape[0]) / params.batch_size
    steps = max(1, round(params.epochs * per_epoch))

    def pixels(xb: torch.Tensor) -> torch.Tensor:
        xb = xb.float().div_(255.0)
        return random_crop(xb, CROP_PADDING, g) if params.augment else xb

    return train_steps(model, x, p, loss_fn=soft_cross_entropy, steps=steps, batch_size=params.batch_size,
                       optimizer=OptimizerSpec("sgd", params.lr, MOMENTUM, WEIGHT_DECAY, nesterov=True),
                       generator=g, transform=pixels, schedule_steps=round(params.schedule_epochs * per_epoch))


def soft_cross_entropy(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Cross-entropy to probability targets, averaged over the batch (utils.py:55-79, temperature 1)."""
    return -(p * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()


@register_defense
class Grad2(Defense):
    name, space = "grad2", "probs"
    paper = "Mazeika, Li, Forsyth, ICML 2022 (GRAD², gradient redirection)"
    fits = True
    output_modes = frozenset({"soft_prob"})
    modes_reason = ("steers the attacker's gradient through the whole probability vector (the reference "
                    "answers posteriors), which a {mode} answer does not carry")

    @dataclass(frozen=True)
    class Params:
        epsilon: float = 0.5            # L1 budget; the reference sweeps 0.0-1.0 (makebatches.sh:89)
        target: str = "all_ones"        # all_ones (GRAD²) | min_ip (get_queries.py:117-183)
        query_batch: int = 32           # min_ip's batch for Gᵀy (get_queries.py:188)
        surrogate_data: str = VICTIM_DATA  # victim (its train split) | a registered dataset's train split
        epochs: float = 10.0            # the "_10" surrogate (makebatches.sh:50-55)
        schedule_epochs: float = 50.0   # the cosine schedule's length (train_surrogate.py:97, 103)
        batch_size: int = 128           # train_surrogate.py:101
        lr: float = 0.1                 # train_surrogate.py:98
        augment: bool = True            # random crops, padding 4 (utils.py:223-229)

    @classmethod
    def cost(cls, params: Any, train_size: int) -> DefenseCost:
        """Each answer a forward-mode Jacobian-vector product of the surrogate, about 3 victim forwards
        (results/adaptive: the MNIST grad2 cells' ``collect`` took 2.8 s for 10k queries against 0.7 s
        undefended, one thread); the surrogate's fit, ``epochs`` over its data's train split."""
        if params.surrogate_data != VICTIM_DATA:
            from mebench.data.profiles import PROFILES

            train_size = PROFILES.get(params.surrogate_data).train_size
        return DefenseCost(answer_forwards=3.0, fit_steps=fit_steps(params.epochs, train_size, params.batch_size))

    @classmethod
    def check_params(cls, params, output_mode) -> None:
        p = params
        for key, ok, rule in (
                ("epsilon", 0.0 <= p.epsilon <= 2.0, "must be in [0, 2] (an L1 distance between distributions)"),
                ("target", p.target in TARGETS, f"must be one of {list(TARGETS)}"),
                ("query_batch", p.query_batch >= 1, "must be at least 1"),
                ("epochs", p.epochs > 0, "must be > 0"),
                ("schedule_epochs", p.schedule_epochs >= p.epochs, f"must be >= epochs ({p.epochs:g})"),
                ("batch_size", p.batch_size >= 1, "must be at least 1"), ("lr", p.lr > 0, "must be > 0")):
            if not ok:
                raise ConfigError(f"defense.params.{key}", getattr(p, key), rule)

    @classmethod
    def check_run(cls, params, cfg) -> None:
        """A named ``surrogate_data`` is a registered dataset with the victim's input shape."""
        source = params.surrogate_data
        if source == VICTIM_DATA:
            return
        from mebench.data.profiles import PROFILES

        shape = (cfg.victim.channels, *cfg.victim.input_size)
        if source not in PROFILES or tuple(PROFILES.get(source).input_shape) != shape:
            valid = [VICTIM_DATA, *(n for n in PROFILES.names() if tuple(PROFILES.get(n).input_shape) == shape)]
            raise ConfigError("defense.params.surrogate_data", source,
                              f"must be one of {valid}: '{VICTIM_DATA}' or a registered dataset with the "
                              f"victim's input shape {shape}")

    @classmethod
    def fit_key(cls, params: Any) -> dict[str, Any]:
        """Minutes of training: kept on disk per ``FIT_KEYS`` values."""
        return {k: getattr(params, k) for k in FIT_KEYS}

    @classmethod
    def fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        """The surrogate, once per victim and ``FIT_KEYS`` values in a process; seeded from ``DEFENDER_SEED``."""
        key = (tuple(getattr(params, k) for k in FIT_KEYS), ctx.input_shape, ctx.num_classes, str(ctx.device))
        fitted = _FITTED.setdefault(ctx.victim, {})
        if key not in fitted:
            t0 = time.perf_counter()
            model = cls._fit(params, ctx)
            model.fit_record.update(fit_seconds=round(time.perf_counter() - t0, 1), torch_threads=torch.get_num_threads())
            fitted[key] = model
        return fitted[key]

    fit_attrs = ("fit_record",)

    @classmethod
    def _fit(cls, params: Any, ctx: DefenseContext) -> torch.nn.Module:
        if params.surrogate_data == VICTIM_DATA:
            x, _ = ctx.train_split()
        elif ctx.load_split is None:
            raise ConfigError("defense.params.surrogate_data", params.surrogate_data,
                              "a named dataset needs the defense context's load_split (engine.defense_context)")
        else:
            x, _ = ctx.load_split(params.surrogate_data, True)
        x = (x if x.dtype == torch.uint8 else (x.float() * 255).round().to(torch.uint8)).to(ctx.device)
        p = torch.cat([torch.softmax(ctx.victim.logits(x[i:i + 1024].float().div(255.0)) / ctx.temperature, dim=1)
                       for i in range(0, x.shape[0], 1024)]).to(ctx.device)
        torch.manual_seed(DEFENDER_SEED)
        model = ctx.make_model().to(ctx.device)
        train_surrogate(model, x, p, params, generator(DEFENDER_SEED, cls.name))
        for q in model.parameters():
            q.requires_grad_(False)
        model.fit_record = {"surrogate_data": params.surrogate_data, "images": int(x.shape[0])}
        return model

    def describe(self) -> dict:
        """Adds what the surrogate was fitted on and how long it took (in the process that fitted it)."""
        return {**super().describe(), "surrogate": getattr(self.state, "fit_record", None)}

    def direction(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """The target t: −1 on every parameter (``all_ones``, get_queries.py:129), or Gᵀy (``min_ip``)."""
        if self.params.target == "all_ones":
            return {n: -torch.ones_like(p) for n, p in self.state.named_parameters()}
        return batch_gradient(self.state, x, y)

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        dev = next(self.state.parameters()).device
        x, y = x.to(dev, torch.float32), scores.to(dev)
        chunk = self.params.query_batch if self.params.target == "min_ip" else max(1, x.shape[0])
        parts = []
        for lo in range(0, x.shape[0], chunk):  # chunks of rows: min_ip's Gᵀy is one chunk's gradient
            xc, yc = x[lo:lo + chunk], y[lo:lo + chunk]
            g = class_gradients(self.state, xc, self.direction(xc, yc))
            parts.append(redirect(yc, g, self.params.epsilon))
        out = torch.cat(parts) if parts else y.double()
        return out.to(device=scores.device, dtype=scores.dtype)


__all__ = ["Grad2", "redirect", "class_gradients", "batch_gradient", "random_crop", "train_surrogate"]
