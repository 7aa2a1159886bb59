"""Speed records of mebench's hot paths, as tables for the docs (docs/guide/performance.md).

Reads the pytest-benchmark records under ``results/perf/bench/`` (``--benchmark-json`` of
``benchmarks/perf/test_roofline.py`` and ``benchmarks/perf/test_track_a_batched_perf.py``) and the
seed-runs under ``results/perf/runs/`` (one MNIST Random cell at its default and with
``substitute.trackA.fast.channels_last``; a ``--seeds-together on`` run is shown when present), and gives
``mebench docs`` its tables (``tables``), so no number on the page is typed.

    python studies/perf/summarize.py     # prints the tables
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean, stdev
from typing import Any, Iterable

from mebench.report.document import render_markdown, table

HERE = Path(__file__).resolve().parents[2] / "results" / "perf"  # the set's records (this script lives in studies/)
VARIANT_NAMES = {"bare": "bare PyTorch loop", "before": "mebench before (per-parameter SGD, nn.MaxPool2d)",
                 "mebench": "mebench default (multi-tensor SGD, fast pooling)", "channels_last": "mebench, fast.channels_last",
                 "bf16": "mebench, fast.bf16", "channels_last+bf16": "mebench, fast.channels_last + fast.bf16",
                 "compile": "mebench, torch.compile"}
RUN_LABELS = {"random": "default", "random_channels_last": "fast.channels_last", "random_bf16": "fast.bf16",
              "random_channels_last_bf16": "fast.channels_last + fast.bf16",
              "random_seeds_together": "--seeds-together on"}


def bench_records(set_dir: Path, name: str) -> list[dict[str, Any]]:
    """The benchmarks of ``bench/<name>.json`` (empty when the record is missing)."""
    path = set_dir / "bench" / f"{name}.json"
    return json.loads(path.read_text())["benchmarks"] if path.is_file() else []


def md_table(header: list[str], rows: Iterable[list[str]]) -> str:
    """One table in the report's Markdown (``mebench.report.document``: a ``|`` in a cell is escaped)."""
    return render_markdown([table(header, list(rows))])


def roofline_table(records: list[dict[str, Any]]) -> str:
    """Track A steps: time, FLOPs, GFLOP/s, the peaks and the fractions; speed-up against ``before``."""
    steps = [r["extra_info"] for r in records if r["extra_info"].get("kind") == "track_a_step"]
    before = {(e["arch"], e["threads"]): e["seconds"] for e in steps if e["variant"] == "before"}
    rows = []
    for e in sorted(steps, key=lambda e: (e["arch"], e["threads"], list(VARIANT_NAMES).index(e["variant"]))):
        base = before.get((e["arch"], e["threads"]))
        rows.append([e["arch"], str(e["threads"]), VARIANT_NAMES[e["variant"]], f"{e['ms_per_step']:.2f}",
                     f"{base / e['seconds']:.2f}x" if base else "", f"{e['flops'] / 1e9:.3f}", f"{e['gflops']:.1f}",
                     f"{e['peak_matmul_gflops']:.1f}", f"{e['peak_conv_gflops']:.1f}",
                     f"{100 * e['roofline_fraction']:.1f} %", f"{100 * e['conv_roof_fraction']:.1f} %"])
    return md_table(["substitute", "threads", "path", "ms / step", "vs before", "GFLOP / step", "GFLOP/s",
                     "matmul peak GFLOP/s", "conv peak GFLOP/s", "of matmul peak", "of conv peak"], rows)


def victim_table(records: list[dict[str, Any]]) -> str:
    got = [r["extra_info"] for r in records if r["extra_info"].get("kind") == "victim_answers"]
    rows = [[e["variant"], str(e["threads"]), f"{e['seconds'] * 1e3:.1f}", f"{e['images_per_second']:,.0f}",
             f"{e['gflops']:.1f}", f"{100 * e['roofline_fraction']:.1f} %"]
            for e in sorted(got, key=lambda e: (e["threads"], e["variant"]))]
    return md_table(["path", "threads", "ms / 1,000 images", "images/s", "GFLOP/s", "of matmul peak"], rows)


def attacks_table(records: list[dict[str, Any]]) -> str:
    got = [r["extra_info"] for r in records if r["extra_info"].get("kind") == "attack_smoke_run"]
    def counted(value: float, text: str) -> str:  # FLOPs an attack's autograd.grad hides from the counter
        return text if value == value else "not counted"

    rows = [[e["attack"], f"{e['seconds']:.2f}", f"{e['ms_per_query']:.2f}",
             counted(e["flops_per_query"], f"{e['flops_per_query'] / 1e6:.2f}"), counted(e["gflops"], f"{e['gflops']:.2f}"),
             counted(e["roofline_fraction"], f"{100 * e['roofline_fraction']:.2f} %")]
            for e in sorted(got, key=lambda e: e["attack"])]
    return md_table(["attack", "s / smoke run (257 queries)", "ms / query", "MFLOP / query", "GFLOP/s",
                     "of matmul peak"], rows)


def seeds_together_table(records: list[dict[str, Any]]) -> str:
    """3 seeds stacked against 3 one by one and one seed alone, per device: the ratios decide the default."""
    by: dict[str, dict[str, float]] = {}
    threads: dict[str, Any] = {}
    for r in records:
        dev = r["params"]["device"]
        by.setdefault(dev, {})[r["params"]["how"]] = r["stats"]["min"]
        threads[dev] = r["extra_info"].get("threads", "")
    rows = []
    for dev, t in sorted(by.items()):
        if {"one_seed", "one_by_one", "together"} <= set(t):
            rows.append([dev, str(threads[dev]), f"{t['one_seed']:.2f}", f"{t['one_by_one']:.2f}", f"{t['together']:.2f}",
                         f"{t['together'] / t['one_seed']:.2f}x", f"{t['one_by_one'] / t['together']:.2f}x"])
    return md_table(["device", "threads", "1 seed (s)", "3 seeds one by one (s)", "3 seeds together (s)",
                     "together / 1 seed", "gain over one by one"], rows)


#: The GPU goals (issue 57): case -> (what, limit, unit).
GPU_GOALS = {"mebench": ("one LeNet-5 graphed, Track A", 0.5, "ms / step"),
             "train_fresh": ("one LeNet-5 graphed, train_fresh's epoch loop", 0.5, "ms / step"),
             "together_3": ("3 seeds together", 0.25, "ms / seed-step")}


def gpu_records(set_dir: Path) -> list[dict[str, Any]]:
    """The GPU check's records (``benchmarks/gpu/check.sh``), one per card."""
    return [json.loads(p.read_text()) for p in sorted((set_dir / "gpu").glob("*/record.json"))]


def gpu_table(records: list[dict[str, Any]]) -> str:
    """Per card: every step timing beside the bare loop, then the goals' rows (met or not)."""
    if not records:
        return ("*No GPU record yet.* Whoever holds a GPU runs `benchmarks/gpu/check.sh` and commits its "
                "`record.json` under `results/perf/gpu/<device>/`; this table is generated from it.\n")
    rows = []
    for r in records:
        card = f"{r.get('device_name')} (torch {r.get('torch')})"
        steps = r.get("steps", {})
        bare = steps.get("bare_eager", {}).get("ms_per_seed_step")
        for case, t in sorted(steps.items()):
            ms = t["ms_per_seed_step"]
            unit = "ms / 1,000 images" if case in ("oracle", "bare_forward") else "ms / seed-step"
            rel = f"{bare / ms:.2f}x" if bare and unit != "ms / 1,000 images" else ""
            rows.append([card, case, str(t["seeds"]), f"{ms:.3f}", unit, rel, ""])
        for case, (what, limit, unit) in GPU_GOALS.items():
            if case in steps:
                ms = steps[case]["ms_per_seed_step"]
                rows.append([card, f"goal: {what}", "", f"{ms:.3f}", unit, "", f"{'met' if ms <= limit else 'not met'} (<= {limit})"])
        if "oracle" in steps and "bare_forward" in steps:
            ratio = steps["oracle"]["ms_per_seed_step"] / steps["bare_forward"]["ms_per_seed_step"]
            rows.append([card, "goal: oracle / bare forward", "", f"{ratio:.2f}", "x", "",
                         f"{'met' if ratio <= 1.1 else 'not met'} (<= 1.1)"])
        grid = r.get("grid", {})
        if "pytest_s" in grid:
            rows.append([card, "goal: 6 grid cells 1k/10k, -n 4 --gpus", "", f"{grid['pytest_s']:.1f}", "s of pytest", "",
                         f"{'met' if grid['pytest_s'] <= 15 else 'not met'} (<= 15); {grid.get('counts', {})}"])
        run = r.get("random_1m") or {}
        total = (run.get("timings_s") or {}).get("total")
        if total is not None:
            rows.append([card, "goal: Random 1M cell, seed 0", "", f"{total / 60:.2f}", "min wall", "",
                         f"{'met' if total <= 180 else 'not met'} (<= 3); status {run.get('status')}"])
    return md_table(["card", "case", "seeds", "time", "unit", "speed-up over the bare eager loop", "goal"], rows)


def run_records(set_dir: Path) -> list[dict[str, Any]]:
    """(label, seed, summary) of every seed-run under ``runs/``."""
    out = []
    for path in sorted((set_dir / "runs").glob("*/*/seed_*/summary.json")):
        s = json.loads(path.read_text())
        if s.get("status") == "complete":
            out.append(s)
    return out


def variants_table(set_dir: Path) -> str:
    """Each option's effect on Track A's metrics, paired by seed against the default (wall times of
    runs on a shared CPU say little about speed; the benchmarks measure that)."""
    rows_by: dict[tuple[str, int, int], dict[str, float]] = {}
    for s in run_records(set_dir):
        for r in s.get("results", []):
            if r["track"] == "A":
                rows_by[(r["attack"], int(r["seed"]), int(r["checkpoint_B"]))] = r
    rows = []
    for label, name in RUN_LABELS.items():
        for b in sorted({k[2] for k in rows_by if k[0] == label}):
            seeds = sorted(k[1] for k in rows_by if k[0] == label and k[2] == b)
            got = [rows_by[(label, s, b)] for s in seeds]
            base = [rows_by.get(("random", s, b)) for s in seeds]
            diffs = {m: [float(g[m]) - float(d[m]) for g, d in zip(got, base) if d is not None]
                     for m in ("agreement", "acc_gt", "kl_mean")}
            agree = [float(g["agreement"]) for g in got]
            rows.append([name, f"{b:,}", str(len(seeds)), f"{mean(agree):.4f}",
                         f"{stdev(agree):.4f}" if len(agree) > 1 else "",
                         f"{mean(float(g['acc_gt']) for g in got):.4f}",
                         *(f"{max(abs(v) for v in diffs[m]):.4f}" if diffs[m] else "" for m in ("agreement", "acc_gt", "kl_mean"))])
    return md_table(["Track A", "B", "seeds", "agreement (mean)", "agreement (std over seeds)", "acc_gt (mean)", "largest Δ agreement vs default (paired)",
                     "largest Δ acc_gt", "largest Δ kl_mean"], rows)


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's tables for ``mebench docs`` (``<!-- mebench:begin perf/<name> -->`` blocks)."""
    roof = bench_records(set_dir, "roofline")
    return {"roofline.md": roofline_table(roof), "victim.md": victim_table(roof), "attacks.md": attacks_table(roof),
            "seeds_together.md": seeds_together_table(bench_records(set_dir, "seeds_together")),
            "variants.md": variants_table(set_dir), "gpu.md": gpu_table(gpu_records(set_dir))}


if __name__ == "__main__":
    for name, text in tables(HERE).items():
        print(f"## {name}\n\n{text}")
