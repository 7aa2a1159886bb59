"""The resolved run plan (``mebench.run.plan``): what ran is recorded whole and hashed (issue 35).

Also pins the bytes of ``metrics.csv`` of five tiny runs to the digests the code produced before
the plan existed (``_tiny_runs.py``): resolving a plan must not change a single number. The digests
hold where they were recorded (``_pins``: torch build, device, CPU capability, threads); in every
environment the same runs are checked to repeat to the byte and to be well formed.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import _pins
from _tiny_runs import BUDGET, CASES, REAL_CASES, real_metrics_digest, tiny_metrics, tiny_metrics_digest
from mebench.run import engine
from mebench.support import identity
from mebench.run.artifacts import METRICS_COLUMNS
from mebench.attacks.knockoff import KnockoffParams
from mebench.defenses import DEFENSES
from mebench.metricspec import METRICS
from mebench.run.plan import canonical_json, first_difference, identity_hash, resolve, stale_reason
from mebench.testing import synthetic_victim

@pytest.fixture(scope="module")
def pinned_victim(tmp_path_factory, one_thread) -> Path:
    """The SYNTH victim trained at one thread (as when the digests were taken)."""
    return synthetic_victim(tmp_path_factory.mktemp("pinned") / "synth_victim.pt")


# contract 16.2 / issue 35: metrics.csv of Random, DFME, knockoff_fast, activethief_kcenter_fast and a
# defended Random run is byte-identical to the one the code wrote before run plans existed. The
# digests hold in the environment they were recorded in (data/pins/metrics_csv.json; issue 51).
@pytest.mark.parametrize("case", sorted(CASES))
def test_metrics_csv_bytes_are_unchanged(case, tmp_path, pinned_victim):
    got = tiny_metrics_digest(tmp_path, pinned_victim, case)
    _pins.record_if_asked("metrics_csv", case, got)
    assert got == _pins.expected("metrics_csv", case)


def check_metrics_csv(data: bytes, checkpoints: list[int], tracks: set[str]) -> None:
    """What holds in every environment: the contract's columns in order, one row per checkpoint and
    track, and every metric finite and within its bounds (or empty where the output mode has none)."""
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    assert tuple(csv.reader(io.StringIO(data.decode())).__next__()) == METRICS_COLUMNS
    assert sorted((int(r["checkpoint_B"]), r["track"]) for r in rows) == sorted(
        (b, t) for b in checkpoints for t in tracks)
    for row in rows:
        for spec in METRICS:
            if row["output_mode"] not in spec.output_modes:
                assert row[spec.name] == "", (spec.name, row)
                continue
            value = float(row[spec.name])
            assert math.isfinite(value) and spec.bounds[0] <= value <= spec.bounds[1], (spec.name, value)


# issue 51: in any environment, the pinned runs are repeatable to the byte and well formed.
@pytest.mark.parametrize("case", sorted(CASES))
def test_metrics_csv_is_repeatable_and_well_formed_everywhere(case, tmp_path, pinned_victim):
    one, two = _pins.two_folders(tmp_path)
    first = tiny_metrics(one, pinned_victim, case)
    assert tiny_metrics(two, pinned_victim, case) == first
    tracks = {"A", "B"} if case in ("knockoff_fast", "activethief_kcenter_fast", "dfme") else {"A"}
    check_metrics_csv(first, BUDGET["checkpoints"], tracks)


ROOT = Path(__file__).resolve().parents[1]


# contract 16.2 / issue 35: the same five runs on real MNIST (about 30 s each on one thread), pinned per
# environment and victim build (data/pins/real_metrics_csv.json names the victim's sha256).
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REAL_CASES))
def test_real_data_metrics_csv_bytes_are_unchanged(case, tmp_path, data_root):
    victim = ROOT / "victims" / "mnist_lenet5.pt"
    if not victim.is_file():
        pytest.skip("needs victims/mnist_lenet5.pt (mebench victim train configs/victims/mnist_lenet5.yaml)")
    build = hashlib.sha256(victim.read_bytes()).hexdigest()[:12]
    got = real_metrics_digest(tmp_path, ROOT, case, data_root)
    _pins.record_if_asked("real_metrics_csv", case, got, victim=build)
    assert got == _pins.expected("real_metrics_csv", case, victim=build)


# issue 35: summary.json holds the plan with every attack and defense parameter that ran, defaults
# included; plan_hash is the SHA-256 of its canonical JSON; code identity and completion time are recorded.
def test_summary_records_the_whole_plan(make_cfg):
    cfg = make_cfg(attack={"name": "knockoff", "label": "knockoff_fast", "params": {"epochs": 2, "lr_step": 1}},
                   defense={"name": "topk"}, budget={"max_budget": 200, "checkpoints": [100, 200]})
    result = engine.run(cfg, progress=False)
    summary = json.loads((result.directory / "seed_0" / "summary.json").read_text())
    plan = summary["plan"]
    assert plan["attack"]["params"] == dataclasses.asdict(KnockoffParams(epochs=2, lr_step=1))
    assert plan["attack"]["params"]["momentum"] == 0.5 and plan["attack"]["params"]["lr_gamma"] == 0.1  # defaults
    assert plan["attack"]["label"] == "knockoff_fast" and plan["attack"]["divergence_restarts"] == 2
    assert plan["defenses"] == [{"name": "topk", "label": "topk",
                                 "params": dataclasses.asdict(DEFENSES.get("topk").Params())}]
    assert plan["defenses"][0]["params"]  # topk has parameters, all defaults here
    assert plan["pool"] == {"kind": "surrogate", "source": "SYNTHSUR", "size": 5000, "need": 200, "seed_size": 100}
    assert plan["input_shape"] == [1, 8, 8] and plan["checkpoints"] == [100, 200] and plan["seed"] == 0
    assert plan["victim"]["checkpoint_sha256"] == hashlib.sha256(Path(cfg.victim.checkpoint_ref).read_bytes()).hexdigest()
    assert summary["plan_hash"] == hashlib.sha256(canonical_json(plan).encode()).hexdigest()
    assert summary["plan_hash"] == resolve(cfg, 0).hash
    assert summary["code_identity"] == identity.code_identity()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", summary["completed_at"])


# issue 35: the plan is resolved once, frozen, and its hash changes with any parameter that runs,
# also one the user never typed (a changed default).
def test_plan_is_frozen_and_its_hash_follows_the_parameters(make_cfg):
    base = resolve(make_cfg())
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.seed = 3  # type: ignore[misc]
    assert resolve(make_cfg()).hash == base.hash
    assert resolve(make_cfg(), seed=1).hash != base.hash
    assert resolve(make_cfg(attack={"params": {"batch_size": 32}})).hash != base.hash
    same_default = resolve(make_cfg(attack={"params": {"batch_size": 64}}))
    assert same_default.hash == base.hash  # typing the default out changes nothing
    no_params = resolve(make_cfg(attack={"params": None}))  # None drops the key
    assert no_params.attack.params.batch_size == 1000  # random's default, filled in


# issue 35: a changed run device or output folder is not a different plan (where, not what).
def test_device_and_output_folder_are_not_in_the_plan(make_cfg, tmp_path):
    assert resolve(make_cfg(run={"output_dir": str(tmp_path / "elsewhere")})).hash == resolve(make_cfg()).hash


# issue 35: stale_reason names what differs in one line: the first plan key, the code identity, the threads.
def test_stale_reason_names_what_differs(make_cfg):
    plan = resolve(make_cfg())
    stored = {"plan": plan.to_dict(), "plan_hash": plan.hash, "code_identity": "1+src.a", "machine": {"torch_threads": 1}}
    assert stale_reason(stored, plan, "1+src.a", 1) is None
    other = resolve(make_cfg(attack={"params": {"batch_size": 32}}))
    assert stale_reason(stored, other, "1+src.a", 1) == "its plan differs (attack.params.batch_size: 64 -> 32)"
    assert stale_reason(stored, plan, "1+src.b", 2) == "code identity 1+src.a -> 1+src.b; torch threads 1 -> 2"
    assert "no plan" in stale_reason({"status": "complete"}, plan, "1+src.a", 1)
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}) == "a.c: absent -> 2"


# contract §10 (reproducibility), §11 (resumed artifacts): a record from another machine is not resumed
# into this one's rows; a record that does not name its machine (written before it was recorded) is
# judged on plan, code and threads alone
def test_a_record_from_another_torch_build_or_cpu_is_stale(make_cfg):
    from mebench.support.runinfo import cpu_model, library_versions

    plan = resolve(make_cfg())
    here = {"plan": plan.to_dict(), "plan_hash": plan.hash, "code_identity": "1+src.a",
            "versions": {"torch": library_versions()["torch"]},
            "machine": {"torch_threads": 1, "cpu_model": cpu_model()}}
    assert stale_reason(here, plan, "1+src.a", 1) is None
    older = {**here, "versions": {}, "machine": {"torch_threads": 1}}
    assert stale_reason(older, plan, "1+src.a", 1) is None
    build = {**here, "versions": {"torch": "0.0.1"}}
    assert stale_reason(build, plan, "1+src.a", 1) == f"torch build 0.0.1 -> {library_versions()['torch']}"
    cpu = {**here, "machine": {"torch_threads": 1, "cpu_model": "Another CPU"}}
    assert stale_reason(cpu, plan, "1+src.a", 1) == f"CPU model Another CPU -> {cpu_model()}"


# contract §10, §11: the same CPU model with another kernel instruction set (an AVX-512 machine, or the
# variables that cap it) computes other bytes, so its cells are not resumed as this machine's either
def test_a_record_with_another_instruction_set_or_its_variables_is_stale(make_cfg, monkeypatch):
    from mebench.support.runinfo import ISA_VARIABLES, cpu_capability, cpu_model

    for name in ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plan = resolve(make_cfg())
    here = {"plan": plan.to_dict(), "plan_hash": plan.hash, "code_identity": "1+src.a",
            "machine": {"torch_threads": 1, "cpu_model": cpu_model(), "cpu_capability": cpu_capability(),
                        "isa_overrides": {}}}
    assert stale_reason(here, plan, "1+src.a", 1) is None
    other = {**here, "machine": {**here["machine"], "cpu_capability": "AVX9"}}
    assert stale_reason(other, plan, "1+src.a", 1) == f"instruction set AVX9 -> {cpu_capability()}"
    capped = {**here, "machine": {**here["machine"], "isa_overrides": {"DNNL_MAX_CPU_ISA": "AVX2"}}}
    assert stale_reason(capped, plan, "1+src.a", 1) == "instruction-set variables DNNL_MAX_CPU_ISA=AVX2 -> none"
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    assert stale_reason(capped, plan, "1+src.a", 1) is None
    assert stale_reason(here, plan, "1+src.a", 1) == "instruction-set variables none -> DNNL_MAX_CPU_ISA=AVX2"
    older = {**here, "machine": {"torch_threads": 1, "cpu_model": cpu_model()}}  # named neither: not judged
    assert stale_reason(older, plan, "1+src.a", 1) is None


# issue 35: the cell hash is the plan hash with the code identity and the thread count.
def test_identity_hash_covers_plan_code_and_threads():
    h = identity_hash("p", "c", 1)
    assert len({h, identity_hash("q", "c", 1), identity_hash("p", "d", 1), identity_hash("p", "c", 2)}) == 4
    assert h == identity_hash("p", "c", 1)


# issue 35: the plan and the resume rule import no torch (they belong to the torch-free config layer).
def test_plan_and_resume_modules_import_no_torch():
    code = "import sys, mebench.run.plan, mebench.run.resume; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

