"""PRADA's batched scoring against the query-by-query implementation it replaced, on the detection
benchmark's own benign clients (docs/defenses/detection_benchmark.md; issue 38).

The first ``N`` benign clients of the MNIST traffic (``studies/detect/run.py``: same sources, answers
and seed) are scored by ``mebench.defenses.prada.Prada`` and by ``Sequential``
(``contract_tests/test_prada_fast.py``: the implementation before the batched scoring), in
alternating rounds on the same process and thread, so both meet the same machine load. Each
client's record (score, flag, query at detection) must be identical. Writes
``results/detect/prada_speed.json``.

    nice -n 10 python studies/detect/prada_speed.py [N] [ROUNDS]
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

from mebench.defenses.prada import PradaSequential as Sequential
from mebench.run import engine
from mebench.run.plan import site
from mebench.run.artifacts import atomic_write_text
from mebench.detection.benign import traffic
from mebench.defenses import build_answers
from mebench.defenses.prada import Prada
from mebench.detection.bench import benign_record
from mebench.harness.grid import load_grid
from mebench.support.identity import code_identity
from mebench.support.inference import chunked
from mebench.support.runinfo import library_versions, machine_info

HERE = Path(__file__).resolve().parents[2] / "results" / "detect"  # the set's records (this script lives in studies/)
CONFIG = "configs/benchmarks/detect/mnist_detect.yaml"


def _bench_module():
    spec = importlib.util.spec_from_file_location("detect_run", Path(__file__).with_name("run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(n: int, rounds: int) -> dict:
    bench = _bench_module()
    cell = load_grid(Path(CONFIG), Path.cwd(), [0]).cells[0]
    prep = engine.prepare(cell.plan, site(cell.cfg))
    splits = [s for _, s in bench.sources(prep)]
    answers = build_answers(prep.victim, cell.cfg.victim.temperature)
    probs = [chunked(answers.probs, s.float().div(255.0), prep.device, 2048).cpu() for s in splits]
    streams = list(traffic([s.shape[0] for s in splits], bench.TRAFFIC, bench.TRAFFIC_SEED))[:n]
    out = {"before": [], "after": [], "load_avg_1min": []}
    records = {}
    for _ in range(rounds):
        for key, cls in (("before", Sequential), ("after", Prada)):
            out["load_avg_1min"].append(round(os.getloadavg()[0], 2))
            t0 = time.perf_counter()
            records[key] = [benign_record(cls(cls.Params(), torch.Generator()), s, splits, probs) for s in streams]
            out[key].append(round(time.perf_counter() - t0, 3))
    return {"kind": "mebench-prada-speed", "config": CONFIG, "dataset": prep.profile.name, "streams": n,
            "queries": sum(len(s) for s in streams), "rounds": rounds, "seconds": out,
            "identical_records": records["before"] == records["after"],
            "flagged": sum(r["flagged_at"] is not None for r in records["after"]),
            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "code_identity": code_identity(),
            "versions": library_versions(), "machine": machine_info(str(prep.device)),
            "completed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = [int(a) for a in sys.argv[1:]]
    rec = main(*(args + [200, 2][len(args):]))
    atomic_write_text(HERE / "prada_speed.json", json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec["seconds"]), rec["identical_records"])
