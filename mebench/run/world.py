"""What a run's plan needs built before its query loop starts (issue 35: plan -> world -> loop -> probes).

``prepare(plan, site)`` builds what every seed shares, once: the frozen victim and its answer pipeline,
the test split with the victim's reference probabilities (the ``Evaluator``), the pool source
images and the splits a defense or a probe reads. Per seed, ``make_oracle``, ``make_store``,
``build_pool`` and ``make_attack`` build the oracle (the only door to the victim), the query
store, the attacker's pool and the attack; ``World`` holds them for the loop and the probes
(``mebench.probes``). Nothing here runs a query or scores a substitute.
See docs/architecture.md.
"""

from __future__ import annotations

import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from mebench.attacks import ATTACKS, AttackContext
from mebench.data.augment import grow_pool
from mebench.data.cache import QueryStore
from mebench.data.datasets import load_split, resolve_data_root
from mebench.data.pools import Pool
from mebench.data.profiles import DatasetProfile, get_profile
from mebench.defenses import DEFENSES, Defense, DefenseContext, build_answers, make_defense
from mebench.errors import SlowVictimWarning
from mebench.support.fitcache import fit_defense
from mebench.metrics import Evaluator
from mebench.models.registry import build_model
from mebench.support.naming import QUERY_CACHE_DIR, mark_cache_owner
from mebench.support import identity
from mebench.oracle import Oracle, AnswerPipeline
from mebench.run.plan import RunPlan, RunSite
from mebench.support.progress import Say
from mebench.probes.transferability.refcache import data_fingerprint
from mebench.support.runinfo import git_commit, library_versions, machine_info
from mebench.support.seeding import generator
from mebench.support.serial import config_hash
from mebench.state import EngineState
from mebench.training.track_a import TrackASpec, TrackATrainer
from mebench.support.serial import jsonable
from mebench.probes.transferability.transfer import reference_models
from mebench.victims.formats import measure_throughput, throughput_warning
from mebench.victims.registry import build_victim
from mebench.victims.wrapper import FrozenVictim

DISCLAIMER_9 = (
    "Contract §9: this attack's queries are state-dependent (selected or synthesized for the attacker's "
    "model at query time). A lower Track A than Track B indicates lower cross-initialization generalizability "
    "of the query set, not necessarily lower usefulness for the end-to-end attack; Track B is the faithful "
    "end-to-end measure and Track A measures query-set generalizability.")


@dataclass
class Prepared:
    """What every seed of a run shares; built once."""

    profile: DatasetProfile
    num_classes: int
    device: torch.device
    victim: FrozenVictim
    answers: AnswerPipeline
    victim_meta: dict[str, Any]
    evaluator: Evaluator
    surrogate_images: Optional[torch.Tensor] = None
    surrogate_labels: Optional[torch.Tensor] = None  # the surrogate dataset's own classes (pool labels)
    victim_train_images: Optional[torch.Tensor] = None
    #: the independent reference ensembles built so far, by (Track A spec, size, victim file): a grid
    #: process shares one Prepared among cells whose transfer settings may differ (``reference_for``)
    transfer_reference: dict = field(default_factory=dict)
    seconds: float = 0.0
    data_root: Optional[Path] = None
    download: bool = False
    #: the victim's file (or callable reference), as the config names it: defenses' fits are keyed by it
    victim_ref: Optional[str] = None
    splits: dict[tuple[str, bool], Any] = field(default_factory=dict)
    defense_states: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str, train: bool, command: str = "run") -> tuple[torch.Tensor, torch.Tensor]:
        """Images (uint8) and labels of one split of dataset ``name``, read once and kept."""
        if (name, train) not in self.splits:
            self.splits[(name, train)] = load_split(name, self.data_root, train, self.download, command)
        return self.splits[(name, train)]




def prepare(plan: RunPlan, site: RunSite, command: str = "run") -> Prepared:
    """Load the victim, the test split (and its victim probabilities) and the pool source.

    ``command`` ("run" or "grid") words the fix when a dataset is missing (``datasets.HINTS``).
    """
    t0 = time.perf_counter()
    profile = get_profile(plan.dataset)
    device = torch.device(site.device)
    root = resolve_data_root(site.data_root, command)
    test_x, test_y = load_split(profile.name, root, False, site.download, command)
    num_classes = profile.num_classes
    net, meta = build_victim(site.victim, num_classes)
    victim = FrozenVictim(net, device)
    rate = measure_throughput(victim.logits, plan.input_shape, device)
    meta["throughput_images_per_s"] = rate
    slow = throughput_warning(rate, site.victim.throughput_floor, plan.max_budget)
    if slow:
        warnings.warn(slow, SlowVictimWarning, stacklevel=2)
    answers = build_answers(victim, plan.victim.temperature)  # the reference the metrics compare with
    evaluator = Evaluator(test_x, test_y, answers.reference_probs(test_x), plan.output_mode == "soft_prob", device)
    meta["test_accuracy_measured"] = evaluator.victim_accuracy()
    meta["answer_transforms"] = answers.describe()
    prep = Prepared(profile, num_classes, device, victim, answers, meta, evaluator, data_root=root,
                    download=site.download, victim_ref=site.victim.checkpoint_ref)
    if plan.pool.kind == "surrogate":
        prep.surrogate_images, prep.surrogate_labels = prep.split(plan.pool.source, True, command)
    transfer = probe_params(plan, "transfer")  # the transfer probe's independent reference ensemble
    if plan.pool.kind == "seed" or transfer is not None:  # the victim's train split, read once
        train_x, train_y = prep.split(profile.name, True, command)
        if plan.pool.kind == "seed":
            prep.victim_train_images = train_x
        if transfer is not None:
            reference_for(plan, site, prep, transfer.references, (train_x, train_y))
    prep.seconds = time.perf_counter() - t0
    return prep


def reference_for(plan: RunPlan, site: RunSite, prep: Prepared, k: int,
                  train: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> list[torch.nn.Module]:
    """The ``k``-model independent reference ensemble for the plan's Track A recipe, built once per
    process (and, through ``mebench.probes.transferability.refcache``, once per machine) on the victim's training split."""
    if k <= 0:
        return []
    key = (repr(TrackASpec.from_plan(plan, prep.num_classes)), int(k), site.victim.checkpoint_ref)
    if key not in prep.transfer_reference:
        x, y = train if train is not None else prep.split(prep.profile.name, True)
        prep.transfer_reference[key] = reference_models(plan, site, k, prep.num_classes, prep.device, x, y)
    return prep.transfer_reference[key]


def probe_params(plan: RunPlan, name: str) -> Any:
    """The typed parameters of probe ``name`` as the plan holds them, ``None`` when it does not run."""
    return next((p.params for p in plan.probes if p.name == name), None)


#: An augmented seed pool larger than this lives in an anonymous temporary file (deleted by the
#: operating system when the process ends, however it ends), so memory stays flat in B.
POOL_STREAM_BYTES = 256 << 20


def build_pool(plan: RunPlan, prep: Prepared) -> Optional[Pool]:
    """The attacker's pool for the plan's seed (§3): surrogate images, or the augmented seed set."""
    pool, seed = plan.pool, plan.seed
    if pool.kind == "surrogate":
        return Pool(prep.surrogate_images, pool.source, prep.surrogate_labels)
    if pool.kind == "seed":
        train = prep.victim_train_images
        pick = torch.randperm(train.shape[0], generator=generator(seed, "seed_set"))[: pool.seed_size]
        on_disk = pool.size * int(train[0].numel()) > POOL_STREAM_BYTES  # a 1M MNIST pool: 0.8 GB
        images = grow_pool(train[pick], pool.size, generator(seed, "seed_pool"), on_disk=on_disk)
        return Pool(images, f"{plan.dataset}-seed{pool.seed_size}-augmented")
    return None


def make_track_a_trainer(plan: RunPlan, prep: Prepared) -> TrackATrainer:
    """The Track A trainer every attack shares (§8)."""
    return TrackATrainer(TrackASpec.from_plan(plan, prep.num_classes), prep.device)


def make_oracle(plan: RunPlan, prep: Prepared) -> Oracle:
    """A fresh oracle with the plan's full budget over the shared frozen victim, behind the
    run's defense (its randomness seeded from the plan's seed)."""
    answers = build_answers(prep.victim, plan.victim.temperature, defense_for(plan, prep, plan.seed, "defense"))
    return Oracle(answers, plan.output_mode, plan.max_budget, plan.input_shape)


def defense_for(plan: RunPlan, prep: Prepared, seed: int, purpose: str) -> Defense:
    """A fresh instance of the run's defense, its randomness seeded from ``(seed, purpose)``.

    A defense with its own models (``Defense.fit``: a surrogate, a misinformation model) fits
    them once per victim and parameter set, from a fixed defender seed, and every seed and
    attack meets the same fitted defense, as they meet the same victim. A fit that declares a
    ``fit_key`` is also kept on disk for the node's other processes and later runs (``mebench.support.fitcache``).
    """
    name, params = plan.defense.name, plan.defense.params
    cls = DEFENSES.get(name)
    state = None
    if cls.fits:
        key = f"{name}:{config_hash(jsonable(params))}:T{plan.victim.temperature}"
        if key not in prep.defense_states:
            prep.defense_states[key] = fit_defense(cls, params, defense_context(plan, prep), fit_identity(plan, prep, cls, params))
        state = prep.defense_states[key]
    return make_defense(name, params, generator(seed, purpose), state)


def fit_identity(plan: RunPlan, prep: Prepared, cls: Any, params: Any) -> dict[str, Any]:
    """The victim and data a cached defense fit depends on (empty when the defense caches nothing):
    dataset, victim file hash and a fingerprint of the training split it fits on."""
    if cls.fit_key(params) is None:
        return {}
    x, y = prep.split(prep.profile.name, True)
    return {"dataset": prep.profile.name, "victim_sha256": prep.victim_meta.get("checkpoint_sha256"),
            "victim": prep.victim_ref, "data": data_fingerprint(x, y)}


def defense_context(plan: RunPlan, prep: Prepared) -> DefenseContext:
    """What a defender has to fit its models: the victim, its training split, its architecture."""
    v, shape = plan.victim, plan.input_shape

    def train_split() -> tuple[torch.Tensor, torch.Tensor]:
        return prep.split(prep.profile.name, True)

    def make_model(arch: Optional[str] = None) -> torch.nn.Module:
        return build_model(arch or prep.victim_meta.get("arch") or plan.track_a.arch, shape[0], prep.num_classes,
                           tuple(shape[1:]), v.normalization["mean"], v.normalization["std"]).to(prep.device)

    return DefenseContext(victim=prep.victim, num_classes=prep.num_classes, input_shape=tuple(shape),
                          device=prep.device, train_split=train_split, make_model=make_model,
                          temperature=v.temperature, load_split=lambda name, train: prep.split(name, train),
                          victim_checkpoint=prep.victim_ref)


def make_store(plan: RunPlan, site: RunSite, prep: Prepared, cache_dir: Optional[Path]) -> QueryStore:
    """The query store: a memmap under ``cache_dir`` when caching is enabled, else in memory."""
    return QueryStore(plan.max_budget, plan.input_shape, plan.output_mode, prep.num_classes,
                      cache_dir if site.cache_enabled else None)



def open_store(plan: RunPlan, site: RunSite, prep: Prepared, seed_dir: Path) -> QueryStore:
    """A fresh query store under the seed folder, marked so a later run can sweep it should this
    process be killed (``naming.sweep_dead_caches``)."""
    store = make_store(plan, site, prep, seed_dir / QUERY_CACHE_DIR)
    if store.on_disk:
        mark_cache_owner(store.directory, "run")
    return store


def clean_store(store: Optional[QueryStore], seed_dir: Path, policy: str,
                cache: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Delete the query store (or what an interrupted ``make_store`` left); the ``cache`` record."""
    if store is not None:
        store.cleanup()
    cache_dir = store.directory if store is not None else seed_dir / QUERY_CACHE_DIR
    if store is None and cache_dir.exists():  # interrupted inside make_store, after its mkdir
        shutil.rmtree(cache_dir, ignore_errors=True)
    cache = cache or {"used": None, "policy": policy, "location": None}
    cache["deleted"] = cache_dir is None or not cache_dir.exists()
    return cache


def row_identity(plan: RunPlan) -> dict[str, str]:
    """The identity columns of every metrics.csv row of this run (§16.2)."""
    return {"attack": plan.attack.label, "data_mode": plan.data_mode,
            "output_mode": plan.output_mode, "victim_id": plan.victim.victim_id,
            "substitute_arch": plan.track_a.arch}


def make_attack(plan: RunPlan, prep: Prepared, pool: Optional[Pool]) -> Any:
    """The plan's attack for its seed, with the plan's typed parameters."""
    a, seed = plan.attack, plan.seed
    cls = ATTACKS.get(a.name)
    # plain values only: the closure must not reach ``prep`` (victim, test split, answers)
    arch, channels, classes, size = plan.track_a.arch, plan.input_shape[0], prep.num_classes, tuple(plan.input_shape[1:])
    mean, std, device = tuple(plan.victim.normalization["mean"]), tuple(plan.victim.normalization["std"]), prep.device

    def make_substitute() -> torch.nn.Module:
        return build_model(arch, channels, classes, size, mean, std).to(device)

    extra = {} if plan.pool.seed_size is None else {"seed_size": plan.pool.seed_size}
    ctx = AttackContext(
        profile=prep.profile, output_mode=plan.output_mode, num_classes=prep.num_classes,
        input_shape=tuple(plan.input_shape), device=prep.device, seed=seed,
        generator=generator(seed, "attack"), pool=pool, params=a.params,
        checkpoints=tuple(plan.checkpoints), max_budget=plan.max_budget,
        make_substitute=make_substitute, data_mode=plan.data_mode, divergence_restarts=a.divergence_restarts, **extra)
    return adaptive_attack(plan, prep, cls(ctx), pool)


#: pool images a defense-aware strategy's copy of the defense answers its table for (at most)
ADAPTIVE_IMAGES = 5000


def adaptive_attack(plan: RunPlan, prep: Prepared, attack: Any, pool: Optional[Pool]) -> Any:
    """``attack`` behind the config's adaptive strategy (``mebench.attacks.adaptive``), or as it is.

    A defense-aware strategy (``needs_defense``) gets its own instance of the run's defense (seeded
    apart from the oracle's) and up to ``ADAPTIVE_IMAGES`` of the attacker's pool images; it never
    gets the victim."""
    from mebench.attacks.adaptive import AdaptiveAttack, parse_adaptive
    from mebench.attacks.recover import defense_in_prob_space

    seed = plan.seed
    parsed = parse_adaptive(plan.attack.adaptive or {}, plan.output_mode)
    if parsed is None:
        return attack
    cls, params = parsed
    strategy = cls(params, generator(seed, "adaptive"))
    if cls.needs_defense and pool is not None:
        g = generator(seed, "adaptive_images")
        images = pool.get(torch.randperm(len(pool), generator=g)[:ADAPTIVE_IMAGES], prep.device)
        strategy.prepare(defense_in_prob_space(defense_for(plan, prep, seed, "adaptive_defense")), images,
                         prep.num_classes)
    return AdaptiveAttack(attack, strategy)


def summary_head(plan: RunPlan, site: RunSite, prep: Prepared) -> dict[str, Any]:
    """What ``summary.json`` says about the world before anything is measured: the plan, the code,
    the attack, dataset, victim and defense, the Track A recipe and the machine (the parameters as
    typed come from the site's record of the config)."""
    cls = ATTACKS.get(plan.attack.name)
    typed, t = site.config, plan.track_a
    state_dependent = plan.attack.state_dependent
    head: dict[str, Any] = {
        "status": "running", "seed": plan.seed, "run_name": site.run_name, "config_hash": site.config_hash,
        "plan": plan.to_dict(), "plan_hash": plan.hash, "code_identity": identity.code_identity(),
        "config": typed,
        "attack": {**cls.describe(), "label": plan.attack.label, "output_mode": plan.output_mode,
                   "params": typed["attack"]["params"], "adaptive": plan.attack.adaptive or {"strategy": "naive"},
                   "state_dependent_queries": state_dependent},
        "dataset": {**prep.profile.as_metadata(), "data_mode": plan.data_mode,
                    "surrogate_name": typed["dataset"]["surrogate_name"], "seed_size": typed["dataset"]["seed_size"]},
        "victim": prep.victim_meta,
        "defense": {**typed["defense"], "paper": DEFENSES.get(plan.defense.name).paper},
        "track_a": {"batch_size": t.batch_size, "steps_coeff_c": t.steps_coeff_c,
                    "profile_override": (prep.profile.track_a_batch_size != 128 or prep.profile.steps_coeff_c != 0.2),
                    "init_seed": t.init_seed, "optimizer": typed["substitute"]["optimizer"],
                    "scheduler": "cosine over S(B)", "loss": "kl" if plan.output_mode == "soft_prob" else "ce"},
        "versions": library_versions(), "git": git_commit(), "machine": machine_info(site.device),
    }
    if state_dependent:
        head["disclaimer"] = DISCLAIMER_9
    return head




@dataclass
class World:
    """One seed's world: what the query loop drives and the probes (``mebench.probes``) measure.

    ``trainer`` is a Track A trainer handed in by the pytest harness (else Track A builds its own);
    ``store``, ``state`` and ``attack`` are filled in by the engine as it builds them.
    """

    plan: RunPlan
    site: RunSite
    prep: Prepared
    seed_dir: Path
    oracle: Oracle
    progress: bool = True
    say: Optional[Say] = None
    trainer: Optional[TrackATrainer] = None
    store: Optional[QueryStore] = None
    state: Optional[EngineState] = None
    attack: Any = None

    @property
    def seed(self) -> int:
        return self.plan.seed

    # What the probes build from the world (they never import this module at run time, so the
    # probes, the plan and the world import no circle).
    def track_a_trainer(self) -> TrackATrainer:
        """The harness's Track A trainer, else a fresh one for the plan (§8)."""
        return make_track_a_trainer(self.plan, self.prep) if self.trainer is None else self.trainer

    def defense(self, purpose: str) -> Defense:
        """A fresh instance of the run's defense, seeded from ``(seed, purpose)`` (``defense_for``)."""
        return defense_for(self.plan, self.prep, self.seed, purpose)

    def references(self, k: int) -> list[torch.nn.Module]:
        """The ``k``-model independent reference ensemble (``reference_for``)."""
        return reference_for(self.plan, self.site, self.prep, k)

    def probe_params(self, name: str) -> Any:
        """The typed parameters of probe ``name`` in the plan, ``None`` when it does not run."""
        return probe_params(self.plan, name)
