"""One thread policy for every way of running cells (issue 40): the grid without --mebench-threads
uses the count `mebench run` would (``mebench.support.threads.default_threads``), shared among xdist workers,
and records it with every cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mebench.support import threads
from mebench.harness.session import grid_threads
from test_plugin import bench, cells_by_id  # noqa: F401  (the pytester grid folder)

pytest_plugins = ["pytester"]


def test_grid_threads_shares_the_run_policy_among_workers() -> None:
    assert grid_threads(None, default=3) == 3          # serial grid: exactly mebench run's count
    assert grid_threads(1, default=3) == 3
    assert grid_threads(2, default=8) == 4             # -n 2: each worker half of the free cores
    assert grid_threads(4, default=2) == 1             # never below one thread
    assert grid_threads("auto", default=5) == 5        # not a worker count: serial


# contract §11 (run records): the thread count a cell ran with is recorded and is the policy's
@pytest.mark.slow
def test_grid_without_threads_option_uses_the_run_policy(bench: pytest.Pytester,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    policy = 1 if torch.get_num_threads() != 1 else 2  # differs from torch's own default here
    monkeypatch.setattr(threads, "default_threads", lambda *a, **k: policy)
    before = torch.get_num_threads()
    result = bench.runpytest("benchmarks", "-k", "random and surrogate and hard_top1 and s0",
                             "-p", "no:benchmark", "--mebench-json", "t.json")
    assert result.ret == 0, result.stdout.str()
    (cell,) = cells_by_id(bench.path / "t.json").values()
    summary = json.loads((Path(cell["artifacts_dir"]) / "summary.json").read_text())
    assert summary["machine"]["torch_threads"] == policy
    assert torch.get_num_threads() == before  # the in-process grid leaves this process's count alone
