"""The measured effect of each deviation of mebench's older PRADA rule from the reference
(docs/defenses/prada.md; issue 42). Writes the set's ``results/prada/deviations.json``.

For every ``prada`` cell of the given grid configs (attack, seed) the attack's queries are
collected once (no substitute is scored: PRADA changes no answer, so the stream does not depend
on which detector watches it) behind an oracle that carries one PRADA detector per variant: the
reference rule, the older rule (``LEGACY``), and the reference with one older option each. The
run's benign streams (``metrics.benign_streams`` seeded orders of each test split, as
``engine.detection_record`` builds them) are fed to a fresh detector of each variant.

    python studies/prada/deviations.py configs/benchmarks/prada/mnist_prada.yaml configs/benchmarks/prada/fashionmnist_prada.yaml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from mebench.run import artifacts, engine
from mebench.run.plan import resolve, site
from mebench.data.cache import QueryStore
from mebench.defenses import build_answers
from mebench.defenses.detection import benign_streams, feed
from mebench.defenses.prada import LEGACY, Prada
from mebench.harness.grid import load_grid
from mebench.oracle import AnswerPipeline, Oracle
from mebench.support.identity import code_identity
from mebench.support.runinfo import library_versions, machine_info
from mebench.support.seeding import seed_everything
from mebench.state import EngineState

VARIANTS = {"reference": {}, "legacy": dict(LEGACY), **{f"only_{k}": {k: v} for k, v in LEGACY.items()}}

HERE = Path(__file__).resolve().parents[2] / "results" / "prada"  # the set this script writes into


def _detectors() -> dict[str, Prada]:
    return {name: Prada(Prada.Params(**p), torch.Generator()) for name, p in VARIANTS.items()}


def _stream(det: Prada, budget: int) -> dict[str, Any]:
    r = det.record()
    return {"min_w": r["min_w"], "flagged_at": r["flagged_at"], "flag_at_B": r["flag_at"].get(str(budget)),
            "tests": r["tests"]}


def attack_streams(cell, prep) -> dict[str, dict]:
    """Every variant's record of the cell's attack stream."""
    cfg, seed = cell.cfg, cell.seed
    seed_everything(seed)
    dets = _detectors()
    answers = build_answers(prep.victim, cfg.victim.temperature)
    answers = AnswerPipeline(prep.victim, [*answers.transforms, *dets.values()])
    shape = (cfg.victim.channels, *cfg.victim.input_size)
    oracle = Oracle(answers, cfg.attack.output_mode, cfg.budget.max_budget, shape)
    store = QueryStore(cfg.budget.max_budget, shape, cfg.attack.output_mode, prep.num_classes, None)
    state = EngineState(cfg.budget.max_budget, tuple(cfg.budget.checkpoints), store, prep.device)
    plan = resolve(cfg, seed)
    attack = engine.make_attack(plan, prep, engine.build_pool(plan, prep))
    engine.collect(attack, oracle, state, lambda b: [d.mark([b]) for d in dets.values()])
    return {name: _stream(d, cfg.budget.max_budget) for name, d in dets.items()}


def benign(cell, prep) -> list[dict]:
    """Every variant's record of the cell's benign streams."""
    cfg, budget = cell.cfg, cell.cfg.budget.max_budget
    detection = cfg.measure_params("detection")
    streams, benign_dataset = detection.get("benign_streams", 4), detection.get("benign_dataset")
    sources = [(f"{prep.profile.name}-test", prep.split(prep.profile.name, False)[0])]
    if benign_dataset:
        sources.append((f"{benign_dataset}-test", prep.split(benign_dataset, False)[0]))
    answers = build_answers(prep.victim, cfg.victim.temperature)
    out = []
    for source, k, images in benign_streams(sources, budget, streams, cell.seed):
        dets = _detectors()
        for d in dets.values():
            feed(d, images, answers.probs, [budget], prep.device)
        out.append({"source": source, "stream": k, "seed": cell.seed,
                    **{name: _stream(d, budget) for name, d in dets.items()}})
    return out


def main(paths: list[str]) -> None:
    torch.set_num_threads(1)
    # where it ran, as a seed-run's summary.json says it: code identity, versions, CPU model and its caps
    out: dict[str, Any] = {"variants": VARIANTS, "code_identity": code_identity(), "versions": library_versions(),
                           "machine": machine_info("cpu"), "datasets": {}}
    for path in paths:
        grid = load_grid(Path(path), Path.cwd())
        cells = [c for c in grid.cells if c.defense == "prada" and not c.cfg.defense.label]
        preps: dict[str, Any] = {}
        rec: dict[str, Any] = {"config": path, "attack": [], "benign": []}
        for cell in cells:
            prep = preps.setdefault(cell.victim_key, engine.prepare(cell.plan, site(cell.cfg)))
            print(cell.id, flush=True)
            rec["attack"].append({"cell": cell.id, "attack": cell.label, "seed": cell.seed,
                                  **attack_streams(cell, prep)})
            if cell.seed not in {b["seed"] for b in rec["benign"]}:
                rec["benign"] += benign(cell, prep)
        out["datasets"][cells[0].cfg.dataset.name] = rec
    artifacts.atomic_write_text(HERE / "deviations.json", json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
