"""Every measurement a seed-run writes stays the same when the engine is reshaped (issue 35).

``test_run_plan.py`` pins ``metrics.csv``; this module pins what the other measurements write:
``transfer.csv`` bytes and, from ``summary.json``, the training-health records, the defense's
utility cost and fitted description, the detector's records on the attack's and the benign
streams, the per-checkpoint Track A steps and the result rows. Two tiny SYNTH runs at one torch
thread cover them: Knockoff (Track A and B) behind PRADA with FGSM/PGD transfer, and Random
behind Gaussian noise. The expected values live in ``data/pins/measurement_outputs.json``, per environment (``_pins``),
first written by the code before measurements became probes (transfer's rows since rewritten once,
deliberately, for its ε curve and reference ensemble, checked equal to the pre-probe engine's);
record them only for a deliberate change in numbers or a new environment:
``MEBENCH_PIN_WRITE=1 pytest contract_tests/test_outputs_pinned.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

import _pins
from mebench.testing import deep_update, synthetic_config_dict, synthetic_victim

pytestmark = pytest.mark.slow  # two engine runs with transfer and detection (seconds)

BUDGET = {"max_budget": 200, "checkpoints": [67, 200]}
CASES: dict[str, dict] = {
    "knockoff_prada_transfer": {
        "attack": {"name": "knockoff", "params": {"epochs": 2, "lr_step": 1}},
        "defense": {"name": "prada", "params": {}},
        "measure": {"transfer": {"methods": ["fgsm", "pgd"], "images": 24}, "detection": {"benign_streams": 2}}},
    "random_noise": {
        "attack": {"name": "random", "params": {"batch_size": 64}},
        "defense": {"name": "gaussian_noise", "params": {"sigma": 0.05}}},
}
#: summary.json sections each measurement owns (timings, paths and machine facts vary by design).
SECTIONS = ("results", "track_a_steps", "training_health", "health_flags", "attack_restarts", "queries_used",
            "transfer", "status")
DEFENSE_SECTIONS = ("utility", "fitted", "detection")
TIMED = re.compile(r"seconds|wall_clock|_s$")


@pytest.fixture(scope="module")
def pinned_victim(tmp_path_factory, one_thread) -> Path:
    """The SYNTH victim trained at one thread (``one_thread`` is the conftest's module fixture)."""
    return synthetic_victim(tmp_path_factory.mktemp("pinned") / "synth_victim.pt")


def measured(tmp_path: Path, victim: Path, case: str) -> dict:
    """Run one case (seed 0, one thread) and return what its measurements wrote."""
    from mebench.run import engine
    from mebench.config import parse_config

    raw = deep_update(synthetic_config_dict(tmp_path, victim), {"budget": BUDGET, **CASES[case]})
    result = engine.run(parse_config(raw), progress=False)
    seed_dir = result.directory / "seed_0"
    summary = json.loads((seed_dir / "summary.json").read_text())
    out = {k: summary.get(k) for k in SECTIONS}
    out["defense"] = {k: summary["defense"].get(k) for k in DEFENSE_SECTIONS}
    out["files"] = {name: hashlib.sha256(untimed_csv(seed_dir / name)).hexdigest()
                    for name in ("metrics.csv", "transfer.csv") if (seed_dir / name).exists()}
    return untimed(json.loads(json.dumps(out)))


def untimed(value: object) -> object:
    """``value`` without the keys that hold measured durations (they differ run to run by design)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not TIMED.search(k)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def untimed_csv(path: Path) -> bytes:
    """The file's bytes with every duration column removed (``transfer.csv``'s ``seconds``)."""
    lines = path.read_bytes().decode().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    keep = [i for i, name in enumerate(header) if not TIMED.search(name)]
    return "".join(",".join(line.rstrip("\r\n").split(",")[i] for i in keep) + "\n" for line in lines).encode()


def shape(value: object) -> object:
    """``value``'s structure without its numbers: keys, list lengths and value types (holds everywhere)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def finite_numbers(value: object) -> list[float]:
    """Every number in ``value`` that is not finite (NaN where a section records "not measured" is allowed
    only as ``None``, as JSON writes it)."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in finite_numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in finite_numbers(v)]
    return [value] if isinstance(value, float) and not math.isfinite(value) else []


# contract §16.2, §16.3 / issue 35: reshaping the engine into probes changes no measured value. The values
# hold in the environment they were recorded in (data/pins/measurement_outputs.json; issue 51).
@pytest.mark.parametrize("case", sorted(CASES))
def test_measurement_outputs_are_unchanged(case, tmp_path, pinned_victim):
    got = measured(tmp_path, pinned_victim, case)
    _pins.record_if_asked("measurement_outputs", case, got)
    expected = _pins.expected("measurement_outputs", case)
    for key in expected:
        assert got[key] == expected[key], key


# issue 51: in every environment the same runs repeat exactly, write no NaN or inf, and have the recorded
# sections, keys and list lengths (the pinned values' shape, from any recorded environment).
@pytest.mark.parametrize("case", sorted(CASES))
def test_measurement_outputs_repeat_and_keep_their_shape_everywhere(case, tmp_path, pinned_victim):
    one, two = _pins.two_folders(tmp_path)
    got = measured(one, pinned_victim, case)
    assert measured(two, pinned_victim, case) == got
    assert finite_numbers(got) == []
    assert got["status"] == "complete" and got["queries_used"] == BUDGET["max_budget"]
    recorded = [e["values"][case] for e in _pins.load("measurement_outputs") if case in e["values"]]
    assert recorded, "no recorded environment to take the shape from"
    assert shape(got) == shape(recorded[0])
