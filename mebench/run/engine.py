"""The query loop and its lifecycle events (contract §7, §14.3; issue 35: plan -> world -> loop -> probes).
See docs/architecture.md.
"""
# ``run(cfg)`` validates the config, resolves one plan per seed (``mebench.run.plan``), builds what all
# seeds share (``mebench.run.world.prepare``) and runs every seed. A seed builds its world (oracle,
# query store, pool, attack), tells the plan's probes (``mebench.probes``) ``start``, lets the
# attack propose batches that the oracle answers and the store records, tells them ``checkpoint``
# at every B (Track A and B score substitutes there and ``emit`` them to the others) and
# ``finish`` after the last query. The engine never asks what kind of attack it runs, nor what a
# probe measures; it writes ``metrics.csv`` (§16.2), ``measurements.csv`` and ``summary.json``.

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from tqdm.auto import tqdm

from mebench.run import artifacts
from mebench.run.records import record_run_metadata, record_write_failure, summary_tail, utc_now, write_outputs
from mebench.config import RunConfig
from mebench.data.cache import QueryStore
from mebench.support.naming import QUERY_CACHE_DIR, sweep_dead_caches
from mebench.oracle import Oracle
from mebench.run.plan import RunPlan, RunSite, resolve, site as site_of
from mebench.probes import PROBES, Probe, Scored, merge_section
from mebench.support.progress import Say, Ticker, interval_of, prefixed
from mebench.run.resume import KEPT_FILES, file_sha256, resume_seeds
from mebench.support.seeding import seed_everything
from mebench.state import EngineState
from mebench.run.together import default_for, run_together
from mebench.training.track_a import TrackATrainer
from mebench.config.validation import validate
from mebench.run.world import (  # noqa: F401  (re-exported: the harness and tests build worlds through these)
    DISCLAIMER_9, Prepared, World, build_pool, clean_store, defense_context, defense_for,
    make_attack, make_oracle, make_store, make_track_a_trainer, open_store, prepare, row_identity, summary_head)


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


def collect(attack: Any, oracle: Oracle, state: EngineState,
            on_checkpoint: Callable[[int], None], advance: Optional[Callable[[int], None]] = None) -> float:
    """propose → oracle → keep → store → observe until the maximum budget; returns seconds spent querying.

    ``attack.keep`` is the answer as it came for a naive attacker and what an adaptive one keeps of it
    (``mebench.attacks.adaptive``): the store and the attack both see only that."""
    cps = set(state.checkpoints)
    spent = 0.0
    while state.queries_used < state.max_budget:
        t0 = time.perf_counter()
        k = min(max(1, int(attack.next_batch_size(state))), state.next_checkpoint - state.queries_used)
        batch = attack.propose(k, state)
        if len(batch) != k:
            raise RuntimeError(f"attack '{attack.name}' proposed {len(batch)} images when asked for {k} (§14.2)")
        out = attack.keep(batch, oracle.query(batch.x))  # what the attacker keeps of the answers
        state.store.append(batch.x, out.y)
        state.queries_used = oracle.queries_used
        attack.observe(batch, out, state)
        spent += time.perf_counter() - t0
        if advance is not None:
            advance(k)
        if state.queries_used in cps:
            on_checkpoint(state.queries_used)
    return spent


def make_probes(plan: RunPlan) -> list[Probe]:
    """The plan's probes, fresh for one seed, in the plan's order."""
    return [PROBES.get(p.name)(p.params) for p in plan.probes]


def run_seed(plan: RunPlan, site: RunSite, prep: Prepared, seed_dir: Path, progress: bool = True, *,
             oracle: Optional[Oracle] = None, store: Optional[QueryStore] = None,
             trainer: Optional[TrackATrainer] = None, say: Optional[Say] = None) -> SeedResult:
    """One seed: build its world, collect queries, tell the probes each event, write the artifacts.

    ``plan`` is the seed's resolved plan (``mebench.run.plan.resolve``), the run's only input besides
    ``site`` (where it stores): the attack's typed parameters and the probes come from it and
    ``summary.json`` records it with its hash, the code identity and, once the seed is done,
    ``completed_at``. ``oracle``, ``store`` and ``trainer`` default to fresh ones built from the plan;
    the pytest harness passes its fixtures instead. ``say`` receives a few progress lines per phase
    (``mebench.support.progress``). The store is cleaned up here in every case (success, error, Ctrl-C).
    """
    seed_dir.mkdir(parents=True, exist_ok=True)
    artifacts.atomic_write_text(seed_dir / "run_config.yaml", site.config_yaml)
    seed_everything(plan.seed)
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    world = World(plan, site, prep, seed_dir, make_oracle(plan, prep) if oracle is None else oracle,
                  progress, say, trainer, store)
    probes = make_probes(plan)
    summary = summary_head(plan, site, prep)
    # Replaces an earlier run's summary before any file of this one is written: a folder killed
    # mid-rerun never pairs an old "complete" summary with new partial rows.
    artifacts.atomic_write_json(seed_dir / "summary.json", {**summary, "status": "running"})
    timings = {"prepare_shared": prep.seconds}

    def emit(scored: Scored) -> None:
        rows.append(artifacts.metrics_row(scored.result, row_identity(plan)))
        for p in probes:
            p.substitute(world, scored)

    def on_checkpoint(budget: int) -> None:
        for p in probes:
            p.checkpoint(world, budget, emit)
        write_outputs(seed_dir, rows, probes, final=False)

    try:
        for p in probes:
            p.start(world)
        if world.store is None:  # made inside the try, so an interrupt right after its mkdir is cleaned up too
            world.store = open_store(plan, site, prep, seed_dir)
        summary["cache"] = {"used": world.store.on_disk, "policy": site.cache_policy,
                            "location": str(world.store.directory) if world.store.on_disk else None}
        timings["prepare_seed"] = arm(world)
        timings["collect"] = query_loop(world, on_checkpoint)
        for p in probes:
            p.finish(world)
        summary["status"] = "complete"
        summary["completed_at"] = utc_now()
    except BaseException as e:
        summary["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        summary["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        summary["cache"] = clean_store(world.store, seed_dir, site.cache_policy, summary.get("cache"))
        for p in probes:
            timings.update(p.timings)
        timings["total"] = time.perf_counter() - t_start
        summary.update(summary_tail(world.oracle, timings, rows, world.attack))
        for p in probes:
            merge_section(summary, p.summary(world))
        try:
            write_outputs(seed_dir, rows, probes, final=True)
            summary[KEPT_FILES] = {f.name: file_sha256(f) for f in sorted(seed_dir.glob("*.ckpt"))}  # --resume checks them
            artifacts.atomic_write_json(seed_dir / "summary.json", summary)
        except OSError as e:  # a full or read-only disk: say so in summary.json where that still can be written
            record_write_failure(seed_dir / "summary.json", summary, e)
            raise
    return SeedResult(plan.seed, rows, summary, seed_dir)


def arm(world: World) -> float:
    """The engine state, the attacker's pool and the attack of the world's seed; seconds taken."""
    t0 = time.perf_counter()
    prep, plan = world.prep, world.plan
    world.state = EngineState(plan.max_budget, plan.checkpoints, world.store, prep.device)
    world.attack = make_attack(plan, prep, build_pool(plan, prep))
    return time.perf_counter() - t0


def query_loop(world: World, on_checkpoint: Callable[[int], None]) -> float:
    """``collect`` with a progress bar and ticker; returns the seconds spent querying."""
    budget = world.plan.max_budget
    ticker = Ticker(world.say, "queries", budget, "images", interval=interval_of(world.say))
    with tqdm(total=budget, desc=f"seed {world.seed} queries", unit="img",
              disable=not world.progress or None, leave=False) as bar:
        def advance(k: int) -> None:
            bar.update(k)
            ticker.update(k)

        spent = collect(world.attack, world.oracle, world.state, on_checkpoint, advance)
    ticker.close("scoring at the checkpoints included")
    return spent


def run_seeds_together(plans: dict[int, RunPlan], site: RunSite, prep: Prepared, directory: Path,
                       progress: bool, say: Optional[Say]) -> list[SeedResult]:
    """``run_seed`` for the plans' seeds in lockstep, Track A trained for all of them at once (``mebench.run.together``)."""
    def one(seed: int, trainer: TrackATrainer) -> SeedResult:
        try:
            return run_seed(plans[seed], site, prep, directory / f"seed_{seed}", progress,
                            say=prefixed(say, f"seed {seed}"), trainer=trainer)
        finally:
            record_run_metadata(site.output_dir, directory / f"seed_{seed}")

    first = next(iter(plans.values()))
    return run_together(list(plans), make_track_a_trainer(first, prep), one)


def run(cfg: RunConfig, progress: bool = True, check_files: bool = True, say: Optional[Say] = None, *,
        resume: Optional[Path] = None, keep_stale: bool = False,
        tell: Optional[Callable[[str], None]] = None, seeds_together: Optional[bool] = None) -> RunResult:
    """Validate, resolve one plan per seed, then run every seed and write the seed aggregate (the
    config is read here and in ``mebench.run.plan`` only). Nothing is created if validation fails.

    ``progress`` shows progress bars; ``say`` (e.g. ``mebench.support.progress.stderr_lines``) receives a few
    lines per phase instead, for logs that are not a terminal. ``resume`` is an earlier run folder
    of this config: a seed whose folder is whole and current (``mebench.run.resume``) is kept, any
    other runs again; ``keep_stale`` keeps whole but stale ones too (marked in ``summary.json``).
    ``tell`` receives one line per resumed seed (kept, or why it runs again). ``seeds_together``
    trains the seeds' Track A as one stacked model (``mebench.run.together``; ``None``: the device's
    measured default).
    """
    validate(cfg, check_files=check_files)
    plans = {seed: resolve(cfg, seed) for seed in cfg.run.seeds}
    where = site_of(cfg)
    swept = sweep_dead_caches(Path(where.output_dir) / where.run_name, f"*/seed_*/{QUERY_CACHE_DIR}")
    if swept and tell is not None:
        tell(f"removed {len(swept)} query cache(s) a killed run left under {Path(where.output_dir) / where.run_name}")
    directory = resume if resume is not None else artifacts.new_run_dir(where.output_dir, where.run_name)
    with artifacts.run_folder_lock(directory):  # a second --resume of this folder stops here, in one line
        kept = {} if resume is None else {
            seed: SeedResult(seed, rows, summary, resume / f"seed_{seed}")
            for seed, (summary, rows) in resume_seeds(resume, plans, keep_stale, torch.get_num_threads(), tell).items()}
        return _run_seeds(plans, where, RunResult(directory), kept, progress, say, seeds_together)


def _run_seeds(plans: dict[int, RunPlan], site: RunSite, result: RunResult, kept: dict[int, SeedResult],
               progress: bool, say: Optional[Say], seeds_together: Optional[bool]) -> RunResult:
    """``run``'s work in its (locked) run folder: every seed not kept, then the seed aggregate."""
    todo = [seed for seed in plans if seed not in kept]
    prep = prepare(plans[todo[0]], site) if todo else None
    if prep is not None and len(todo) > 1 and (default_for(prep.device) if seeds_together is None else seeds_together):
        done = dict(zip(todo, run_seeds_together({s: plans[s] for s in todo}, site, prep, result.directory, progress, say)))
    else:
        done = {}
    for seed, plan in plans.items():
        seed_dir = result.directory / f"seed_{seed}"
        if seed in kept or seed in done:
            result.seeds.append(kept.get(seed) or done[seed])
            continue
        try:
            result.seeds.append(run_seed(plan, site, prep, seed_dir, progress, say=prefixed(say, f"seed {seed}")))
        finally:
            record_run_metadata(site.output_dir, seed_dir)
    all_rows = [r for s in result.seeds for r in s.rows]
    result.aggregate = artifacts.aggregate_rows(all_rows, dataset=next(iter(plans.values())).dataset)
    artifacts.write_aggregate_csv(result.directory / "aggregate.csv", result.aggregate)
    return result
