"""Seeds together in the grid (§8 Track A, §10; ``mebench.harness.seedgroups``): with
``--seeds-together on`` the seed cells of one condition run as one group (one stacked Track A per
checkpoint), each keeps its own cell, record and rows, and the rows equal those of lone cells within
the stacked trainer's bound (``test_seeds_together.py``: 2e-3 on every metric); under ``-n`` a
group stays on one worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mebench.harness.plugin import loadgroup_works
from test_plugin import bench, cells_by_id  # noqa: F401  (bench: the pytester grid fixture)

pytest_plugins = ["pytester"]
SELECT = "random and surrogate"  # 2 output modes x 2 seeds: two groups of two cells


def rows(cell: dict) -> dict:
    return {(r["checkpoint_B"], r["track"]): r for r in cell["summary"]["results"]}


def test_grouped_cells_equal_lone_cells(bench: pytest.Pytester) -> None:
    lone = bench.runpytest("benchmarks", "-k", SELECT, "--mebench-json", "lone.json", "--mebench-cells", "lone")
    lone.assert_outcomes(passed=4)
    grouped = bench.runpytest("benchmarks", "-k", SELECT, "--seeds-together", "on", "--mebench-json", "grouped.json",
                              "--mebench-cells", "grouped")
    grouped.assert_outcomes(passed=4)
    a, b = cells_by_id(bench.path / "lone.json"), cells_by_id(bench.path / "grouped.json")
    assert a.keys() == b.keys() and len(a) == 4
    for cell_id, cell in b.items():
        assert cell["status"] == "passed"
        assert cell["summary"]["track_a_seeds_together"] == {"seeds": [0, 1]}, cell_id
        assert "track_a_seeds_together" not in a[cell_id]["summary"]
        assert Path(cell["artifacts_dir"]).name == cell_id and (Path(cell["artifacts_dir"]) / "metrics.csv").is_file()
        got, want = rows(cell), rows(a[cell_id])
        assert got.keys() == want.keys()
        for key, row in want.items():
            for m in ("agreement", "acc_gt", "kl_mean", "l1_mean"):
                if row.get(m) is not None:
                    assert got[key][m] == pytest.approx(row[m], abs=2e-3), (cell_id, key, m)
        assert got[(300, "A")]["agreement"] == pytest.approx(want[(300, "A")]["agreement"], abs=2e-3)
    assert not list((bench.path / "grouped").rglob(".query_cache"))


def test_a_group_stays_on_one_worker(bench: pytest.Pytester) -> None:
    result = bench.runpytest_subprocess("benchmarks", "-k", SELECT, "--seeds-together", "on", "-n", "2",
                                        "--mebench-json", "x.json", "-p", "no:benchmark")
    if not loadgroup_works():  # pytest 9.2 with pytest-xdist <= 3.8.0: refused in one line, before any cell
        assert result.ret == pytest.ExitCode.USAGE_ERROR and "install pytest<9.2" in result.stderr.str()
        return
    result.assert_outcomes(passed=4)
    cells = cells_by_id(bench.path / "x.json")
    for mode in ("soft_prob", "hard_top1"):
        pair = [cells[f"synth-mlp-random-surrogate-{mode}-s{s}"] for s in (0, 1)]
        assert pair[0]["worker"] == pair[1]["worker"] and pair[0]["worker"].startswith("gw")
        assert all(c["summary"]["track_a_seeds_together"] == {"seeds": [0, 1]} for c in pair)


def test_auto_is_off_on_the_cpu(bench: pytest.Pytester) -> None:
    result = bench.runpytest("benchmarks", "-k", SELECT + " and soft_prob", "--mebench-json", "auto.json")
    result.assert_outcomes(passed=2)
    assert all("track_a_seeds_together" not in c["summary"] for c in cells_by_id(bench.path / "auto.json").values())


def test_other_dist_modes_are_refused(bench: pytest.Pytester) -> None:
    result = bench.runpytest_subprocess("benchmarks", "-k", SELECT, "--seeds-together", "on", "-n", "2",
                                        "--dist", "loadfile", "-p", "no:benchmark")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--seeds-together*needs --dist loadgroup*not --dist loadfile*"])


FAILING = """\
import pytest
from mebench.run import engine
from mebench.training.track_a import TrackATrainer
from test_cells import test_cell  # the same test, with a Track A trainer that fails when it trains


class Failing(TrackATrainer):
    def steps(self, budget):
        raise RuntimeError("injected failure")


@pytest.fixture
def track_a_trainer(cell, run_config, victim):
    real = engine.make_track_a_trainer(cell.plan, victim)
    return Failing(real.spec, real.device)
"""


# a group fails together: the seed whose training raised reports its error, its sibling says why it stopped.
def test_a_failing_group_reports_each_cell(bench: pytest.Pytester) -> None:
    (bench.path / "benchmarks" / "test_broken.py").write_text(FAILING)
    result = bench.runpytest("benchmarks/test_broken.py", "-k", "random and surrogate and hard_top1",
                             "--seeds-together", "on", "--mebench-json", "broken.json")
    result.assert_outcomes(failed=2)
    cells = cells_by_id(bench.path / "broken.json")
    errors = {c["id"]: c["error"] for c in cells.values()}
    own = [e for e in errors.values() if e.startswith("RuntimeError: injected failure")]
    stopped = [e for e in errors.values() if e.startswith("Aborted:")]
    assert len(own) == 1 and len(stopped) == 1, errors
    failed = next(i for i, e in errors.items() if e in own)
    assert f"stopped: {failed}, a seed cell of its group, failed" in stopped[0]
    assert not list(bench.path.rglob(".query_cache"))
    assert json.loads((bench.path / "broken.json").read_text())["cells"]


COUNTING = """\
import mebench.run.plan as plan_module
from mebench.run import engine

CALLS = []
REAL = plan_module.resolve, engine.resolve


def counting(*args, **kwargs):
    CALLS.append(args)
    return REAL[0](*args, **kwargs)


plan_module.resolve = counting
engine.resolve = counting


def pytest_sessionfinish(session):
    (session.config.rootpath / "resolves.txt").write_text(str(len(CALLS)))


def pytest_unconfigure(config):  # this runs in the test's own process: leave the modules as they were
    plan_module.resolve, engine.resolve = REAL
"""


# issue 55: the grid hands each cell's plan to the run, so a cell's plan is resolved once (Cell.plan).
def test_a_cell_resolves_its_plan_once(bench: pytest.Pytester) -> None:
    (bench.path / "conftest.py").write_text((bench.path / "conftest.py").read_text() + "\n" + COUNTING)
    result = bench.runpytest("benchmarks", "-k", "random and surrogate and soft_prob", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    assert (bench.path / "resolves.txt").read_text() == "2"


PARAMS_COUNTING = """\
import collections
import mebench.config as config_module
import mebench.config.schema as builder_module
import mebench.config.validation as validation_module

BUILT = collections.Counter()
REAL_BUILD = builder_module.build_params


def counting_build(cls, raw, where, *args, **kwargs):
    BUILT[where] += 1
    return REAL_BUILD(cls, raw, where, *args, **kwargs)


for module in (config_module, builder_module, validation_module):
    module.build_params = counting_build


def pytest_sessionfinish(session):
    import json
    (session.config.rootpath / "params.json").write_text(json.dumps(BUILT))


def pytest_unconfigure(config):
    for module in (config_module, builder_module, validation_module):
        module.build_params = REAL_BUILD
"""


# issue 55: a grid cell builds its attack's, its defense's and each probe's Params once, from
# collection to its records (the plan is the one place a config meets the registries).
def test_a_cell_builds_each_plugin_s_params_once(bench: pytest.Pytester) -> None:
    grid = bench.path / "configs" / "benchmarks" / "mnist.yaml"
    text = grid.read_text().replace("seeds: [0, 1]", "seeds: [0]\noutput_modes: [soft_prob]")
    grid.write_text(text.split("  - name: dfme")[0].replace("[seed, surrogate, data_free]", "[surrogate]"))
    (bench.path / "conftest.py").write_text((bench.path / "conftest.py").read_text() + "\n" + PARAMS_COUNTING)
    result = bench.runpytest("benchmarks", "-p", "no:randomly")
    result.assert_outcomes(passed=1)  # the grid's one cell, collected, run and recorded
    built = json.loads((bench.path / "params.json").read_text())
    probes = {k: v for k, v in built.items() if k.startswith("measure.")}
    assert built["attack.params"] == 1 and built["defense.params"] == 1, built
    assert probes and all(v == 1 for v in probes.values()), built
