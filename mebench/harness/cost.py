"""The wall time a selection of cells will take on this machine, phase by phase.

Every phase that costs time is a named term, in seconds of one cell at the thread count the cells
will use, from step times measured on this machine (``mebench.harness.calibration``); the terms
are listed below. A cell's seconds are summed over phases and spread over the workers. Sizes a
warning and the large-run guard only, never a result. See docs/guide/grid.md.
"""
# Every phase that costs time is a named term, in seconds of one cell at the thread count the cells
# will use, from step times measured on this machine (``mebench.harness.calibration``; ``T(arch)`` below is
# the measured SGD step at batch 128, ``F(arch)`` one image forward at batch 256):
#
# - ``queries``: ``max_budget * F(victim)``, plus the defense's own work per answer in victim forwards, as
#   the defense declares it (``Defense.cost``: ``answer_forwards``);
# - ``attack``: the attack's own work (``Attack.training_cost``): its training examples ``* T(model) / 128``,
#   its forward-only examples ``* F(model)``, its generator examples ``* T(generator) / 128`` and DFMS's
#   GAN examples; ``model`` is the substitute's architecture or the attack's own (MAZE's WRN-22-2 clone);
# - ``track_a``: ``sum_B S(B) * T(substitute)`` plus one pass over the test split per checkpoint;
# - ``track_b``: one pass over the test split per checkpoint for attacks that have Track B;
# - ``transfer``: per scored model (each checkpoint and track, the victim, each reference member and
#   each init-variance model) and per ε of the curve, ``measure.transfer.images`` images through FGSM
#   (1 input-gradient step) and PGD (``pgd_steps``), a step ``T(substitute) / 128`` an image, and the
#   victim's forward on each method's images;
# - ``transfer_reference``: each member of the independent reference ensemble, ``S(train_size) *
#   T(substitute)``, trained once per spec (counted once per worker in a grid); ``reference_cached=True``
#   drops the term when the members come from the disk cache (``mebench.probes.transferability.refcache``);
# - ``init_variance`` (counted in ``track_a``): ``inits`` more Track A trainings at the largest B;
# - ``defense_fit``: the defender's own model fit, ``fit_steps * T(victim)`` as the defense declares it
#   (``Defense.cost``), once per process and parameters;
# - ``defense_utility``: the test split through the defended victim;
# - ``detection``: ``benign_streams`` benign streams of ``max_budget`` images per source through the
#   defended victim and the detector (its declared ``answer_forwards``);
# - ``verification``: per scored model (each checkpoint and track), the images each verification method
#   sends to the suspect (``Verifier.planned_images``), a suspect forward ``F(substitute)`` each, and the
#   owner's key prepared once a run from the victim (its declared victim images, ``F(victim)`` each);
# - ``verification_negatives``: the owner's negatives (``measure.verification.negatives`` models,
#   ``negative_steps`` Adam steps of ``T(arch)`` each) and their scores under each method's key, once per
#   machine (cached; counted once per worker); ``negatives_cached=True`` drops the term
#   (``mebench.probes.verification.negatives_cached``);
# - ``prepare``: loading data and the victim's test answers (``OVERHEAD_S`` plus the test split
#   through the victim).
#
# Measured times are rescaled from the load average they were measured at to the load now
# (``calibration.load_factor``). A cell's seconds are summed over phases; the selection's wall time on ``workers`` processes is
# ``max(sum / workers, longest cell) * max(1, workers * threads / cpus)``. Sizes a warning and the
# large-run guard only, never a result.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from mebench.support.naming import plural

#: Gradient steps of one CW crafting at mebench.probes.transferability.transfer's defaults (cw_binary_steps x cw_steps).
CW_STEPS = 3 * 50

#: A selection above either bound needs ``--budgets`` or ``--mebench-allow-large``.
LARGE_MAX_BUDGET = 100_000
LARGE_CPU_HOURS = 2.0
#: A LeNet-5 SGD step of 128 images on the machine ``SECONDS_PER_GAN_EXAMPLE`` is stated for (seconds).
LENET5_REF_STEP_S = 0.015
#: Seconds per image of one width-32 DCGAN generator-and-discriminator step (DFMS) on a machine where a
#: LeNet-5 step takes ``LENET5_REF_STEP_S``; scaled by this machine's measured LeNet-5 step. About 28
#: LeNet-5 images of SGD at batch 128: fitted to ``dfms_fast``'s recorded attack time at 10k (AMD EPYC,
#: 4,000-6,800 Track A steps' time) and at 100k (Intel Xeon, the idle seed 25,200), where the pool's
#: 15,000 GAN images and the loop's one a query account for it; an attack-loop query counts as one.
SECONDS_PER_GAN_EXAMPLE = 28 * LENET5_REF_STEP_S / 128
#: Per-cell fixed work (loading data, building models), seconds.
OVERHEAD_S = 2.0
PHASES = ("prepare", "queries", "attack", "track_a", "track_b", "transfer", "transfer_reference",
          "defense_fit", "defense_utility", "detection", "verification", "verification_negatives")

#: ``times(arch, input_shape, num_classes) -> {"train_step_s", "forward_image_s", ...}``.
Times = Callable[[str, tuple, int], dict]


@dataclass(frozen=True)
class Cost:
    """A selection's estimate: per-phase seconds summed over cells, the longest cell, the workers."""

    cells: int
    queries: int
    track_a_steps: int
    max_budget: int
    phases: dict[str, float] = field(default_factory=dict)
    longest_s: float = 0.0
    workers: int = 1
    threads: int = 1
    cpus: int = 1
    calibration: str = ""

    @property
    def cpu_seconds(self) -> float:
        return sum(self.phases.values())

    @property
    def cpu_hours(self) -> float:
        return self.cpu_seconds / 3600.0

    @property
    def wall_seconds(self) -> float:
        slowdown = max(1.0, self.workers * self.threads / max(1, self.cpus))
        return max(self.cpu_seconds / max(1, self.workers), self.longest_s) * slowdown

    @property
    def large(self) -> bool:
        return self.max_budget > LARGE_MAX_BUDGET or self.cpu_hours > LARGE_CPU_HOURS

    def line(self) -> str:
        top = sorted(((s, p) for p, s in self.phases.items() if s >= 0.5), reverse=True)[:4]
        parts = ", ".join(f"{p} {human(s)}" for s, p in top)
        return (f"mebench: {self.cells} grid {plural(self.cells, 'cell')} selected: {self.queries:,} queries, "
                f"{self.track_a_steps:,} Track A steps, largest budget {self.max_budget:,}; "
                f"estimate ~{human(self.wall_seconds)} wall on {self.workers} {plural(self.workers, 'worker')} x "
                f"{self.threads} {plural(self.threads, 'thread')} ({parts or 'no phase over 1 s'}; {self.calibration})")


def human(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def estimate(runs: Iterable[Any], *, workers: int = 1, threads: Optional[int] = None, device: str = "cpu",
             reference_cached: Optional[bool] = None, times: Optional[Times] = None, load: Optional[float] = None,
             negatives_cached: Optional[bool] = None) -> Cost:
    """The estimate for ``runs`` (``RunPlan``s, or ``RunConfig``s resolved for their first seed) run on
    ``workers`` processes of ``threads`` torch threads each (default: this process's count), at the
    machine's 1-minute ``load`` average (default: now; measured times are rescaled from the load
    they were measured at, ``calibration.load_factor``). ``reference_cached`` None asks the disk
    cache per plan (``refcache.ensemble_cached``); True or False says it for every plan;
    ``negatives_cached`` likewise for the verification probe's negatives (``negatives_cached``)."""
    import torch

    from mebench.harness.calibration import load_now
    from mebench.run.plan import resolve
    from mebench.support.threads import usable_cpus
    from mebench.training.loop import steps_for_budget

    threads = threads or torch.get_num_threads()
    probe = _Probe(threads, device, times, load_now() if load is None else load, usable_cpus())
    plans = [r if hasattr(r, "track_a") else resolve(r) for r in runs]
    phases = dict.fromkeys(PHASES, 0.0)
    shared: dict[tuple, list] = {}
    longest = 0.0
    for plan in plans:
        cell, once = cell_seconds(plan, probe, reference_cached, negatives_cached)
        for k, v in cell.items():
            phases[k] += v
        for key, seconds in once.items():  # trained once per process: count it once per worker that needs it
            shared.setdefault(key, []).append(seconds)
        longest = max(longest, sum(cell.values()) + sum(once.values()))
    for (phase, *_), seen in shared.items():
        phases[phase] += max(seen) * min(workers, len(seen))
    return Cost(len(plans), sum(p.max_budget for p in plans),
                sum(steps_for_budget(b, p.track_a.steps_coeff_c) for p in plans for b in p.checkpoints),
                max((p.max_budget for p in plans), default=0), phases, longest, workers, threads,
                usable_cpus(), probe.describe())


def cell_seconds(plan: Any, probe: "_Probe", reference_cached: Optional[bool] = False,
                 negatives_cached: Optional[bool] = False) -> tuple[dict[str, float], dict]:
    """One cell's seconds per phase, and the work shared by the cells of one process (``{(phase, spec): s}``)."""
    from mebench.attacks import ATTACKS
    from mebench.data.profiles import PROFILES
    from mebench.defenses import DEFENSES
    from mebench.defenses.detection import Detector
    from mebench.training.loop import steps_for_budget

    prof, ta = PROFILES.get(plan.dataset), plan.track_a
    shape, k = tuple(plan.input_shape), plan.victim.num_classes
    sub = probe(ta.arch, shape, k)
    vic = probe(plan.victim.arch or ta.arch, shape, k)
    cls = ATTACKS.get(plan.attack.name)
    own = cls.training_cost(plan.attack.params, tuple(plan.checkpoints), plan.max_budget)
    mod = probe(own.model_arch, shape, k) if own.model_arch else sub
    gen = probe("generator", shape, k)["train_step_s"] if own.generator_examples else 0.0
    gan = probe("lenet5", shape, k)["train_step_s"] / LENET5_REF_STEP_S if own.gan_examples else 0.0
    d = plan.defense
    d_cost = DEFENSES.get(d.name).cost(d.params, prof.train_size)  # declared by the defense (Defense.cost)
    answer = vic["forward_image_s"] * (1.0 + d_cost.answer_forwards)
    n_ckpt, track_b = len(plan.checkpoints), bool(cls.has_track_b)
    s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    s["prepare"] = OVERHEAD_S + prof.test_size * vic["forward_image_s"]
    s["queries"] = plan.max_budget * answer
    s["attack"] = (own.substitute_examples * mod["train_step_s"] / 128 + own.forward_examples * mod["forward_image_s"]
                   + own.generator_examples * gen / 128 + own.gan_examples * SECONDS_PER_GAN_EXAMPLE * gan)
    s["track_a"] = sum(steps_for_budget(b, ta.steps_coeff_c) for b in plan.checkpoints) * sub["train_step_s"] \
        + n_ckpt * prof.test_size * sub["forward_image_s"]
    s["track_b"] = n_ckpt * prof.test_size * mod["forward_image_s"] if track_b else 0.0
    once: dict[tuple, float] = {}
    probes = {p.name: p.params for p in getattr(plan, "probes", ())}
    transfer = probes.get("transfer")
    if transfer is not None and transfer.methods:
        n_eps = len(transfer.eps or prof.transfer_eps_curve or (prof.transfer_eps,))
        # FGSM and PGD craft per ε; CW crafts once (CW_STEPS gradient steps) and scores at each ε and at ε 1
        crafting = sum(CW_STEPS if m == "cw" else n_eps * (1 if m == "fgsm" else prof.pgd_steps) for m in transfer.methods)
        scoring = sum(n_eps + (m == "cw") for m in transfer.methods)
        per_model = (crafting * transfer.images * sub["train_step_s"] / 128
                     + scoring * transfer.images * vic["forward_image_s"])
        s["transfer"] = (n_ckpt * (1 + track_b) + 1 + transfer.references) * per_model
        if reference_cached is None:
            from mebench.probes.transferability.refcache import ensemble_cached, ensemble_key

            reference_cached = ensemble_cached(ensemble_key(plan, transfer.references, probe.device, probe.threads))
        if not reference_cached:
            for member in range(transfer.references):  # each member of the ensemble, once per worker
                spec = ("transfer_reference", ta.arch, plan.dataset, ta.steps_coeff_c, ta.init_seed,
                        repr(ta.optimizer), member)
                once[spec] = steps_for_budget(prof.train_size, ta.steps_coeff_c) * sub["train_step_s"]
    init_variance = probes.get("init_variance")
    if init_variance is not None:  # Track A at the largest B again from each other init, scored like Track A
        s["track_a"] += init_variance.inits * (steps_for_budget(plan.max_budget, ta.steps_coeff_c) * sub["train_step_s"]
                                               + prof.test_size * sub["forward_image_s"])
        if transfer is not None and transfer.methods:
            s["transfer"] += init_variance.inits * per_model
    verification = probes.get("verification")
    if verification is not None and verification.methods:
        s["verification"], negatives = _verification_seconds(plan, verification, probe, prof.test_size // 2,
                                                              n_ckpt * (1 + track_b), negatives_cached)
        if negatives:
            once[("verification_negatives", plan.dataset, repr(verification), plan.victim.checkpoint_sha256)] = negatives
    if d.name != "none":
        s["defense_utility"] = prof.test_size * answer
        if d_cost.fit_steps:
            once[("defense_fit", d.name, repr(d.params), plan.victim.victim_id)] = d_cost.fit_steps * vic["train_step_s"]
        detection = probes.get("detection")
        if detection is not None and issubclass(DEFENSES.get(d.name), Detector):
            sources = 1 + bool(detection.benign_dataset)
            s["detection"] = detection.benign_streams * sources * plan.max_budget * answer
    return s, once


def _verification_seconds(plan: Any, params: Any, probe: "_Probe", public: int, scored: int,
                          cached: Optional[bool]) -> tuple[float, float]:
    """The verification probe's seconds in one cell (suspect queries and the owner's keys) and, unless
    cached, the negatives' training and scoring (once per machine)."""
    from mebench.probes.verification import negatives_cached, negatives_key
    from mebench.verification import VERIFIERS

    shape, k = tuple(plan.input_shape), plan.victim.num_classes
    sub, vic = probe(plan.track_a.arch, shape, k), probe(plan.victim.arch or plan.track_a.arch, shape, k)
    per_suspect, keys = 0, 0
    for method in params.methods:
        cls = VERIFIERS.get(method)
        if cls.needs_defense is not None and cls.needs_defense != plan.defense.name:
            continue
        m = params.params_of(method) or cls.Params()
        suspect, prepare = cls.planned_images(m, public)
        per_suspect, keys = per_suspect + suspect, keys + prepare
    seconds = scored * per_suspect * sub["forward_image_s"] + keys * vic["forward_image_s"]
    if cached is None:
        cached = negatives_cached(negatives_key(plan, params, probe.threads))
    if cached:
        return seconds, 0.0
    archs = tuple(params.negative_archs) or tuple(dict.fromkeys([plan.victim.arch or plan.track_a.arch,
                                                                  plan.track_a.arch]))
    negatives = 0.0
    for i in range(params.negatives):
        t = probe(archs[i % len(archs)], shape, k)
        negatives += params.negative_steps * t["train_step_s"] + per_suspect * t["forward_image_s"]
    return seconds, negatives


class _Probe:
    """Measured step times per architecture (``calibration.step_times``), asked once per architecture."""

    def __init__(self, threads: int, device: str, times: Optional[Times], load: Optional[float], cpus: int) -> None:
        self.threads, self.device, self.times, self.load, self.cpus = threads, device, times, load, cpus
        self.seen: dict[tuple, dict] = {}

    def __call__(self, arch: str, shape: tuple, num_classes: int) -> dict:
        from mebench.harness.calibration import load_factor, step_times

        key = (arch, shape, num_classes)
        if key not in self.seen:
            t = (self.times or (lambda *a: step_times(*a, self.threads, self.device)))(arch, shape, num_classes)
            f = load_factor(t.get("load"), self.load, self.cpus)
            self.seen[key] = {**t, "factor": f, "train_step_s": t["train_step_s"] * f,
                              "forward_image_s": t["forward_image_s"] * f}
        return self.seen[key]

    def describe(self) -> str:
        if not self.seen:
            return "no calibration"
        dates = sorted({str(v.get("measured_at", ""))[:16] for v in self.seen.values()} - {""})
        paths = {str(v.get("path", "")) for v in self.seen.values()} - {""}
        loads = sorted({v["load"] for v in self.seen.values() if v.get("load") is not None})
        where = f", cached in {sorted(paths)[0].rsplit('/', 1)[0]}" if paths else ""
        now = f", load {self.load:.1f} now vs {loads[-1]:.1f} then" if loads and self.load is not None else ""
        return f"calibrated {dates[-1] if dates else 'by the caller'}{where}{now}"
