"""Measurements are probes (``mebench.probes``; issue 35): a registry, typed parameters under
``measure.<probe>``, the start / checkpoint / finish events, long-format ``measurements.csv``."""

from __future__ import annotations

import csv
import dataclasses
import json
import warnings
from dataclasses import dataclass

import pytest

from mebench.run import artifacts, engine
from mebench.config import parse_config
from mebench.errors import ConfigError
from mebench.run.plan import resolve
from mebench.probes import MEASUREMENT_COLUMNS, PROBES, Probe, measurement, register_probe
from mebench.testing import deep_update, synthetic_config_dict
from mebench.config.validation import validate

BUILT_INS = ("defense_utility", "detection", "track_b", "track_a", "health", "transfer")
TINY = {"budget": {"max_budget": 100, "checkpoints": [50, 100]}}


def test_built_in_probes_are_registered_with_typed_params_and_declared_metrics():
    assert set(BUILT_INS) <= set(PROBES.names())
    for name in BUILT_INS:
        cls = PROBES.get(name)
        assert cls.name == name and dataclasses.is_dataclass(cls.Params) and cls.metrics
    with pytest.raises(ValueError, match="already registered"):
        register_probe("health")(type("Again", (Probe,), {}))


# issue 35: the plan lists the probes that run with their parameters, defaults filled in.
def test_the_plan_records_each_probe_and_its_params(make_cfg):
    plain = {p.name: p.params for p in resolve(make_cfg()).probes}
    assert list(plain) == ["track_b", "track_a", "health"]
    cfg = make_cfg(measure={"transfer": {"methods": ["fgsm"]}}, defense={"name": "prada", "params": {}})
    plan = resolve(cfg)
    assert [p.name for p in plan.probes] == ["defense_utility", "detection", "track_b", "track_a", "health", "transfer"]
    probes = {p["name"]: p["params"] for p in plan.to_dict()["probes"]}
    assert probes["transfer"] == {"methods": ["fgsm"], "images": 500, "eps": [], "references": 3}
    assert probes["detection"] == {"benign_streams": 4, "benign_dataset": None}
    assert resolve(make_cfg(measure={"transfer": {"methods": ["fgsm"], "images": 10}})).hash != plan.hash


# issue 35: the old metrics.* keys are read for one release, each with a warning naming its new key.
@pytest.mark.parametrize("old, new, measure", [
    ({"transfer": ["pgd"]}, "measure.transfer.methods", {"transfer": {"methods": ["pgd"]}}),
    ({"transfer_images": 50}, "measure.transfer.images", {"transfer": {"images": 50}}),
    ({"benign_streams": 3}, "measure.detection.benign_streams", {"detection": {"benign_streams": 3}}),
    ({"benign_dataset": "SYNTHSUR"}, "measure.detection.benign_dataset", {"detection": {"benign_dataset": "SYNTHSUR"}}),
])
def test_old_metrics_keys_still_work_with_a_deprecation_warning(tmp_path, synth_victim_path, old, new, measure):
    raw = synthetic_config_dict(tmp_path, synth_victim_path)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        cfg = parse_config({**raw, "metrics": old})
    assert cfg.measure == measure
    assert resolve(cfg).hash == resolve(parse_config({**raw, "measure": measure})).hash
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_config({**raw, "measure": measure})  # the new spelling warns nothing


def test_a_key_set_in_both_spellings_is_one_error(tmp_path, synth_victim_path):
    raw = {**synthetic_config_dict(tmp_path, synth_victim_path), "metrics": {"transfer": ["pgd"]},
           "measure": {"transfer": {"methods": ["fgsm"]}}}
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert e.value.key == "metrics.transfer" and "measure.transfer.methods" in str(e.value)


# contract §15.2 / issue 35: an unknown probe or probe parameter fails validation in one line.
@pytest.mark.parametrize("measure, key, words", [
    ({"tranfer": {"methods": ["fgsm"]}}, "measure.tranfer", "did you mean 'transfer'"),
    ({"transfer": {"method": ["fgsm"]}}, "measure.transfer.method", "did you mean 'methods'"),
    ({"transfer": {"images": "many"}}, "measure.transfer.images", "must be an integer"),
    ({"health": 3}, "measure.health", "mapping"),
])
def test_unknown_probes_and_params_fail_in_one_line(make_cfg, measure, key, words):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(measure=measure), check_files=False)
    assert e.value.key == key and words in str(e.value) and "\n" not in str(e.value)


@dataclass(frozen=True)
class EchoParams:
    scale: float = 1.0


class Echo(Probe):
    """A test-only probe: records every event it hears and writes one measurement per substitute."""

    Params = EchoParams
    metrics = ("scaled_agreement",)

    def __init__(self, params=None):
        super().__init__(params)
        self.events: list[tuple] = []
        self.rows: list[dict] = []

    def start(self, world):
        self.events.append(("start", world.seed, world.attack is not None))

    def checkpoint(self, world, budget, emit):
        self.events.append(("checkpoint", budget, world.oracle.queries_used))

    def substitute(self, world, scored):
        self.events.append(("substitute", scored.budget, scored.track))
        self.rows.append(measurement(world.seed, scored.budget, scored.track, self.name, "scaled_agreement",
                                     self.params.scale * scored.result.metrics.agreement))

    def finish(self, world):
        self.events.append(("finish",))

    def measurements(self):
        return self.rows

    def summary(self, world):
        return {"echo": {"events": [list(e) for e in self.events]}}


@pytest.fixture
def echo():
    register_probe("echo")(Echo)
    yield Echo
    PROBES.unregister("echo")


# issue 35: a registered probe hears start / checkpoint / substitute / finish in order, its
# measurements go to measurements.csv and its section to summary.json; metrics.csv keeps §16.2.
def test_a_registered_probe_hears_every_event_and_writes_long_rows(make_cfg, echo):
    cfg = make_cfg(attack={"name": "knockoff", "params": {"epochs": 1, "lr_step": 1}},
                   measure={"echo": {"scale": 2.0}}, **TINY)
    result = engine.run(cfg, progress=False)
    seed_dir = result.directory / "seed_0"
    summary = json.loads((seed_dir / "summary.json").read_text())
    assert {"name": "echo", "params": {"scale": 2.0}} in summary["plan"]["probes"]
    assert summary["echo"]["events"] == [
        ["start", 0, False],  # before the attack is built: nothing has been queried
        # registered after the tracks, it hears their substitutes before its own checkpoint event
        ["substitute", 50, "B"], ["substitute", 50, "A"], ["checkpoint", 50, 50],
        ["substitute", 100, "B"], ["substitute", 100, "A"], ["checkpoint", 100, 100], ["finish"]]
    with (seed_dir / "metrics.csv").open() as f:
        reader = csv.DictReader(f)
        metrics = list(reader)
    assert tuple(reader.fieldnames) == artifacts.METRICS_COLUMNS
    with (seed_dir / "measurements.csv").open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == MEASUREMENT_COLUMNS
    echoed = [r for r in rows if r["probe"] == "echo"]
    assert [(r["checkpoint_B"], r["track"]) for r in echoed] == [("50", "B"), ("50", "A"), ("100", "B"), ("100", "A")]
    agreement = {(m["checkpoint_B"], m["track"]): float(m["agreement"]) for m in metrics}
    for r in echoed:
        assert float(r["value"]) == pytest.approx(2.0 * agreement[(r["checkpoint_B"], r["track"])])


# issue 35: training health's per-checkpoint numbers are in measurements.csv, equal to summary.json's.
def test_health_numbers_are_long_rows_of_measurements_csv(make_cfg):
    result = engine.run(make_cfg(**TINY), progress=False)
    seed_dir = result.directory / "seed_0"
    health = json.loads((seed_dir / "summary.json").read_text())["training_health"]
    with (seed_dir / "measurements.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["probe"] == "health"]
    assert {r["metric"] for r in rows} >= {"pred_top_share", "victim_top_share", "loss_first", "loss_last"}
    for r in rows:
        record = next(h for h in health if h["track"] == r["track"] and str(h["checkpoint_B"]) == r["checkpoint_B"])
        assert float(r["value"]) == pytest.approx(record[r["metric"]]) and r["seed"] == "0"
    assert len({(r["checkpoint_B"], r["track"]) for r in rows}) == len(health) == 2


def test_a_probe_that_is_not_built_in_runs_only_when_the_config_names_it(make_cfg, echo):
    assert "echo" not in [p.name for p in resolve(make_cfg()).probes]
    assert "echo" in [p.name for p in resolve(make_cfg(measure={"echo": None})).probes]


def test_the_mebench_command_shows_an_old_key_with_its_new_name(tmp_path):
    # issue 35: Python hides DeprecationWarning outside __main__; the command shows this one.
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    raw = yaml.safe_load((root / "configs" / "mnist_lenet5_random_soft.yaml").read_text())
    raw["metrics"] = {"transfer_images": 10}
    raw["budget"] = {"max_budget": 10, "checkpoints": [20]}  # invalid: fails right after parsing
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = "import sys; from mebench.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", code, "run", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "budget.checkpoints" in done.stderr + done.stdout
    assert "metrics.transfer_images is deprecated: write measure.transfer.images" in done.stderr
    # issue 52: the deprecation is one line of its own, not Python's warning with file, line and source
    lines = done.stderr.strip().splitlines()
    assert [ln for ln in lines if "deprecated" in ln][0].startswith("mebench: deprecated: ")
    assert "DeprecationWarning" not in done.stderr and len(lines) == 2  # the deprecation, then the error
