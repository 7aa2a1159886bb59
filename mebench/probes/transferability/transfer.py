"""Transferability: do adversarial examples crafted on the stolen substitute fool the victim?

For a checkpoint substitute (Track A or B), untargeted L∞ adversarial examples are crafted on
the substitute (FGSM; PGD with a fixed number of steps, a step size and a random start) for a
fixed, seeded subset of the victim's test split restricted to images the victim classifies
correctly, and scored on the victim:
See docs/transferability.md.
"""
# - ``success_rate``: the share of those images the victim misclassifies (transfer success);
# - ``substitute_success_rate``: the share the substitute itself misclassifies (white-box), among
#   the ``substitute_n_images`` images it classifies as the victim does before the attack (an
#   image the substitute already gets wrong is no success of the attack; counting it let a
#   substitute that agrees with the victim on few images score near 1).
#
# Every rate is independent of which rows ran before it (contract §10): the image subset has its
# own generator (``generator(seed, "transfer")`` in the engine), and PGD's random starts come from
# a generator seeded per (run seed, ``checkpoint_B``, track, method) (``pgd_generator``), so the
# rows may be evaluated in any order, resumed or skipped without changing a number.
#
# Reference rows per method and ε place the numbers (``checkpoint_B`` 0): the attack crafted on
# the victim itself (track ``victim``, the white-box upper bound) and on each member of an
# ensemble of models of the substitute's architecture trained on the victim's own training data
# with its true labels (track ``independent``, column ``member``; ``mebench.probes.transferability.refcache``: trained once
# per machine and code identity).
#
# Every row is repeated over a list of ε (a success-vs-ε curve; ε 0.3 sits at the ceiling on
# MNIST, where white-box PGD reaches 1.0, and ε 0.2 separates substitutes far better). The list
# is the profile's ``transfer_eps_curve`` unless ``measure.transfer.eps`` names one; PGD's step size
# stays proportional to ε as the profile defines it (``pgd_alpha`` at ``transfer_eps``, e.g.
# 0.01 at 0.3: 40 steps of ε/30), and its step count is the profile's ``pgd_steps``. The
# profile's ``transfer_headline_eps`` (0.2 on MNIST-like data) is the one a leaderboard shows.
# ε, steps and step size are written with every row. The victim is reached through
# this evaluation path, never through the oracle: nothing here is charged to the budget and the
# attack never sees it. Rows go to ``transfer.csv`` (long format), so ``metrics.csv`` keeps
# exactly the contract's columns; the fidelity rows ``rows`` returns beside them
# (``mebench.probes.transferability.fidelity``) go to ``fidelity.csv`` (``write_records``).
#
# Carlini–Wagner L2 (``cw``; Carlini & Wagner, *Towards Evaluating the Robustness of Neural Networks*,
# IEEE S&P 2017) is a minimum-norm attack with no ε: it is crafted once per substitute (``cw_l2``: Adam
# in tanh space on ``||δ||² + c·max(Z_y − max_{i≠y} Z_i, −κ)``, a binary search over ``c`` per
# image), and its rows share the ε axis of FGSM and PGD by clipping that perturbation into each L∞
# ε-ball, plus one row at ε 1, where nothing is clipped (the plain CW example). Its cost is kept small
# by default (``TransferSettings.cw_*``: 3 binary-search steps of 50 Adam steps, ``c`` from 1, κ 0, the
# same image subset); ``steps`` in a CW row is binary steps × steps, ``alpha`` the Adam learning rate,
# ``seconds`` counts the shared crafting on the row of the first ε.

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mebench.probes.transferability.fidelity import input_grad
from mebench.support.inference import chunked
from mebench.support.seeding import derive_seed
from mebench.victims.wrapper import FrozenVictim

METHODS: tuple[str, ...] = ("fgsm", "pgd", "cw")
#: Columns of transfer.csv.
TRANSFER_COLUMNS: tuple[str, ...] = (
    "seed", "checkpoint_B", "track", "method", "eps", "steps", "alpha", "n_images",
    "success_rate", "substitute_success_rate", "substitute_n_images", "member", "seconds",
)


def fgsm(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """One step of ε·sign(∇ₓ CE(model(x), y)), clipped to the pixel range [0, 1]."""
    return (x + eps * input_grad(model, x, y).sign()).clamp(0.0, 1.0).detach()


def pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int, alpha: float,
        generator: torch.Generator) -> torch.Tensor:
    """L∞ PGD: a uniform random start in the ε-ball, ``steps`` steps of α·sign(∇), each projected
    back into the ε-ball around ``x`` and into [0, 1]."""
    start = (torch.rand(x.shape, generator=generator, device=generator.device) * 2 - 1).to(x.device) * eps
    adv = (x + start).clamp(0.0, 1.0)
    for _ in range(steps):
        adv = adv + alpha * input_grad(model, adv, y).sign()
        adv = torch.min(torch.max(adv, x - eps), x + eps).clamp(0.0, 1.0).detach()
    return adv


def cw_l2(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, c: float = 1.0, kappa: float = 0.0,
          steps: int = 50, binary_steps: int = 3, lr: float = 0.01) -> torch.Tensor:
    """Untargeted Carlini–Wagner L2 on ``model``: per image the smallest-L2 example found that the
    model misclassifies by a logit margin above ``kappa``, else ``x`` itself.

    Variables ``w`` with ``x' = (tanh(w) + 1) / 2`` (the box [0, 1] for free), Adam at ``lr`` for
    ``steps`` steps on ``||x' − x||² + c·max(Z_y − max_{i≠y} Z_i + κ, 0)``, from ``w`` at ``x``; after
    each of ``binary_steps`` rounds ``c`` is halved toward the last failure where the round
    succeeded, else multiplied by 10 until a success bounds it (the paper's search)."""
    n = x.shape[0]
    const = torch.full((n,), float(c), device=x.device)
    lo, hi = torch.zeros_like(const), torch.full_like(const, float("inf"))
    best, best_l2 = x.detach().clone(), torch.full_like(const, float("inf"))
    w0 = torch.atanh((x.detach() * 2 - 1).clamp(-1 + 1e-6, 1 - 1e-6))
    mask = F.one_hot(y, num_classes=int(model(x[:1]).shape[1])).bool()
    for _ in range(binary_steps):
        w = w0.clone().requires_grad_(True)
        opt = torch.optim.Adam([w], lr=lr)
        hit = torch.zeros(n, dtype=torch.bool, device=x.device)
        for _ in range(steps):
            adv = (torch.tanh(w) + 1) / 2
            z = model(adv)
            real, other = z[mask], z.masked_fill(mask, float("-inf")).max(dim=1).values
            l2 = (adv - x).flatten(1).pow(2).sum(dim=1)
            with torch.no_grad():
                ok = (other - real > kappa) & (l2 < best_l2)
                best[ok], best_l2[ok] = adv.detach()[ok], l2.detach()[ok]
                hit |= other - real > kappa
            loss = (l2 + const * (real - other + kappa).clamp_min(0)).sum()
            (w.grad,) = torch.autograd.grad(loss, w)  # never into the model's own .grad
            opt.step()
        hi = torch.where(hit, torch.minimum(hi, const), hi)
        lo = torch.where(hit, lo, torch.maximum(lo, const))
        const = torch.where(torch.isinf(hi), const * 10, (lo + hi) / 2)
    return best.detach()


def pgd_generator(seed: int, budget: int, track: str, method: str,
                  device: torch.device | str = "cpu", eps: Optional[float] = None,
                  member: Optional[int] = None) -> torch.Generator:
    """The generator of one row's PGD starts, on ``device``: seeded from a stable hash of (run
    seed, ``checkpoint_B``, track, method, ε, reference member) alone, so a row's rate never
    depends on the rows evaluated before it (a shared stream made it depend on their order and number)."""
    tag = f"transfer/pgd-start/B{budget}/{track}/{method}"
    tag += "" if eps is None else f"/eps{eps:.6g}"
    tag += "" if member is None else f"/m{member}"
    g = torch.Generator(device=torch.device(device))
    return g.manual_seed(derive_seed(seed, tag))


@dataclass(frozen=True)
class TransferSettings:
    """What the profile fixes: ε (one or a curve), PGD steps and step size at ``alpha_eps``; and
    how many test images to use.

    ``eps`` is one ε or a tuple of them; PGD's step size at ε is ``pgd_alpha * ε / alpha_eps``
    (``alpha_eps`` defaults to the first ε), so the steps cover the same share of the ball at
    every ε."""

    eps: float | tuple[float, ...]
    pgd_steps: int
    pgd_alpha: float
    n_images: int = 500
    batch_size: int = 500
    alpha_eps: Optional[float] = None
    cw_c: float = 1.0
    cw_kappa: float = 0.0
    cw_steps: int = 50
    cw_binary_steps: int = 3
    cw_lr: float = 0.01

    @property
    def eps_list(self) -> tuple[float, ...]:
        return tuple(self.eps) if isinstance(self.eps, (tuple, list)) else (float(self.eps),)

    def alpha(self, eps: float) -> float:
        """PGD's step size at ``eps``: proportional to ε, as the profile's (ε, α) pair defines."""
        ref = self.alpha_eps if self.alpha_eps is not None else self.eps_list[0]
        return self.pgd_alpha * eps / ref


def correct_subset(victim: FrozenVictim, x: torch.Tensor, y: torch.Tensor, n: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` test images in a seeded random order, among those the victim classifies correctly."""
    pred = chunked(victim.logits, x, victim.device).argmax(dim=1).to(y.device)
    correct = torch.nonzero(pred == y).flatten()
    pick = correct[torch.randperm(correct.numel(), generator=generator)[:n].to(correct.device)]
    images = x[pick]
    images = images.float().div(255.0) if images.dtype == torch.uint8 else images.float()
    return images, y[pick]


class TransferEvaluator:
    """Transfer success of checkpoint substitutes against the victim (evaluation path, no oracle)."""

    def __init__(self, victim: FrozenVictim, test_x: torch.Tensor, test_y: torch.Tensor,
                 settings: TransferSettings, methods: tuple[str, ...], subset_generator: torch.Generator) -> None:
        """``subset_generator`` draws the image subset and nothing else; PGD's starts come from
        ``pgd_generator`` per row, so no row consumes randomness another row sees."""
        self.victim, self.settings, self.methods = victim, settings, tuple(methods)
        self.x, self.y = correct_subset(victim, test_x, test_y, settings.n_images, subset_generator)
        self.x, self.y = self.x.to(victim.device), self.y.to(victim.device)
        self.fidelity: Any = None  # a mebench.probes.transferability.fidelity.FidelityEvaluator, set by the caller

    def reference_rows(self, seed: int, independent: nn.Module | Sequence[nn.Module] | None = None
                       ) -> list[dict[str, Any]]:
        """The references (``checkpoint_B`` 0): the attacks crafted on the victim itself (track
        ``victim``, the white-box upper bound) and on each model of ``independent``, models of the
        substitute's architecture trained on the victim's own training data (track
        ``independent``, one ``member`` per model: an ensemble, read as mean and spread)."""
        rows = self.rows(self.victim.model, seed, 0, "victim")
        models = [] if independent is None else [independent] if isinstance(independent, nn.Module) else independent
        for i, model in enumerate(models):
            rows += self.rows(model, seed, 0, "independent", member=i)
        return rows

    def rows(self, model: nn.Module, seed: int, budget: int, track: str,
             member: Optional[int] = None) -> list[dict[str, Any]]:
        """One row per (method, ε) for one checkpoint substitute, then its fidelity rows
        (``mebench.probes.transferability.fidelity``) when the evaluator has a fidelity evaluator."""
        was = model.training
        model.eval()
        out = []
        try:
            for method in self.methods:
                if method == "cw":
                    out += self._cw_rows(model, seed, budget, track, member)
                    continue
                for eps in self.settings.eps_list:
                    out.append(self._row(model, method, eps, seed, budget, track, member))
            if self.fidelity is not None:
                out += self.fidelity.rows(model, seed, budget, track, member)
        finally:
            model.train(was)
        return out

    def _row(self, model: nn.Module, method: str, eps: float, seed: int, budget: int, track: str,
             member: Optional[int]) -> dict[str, Any]:
        s = self.settings
        craft: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
        if method == "fgsm":
            craft, steps, alpha = (lambda i, xb, yb: fgsm(model, xb, yb, eps)), 1, eps
        else:
            g = pgd_generator(seed, budget, track, method, self.x.device, eps, member)  # this row's own starts
            steps, alpha = s.pgd_steps, s.alpha(eps)
            craft = lambda i, xb, yb: pgd(model, xb, yb, eps, steps, alpha, g)  # noqa: E731
        t0 = time.perf_counter()
        return self._record(model, craft, method, eps, steps, alpha, seed, budget, track, member, t0)

    def _record(self, model: nn.Module, craft: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor],
                method: str, eps: float, steps: int, alpha: float, seed: int, budget: int, track: str,
                member: Optional[int], t0: float) -> dict[str, Any]:
        fooled_victim, fooled_self, agreed = self._score(model, craft)
        n = int(self.x.shape[0])
        return {"seed": seed, "checkpoint_B": budget, "track": track, "method": method, "eps": eps,
                "steps": steps, "alpha": alpha, "n_images": n,
                "success_rate": fooled_victim / n if n else None,
                "substitute_success_rate": fooled_self / agreed if agreed else None,
                "substitute_n_images": agreed, "member": member, "seconds": time.perf_counter() - t0}

    def cw_eps(self) -> tuple[float, ...]:
        """CW's ε: the curve's, then 1 (no clipping: the plain CW example) unless the curve has it."""
        eps = self.settings.eps_list
        return eps if 1.0 in eps else (*eps, 1.0)

    def _cw_rows(self, model: nn.Module, seed: int, budget: int, track: str,
                 member: Optional[int]) -> list[dict[str, Any]]:
        """CW crafted once on ``model`` (``cw_l2``, batch by batch), then one row per ``cw_eps`` with
        the perturbation clipped into that L∞ ball; the crafting time is on the first row."""
        s, bs = self.settings, self.settings.batch_size
        t0 = time.perf_counter()
        adv = torch.cat([cw_l2(model, self.x[i:i + bs], self.y[i:i + bs], c=s.cw_c, kappa=s.cw_kappa, steps=s.cw_steps,
                               binary_steps=s.cw_binary_steps, lr=s.cw_lr)
                         for i in range(0, int(self.x.shape[0]), bs)]) if len(self.x) else self.x
        out = []
        for eps in self.cw_eps():
            clipped = (self.x + (adv - self.x).clamp(-eps, eps)).clamp(0.0, 1.0)
            craft = lambda i, xb, yb, c=clipped: c[i:i + xb.shape[0]]  # noqa: E731
            out.append(self._record(model, craft, "cw", eps, s.cw_binary_steps * s.cw_steps, s.cw_lr, seed, budget,
                                    track, member, t0))
            t0 = time.perf_counter()
        return out

    def _score(self, model: nn.Module, craft: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
               ) -> tuple[int, int, int]:
        """(images the victim misclassifies after the attack; among the images the substitute
        classified as the victim does before it, those it misclassifies after; their number)."""
        fooled_victim = fooled_self = agreed = 0
        for i in range(0, int(self.x.shape[0]), self.settings.batch_size):
            xb, yb = self.x[i:i + self.settings.batch_size], self.y[i:i + self.settings.batch_size]
            adv = craft(i, xb, yb)
            with torch.no_grad():
                same = model(xb).argmax(dim=1) == yb  # yb is the victim's (correct) answer
                fooled_victim += int((self.victim.logits(adv).argmax(dim=1) != yb).sum())
                fooled_self += int(((model(adv).argmax(dim=1) != yb) & same).sum())
                agreed += int(same.sum())
        return fooled_victim, fooled_self, agreed


def settings_for(profile: Any, n_images: Optional[int] = None,
                 eps: Optional[Sequence[float]] = None) -> TransferSettings:
    """The profile's transfer settings: the ε curve (``transfer_eps_curve``, or ``eps`` when given,
    i.e. ``measure.transfer.eps``), ``pgd_steps``, and ``pgd_alpha`` at ``transfer_eps``."""
    curve = tuple(float(e) for e in (eps if eps else profile.transfer_eps_curve or (profile.transfer_eps,)))
    return TransferSettings(curve, profile.pgd_steps, profile.pgd_alpha, 500 if n_images is None else n_images,
                            alpha_eps=profile.transfer_eps)


def split_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(transfer rows, fidelity rows) of one mixed list (``TransferEvaluator.rows`` returns both)."""
    return [r for r in rows if "method" in r], [r for r in rows if "measure" in r]


def write_records(seed_dir: Path, rows: Sequence[dict[str, Any]]) -> None:
    """``transfer.csv`` and, when there are fidelity rows, ``fidelity.csv`` (both long format, atomic)."""
    from mebench.run import artifacts
    from mebench.probes.transferability.fidelity import FIDELITY_COLUMNS

    transfer, fidelity = split_rows(rows)
    artifacts.write_csv(seed_dir / "transfer.csv", TRANSFER_COLUMNS, transfer)
    if fidelity:
        artifacts.write_csv(seed_dir / "fidelity.csv", FIDELITY_COLUMNS, fidelity)


def evaluator_for(params: Any, prep: Any, seed: int) -> TransferEvaluator:
    """One seed's transfer evaluator for the transfer probe's ``params`` (methods, images, eps), with
    its fidelity evaluator (``mebench.probes.transferability.fidelity``): the image subset from ``generator(seed, "transfer")``,
    the off-manifold sets from the seed's own streams."""
    from mebench.probes.transferability.fidelity import FidelityEvaluator
    from mebench.support.seeding import generator

    ev = TransferEvaluator(prep.victim, prep.evaluator.x, prep.evaluator.y,
                           settings_for(prep.profile, params.images, params.eps), params.methods,
                           generator(seed, "transfer"))
    p = prep.profile
    off = FidelityEvaluator.default_sets(p.input_shape, seed, tuple(p.mean), tuple(p.std))
    ev.fidelity = FidelityEvaluator(prep.victim.model, ev.x, ev.y, off)
    return ev


def reference_models(plan: Any, site: Any, k: int, num_classes: int, device: torch.device, x: torch.Tensor,
                     y: torch.Tensor) -> list[nn.Module]:
    """The ``independent`` reference ensemble of ``k`` models (``measure.transfer.references``;
    ``mebench.probes.transferability.refcache``: trained once per machine and code identity), indexed by the run's plan
    so a cost estimate knows it is cached."""
    from mebench.probes.transferability.refcache import ensemble_key, reference_ensemble
    from mebench.training.track_a import TrackASpec

    base = TrackASpec.from_plan(plan, num_classes)
    index = ensemble_key(plan, k, device, torch.get_num_threads())
    return reference_ensemble(base, k, victim_file(site), device, x, y, index=index)


def victim_file(site: Any) -> Optional[str]:
    """The victim's checkpoint path when its format reads one (its recipe sits beside it as ``.json``)."""
    from mebench.victims.registry import reads_file

    return site.victim.checkpoint_ref if reads_file(site.victim.format) else None


def victim_seeds(plan: Any, site: Any) -> tuple[int, ...]:
    """The victim recipe's seed when its architecture is the substitute's (``PATH.json``): an
    initialization no reference or init-variance model may start from."""
    from mebench.probes.transferability.refcache import victim_recipe

    path = victim_file(site)
    recipe = victim_recipe(path) if path else None
    seed = recipe.get("seed") if recipe and recipe.get("arch") == plan.track_a.arch else None
    return (seed,) if isinstance(seed, int) else ()
