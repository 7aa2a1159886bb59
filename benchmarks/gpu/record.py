"""The GPU check's record: one JSON from the folder ``benchmarks/gpu/check.sh`` filled.

    python benchmarks/gpu/record.py OUT                          # writes OUT/record.json
    python benchmarks/gpu/record.py OUT --into results/perf/gpu  # and copies it to results/perf/gpu/<device>/

It keeps what the performance page's GPU table shows (``studies/perf/summarize.py``): the card, torch
and code identity; each stage's exit status and wall time; every step timing of
``benchmarks/perf/test_gpu_step_perf.py``; the grid's pytest time and verdicts; the Random 1M cell's
wall time, timings and how its Track A stepped; the victim build. Nothing is computed here that the
logs do not say; a stage that failed or ran out of time is recorded as such.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

PYTEST_LINE = re.compile(r"=+ (?P<verdicts>[^=]*?) in (?P<seconds>[\d.]+)s")


def pytest_summary(log: Path) -> dict[str, Any]:
    """Counts and time of the last pytest summary line in ``log`` (``{}`` when there is none)."""
    if not log.is_file():
        return {}
    found = PYTEST_LINE.findall(log.read_text(errors="replace"))
    if not found:
        return {}
    verdicts, seconds = found[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", verdicts)}
    return {"counts": counts, "pytest_s": float(seconds)}


def step_timings(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the environment row, {case: timing}) from the pytest-benchmark JSON."""
    if not path.is_file():
        return {}, {}
    env: dict[str, Any] = {}
    cases: dict[str, Any] = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        e = b.get("extra_info", {})
        if e.get("kind") == "gpu_env":
            env = {k: e[k] for k in ("device_name", "torch", "cuda") if k in e}
        elif e.get("kind") == "gpu_step":
            cases[e["case"]] = {k: e[k] for k in ("ms_per_seed_step", "seeds", "steps", "seconds")}
    return env, cases


def one_summary(folder: Path) -> Optional[dict[str, Any]]:
    found = sorted(folder.glob("*/seed_0/summary.json")) if folder.is_dir() else []
    return json.loads(found[-1].read_text()) if found else None


def build(out: Path) -> dict[str, Any]:
    stages = [json.loads(line) for line in (out / "stages.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "stages.jsonl").is_file() else []
    env, steps = step_timings(out / "gpu_step.json")
    run = one_summary(out / "runs")
    grid_cells = []
    for summary in sorted((out / "grid").glob("*/summary.json")) if (out / "grid").is_dir() else []:
        s = json.loads(summary.read_text())
        grid_cells.append({"cell": summary.parent.name, "status": s.get("status"),
                           "track_a_step": s.get("track_a_step"), "total_s": s.get("timings_s", {}).get("total")})
    record: dict[str, Any] = {
        "kind": "mebench-gpu-check", "version": 1,
        "device_name": env.get("device_name") or (run or {}).get("machine", {}).get("gpu"),
        "torch": env.get("torch"), "cuda": env.get("cuda"),
        "stages": stages,
        "cuda_tests": pytest_summary(out / "cuda_tests.log"),
        "steps": steps,
        "grid": {**pytest_summary(out / "grid.log"), "cells": grid_cells},
        "random_1m": None if run is None else {
            "status": run.get("status"), "code_identity": run.get("code_identity"),
            "victim_sha256": run.get("plan", {}).get("victim", {}).get("checkpoint_sha256"),
            "timings_s": run.get("timings_s"), "track_a_step": run.get("track_a_step"),
            "machine": run.get("machine"),
            "track_a": [{k: r[k] for k in ("checkpoint_B", "agreement", "acc_gt")} for r in run.get("results", [])
                        if r.get("track") == "A"]},
    }
    return record


def slug(name: Optional[str]) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (name or "unknown-gpu").lower()).strip("-")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the folder check.sh filled")
    ap.add_argument("--into", type=Path, help="also copy the record to INTO/<device>/record.json")
    args = ap.parse_args(argv)
    record = build(args.out)
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    tmp = args.out / "record.json.tmp"
    tmp.write_text(text)
    tmp.replace(args.out / "record.json")
    print(f"check: record {args.out / 'record.json'} ({record['device_name']}, "
          f"{len(record['steps'])} step timings, stages "
          + ", ".join(f"{s['stage']} rc={s['rc']}" for s in record["stages"]) + ")")
    if args.into is not None:
        dest = args.into / slug(record["device_name"]) / "record.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.out / "record.json", dest)
        print(f"check: copied to {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
