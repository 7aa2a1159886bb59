"""`mebench records`: a result set gets finished seed-runs' records only (docs/results/index.md, "How a
result set is made"; contract: results are records, written whole or not at all)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mebench.cli import main
from mebench.report.load import CSV_COLUMNS, load_runs_folder
from mebench.report.publish import MixedBuildsError, copy_records


def _seed(folder: Path, seed: int, cell: bool = False, status: str = "passed", build: str = "") -> Path:
    folder.mkdir(parents=True)
    row = {c: "" for c in CSV_COLUMNS}
    row.update({"seed": seed, "checkpoint_B": 1000, "track": "A", "acc_gt": 0.5, "agreement": 0.5,
                "attack": "random", "data_mode": "surrogate", "output_mode": "soft_prob",
                "victim_id": "mnist_lenet5", "substitute_arch": "lenet5"})
    pd.DataFrame([row], columns=list(CSV_COLUMNS)).to_csv(folder / "metrics.csv", index=False)
    summary = {"status": "complete", "seed": seed, "attack": {"name": "random"}, "dataset": {"name": "MNIST"}}
    if build:
        summary["victim"] = {"victim_id": "mnist_lenet5", "checkpoint_sha256": build * 64}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "run_config.yaml").write_text("run: {name: r}\n")
    (folder / "final_substitute.ckpt").write_bytes(b"weights")
    (folder / ".query_cache").mkdir()
    (folder / ".query_cache" / "x.pt").write_bytes(b"cache")
    if cell:
        (folder / "result.json").write_text(json.dumps({"status": status}))
    return folder


def test_a_set_gets_whole_groups_of_finished_seed_runs_without_weights_or_caches(tmp_path):
    cells = tmp_path / "cells"
    for s in range(3):
        _seed(cells / f"g-random-surrogate-soft_prob-s{s}", s, cell=True)
    _seed(cells / "g-knockoff-surrogate-soft_prob-s0", 0, cell=True)             # one seed of three
    _seed(cells / "g-knockoff-surrogate-soft_prob-s1", 1, cell=True, status="failed")
    runs = tmp_path / "runs"
    for s in range(3):
        _seed(runs / "mnist_random" / "20260101T000000Z" / f"seed_{s}", s)
    dest = tmp_path / "results" / "set"
    done = copy_records([cells, runs], dest)
    assert sorted(done.copied) == [*(f"g-random-surrogate-soft_prob-s{s}" for s in range(3)),
                                   *(f"mnist_random/20260101T000000Z/seed_{s}" for s in range(3))]
    assert len(done.skipped) == 2 and any("cell failed" in line for line in done.skipped)
    assert any("fewer than 3" in line for line in done.skipped)
    names = {p.name for p in dest.rglob("*") if p.is_file()}
    assert names == {"metrics.csv", "summary.json", "run_config.yaml", "result.json"}
    assert [r.ok for r in load_runs_folder(dest)] == [True] * 6
    assert not [p for p in dest.rglob(".*")]  # no temporary folder left behind
    # copied again (a rerun's records), each folder is replaced whole: a file the rerun no longer
    # has is gone, not merged with the new ones
    rerun = cells / "g-random-surrogate-soft_prob-s0"
    (rerun / "extra.json").write_text("{}")
    (rerun / "run_config.yaml").unlink()
    copy_records([cells], dest)
    assert sorted(p.name for p in (dest / rerun.name).iterdir()) == [
        "extra.json", "metrics.csv", "result.json", "summary.json"]


def test_a_folder_whose_rename_fails_comes_back_as_it_was(tmp_path, monkeypatch):
    cells = tmp_path / "cells"
    for s in range(3):
        _seed(cells / f"g-random-surrogate-soft_prob-s{s}", s, cell=True)
    dest = tmp_path / "set"
    copy_records([cells], dest)
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    for s in range(3):
        (cells / f"g-random-surrogate-soft_prob-s{s}" / "summary.json").write_text('{"status": "complete"}')
    rename = Path.rename

    def failing(self, target):  # the new folder cannot be moved into place
        if self.name.endswith(".tmp"):
            raise OSError("disk full")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError, match="disk full"):
        copy_records([cells], dest)
    after = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before  # the old records, whole
    assert not [p for p in dest.rglob(".*")]  # and no temporary folder left behind


def test_the_command_says_what_it_left_out_and_refuses_bad_input(tmp_path, capsys):
    cells = tmp_path / "cells"
    _seed(cells / "g-random-surrogate-soft_prob-s0", 0, cell=True)
    assert main(["records", str(cells), "--into", str(tmp_path / "set")]) == 1  # nothing whole to copy
    out = capsys.readouterr().out
    assert "fewer than 3" in out and "copied 0 seed-runs" in out
    assert main(["records", str(cells), "--into", str(tmp_path / "set"), "--min-seeds", "1"]) == 0
    assert main(["records", str(tmp_path / "nowhere"), "--into", str(tmp_path / "set")]) == 1
    assert "no such folder" in capsys.readouterr().err
    assert main(["records", str(cells), "--into", str(tmp_path / "set"), "--min-seeds", "0"]) == 2
    assert main(["records", str(cells), "--into", str(cells / "inside")]) == 1


def test_a_set_holds_one_build_of_each_victim(tmp_path, capsys):
    """Seed-runs against another build (sha256) of a victim the set holds are refused before anything
    is written: the set's report would split the victim by build (docs/guide/victims.md)."""
    first, other = tmp_path / "first", tmp_path / "other"
    for s in range(3):
        _seed(first / f"g-random-surrogate-soft_prob-s{s}", s, cell=True, build="a")
        _seed(other / f"g-knockoff-surrogate-soft_prob-s{s}", s, cell=True, build="b")
    dest = tmp_path / "set"
    assert len(copy_records([first], dest).copied) == 3
    before = sorted(p.relative_to(dest) for p in dest.rglob("*"))
    with pytest.raises(MixedBuildsError, match=r"mnist_lenet5 would hold several: aaaaaaaaaaaa \(3 seed-runs"):
        copy_records([other], dest)
    assert sorted(p.relative_to(dest) for p in dest.rglob("*")) == before  # nothing written
    with pytest.raises(MixedBuildsError):  # two builds from the sources alone, into a new set
        copy_records([first, other], tmp_path / "new")
    assert not (tmp_path / "new").exists()
    assert main(["records", str(other), "--into", str(dest)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one build of each victim" in err and "bbbbbbbbbbbb" in err
    # a rerun that replaces every seed-run of the old build is one build again
    rerun = tmp_path / "rerun"
    for s in range(3):
        _seed(rerun / f"g-random-surrogate-soft_prob-s{s}", s, cell=True, build="b")
    assert len(copy_records([rerun], dest).copied) == 3
    assert len(copy_records([other], dest).copied) == 3


def test_seed_runs_named_one_by_one_keep_their_names_and_the_set_keeps_the_rest(tmp_path):
    # a cell folder (or a run's seed folder) named on the command line is one seed-run: it lands under
    # its own name beside the set's other folders, never in place of the whole set, and the cells
    # named together count as one group
    dest = tmp_path / "results" / "set"
    old = tmp_path / "old"
    for s in range(3):
        _seed(old / f"g-random-surrogate-soft_prob-s{s}", s, cell=True)
    assert len(copy_records([old], dest).copied) == 3
    cells = tmp_path / "cells"
    named = [_seed(cells / f"g-knockoff-surrogate-soft_prob-s{s}", s, cell=True) for s in range(3)]
    done = copy_records(named, dest)
    assert sorted(done.copied) == [f"g-knockoff-surrogate-soft_prob-s{s}" for s in range(3)] and not done.skipped
    one = copy_records(named[:1], dest)  # one of the three alone is a group of one
    assert not one.copied and "fewer than 3" in one.skipped[0]
    runs = tmp_path / "runs"
    seed = _seed(runs / "mnist_random" / "20260101T000000Z" / "seed_0", 0)
    assert copy_records([seed], dest, min_seeds=1).copied == ["mnist_random/20260101T000000Z/seed_0"]
    kept = sorted(str(p.relative_to(dest)) for p in dest.iterdir())
    assert kept == [*(f"g-knockoff-surrogate-soft_prob-s{s}" for s in range(3)),
                    *(f"g-random-surrogate-soft_prob-s{s}" for s in range(3)), "mnist_random"]
    assert [r.ok for r in load_runs_folder(dest)] == [True] * 7


def test_a_relative_seed_folder_named_as_its_source_is_copied_whole(tmp_path, monkeypatch):
    # 'seed_0' named from inside its timestamp folder: its layout starts three levels up all the same
    ts = tmp_path / "runs" / "mnist_random" / "20260101T000000Z"
    _seed(ts / "seed_0", 0)
    monkeypatch.chdir(ts)
    done = copy_records([Path("seed_0")], tmp_path / "set", min_seeds=1)
    assert done.copied == ["mnist_random/20260101T000000Z/seed_0"]
    assert (tmp_path / "set" / "mnist_random" / "20260101T000000Z" / "seed_0" / "summary.json").is_file()
