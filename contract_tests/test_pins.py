"""Every byte pin names the environment it holds in (issue 51; contract §16.2: a pin that cannot tell a
changed number from a changed kernel must say where it was recorded)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import _pins

HERE = Path(__file__).parent
#: A SHA-256 in hex: a digest typed into a test module is a pin without an environment.
DIGEST = re.compile(r"['\"][0-9a-f]{64}['\"]")


def test_every_recorded_pin_names_its_whole_environment():
    files = sorted(_pins.PINS_DIR.glob("*.json"))
    assert {f.stem for f in files} >= {"metrics_csv", "measurement_outputs", "real_metrics_csv"}
    for path in files:
        entries = json.loads(path.read_text())["environments"]
        assert entries, path.name
        for entry in entries:
            env = entry["environment"]
            missing = [k for k in _pins.ENVIRONMENT_KEYS if env.get(k) in (None, "")]
            assert not missing, f"{path.name}: an entry lacks {missing}"
            assert entry["values"], f"{path.name}: an entry for {_pins.describe(env)} pins nothing"
        envs = [json.dumps(e["environment"], sort_keys=True) for e in entries]
        assert len(envs) == len(set(envs)), f"{path.name}: one environment recorded twice"


def test_no_test_module_types_a_digest_outside_the_pin_files():
    offenders = [p.name for p in sorted(HERE.glob("*.py")) if DIGEST.search(p.read_text())]
    assert offenders == [], "pin these per environment through _pins (data/pins/*.json)"
    assert not (HERE / "data" / "pinned_outputs.json").exists()  # moved into data/pins/


def test_a_pin_from_another_environment_skips_naming_both(tmp_path, monkeypatch):
    here = _pins.environment()
    other = {**here, "torch": "0.0.0+elsewhere"}
    (tmp_path / "demo.json").write_text(json.dumps({"environments": [{"environment": other, "values": {"a": 1}}]}))
    monkeypatch.setattr(_pins, "PINS_DIR", tmp_path)
    with pytest.raises(pytest.skip.Exception) as skipped:
        _pins.expected("demo", "a")
    assert "torch 0.0.0+elsewhere" in str(skipped.value) and f"torch {here['torch']}" in str(skipped.value)
    monkeypatch.setenv("MEBENCH_PIN_WRITE", "1")
    _pins.record_if_asked("demo", "a", 2)
    assert _pins.expected("demo", "a") == 2  # recorded for this environment, beside the other one
    assert len(_pins.load("demo")) == 2 and _pins.load("demo")[0]["values"] == {"a": 1}
