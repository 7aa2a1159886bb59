"""Detectors at a resolvable false-positive rate (docs/defenses/detection_benchmark.md; issue 38).

For each grid config (one victim): every detector defense the config lists watches
``TrafficParams().streams`` benign clients (``mebench.detection.benign``: the victim's test split and
every other test split of the victim's shape on the data root) and every attack stream of the
config's cells (attack x seed, collected once: a detector changes no answer), plain and with PRADA's
evasion (``EVASION`` shares of natural images interleaved, charged to the budget). No substitute is
trained or scored. Writes ``results/detect/<dataset>/detection_bench.json``; ``mebench report
results/detect`` reads it.

    nice -n 10 python studies/detect/run.py --max-seeds activethief_kcenter_fast=3 \
        configs/benchmarks/detect/fashionmnist_detect.yaml configs/benchmarks/detect/mnist_detect.yaml
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import torch

from mebench.run import engine
from mebench.run.plan import site
from mebench.run.artifacts import atomic_write_text
from mebench.detection.benign import TrafficParams, overlap, traffic
from mebench.data.cache import QueryStore
from mebench.defenses import build_answers
from mebench.detection.bench import attack_record, benign_record, collect_stream, evasion_budgets, interleave, timed
from mebench.errors import DataMissingError
from mebench.harness.grid import load_grid
from mebench.support.identity import code_identity
from mebench.support.inference import chunked
from mebench.support.runinfo import library_versions, machine_info
from mebench.support.seeding import derive_seed, seed_everything
from mebench.state import EngineState
from mebench.run.world import defense_for

HERE = Path(__file__).resolve().parents[2] / "results" / "detect"  # the set's records (this script lives in studies/)
TRAFFIC = TrafficParams()
EVASION = (0.5,)
"""PRADA's evasion: the share of the budget spent on interleaved natural images."""
TRAFFIC_SEED = 0
CACHE = Path("runs/detect_cache")
"""Collected attack streams (queries and answers; never committed)."""


def sources(prep: Any) -> list[tuple[str, torch.Tensor]]:
    """The victim's test split first, then every other dataset of its shape found on the data root."""
    out = [(prep.profile.name, prep.split(prep.profile.name, False)[0])]
    for name in prep.profile.surrogates:
        try:
            out.append((name, prep.split(name, False)[0]))
        except (DataMissingError, FileNotFoundError):
            continue
    return out


def detectors(cells: list) -> dict[str, Any]:
    """label -> a cell whose config carries that detector (one per distinct defense label)."""
    out: dict[str, Any] = {}
    for c in cells:
        out.setdefault(c.cfg.defense.label or c.cfg.defense.name, c)
    return out


def make_state(cfg: Any, prep: Any) -> Any:
    shape = (cfg.victim.channels, *cfg.victim.input_size)

    def state(budget: int) -> EngineState:
        store = QueryStore(budget, shape, cfg.attack.output_mode, prep.num_classes, None)
        return EngineState(budget, (budget,), store, prep.device)
    return state


def attack_streams(cells: list, prep: Any, max_seeds: dict[str, int]) -> list[dict]:
    """Every (attack, seed) stream once, plain and with each evasion share, with its answers; a
    collected stream is kept under ``CACHE`` (not a record: queries), so a rerun does not collect it again."""
    out, seen = [], set()
    for cell in cells:
        key = (cell.label, cell.data_mode, cell.seed)
        if key in seen or cell.seed >= max_seeds.get(cell.label, 1 << 30):
            continue
        seen.add(key)
        for share in (0.0, *EVASION):
            path = CACHE / prep.profile.name / f"{cell.label}-{cell.data_mode}-s{cell.seed}-e{share}.pt"
            if path.is_file():
                out.append(torch.load(path, weights_only=True))
                continue
            stream = collect_one(cell, prep, share)
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(stream, path)
            out.append(stream)
    return out


def collect_one(cell: Any, prep: Any, share: float) -> dict:
    cfg, budget = cell.cfg, cell.cfg.budget.max_budget
    answers = build_answers(prep.victim, cfg.victim.temperature)
    shape = (cfg.victim.channels, *cfg.victim.input_size)
    natural_name = cfg.dataset.surrogate_name or prep.profile.surrogates[0]
    own, n_nat = evasion_budgets(budget, share)
    seed_everything(cell.seed)
    attack = engine.make_attack(cell.plan, prep, engine.build_pool(cell.plan, prep))
    (x, p), secs = timed(lambda: collect_stream(answers, attack, cfg.attack.output_mode, own, shape,
                                                make_state(cfg, prep)))
    if n_nat:
        pool = prep.split(natural_name, True)[0]
        g = torch.Generator().manual_seed(derive_seed(cell.seed, "prada_evasion:natural"))
        nat = pool[torch.randperm(pool.shape[0], generator=g)[:n_nat]].float().div_(255.0)
        x, p = interleave((x, p), (nat, chunked(answers.probs, nat, prep.device, 2048).cpu()), cell.seed)
    print(f"  {cell.label} seed {cell.seed} evasion {share}: {secs:.1f} s", flush=True)
    return {"about": {"attack": cell.label, "data_mode": cell.data_mode, "seed": cell.seed, "evasion_share": share,
                      "natural": natural_name if n_nat else None, "collect_s": round(secs, 3)}, "x": x, "p": p}


def run(path: str, seeds: list[int] | None = None, max_seeds: dict[str, int] | None = None) -> None:
    grid = load_grid(Path(path), Path.cwd(), seeds)
    cells = grid.cells
    prep = engine.prepare(cells[0].plan, site(cells[0].cfg))
    for c in cells:  # every attack's pool source is loaded (surrogate cells need theirs)
        if c.cfg.dataset.surrogate_name:
            prep.surrogate_images, prep.surrogate_labels = prep.split(c.cfg.dataset.surrogate_name, True)
    srcs = sources(prep)
    answers = build_answers(prep.victim, cells[0].cfg.victim.temperature)
    splits = [s for _, s in srcs]
    probs = [chunked(answers.probs, s.float().div(255.0), prep.device, 2048).cpu() for s in splits]
    streams = list(traffic([s.shape[0] for s in splits], TRAFFIC, TRAFFIC_SEED))
    attacks = attack_streams(cells, prep, max_seeds or {})
    clash = {f"{a['about']['attack']}:{a['about']['seed']}:{a['about']['evasion_share']}":
             overlap(torch.cat([s.images(splits) for s in streams[:200]]), a["x"]) for a in attacks}
    rec: dict[str, Any] = {"kind": "mebench-detection-bench", "config": path, "dataset": prep.profile.name,
                           "victim": {k: prep.victim_meta.get(k) for k in ("victim_id", "checkpoint_sha256",
                                                                            "test_accuracy")},
                           "budget": cells[0].cfg.budget.max_budget, "traffic": dataclasses.asdict(TRAFFIC),
                           "traffic_seed": TRAFFIC_SEED, "sources": [[n, int(s.shape[0])] for n, s in srcs],
                           "evasion_shares": list(EVASION), "max_seeds": max_seeds or {},
                           "overlap_first_200_benign": clash,
                           "code_identity": code_identity(), "torch_threads": torch.get_num_threads(),
                           "versions": library_versions(), "machine": machine_info(str(prep.device)),
                           "detectors": {}}
    for label, cell in detectors(cells).items():
        fresh = lambda purpose: defense_for(cell.plan, prep, 0, purpose)  # noqa: E731
        (fitted, fit_s) = timed(lambda: fresh("fit").describe())
        benign, b_s = timed(lambda: [_progress(k, benign_record(fresh(f"benign:{s.index}"), s, splits, probs))
                                     for k, s in enumerate(streams)])
        attack, a_s = timed(lambda: [attack_record(fresh("attack"), a["x"], a["p"], **a["about"]) for a in attacks])
        queries = sum(len(s) for s in streams) + sum(a["x"].shape[0] for a in attacks)
        print(f"{prep.profile.name} {label}: benign {b_s:.1f} s, attack {a_s:.1f} s", flush=True)
        rec["detectors"][label] = {"name": cell.cfg.defense.name, "fitted": fitted,
                                   "wall_s": {"fit": fit_s, "benign": b_s, "attack": a_s,
                                              "per_1k_queries": 1000 * (b_s + a_s) / queries},
                                   "benign": benign, "attack": attack}
        rec["completed_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        out = HERE / prep.profile.name / "detection_bench.json"  # written after each detector: a record per step
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(rec) + "\n")


def _progress(k: int, record: dict) -> dict:
    if (k + 1) % 250 == 0:
        print(f"    benign client {k + 1}", flush=True)
    return record


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = sys.argv[1:]
    if args[:1] == ["--smoke"]:  # a quick check of the whole path: few streams and seeds, under /tmp
        TRAFFIC, HERE, CACHE, args = TrafficParams(streams=20), Path("/tmp/mebench-detect-smoke"), Path("/tmp/mdc"), args[1:]
    caps = {}
    while args and args[0] == "--max-seeds":  # --max-seeds LABEL=N: only that attack's first N seeds
        label, n = args[1].split("=")
        caps[label], args = int(n), args[2:]
    for p in args:
        run(p, [0] if HERE != Path(__file__).resolve().parents[2] / "results" / "detect" else None, caps)
