"""The query loop and the two tracks (contract §7, §8, §14.3).

``run(cfg)`` validates the config, prepares what all seeds share (the frozen
victim and its answer pipeline, the test split and the victim's reference
probabilities on it, the pool source images), then for every seed: builds the pool and the attack, lets the attack
propose batches that the oracle answers and the query store records, and at
each checkpoint B scores Track B (the attack's own substitute, if it has one)
and Track A (a fresh substitute trained on D_B). The engine never asks what
kind of attack it runs; capabilities are read from the attack class.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from tqdm.auto import tqdm

from mebench import artifacts
from mebench.attacks import ATTACKS, AttackContext
from mebench.config import RunConfig
from mebench.data.augment import grow_pool
from mebench.data.cache import QueryStore
from mebench.data.datasets import load_split, resolve_data_root
from mebench.data.pools import Pool
from mebench.data.profiles import DatasetProfile, get_profile
from mebench.defenses import DEFENSES, Defense, DefenseContext, build_answers, make_defense
from mebench.defenses.detection import Detector, benign_streams, feed
from mebench.defenses.utility import utility_cost
from mebench.errors import SlowVictimWarning
from mebench.metrics import Evaluator
from mebench.models.registry import build_model
from mebench import identity
from mebench.naming import QUERY_CACHE_DIR, mark_cache_owner, sweep_dead_caches
from mebench.oracle import AnswerPipeline, Oracle
from mebench.plan import RunPlan, resolve
from mebench.resume import resume_seeds
from mebench.progress import Say, Ticker, interval_of, prefixed
from mebench.serial import config_hash
from mebench.runinfo import git_commit, library_versions, machine_info
from mebench.seeding import generator, seed_everything
from mebench.state import EngineState
from mebench.training.health import LossCurve, assess, restart_flag
from mebench.training.track_a import TrackASpec, TrackATrainer
from mebench import init_variance
from mebench.transfer import TransferEvaluator, evaluator_for, reference_models, victim_seeds, write_records
from mebench.types import CheckpointResult
from mebench.validation import attack_params, defense_params, seed_pool_size, validate
from mebench.victims.formats import build_victim, measure_throughput, throughput_warning
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
    transfer_reference: Optional[list[torch.nn.Module]] = None
    seconds: float = 0.0
    data_root: Optional[Path] = None
    download: bool = False
    splits: dict[tuple[str, bool], Any] = field(default_factory=dict)
    defense_states: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str, train: bool, command: str = "run") -> tuple[torch.Tensor, torch.Tensor]:
        """Images (uint8) and labels of one split of dataset ``name``, read once and kept."""
        if (name, train) not in self.splits:
            self.splits[(name, train)] = load_split(name, self.data_root, train, self.download, command)
        return self.splits[(name, train)]


@dataclass
class SeedResult:
    seed: int
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    directory: Path


@dataclass
class RunResult:
    directory: Path
    seeds: list[SeedResult] = field(default_factory=list)
    aggregate: list[dict[str, Any]] = field(default_factory=list)


def prepare(cfg: RunConfig, command: str = "run") -> Prepared:
    """Load the victim, the test split (and its victim probabilities) and the pool source.

    ``command`` ("run" or "grid") words the fix when a dataset is missing (``datasets.HINTS``).
    """
    t0 = time.perf_counter()
    profile = get_profile(cfg.dataset.name)
    device = torch.device(cfg.run.device)
    root = resolve_data_root(cfg.dataset.data_root, command)
    test_x, test_y = load_split(profile.name, root, False, cfg.dataset.download, command)
    num_classes = profile.num_classes
    net, meta = build_victim(cfg.victim, num_classes)
    victim = FrozenVictim(net, device)
    rate = measure_throughput(victim.logits, (cfg.victim.channels, *cfg.victim.input_size), device)
    meta["throughput_images_per_s"] = rate
    slow = throughput_warning(rate, cfg.victim.throughput_floor, cfg.budget.max_budget)
    if slow:
        warnings.warn(slow, SlowVictimWarning, stacklevel=2)
    answers = build_answers(victim, cfg.victim.temperature)  # the reference the metrics compare with
    evaluator = Evaluator(test_x, test_y, answers.reference_probs(test_x), cfg.attack.output_mode == "soft_prob", device)
    meta["test_accuracy_measured"] = evaluator.victim_accuracy()
    meta["answer_transforms"] = answers.describe()
    prep = Prepared(profile, num_classes, device, victim, answers, meta, evaluator, data_root=root,
                    download=cfg.dataset.download)
    if cfg.dataset.data_mode == "surrogate":
        prep.surrogate_images, prep.surrogate_labels = prep.split(cfg.dataset.surrogate_name, True, command)
    if cfg.dataset.data_mode == "seed" or cfg.metrics.transfer:  # the victim's train split, read once
        train_x, train_y = prep.split(profile.name, True, command)
        if cfg.dataset.data_mode == "seed":
            prep.victim_train_images = train_x
        if cfg.metrics.transfer:
            prep.transfer_reference = reference_models(cfg, num_classes, device, train_x, train_y)
    prep.seconds = time.perf_counter() - t0
    return prep


def build_pool(cfg: RunConfig, prep: Prepared, seed: int) -> Optional[Pool]:
    """The attacker's pool for this seed (§3): surrogate images, or the augmented seed set."""
    if cfg.dataset.data_mode == "surrogate":
        return Pool(prep.surrogate_images, cfg.dataset.surrogate_name, prep.surrogate_labels)
    if cfg.dataset.data_mode == "seed":
        train = prep.victim_train_images
        pick = torch.randperm(train.shape[0], generator=generator(seed, "seed_set"))[: cfg.dataset.seed_size]
        images = grow_pool(train[pick], seed_pool_size(cfg), generator(seed, "seed_pool"))
        return Pool(images, f"{cfg.dataset.name}-seed{cfg.dataset.seed_size}-augmented")
    return None


class CheckpointScorer:
    """Track A and Track B at one checkpoint: trains/fetches a model, scores it, returns rows."""

    def __init__(self, cfg: RunConfig, prep: Prepared, seed: int, progress: bool,
                 trainer: Optional[TrackATrainer] = None, say: Optional[Say] = None) -> None:
        self.cfg, self.prep, self.seed, self.progress, self.say = cfg, prep, seed, progress, say
        self.trainer = make_track_a_trainer(cfg, prep) if trainer is None else trainer
        self.final_model: Optional[torch.nn.Module] = None
        self.timings = {"track_a": 0.0, "track_b": 0.0}
        self.track_a_steps: dict[int, int] = {}
        self.health: list[dict[str, Any]] = []  # one record per scored checkpoint and track (training.health)
        self.transfer: Optional[TransferEvaluator] = None
        self.transfer_rows: list[dict[str, Any]] = []
        self.init_rows: list[dict[str, Any]] = []
        if cfg.metrics.transfer:  # the victim through the evaluation path: never the oracle, never the attack
            self.timings["transfer"] = 0.0
            self.transfer = evaluator_for(cfg, prep, seed)
            t0 = time.perf_counter()
            self.transfer_rows += self.transfer.reference_rows(seed, prep.transfer_reference)
            self.timings["transfer"] += time.perf_counter() - t0

    def record_health(self, track: str, budget: int, share: float, curve: Optional[LossCurve] = None) -> None:
        """Keep the checkpoint's health record; say each flag it raises (``mebench.training.health``)."""
        record = assess(track, budget, share, self.prep.evaluator.victim_top_share, curve)
        self.health.append(record)
        for flag in record["flags"]:
            if self.say is not None:
                self.say(f"WARNING {flag}")

    def score_transfer(self, model: torch.nn.Module, budget: int, track: str) -> None:
        """Transfer success of one checkpoint substitute (``metrics.transfer``), kept for transfer.csv."""
        if self.transfer is None:
            return
        t0 = time.perf_counter()
        self.transfer_rows += self.transfer.rows(model, self.seed, budget, track)
        self.timings["transfer"] += time.perf_counter() - t0

    def track_a(self, state: EngineState, budget: int) -> CheckpointResult:
        t0 = time.perf_counter()
        x, y = state.store.prefix(budget, self.prep.device)
        steps = self.trainer.steps(budget)
        ticker = Ticker(self.say, f"Track A B={budget:,}", steps, "steps", interval=interval_of(self.say))
        with tqdm(total=steps, desc=f"seed {self.seed} Track A B={budget}", unit="step",
                  disable=not self.progress or None, leave=False) as bar:
            def on_step(_: int) -> None:
                bar.update()
                ticker.update()

            losses = torch.zeros(steps, dtype=torch.float32, device=self.prep.device)
            model = self.trainer.train(x, y, on_step=on_step, losses=losses)
        self.track_a_steps[budget] = ticker.done  # recorded once trained: an interrupted training lists nothing
        metrics, share = self.prep.evaluator.score(model)
        self.final_model = model
        dt = time.perf_counter() - t0
        ticker.close(f"agreement {metrics.agreement:.4f}, acc {metrics.acc_gt:.4f}")
        self.record_health("A", budget, share, LossCurve.of(losses[:ticker.done]))
        self.timings["track_a"] += dt
        self.score_transfer(model, budget, "A")
        if self.cfg.metrics.init_variance and budget == max(self.cfg.budget.checkpoints):  # off by default
            t0 = time.perf_counter()
            self.init_rows = init_variance.measure(self.trainer, x, y, self.prep.evaluator, self.seed,
                                                   self.cfg.metrics.init_variance, self.transfer, victim_seeds(self.cfg))
            self.timings["init_variance"] = time.perf_counter() - t0
        return CheckpointResult(self.seed, budget, "A", metrics, dt)

    def track_b(self, attack: Any, state: EngineState, budget: int) -> Optional[CheckpointResult]:
        if not type(attack).has_track_b:
            return None
        t0 = time.perf_counter()
        model = attack.track_b_model(state)
        if model is None:
            return None
        metrics, share = self.prep.evaluator.score(model)
        dt = time.perf_counter() - t0
        self.record_health("B", budget, share)
        self.timings["track_b"] += dt
        self.score_transfer(model, budget, "B")
        return CheckpointResult(self.seed, budget, "B", metrics, dt)


def make_track_a_trainer(cfg: RunConfig, prep: Prepared) -> TrackATrainer:
    """The Track A trainer every attack shares (§8)."""
    return TrackATrainer(TrackASpec.from_config(cfg, prep.num_classes), prep.device)


def make_oracle(cfg: RunConfig, prep: Prepared, seed: Optional[int] = None) -> Oracle:
    """A fresh oracle with the full budget of ``cfg`` over the shared frozen victim, behind the
    run's defense (its randomness seeded from ``seed``, by default the config's first seed)."""
    seed = cfg.run.seeds[0] if seed is None else seed
    answers = build_answers(prep.victim, cfg.victim.temperature, defense_for(cfg, prep, seed, "defense"))
    return Oracle(answers, cfg.attack.output_mode, cfg.budget.max_budget,
                  (cfg.victim.channels, *cfg.victim.input_size))


def defense_for(cfg: RunConfig, prep: Prepared, seed: int, purpose: str) -> Defense:
    """A fresh instance of the run's defense, its randomness seeded from ``(seed, purpose)``.

    A defense with its own models (``Defense.fit``: a surrogate, a misinformation model) fits
    them once per victim and parameter set, from a fixed defender seed, and every seed and
    attack meets the same fitted defense, as they meet the same victim.
    """
    cls, params = DEFENSES.get(cfg.defense.name), defense_params(cfg)
    state = None
    if cls.fits:
        key = f"{cfg.defense.name}:{config_hash(cfg.defense.params)}:T{cfg.victim.temperature}"
        if key not in prep.defense_states:
            prep.defense_states[key] = cls.fit(params, defense_context(cfg, prep))
        state = prep.defense_states[key]
    return make_defense(cfg.defense.name, params, generator(seed, purpose), state)


def defense_context(cfg: RunConfig, prep: Prepared) -> DefenseContext:
    """What a defender has to fit its models: the victim, its training split, its architecture."""
    v = cfg.victim

    def train_split() -> tuple[torch.Tensor, torch.Tensor]:
        return prep.split(prep.profile.name, True)

    def make_model(arch: Optional[str] = None) -> torch.nn.Module:
        return build_model(arch or prep.victim_meta.get("arch") or cfg.substitute.arch, v.channels, prep.num_classes,
                           tuple(v.input_size), v.normalization.mean, v.normalization.std).to(prep.device)

    return DefenseContext(victim=prep.victim, num_classes=prep.num_classes, input_shape=(v.channels, *v.input_size),
                          device=prep.device, train_split=train_split, make_model=make_model,
                          temperature=v.temperature, load_split=lambda name, train: prep.split(name, train))


def detection_record(cfg: RunConfig, prep: Prepared, seed: int, detector: Detector) -> dict[str, Any]:
    """The detector's record of the attack's stream and of the benign streams (``mebench.defenses.detection``):
    ``metrics.benign_streams`` seeded orders of the victim's test split and of ``metrics.benign_dataset``'s."""
    checkpoints = tuple(cfg.budget.checkpoints)
    sources = [(f"{prep.profile.name}-test", prep.split(prep.profile.name, False)[0])]
    if cfg.metrics.benign_dataset:
        sources.append((f"{cfg.metrics.benign_dataset}-test", prep.split(cfg.metrics.benign_dataset, False)[0]))
    benign = []
    for source, k, images in benign_streams(sources, cfg.budget.max_budget, cfg.metrics.benign_streams, seed):
        fresh = defense_for(cfg, prep, seed, f"defense_benign:{source}:{k}")
        answers = build_answers(prep.victim, cfg.victim.temperature, fresh)
        feed(fresh, images, lambda xb: answers.probs(xb), checkpoints, prep.device)
        benign.append({"source": source, "stream": k, **fresh.record()})
    return {"params": dataclasses.asdict(detector.params), "attack": detector.record(), "benign": benign}


def make_store(cfg: RunConfig, prep: Prepared, cache_dir: Optional[Path]) -> QueryStore:
    """The query store: a memmap under ``cache_dir`` when caching is enabled, else in memory."""
    return QueryStore(cfg.budget.max_budget, (cfg.victim.channels, *cfg.victim.input_size),
                      cfg.attack.output_mode, prep.num_classes, cache_dir if cfg.cache.enabled else None)


def collect(attack: Any, oracle: Oracle, state: EngineState,
            on_checkpoint: Callable[[int], None], advance: Optional[Callable[[int], None]] = None) -> float:
    """propose → oracle → store → observe until the maximum budget; returns seconds spent querying."""
    cps = set(state.checkpoints)
    spent = 0.0
    while state.queries_used < state.max_budget:
        t0 = time.perf_counter()
        k = min(max(1, int(attack.next_batch_size(state))), state.next_checkpoint - state.queries_used)
        batch = attack.propose(k, state)
        if len(batch) != k:
            raise RuntimeError(f"attack '{attack.name}' proposed {len(batch)} images when asked for {k} (§14.2)")
        out = oracle.query(batch.x)
        state.store.append(batch.x, out.y)
        state.queries_used = oracle.queries_used
        attack.observe(batch, out, state)
        spent += time.perf_counter() - t0
        if advance is not None:
            advance(k)
        if state.queries_used in cps:
            on_checkpoint(state.queries_used)
    return spent


def _ident(cfg: RunConfig) -> dict[str, str]:
    return {"attack": cfg.attack_label(), "data_mode": cfg.dataset.data_mode,
            "output_mode": cfg.attack.output_mode, "victim_id": cfg.victim.victim_id,
            "substitute_arch": cfg.substitute.arch}


def make_attack(cfg: RunConfig, prep: Prepared, seed: int, pool: Optional[Pool], params: Any = None) -> Any:
    """The attack of ``cfg`` for one seed; ``params`` are its typed parameters (the plan's), parsed here if omitted."""
    cls = ATTACKS.get(cfg.attack.name)
    v = cfg.victim
    # plain values only: the closure must not reach ``prep`` (victim, test split, answers)
    arch, channels, classes, size = cfg.substitute.arch, v.channels, prep.num_classes, tuple(v.input_size)
    mean, std, device = tuple(v.normalization.mean), tuple(v.normalization.std), prep.device

    def make_substitute() -> torch.nn.Module:
        return build_model(arch, channels, classes, size, mean, std).to(device)

    ctx = AttackContext(
        profile=prep.profile, output_mode=cfg.attack.output_mode, num_classes=prep.num_classes,
        input_shape=(v.channels, *v.input_size), device=prep.device, seed=seed,
        generator=generator(seed, "attack"), pool=pool, params=attack_params(cfg) if params is None else params,
        checkpoints=tuple(cfg.budget.checkpoints), max_budget=cfg.budget.max_budget,
        make_substitute=make_substitute, data_mode=cfg.dataset.data_mode, seed_size=cfg.dataset.seed_size,
        divergence_restarts=cfg.attack.divergence_restarts)
    return cls(ctx)


def run_seed(cfg: RunConfig, seed: int, prep: Prepared, seed_dir: Path, progress: bool = True, *,
             oracle: Optional[Oracle] = None, store: Optional[QueryStore] = None,
             trainer: Optional[TrackATrainer] = None, say: Optional[Say] = None,
             plan: Optional[RunPlan] = None) -> SeedResult:
    """One seed: collect queries, score both tracks at every checkpoint, write the artifacts.

    ``plan`` is the seed's resolved plan (``mebench.plan.resolve(cfg, seed)`` when omitted): the
    attack's typed parameters come from it and ``summary.json`` records it with its hash, the code
    identity and, once the seed is done, ``completed_at``.
    ``oracle``, ``store`` and ``trainer`` default to fresh ones built from ``cfg``;
    the pytest harness passes its fixtures instead. ``say`` receives a few
    progress lines per phase (``mebench.progress``). The store is cleaned up
    here in every case (success, error, Ctrl-C).
    """
    seed_dir.mkdir(parents=True, exist_ok=True)
    plan = resolve(cfg, seed) if plan is None else plan
    artifacts.atomic_write_text(seed_dir / "run_config.yaml", cfg.to_yaml())
    seed_everything(seed)
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    scorer = CheckpointScorer(cfg, prep, seed, progress, trainer, say)
    oracle = make_oracle(cfg, prep, seed) if oracle is None else oracle
    detectors = [t for t in oracle.answers.transforms if isinstance(t, Detector)]
    summary = _summary_head(cfg, plan, prep)
    # Replaces an earlier run's summary before any file of this one is written: a folder killed
    # mid-rerun never pairs an old "complete" summary with new partial rows.
    artifacts.atomic_write_json(seed_dir / "summary.json", {**summary, "status": "running"})
    if cfg.defense.name != "none":  # a fresh instance, so the measurement draws none of the oracle's randomness
        own = defense_for(cfg, prep, seed, "defense_utility")
        summary["defense"]["utility"] = utility_cost(build_answers(prep.victim, cfg.victim.temperature, own),
                                                     prep.answers, prep.evaluator)
        summary["defense"]["fitted"] = own.describe()  # resolved params and what was fitted (e.g. the outlier source)
    timings = {"prepare_shared": prep.seconds}
    attack: Any = None

    def on_checkpoint(budget: int) -> None:
        for d in detectors:
            d.mark([budget])
        for res in (scorer.track_b(attack, state, budget), scorer.track_a(state, budget)):
            if res is not None:
                rows.append(artifacts.metrics_row(res, _ident(cfg)))
        artifacts.write_metrics_csv(seed_dir / "metrics.csv", rows)
        if scorer.transfer is not None:
            write_records(seed_dir, scorer.transfer_rows)

    try:
        if store is None:  # created inside the try so an interrupt right after mkdir is cleaned up too
            store = make_store(cfg, prep, seed_dir / QUERY_CACHE_DIR)
            if store.on_disk:  # lets a later run sweep it should this process be killed (naming.sweep_dead_caches)
                mark_cache_owner(store.directory, "run")
        summary["cache"] = {"used": store.on_disk, "policy": cfg.cache.policy,
                            "location": str(store.directory) if store.on_disk else None}
        state = EngineState(cfg.budget.max_budget, tuple(cfg.budget.checkpoints), store, prep.device)
        t0 = time.perf_counter()
        pool = build_pool(cfg, prep, seed)
        attack = make_attack(cfg, prep, seed, pool, plan.attack.params)
        timings["prepare_seed"] = time.perf_counter() - t0
        ticker = Ticker(say, "queries", cfg.budget.max_budget, "images", interval=interval_of(say))
        with tqdm(total=cfg.budget.max_budget, desc=f"seed {seed} queries", unit="img",
                  disable=not progress or None, leave=False) as bar:
            def advance(k: int) -> None:
                bar.update(k)
                ticker.update(k)

            timings["collect"] = collect(attack, oracle, state, on_checkpoint, advance)
        ticker.close("scoring at the checkpoints included")
        if detectors:
            t0 = time.perf_counter()
            summary["defense"]["detection"] = detection_record(cfg, prep, seed, detectors[0])
            timings["detection_benign"] = time.perf_counter() - t0
        summary["status"] = "complete"
        summary["completed_at"] = utc_now()
    except BaseException as e:
        summary["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        summary["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        if store is not None:
            store.cleanup()
        cache_dir = store.directory if store is not None else seed_dir / QUERY_CACHE_DIR
        if store is None and cache_dir.exists():  # interrupted inside make_store, after its mkdir
            shutil.rmtree(cache_dir, ignore_errors=True)
        summary.setdefault("cache", {"used": None, "policy": cfg.cache.policy, "location": None})
        summary["cache"]["deleted"] = cache_dir is None or not cache_dir.exists()
        timings.update(scorer.timings)
        timings["total"] = time.perf_counter() - t_start
        summary.update(_summary_tail(oracle, timings, scorer, rows, attack.ctx.restarts if attack is not None else []))
        if scorer.final_model is not None:
            artifacts.atomic_save_torch({k: v.cpu() for k, v in scorer.final_model.state_dict().items()},
                                        seed_dir / "final_substitute.ckpt")
        artifacts.write_metrics_csv(seed_dir / "metrics.csv", rows)
        if scorer.transfer is not None:
            summary["transfer"] = scorer.transfer_rows
            write_records(seed_dir, scorer.transfer_rows)
        if scorer.init_rows:
            artifacts.write_csv(seed_dir / "init_variance.csv", init_variance.INIT_VARIANCE_COLUMNS, scorer.init_rows)
        artifacts.atomic_write_json(seed_dir / "summary.json", summary)
    return SeedResult(seed, rows, summary, seed_dir)


def utc_now() -> str:
    """ISO-8601 UTC time to the second (``completed_at``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _summary_head(cfg: RunConfig, plan: RunPlan, prep: Prepared) -> dict[str, Any]:
    cls = ATTACKS.get(cfg.attack.name)
    state_dependent = plan.attack.state_dependent
    head: dict[str, Any] = {
        "status": "running", "seed": plan.seed, "run_name": cfg.run.name, "config_hash": cfg.config_hash(),
        "plan": plan.to_dict(), "plan_hash": plan.hash, "code_identity": identity.code_identity(),
        "config": cfg.to_dict(),
        "attack": {**cls.describe(), "label": cfg.attack_label(), "output_mode": cfg.attack.output_mode,
                   "params": cfg.to_dict()["attack"]["params"],
                   "state_dependent_queries": state_dependent},
        "dataset": {**prep.profile.as_metadata(), "data_mode": cfg.dataset.data_mode,
                    "surrogate_name": cfg.dataset.surrogate_name, "seed_size": cfg.dataset.seed_size},
        "victim": prep.victim_meta,
        "defense": {**cfg.to_dict()["defense"], "paper": DEFENSES.get(cfg.defense.name).paper},
        "track_a": {"batch_size": cfg.substitute.trackA.batch_size, "steps_coeff_c": cfg.substitute.trackA.steps_coeff_c,
                    "profile_override": (prep.profile.track_a_batch_size != 128 or prep.profile.steps_coeff_c != 0.2),
                    "init_seed": cfg.substitute.init_seed, "optimizer": cfg.to_dict()["substitute"]["optimizer"],
                    "scheduler": "cosine over S(B)", "loss": "kl" if cfg.attack.output_mode == "soft_prob" else "ce"},
        "versions": library_versions(), "git": git_commit(), "machine": machine_info(cfg.run.device),
    }
    if state_dependent:
        head["disclaimer"] = DISCLAIMER_9
    return head


def _summary_tail(oracle: Oracle, timings: dict[str, float], scorer: CheckpointScorer,
                  rows: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> dict[str, Any]:
    collect_s = timings.get("collect") or 0.0
    return {"queries_used": oracle.queries_used, "budget": oracle.budget,
            "timings_s": timings, "queries_per_second": (oracle.queries_used / collect_s) if collect_s else None,
            "track_a_steps": {str(k): v for k, v in scorer.track_a_steps.items()}, "results": rows,
            "training_health": scorer.health, "attack_restarts": list(restarts),
            "health_flags": [f for r in scorer.health for f in r["flags"]] + [restart_flag(r) for r in restarts]}


def record_run_metadata(cfg: RunConfig, seed_dir: Path) -> None:
    """Append the seed-run's line to ``<output_dir>/run_metadata.jsonl`` (safe for concurrent runs)."""
    import json

    from mebench.report.metadata import METADATA_FILE, append_metadata, run_metadata_entry

    summary_path = seed_dir / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        append_metadata(Path(cfg.run.output_dir) / METADATA_FILE, run_metadata_entry(summary, seed_dir))


def run(cfg: RunConfig, progress: bool = True, check_files: bool = True, say: Optional[Say] = None, *,
        resume: Optional[Path] = None, keep_stale: bool = False,
        tell: Optional[Callable[[str], None]] = None) -> RunResult:
    """Validate, then run every seed and write the seed aggregate. Nothing is created if validation fails.

    ``progress`` shows progress bars; ``say`` (e.g. ``mebench.progress.stderr_lines``) receives a few
    lines per phase instead, for logs that are not a terminal. ``resume`` is an earlier run folder
    of this config: a seed whose folder is whole and current (``mebench.resume``) is kept, any
    other runs again; ``keep_stale`` keeps whole but stale ones too (marked in ``summary.json``).
    ``tell`` receives one line per resumed seed (kept, or why it runs again).
    """
    validate(cfg, check_files=check_files)
    plans = {seed: resolve(cfg, seed) for seed in cfg.run.seeds}
    swept = sweep_dead_caches(Path(cfg.run.output_dir) / cfg.run.name, f"*/seed_*/{QUERY_CACHE_DIR}")
    if swept and tell is not None:
        tell(f"removed {len(swept)} query cache(s) a killed run left under {Path(cfg.run.output_dir) / cfg.run.name}")
    kept = {} if resume is None else {
        seed: SeedResult(seed, rows, summary, resume / f"seed_{seed}")
        for seed, (summary, rows) in resume_seeds(resume, plans, keep_stale, torch.get_num_threads(), tell).items()}
    prep = prepare(cfg) if len(kept) < len(plans) else None
    result = RunResult(resume if resume is not None else artifacts.new_run_dir(cfg.run.output_dir, cfg.run.name))
    for seed in cfg.run.seeds:
        seed_dir = result.directory / f"seed_{seed}"
        if seed in kept:
            result.seeds.append(kept[seed])
            continue
        try:
            result.seeds.append(run_seed(cfg, seed, prep, seed_dir, progress, say=prefixed(say, f"seed {seed}"),
                                         plan=plans[seed]))
        finally:
            record_run_metadata(cfg, seed_dir)
    all_rows = [r for s in result.seeds for r in s.rows]
    result.aggregate = artifacts.aggregate_rows(all_rows, dataset=cfg.dataset.name)
    artifacts.write_aggregate_csv(result.directory / "aggregate.csv", result.aggregate)
    return result

