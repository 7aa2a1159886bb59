"""One identity for a result (issue 43; contract §10 seeds, §16 outputs).

A seed-run is told apart by its condition and seed; among repeats the one completed last is
kept (``summary.json`` ``completed_at``, else a file time), never the one whose folder name
sorts last. Seeds that ran with different thread counts, devices or code are never pooled
into one mean without saying so, and cells kept by ``--keep-stale`` are marked.
Fixtures are written directly (metrics.csv, summary.json), so no training runs.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pandas as pd
import pytest

from mebench.run.artifacts import write_metrics_csv
from mebench.report.writer import write_report


def write_seed(folder: Path, seed: int, agreement: float, *, label: str = "random", completed_at: str | None = None,
               threads: int | None = 1, code: str | None = "0.1.0+src.aaaaaaaaaaaa", grid_cell: bool = False,
               extra: dict | None = None) -> Path:
    """One finished seed folder (a grid cell also gets its result.json)."""
    folder.mkdir(parents=True)
    rows = [{"seed": seed, "checkpoint_B": b, "track": "A", "acc_gt": agreement - 0.01, "agreement": agreement,
             "kl_mean": 0.5, "l1_mean": 0.05, "attack": label, "data_mode": "surrogate", "output_mode": "soft_prob",
             "victim_id": "mnist_lenet5", "substitute_arch": "lenet5"} for b in (1000, 10000)]
    write_metrics_csv(folder / "metrics.csv", rows)
    summary = {"status": "complete", "seed": seed, "attack": {"name": label, "label": label},
               "dataset": {"name": "MNIST", "data_mode": "surrogate"},
               "victim": {"victim_id": "mnist_lenet5", "test_accuracy": 0.99, "checkpoint_sha256": "a" * 64},
               "machine": {"device": "cpu", **({"torch_threads": threads} if threads is not None else {})},
               **({"code_identity": code} if code else {}), **({"completed_at": completed_at} if completed_at else {}),
               **(extra or {})}
    (folder / "summary.json").write_text(json.dumps(summary))
    if grid_cell:
        (folder / "result.json").write_text(json.dumps({"id": folder.name, "status": "passed", "summary": summary}))
    return folder


def _report(root: Path, out: Path) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = write_report(root, out, n_bootstrap=50)
    return files, [str(w.message) for w in caught]


def _agreement(files: dict, label: str = "random") -> dict[int, float]:
    results = pd.read_csv(files["results_csv"])
    rows = results[(results["label"] == label) & (results["checkpoint_B"] == 1000)]
    return dict(zip(rows["seed"], rows["agreement"]))


@pytest.mark.slow
def test_a_grid_cell_older_than_a_mebench_run_loses_to_it(tmp_path):
    # issue 43: the cells folder ('cells') sorts after every timestamp, but completed first
    cell = write_seed(tmp_path / "pytest" / "20260101T000000Z" / "cells" / "random-s0", 0, 0.3,
                      completed_at="2026-01-01T00:10:00Z", grid_cell=True)
    run = write_seed(tmp_path / "mnist_random" / "20260102T000000Z" / "seed_0", 0, 0.7,
                     completed_at="2026-01-02T00:10:00Z")
    files, messages = _report(tmp_path, tmp_path / "out")
    assert _agreement(files) == {0: pytest.approx(0.7)}
    warning = next(m for m in messages if "replaced by" in m)
    assert (f"{cell} (seed 0, completed 2026-01-01T00:10:00Z by completed_at) replaced by {run} "
            f"(completed 2026-01-02T00:10:00Z by completed_at)") in warning
    assert "path order" not in warning  # a true later completion, not a tie


@pytest.mark.slow
def test_a_newer_grid_cell_wins_and_file_times_stand_in_for_completed_at(tmp_path):
    # the order is completion time whatever the kind of folder; without completed_at, the file's mtime
    cell = write_seed(tmp_path / "pytest" / "20200101T000000Z" / "cells" / "random-s0", 0, 0.3, grid_cell=True)
    run = write_seed(tmp_path / "mnist_random" / "20990101T000000Z" / "seed_0", 0, 0.7)
    os.utime(run / "summary.json", (1_700_000_000, 1_700_000_000))
    os.utime(cell / "summary.json", (1_700_000_600, 1_700_000_600))
    files, messages = _report(tmp_path, tmp_path / "out")
    assert _agreement(files) == {0: pytest.approx(0.3)}
    assert any(f"{run} (seed 0, completed 2023-11-14T22:13:20Z by summary.json mtime) replaced by {cell}" in m
               for m in messages)


@pytest.mark.slow
def test_a_replaced_run_with_another_code_identity_is_said_so(tmp_path):
    write_seed(tmp_path / "a" / "t1" / "seed_0", 0, 0.3, completed_at="2026-01-01T00:00:00Z",
               code="0.1.0+src.111111111111")
    write_seed(tmp_path / "a" / "t2" / "seed_0", 0, 0.4, completed_at="2026-01-01T01:00:00Z",
               code="0.1.0+src.222222222222")
    _, messages = _report(tmp_path, tmp_path / "out")
    assert any("replaced by" in m and "their code identity differ" in m for m in messages)


@pytest.mark.slow
def test_seeds_at_two_thread_counts_are_not_pooled_silently(tmp_path):
    # issue 43: threads 1 and 2 give different float reductions: separate rows, and a warning naming them
    for seed, threads in ((0, 1), (1, 1), (2, 2)):
        write_seed(tmp_path / "r" / "t" / f"seed_{seed}", seed, 0.5 + 0.01 * seed, threads=threads)
    for seed in (0, 1):  # a condition that ran alike stays one row
        write_seed(tmp_path / "k" / "t" / f"seed_{seed}", seed, 0.6, label="knockoff")
    files, messages = _report(tmp_path, tmp_path / "out")
    agg = pd.read_csv(files["aggregate_csv"])
    agreement = agg[(agg["metric"] == "agreement") & (agg["checkpoint_B"] == 1000)].set_index("attack")
    assert agreement["n_seeds"].to_dict() == {"random [threads 1]": 2, "random [threads 2]": 1, "knockoff": 2}
    assert agreement.loc["random [threads 1]", "mean"] == pytest.approx(0.505)
    warning = next(m for m in messages if "not pooled" in m)
    assert "different threads" in warning and "'random [threads 1]': seeds 0, 1" in warning
    assert "'random [threads 2]': seeds 2" in warning
    assert set(pd.read_csv(files["leaderboard_csv"])["label"]) == {"random [threads 1]", "random [threads 2]",
                                                                   "knockoff"}


@pytest.mark.slow
def test_seeds_of_different_code_are_split_and_old_records_fall_back_to_git(tmp_path):
    # no code_identity (an older record): the git commit and dirty flag stand in; a missing field splits nothing
    write_seed(tmp_path / "r" / "t" / "seed_0", 0, 0.5, code=None, extra={"git": {"commit": "a" * 40, "dirty": False}})
    write_seed(tmp_path / "r" / "t" / "seed_1", 1, 0.5, code=None, extra={"git": {"commit": "a" * 40, "dirty": True}})
    write_seed(tmp_path / "k" / "t" / "seed_0", 0, 0.6, label="knockoff", threads=None)
    write_seed(tmp_path / "k" / "t" / "seed_1", 1, 0.6, label="knockoff", threads=2)
    files, _ = _report(tmp_path, tmp_path / "out")
    labels = set(pd.read_csv(files["aggregate_csv"])["attack"])
    assert labels == {"random [code git aaaaaaaaaaaa]", "random [code git aaaaaaaaaaaa+dirty]", "knockoff"}


@pytest.mark.slow
def test_seeds_of_two_machines_are_split_and_a_record_without_one_splits_nothing(tmp_path):
    # contract §10 (reproducibility), §16 (reports): across machines only distributions compare; a seed-run
    # from another torch build or CPU is its own row, named by what differs; an older record that names
    # neither pools with either
    here = {"versions": {"torch": "2.14.1"}}
    cpu = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2", "torch_threads": 1, "device": "cpu"}
    write_seed(tmp_path / "r" / "t" / "seed_0", 0, 0.5, extra={**here, "machine": cpu})
    write_seed(tmp_path / "r" / "t" / "seed_1", 1, 0.5, extra={"versions": {"torch": "2.15.0"}, "machine": cpu})
    write_seed(tmp_path / "k" / "t" / "seed_0", 0, 0.6, label="knockoff", extra={**here, "machine": cpu})
    write_seed(tmp_path / "k" / "t" / "seed_1", 1, 0.6, label="knockoff",
               extra={**here, "machine": {**cpu, "cpu_model": "Intel Xeon", "cpu_capability": "AVX512"}})
    write_seed(tmp_path / "o" / "t" / "seed_0", 0, 0.7, label="jbda", extra={**here, "machine": cpu})
    write_seed(tmp_path / "o" / "t" / "seed_1", 1, 0.7, label="jbda")
    files, messages = _report(tmp_path, tmp_path / "out")
    labels = set(pd.read_csv(files["aggregate_csv"])["attack"])
    assert labels == {"random [torch 2.14.1]", "random [torch 2.15.0]", "knockoff [cpu AMD EPYC (AVX2)]",
                      "knockoff [cpu Intel Xeon (AVX512)]", "jbda"}
    assert any("different cpu" in m and "'knockoff [cpu Intel Xeon (AVX512)]': seeds 1" in m for m in messages)


@pytest.mark.slow
def test_a_variant_split_by_machine_still_meets_its_preset_and_the_gap_is_written(tmp_path):
    # issue 58: presets.md|csv|json pair <preset> and <preset>_fast; when the pooling split suffixes both
    # ('maze [torch 2.15.0]'), each part meets the variant's part of the same suffix, never another's
    cpu = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2", "torch_threads": 1, "device": "cpu"}
    for label, base in (("maze", 0.5), ("maze_fast", 0.4)):
        for seed in range(3):
            torch_build = "2.15.0" if seed == 0 else "2.14.1"
            write_seed(tmp_path / label / "t" / f"seed_{seed}", seed, base + 0.01 * seed, label=label,
                       extra={"versions": {"torch": torch_build}, "machine": cpu, "timings_s": {"total": 10.0}})
    files, _ = _report(tmp_path, tmp_path / "out")
    gaps = json.loads(files["presets_json"].read_text())
    rows = pd.read_csv(files["presets_csv"])
    assert set(zip(rows["preset"], rows["variant"])) == {("maze [torch 2.14.1]", "maze_fast [torch 2.14.1]"),
                                                         ("maze [torch 2.15.0]", "maze_fast [torch 2.15.0]")}
    assert rows["gap"].round(10).eq(-0.1).all() and rows["one_machine"].all()
    assert gaps["definitions"]["ci_level"] == 0.95


@pytest.mark.slow
def test_a_preset_and_its_variant_from_two_machines_are_marked_so(tmp_path):
    # issue 58: the gap's "one machine" column says whether preset and variant ran on one torch build,
    # CPU model, device and GPU; a variant timed on another CPU compares two machines' wall times
    amd = {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2", "torch_threads": 1, "device": "cpu"}
    intel = {**amd, "cpu_model": "Intel Xeon", "cpu_capability": "AVX512"}
    runs = (("maze", 0.5, amd), ("maze_fast", 0.4, intel), ("dissector", 0.6, amd), ("dissector_fast", 0.5, amd))
    for label, base, machine in runs:
        for seed in range(3):
            write_seed(tmp_path / label / "t" / f"seed_{seed}", seed, base + 0.01 * seed, label=label,
                       extra={"versions": {"torch": "2.14.1"}, "machine": machine, "timings_s": {"total": 10.0}})
    files, _ = _report(tmp_path, tmp_path / "out")
    rows = pd.read_csv(files["presets_csv"])
    one = rows.groupby("preset")["one_machine"].agg(set).to_dict()
    assert one == {"maze": {False}, "dissector": {True}}
    shown = files["presets_md"].read_text()
    assert "| no |" in shown and "| yes |" in shown


@pytest.mark.slow
def test_cells_kept_stale_are_marked(tmp_path):
    write_seed(tmp_path / "r" / "t" / "seed_0", 0, 0.5)
    write_seed(tmp_path / "r" / "t" / "seed_1", 1, 0.5,
               extra={"resume": {"kept_stale": True, "reason": "plan changed: attack.params.k 3 -> 4"}})
    files, messages = _report(tmp_path, tmp_path / "out")
    md = files["leaderboard_md"].read_text()
    assert "Results kept stale (--keep-stale)" in md and "plan changed: attack.params.k 3 -> 4" in md
    assert "| 2 (1 kept stale) |" in md
    results = pd.read_csv(files["results_csv"])
    assert results.groupby("seed")["kept_stale"].first().to_dict() == {0: False, 1: True}
    assert any("seed 1 of random was kept by --keep-stale" in m for m in messages)
