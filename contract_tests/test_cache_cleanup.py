"""Contract §11.2, §17.5: the temporary query cache is run-scoped and always removed."""

from __future__ import annotations

import json

import pytest

from mebench.run import engine
from mebench.attacks.random import RandomAttack
from mebench.data.cache import QueryStore


def _summary(res_dir):
    (seed_dir,) = list(res_dir.glob("*/*/seed_0"))
    return seed_dir, json.loads((seed_dir / "summary.json").read_text())


def test_cache_is_used_under_the_seed_folder_and_removed_after_success(make_cfg, monkeypatch):
    # contract 11.2: cache under a run-scoped folder, deleted when the run completes, recorded in logs
    seen = []
    orig = QueryStore.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        seen.append(self.directory)
        assert (self.directory / "x.f32").is_file() and (self.directory / "y.bin").is_file()

    monkeypatch.setattr(QueryStore, "__init__", spy)
    cfg = make_cfg()
    res = engine.run(cfg, progress=False)
    seed_dir = res.directory / "seed_0"
    assert seen == [seed_dir / ".query_cache"]
    assert not seen[0].exists()
    s = json.loads((seed_dir / "summary.json").read_text())
    assert s["cache"]["used"] is True and s["cache"]["deleted"] is True


@pytest.mark.parametrize("exc", [RuntimeError("attack crashed"), KeyboardInterrupt()])
def test_cache_is_removed_when_the_run_fails_or_is_interrupted(exc, make_cfg, monkeypatch, tmp_path):
    # contract 11.2: deleted also on failure and on Ctrl-C; the failure is recorded, nothing is half-written
    calls = {"n": 0}
    orig = RandomAttack.propose

    def boom(self, k, state):
        calls["n"] += 1
        if calls["n"] == 3:
            raise exc
        return orig(self, k, state)

    monkeypatch.setattr(RandomAttack, "propose", boom)
    cfg = make_cfg()
    with pytest.raises(type(exc)):
        engine.run(cfg, progress=False)
    out = tmp_path / "runs"
    assert not list(out.rglob(".query_cache"))
    seed_dir, s = _summary(out)
    assert s["status"] == ("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
    assert type(exc).__name__ in s["error"] and s["cache"]["deleted"] is True
    assert not list(seed_dir.glob(".*.tmp"))


def test_no_cache_when_disabled(make_cfg):
    # contract 11.2: logs record whether temporary caching was used
    res = engine.run(make_cfg(cache={"enabled": False}), progress=False)
    s = res.seeds[0].summary
    assert s["cache"]["used"] is False
    assert not list(res.directory.rglob(".query_cache"))


def test_queried_images_are_not_kept_as_an_artifact(make_cfg):
    # contract 11.2: queried images are not a permanent artifact
    res = engine.run(make_cfg(), progress=False)
    names = sorted(p.name for p in (res.directory / "seed_0").iterdir())
    assert names == ["final_substitute.ckpt", "measurements.csv", "metrics.csv", "run_config.yaml", "summary.json"]


_CHILD = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job starts with SIGINT ignored
from pathlib import Path
from mebench.run import engine
from mebench.config import parse_config
from mebench.testing import deep_update, synthetic_config_dict
from mebench.training.track_a import TrackATrainer
TrackATrainer.steps = lambda self, budget: 10**9  # never finishes: only Ctrl-C ends it
d = synthetic_config_dict(Path(sys.argv[1]), Path(sys.argv[2]))
d = deep_update(d, {"budget": {"max_budget": 5000, "checkpoints": [5000]}, "attack": {"params": {"batch_size": 8}}})
engine.run(parse_config(d), progress=False)
"""


@pytest.mark.slow
def test_real_ctrl_c_removes_the_cache(tmp_path, synth_victim_path):
    # contract 11.2, 17.5: a SIGINT (Ctrl-C) to a running process still deletes the cache
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), str(synth_victim_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.rglob(".query_cache")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, f"run ended before it could be interrupted: {proc.communicate()[1][-2000:]!r}"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=300)  # generous: a loaded machine is slow to unwind
    finally:
        if proc.poll() is None:  # never leave the endless child behind
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and b"KeyboardInterrupt" in err
    assert not list(tmp_path.rglob(".query_cache"))
    seed_dir, s = _summary(tmp_path / "runs")
    assert s["status"] == "interrupted" and s["cache"]["deleted"] is True
