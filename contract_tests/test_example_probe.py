"""The third-party probe in ``examples/mebench_example`` installs, registers through the
``mebench.probes`` entry point and measures (issue 35: adding a probe is one file to write and
its test; nothing in mebench changes).

The package is installed offline into a temporary folder (never into the test environment) and
used from subprocesses that have that folder on ``PYTHONPATH``. Without it, the name is an
unknown probe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "examples" / "mebench_example"

#: Runs one tiny SYNTH seed with ``measure.example_confidence`` and prints what the probe wrote.
SCRIPT = """
import csv, json, sys, torch
torch.set_num_threads(1)
from mebench.run import engine
from mebench.config import parse_config
from mebench.testing import deep_update, synthetic_config_dict
raw = deep_update(synthetic_config_dict(sys.argv[1]), {
    "attack": {"name": "knockoff", "params": {"epochs": 1, "lr_step": 1}},
    "budget": {"max_budget": 100, "checkpoints": [50, 100]},
    "measure": {"example_confidence": {"top_k": 2}}})
try:
    result = engine.run(parse_config(raw), progress=False)
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
    raise SystemExit(0)
seed = result.directory / "seed_0"
rows = [r for r in csv.DictReader((seed / "measurements.csv").open()) if r["probe"] == "example_confidence"]
plan = json.loads((seed / "summary.json").read_text())["plan"]
print(json.dumps({"rows": rows, "probes": plan["probes"]}))
"""


@pytest.fixture(scope="module")
def site(example_site: Path) -> Path:
    """The example package installed offline into its own folder (``conftest.example_site``)."""
    dist = next(example_site.glob("mebench_example-*.dist-info"))
    assert "[mebench.probes]" in (dist / "entry_points.txt").read_text()
    return example_site


def _measure(tmp_path: Path, site: Path | None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []), str(REPO),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# issue 35: a probe registered through the entry point runs when the config names it: the plan
# records it with its parameters and its numbers are rows of measurements.csv.
@pytest.mark.slow
def test_the_example_probe_registers_through_its_entry_point_and_measures(tmp_path, site):
    out = _measure(tmp_path / "with", site)
    assert {"name": "example_confidence", "params": {"top_k": 2}} in out["probes"]
    got = {(r["checkpoint_B"], r["track"], r["metric"]): float(r["value"]) for r in out["rows"]}
    assert set(got) == {(b, t, m) for b in ("50", "100") for t in ("A", "B")
                        for m in ("substitute_confidence", "victim_confidence")}
    assert all(0.5 <= v <= 1.0 for v in got.values())  # top-2 of 4 classes: at least half the mass
    assert got[("50", "A", "victim_confidence")] == got[("100", "B", "victim_confidence")]
    if not any(ep.name == "example_confidence" for ep in entry_points(group="mebench.probes")):
        without = _measure(tmp_path / "without", None)  # not installed here: the name is unknown
        assert "unknown probe 'example_confidence'" in without["error"]
