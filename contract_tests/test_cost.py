"""The grid's cost estimate (mebench.harness.cost) and this machine's measured step times (mebench.harness.calibration).

The estimate sizes the large-run guard and the line the grid prints before it runs; it must count
every phase that costs time (issue 40: a grid that printed "about 0.0 CPU-hours" ran 47 minutes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _studies import study

from mebench.defenses import DEFENSES
from mebench.harness.cost import estimate

DETECTOR_FORWARDS = {"prada": DEFENSES.get("prada").cost(DEFENSES.get("prada").Params(), 0).answer_forwards}
DEFENSE_FORWARDS = {"grad2": DEFENSES.get("grad2").cost(DEFENSES.get("grad2").Params(), 0).answer_forwards}

REPO = Path(__file__).resolve().parents[1]
#: Fake step times: one SGD step of 128 images 0.128 s (1 ms an image), one forward 0.1 ms an image.
T, F = 0.128, 1e-4


def fake_times(arch: str, shape: tuple, num_classes: int) -> dict:
    scale = 100.0 if arch == "wrn22_2" else 1.0
    return {"train_step_s": T * scale, "forward_image_s": F * scale, "measured_at": "2026-01-01T00:00"}


def phases(cfg, **kw) -> dict:
    """Phases with fake step times; the reference ensemble counted as not cached unless ``reference_cached`` says."""
    kw.setdefault("reference_cached", False)
    return estimate([cfg], threads=1, times=fake_times, **kw).phases


def test_track_a_and_queries_follow_the_budget(make_cfg) -> None:
    # Track A: sum of S(B) = ceil(0.2 B) steps (§8) at the measured step; queries: one victim forward each
    from mebench.data.profiles import PROFILES

    cfg = make_cfg(budget={"max_budget": 500, "checkpoints": [200, 500]})
    p = phases(cfg)
    test_size = PROFILES.get(cfg.dataset.name).test_size
    assert p["track_a"] == pytest.approx((40 + 100) * T + 2 * test_size * F)
    assert p["queries"] == pytest.approx(500 * F)
    assert p["transfer"] == p["transfer_reference"] == p["defense_fit"] == p["detection"] == 0.0


def test_transfer_and_its_reference_model_are_counted(make_cfg) -> None:
    # issue 40: transferability trains an independent reference ensemble (S(train_size) steps per
    # member) and runs FGSM + 40-step PGD per scored model and per ε of its curve; a cached
    # ensemble is one term switched off
    from mebench.data.profiles import PROFILES
    from mebench.training.loop import steps_for_budget

    cfg = make_cfg(budget={"max_budget": 500, "checkpoints": [200, 500]},
                   measure={"transfer": {"methods": ["fgsm", "pgd"], "images": 300, "eps": [0.1, 0.2],
                                         "references": 2}})
    prof = PROFILES.get(cfg.dataset.name)
    p = phases(cfg)
    assert p["transfer_reference"] == pytest.approx(2 * steps_for_budget(prof.train_size, 0.2) * T)
    per_model = 2 * ((1 + prof.pgd_steps) * 300 * T / 128 + 2 * 300 * F)  # two ε
    assert p["transfer"] == pytest.approx((2 + 1 + 2) * per_model)  # 2 checkpoints x Track A, victim, 2 members
    assert phases(cfg, reference_cached=True)["transfer_reference"] == 0.0
    # trained once per process: three cells on two workers train the ensemble twice, not three times
    three = estimate([cfg] * 3, threads=1, workers=2, times=fake_times, reference_cached=False)
    assert three.phases["transfer_reference"] == pytest.approx(2 * p["transfer_reference"])


def test_verification_and_its_negatives_are_counted(make_cfg) -> None:
    # issue 56: the verification probe sends each method's images to every scored substitute and
    # prepares the owner's keys through the victim; its negatives are trained and scored once per
    # machine (a cached population is one term switched off)
    from mebench.data.profiles import PROFILES
    from mebench.verification import VERIFIERS

    cfg = make_cfg(budget={"max_budget": 500, "checkpoints": [200, 500]},
                   measure={"verification": {"methods": ["akh", "dataset_inference"], "negatives": 6,
                                             "negative_steps": 50, "akh": {"queries": 30}}})
    public = PROFILES.get(cfg.dataset.name).test_size // 2
    akh = VERIFIERS.get("akh").planned_images(VERIFIERS.get("akh").Params(queries=30), public)
    di = VERIFIERS.get("dataset_inference").planned_images(VERIFIERS.get("dataset_inference").Params(), public)
    assert akh == (30, public + 30) and di[0] == 2 * 50 * 10 * 50
    p = phases(cfg, negatives_cached=False)
    assert p["verification"] == pytest.approx(2 * (akh[0] + di[0]) * F + (akh[1] + di[1]) * F)  # 2 checkpoints, Track A
    assert p["verification_negatives"] == pytest.approx(6 * (50 * T + (akh[0] + di[0]) * F))
    assert phases(cfg, negatives_cached=True)["verification_negatives"] == 0.0
    three = estimate([cfg] * 3, threads=1, workers=2, times=fake_times, negatives_cached=False)
    assert three.phases["verification_negatives"] == pytest.approx(2 * p["verification_negatives"])


def test_init_variance_adds_its_trainings(make_cfg) -> None:
    from mebench.data.profiles import PROFILES
    from mebench.training.loop import steps_for_budget

    budget = {"max_budget": 500, "checkpoints": [200, 500]}
    prof = PROFILES.get(make_cfg().dataset.name)
    plain, varied = phases(make_cfg(budget=budget)), phases(make_cfg(budget=budget, measure={"init_variance": {"inits": 3}}))
    extra = 3 * (steps_for_budget(500, 0.2) * T + prof.test_size * F)
    assert varied["track_a"] - plain["track_a"] == pytest.approx(extra)


def test_defense_fit_utility_and_detection_streams_are_counted(make_cfg) -> None:
    from mebench.data.profiles import PROFILES

    budget = {"max_budget": 500, "checkpoints": [200, 500]}
    prof = PROFILES.get(make_cfg().dataset.name)
    am = phases(make_cfg(budget=budget, defense={"name": "adaptive_misinformation",
                                                 "params": {"recipe": "reference", "outlier_source": "none"}}))
    assert am["defense_fit"] == pytest.approx(round(20 * prof.train_size / 128) * T)  # 20 epochs, batch 128
    assert am["defense_utility"] == pytest.approx(prof.test_size * 2 * F)  # victim + misinformation model
    assert am["queries"] == pytest.approx(500 * 2 * F)
    prada = phases(make_cfg(budget=budget, defense={"name": "prada"},
                           measure={"detection": {"benign_streams": 3}}))
    per_image = (1 + DETECTOR_FORWARDS["prada"]) * F  # the victim, then PRADA's distances
    assert prada["detection"] == pytest.approx(3 * 500 * per_image)  # 3 benign streams of max_budget images
    assert prada["queries"] == pytest.approx(500 * per_image)


def test_grad2_counts_its_surrogate_fit_and_its_answers(make_cfg) -> None:
    # GRAD²: the surrogate (victim architecture) distilled epochs * n / batch_size steps on its data's
    # train split; each answer a Jacobian-vector product of the surrogate (DEFENSE_FORWARDS forwards)
    from mebench.data.profiles import PROFILES

    budget = {"max_budget": 500, "checkpoints": [200, 500]}
    prof = PROFILES.get(make_cfg().dataset.name)
    g = phases(make_cfg(budget=budget, defense={"name": "grad2"}))
    assert g["defense_fit"] == pytest.approx(round(10 * prof.train_size / 128) * T)  # 10 epochs, batch 128
    assert g["queries"] == pytest.approx(500 * (1 + DEFENSE_FORWARDS["grad2"]) * F)
    assert g["defense_utility"] == pytest.approx(prof.test_size * (1 + DEFENSE_FORWARDS["grad2"]) * F)
    other = phases(make_cfg(budget=budget, defense={"name": "grad2", "params": {"surrogate_data": "FashionMNIST",
                                                                                "epochs": 2.0}}))
    assert other["defense_fit"] == pytest.approx(round(2 * PROFILES.get("FashionMNIST").train_size / 128) * T)


def test_attack_loops_count_their_own_models() -> None:
    # DFME: per iteration of 256*2 + 5*256 = 1792 queries, 5 student steps of 256, 512 probe forwards;
    # MAZE: per iteration of 128*(4 + 11) = 1920 queries, 15 clone steps of 128 on its own architecture
    from mebench.attacks import ATTACKS

    Dfme, Maze = ATTACKS.get("dfme"), ATTACKS.get("maze")
    d = Dfme.training_cost(Dfme.Params(), (17920,), 17920)
    assert (d.substitute_examples, d.forward_examples, d.model_arch) == (10 * 1280, 10 * 512, None)
    assert d.generator_examples == pytest.approx(10 * (256 + 1280 / 3))
    m = Maze.training_cost(Maze.Params(), (19200,), 19200)
    assert (m.substitute_examples, m.forward_examples, m.model_arch) == (10 * 128 * 15, 10 * 128 * 11, "wrn22_2")


def test_untrained_generator_counts_its_generator_forwards(make_cfg) -> None:
    # the untrained-generator control passes every query through DFME's generator: at 100k on MNIST
    # (width 64, one thread) those forwards took 7.1 min against Track A's 6.5 (leaderboard/datafree_100k_mnist.yaml)
    from mebench.attacks import ATTACKS

    U = ATTACKS.get("untrained_generator")
    assert U.training_cost(U.Params(), (3000,), 3000).generator_examples == pytest.approx(1000)
    assert U.training_cost(U.Params(generator_width=32), (3000,), 3000).generator_examples == pytest.approx(250)
    cfg = make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                   attack={"name": "untrained_generator", "params": {"batch_size": 8, "generator_width": 8}},
                   budget={"max_budget": 3000, "checkpoints": [3000]})
    assert phases(cfg)["attack"] == pytest.approx(3000 * (8 / 64) ** 2 / 3 * T / 128)


def test_maze_clone_cost_uses_the_clone_architecture(make_cfg) -> None:
    cfg = make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                   attack={"name": "maze", "params": {"clone_arch": "wrn22_2", "batch_size": 8, "ndirs": 2,
                                                      "latent_dim": 8, "generator_width": 4}},
                   budget={"max_budget": 400, "checkpoints": [400]})
    p = phases(cfg)
    from mebench.attacks import ATTACKS
    from mebench.run.plan import resolve

    own = ATTACKS.get("maze").training_cost(resolve(cfg).attack.params, (400,), 400)
    assert p["attack"] >= own.substitute_examples * 100 * T / 128  # the WRN step, not the substitute's


def test_wall_time_divides_among_workers(make_cfg) -> None:
    cfg = make_cfg(budget={"max_budget": 500, "checkpoints": [200, 500]})
    one = estimate([cfg] * 4, threads=1, workers=1, times=fake_times)
    two = estimate([cfg] * 4, threads=1, workers=2, times=fake_times)
    slowdown = max(1.0, 2 / two.cpus)
    assert two.wall_seconds == pytest.approx(one.wall_seconds / 2 * slowdown)
    assert "4 grid cells selected" in two.line() and "on 2 workers x 1 thread" in two.line()


def test_calibration_is_measured_once_and_cached(tmp_path, monkeypatch) -> None:
    from mebench.harness import calibration

    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibration, "measure", lambda *a, **k: calls.append(a) or {"train_step_s": 0.02,
                                                                                    "forward_image_s": 1e-4})
    first = calibration.step_times("tiny_mlp", (1, 8, 8), 4, threads=1)
    again = calibration.step_times("tiny_mlp", (1, 8, 8), 4, threads=1)
    assert len(calls) == 1 and first == again and first["train_step_s"] == 0.02
    stored = json.loads(Path(first["path"]).read_text())
    assert Path(first["path"]).parent == tmp_path / "calibration"
    assert {"arch", "threads", "device", "torch", "cpu", "input_shape"} <= set(stored["key"])
    calibration.step_times("tiny_mlp", (1, 8, 8), 4, threads=2)  # another thread count is another entry
    assert len(calls) == 2
    Path(first["path"]).write_text("{truncated")  # a corrupt entry is measured again, never read
    assert calibration.step_times("tiny_mlp", (1, 8, 8), 4, threads=1)["train_step_s"] == 0.02 and len(calls) == 3


def test_a_real_probe_measures_positive_times(tmp_path, monkeypatch) -> None:
    from mebench.harness import calibration

    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibration, "TRAIN_STEPS", 3)
    t = calibration.step_times("tiny_mlp", (1, 8, 8), 4, threads=1)
    assert 0 < t["forward_image_s"] < t["train_step_s"] < 5.0


@pytest.mark.slow
@pytest.mark.parametrize("case", ["random", "dfme"])
def test_estimate_is_within_a_factor_of_two_of_a_real_cell(case, tmp_path, monkeypatch, data_root) -> None:
    # issue 40 done-when: estimate vs actual on small real MNIST cells through the engine, calibrated now
    import torch
    import yaml

    from mebench.run import engine
    from mebench.config import parse_config
    from mebench.testing import deep_update

    from mebench.models.registry import build_model
    from mebench.victims.load import save_victim

    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "cache"))
    victim = tmp_path / "mnist_lenet5_untrained.pt"  # what is timed is the work, not the victim's accuracy
    torch.manual_seed(0)
    save_victim(victim, build_model("lenet5", 1, 10, (28, 28), (0.0,), (1.0,)).net, "lenet5", 10, 1, (28, 28))
    raw = yaml.safe_load((REPO / "configs/mnist_lenet5_random_soft.yaml").read_text())
    over = {"random": {"budget": {"max_budget": 500, "checkpoints": [250, 500]}},
            "dfme": {"dataset": {"data_mode": "data_free", "surrogate_name": None},
                     "attack": {"name": "dfme", "params": {"batch_size": 64}},
                     "budget": {"max_budget": 448, "checkpoints": [224, 448]}}}[case]
    raw = deep_update(raw, {"run": {"seeds": [0], "output_dir": str(tmp_path / "runs")},
                            "victim": {"checkpoint_ref": str(victim)},
                            "dataset": {"data_root": str(data_root)}, **over})
    cfg = parse_config(raw)
    assert torch.get_num_threads() == 1
    predicted = estimate([cfg], threads=1).wall_seconds  # probes this machine now, at its current load
    t0 = time.perf_counter()
    engine.run(cfg, progress=False)
    actual = time.perf_counter() - t0
    assert predicted / 2 <= actual <= predicted * 2, f"estimate {predicted:.1f} s, actual {actual:.1f} s"


def test_measured_times_follow_the_load(make_cfg, monkeypatch) -> None:
    # a step measured on an idle 2-CPU machine takes about twice as long at load 4 (each process gets half a CPU)
    import mebench.support.threads
    from mebench.harness.calibration import load_factor

    monkeypatch.setattr(mebench.support.threads, "usable_cpus", lambda: 2)
    assert load_factor(0.5, 4.0, 2) == 2.0 and load_factor(6.0, 3.0, 2) == 0.5 and load_factor(None, 9.0, 2) == 1.0
    cfg = make_cfg(budget={"max_budget": 500, "checkpoints": [200, 500]})
    at = lambda load: lambda *a: {**fake_times(*a), "load": load}  # noqa: E731
    idle = estimate([cfg], threads=1, times=at(1.0), load=1.0)
    busy = estimate([cfg], threads=1, times=at(1.0), load=4.0)
    assert busy.phases["track_a"] == pytest.approx(2 * idle.phases["track_a"])
    assert "load 4.0 now vs 1.0 then" in busy.line()


@pytest.mark.slow
def test_a_cached_reference_ensemble_is_not_charged_again(make_cfg, one_thread, tmp_path, monkeypatch) -> None:
    # issue 40: once a run has the ensemble in the disk cache (mebench.probes.transferability.refcache), the estimate of the
    # same plan on this machine drops its training; another ensemble size is not the same ensemble
    from mebench.run import engine

    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "cache"))  # empty: no earlier test's ensemble

    cfg = make_cfg(budget={"max_budget": 120, "checkpoints": [60, 120]},
                   measure={"transfer": {"methods": ["fgsm"], "images": 16, "eps": [0.2], "references": 1}})
    before = phases(cfg, reference_cached=None)["transfer_reference"]  # None: ask the disk cache
    assert before > 0
    engine.run(cfg, progress=False)
    assert phases(cfg, reference_cached=None)["transfer_reference"] == 0.0
    two = make_cfg(budget={"max_budget": 120, "checkpoints": [60, 120]},
                   measure={"transfer": {"methods": ["fgsm"], "images": 16, "eps": [0.2], "references": 2}})
    assert phases(two, reference_cached=None)["transfer_reference"] > 0


# issue 55: a defense declares its cost (Defense.cost) as an attack declares training_cost; the
# estimate names no defense.
def test_the_estimate_names_no_defense():
    from pathlib import Path

    import mebench.harness.cost as cost

    source = Path(cost.__file__).read_text()
    for name in DEFENSES.names():
        if name != "none":
            assert f'"{name}"' not in source and f"'{name}'" not in source, name


def test_qedg_cost_counts_the_rounds_selection_takes() -> None:
    # selection sends SELECTED_SHARE of each round's batch: 10,000 queries at batch 256 send 46 a round,
    # 218 rounds (a record took 212), not the 40 of sending every image
    from mebench.attacks import ATTACKS
    from mebench.attacks.qedg import SELECTED_SHARE

    Qedg = ATTACKS.get("qedg")
    p = Qedg.Params(generator_width=16, g_steps=20, final_epochs=5)
    sent = round(256 * SELECTED_SHARE)
    rounds = -(-10_000 // sent)
    assert (sent, rounds) == (46, 218)
    c = Qedg.training_cost(p, (1000, 10_000), 10_000)
    assert c.generator_examples == pytest.approx(rounds * 20 * 256 * (16 / 64) ** 2 * 2)
    assert c.substitute_examples == rounds * 20 * 256 + 20 * sent * rounds * (rounds + 1) // 2 + 5 * 20 * 11_000


def test_activethief_cost_counts_its_selection_passes() -> None:
    # budget 1,000 in one segment: 100 seed, 200 validation, 5 rounds of 140; candidate_factor 10 scores
    # 1,400 pool images a round. k-center and uncertainty pass each forward once; DFAL adds 20 DeepFool
    # steps of one forward and 9 rival gradients. A DFAL cell took 13x a k-center cell's wall on one
    # thread (1,558 s against about 120 s) while the estimate, which counted no DeepFool, gave them alike.
    from mebench.attacks import ATTACKS
    from mebench.attacks.activethief import DEEPFOOL_FORWARDS_PER_RIVAL

    At = ATTACKS.get("activethief")
    base = dict(rounds=5, max_steps=400, patience=20, candidate_factor=10)
    random, kcenter, dfal = (At.training_cost(At.Params(strategy=s, **base), (1000,), 1000)
                             for s in ("random", "k_center", "dfal"))
    assert random.forward_examples == 0
    assert kcenter.forward_examples == 5 * 1400
    assert dfal.forward_examples == pytest.approx(5 * 1400 * (1 + 20 * (1 + DEEPFOOL_FORWARDS_PER_RIVAL * 9)))
    assert random.substitute_examples == kcenter.substitute_examples == dfal.substitute_examples
    # with no candidate factor, the whole pool (60,000 less what was bought) is scored each round
    whole = At.training_cost(At.Params(strategy="uncertainty", rounds=5, patience=20), (1000,), 1000)
    assert whole.forward_examples == sum(60_000 - (300 + 140 * i) for i in range(5))


def test_the_cost_study_log_names_the_machine(tmp_path, monkeypatch):
    # records name the CPU model (issue 58): the estimator's timing logs (results/cost/logs) too
    from types import SimpleNamespace

    from mebench.support.runinfo import cpu_model

    timed = study("cost", "timed.py")
    monkeypatch.setattr(timed, "HERE", tmp_path)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    cost = SimpleNamespace(wall_seconds=12.34, phases={"attack": 10.0}, line=lambda: "estimate ~12 s",
                           workers=1, threads=1, cells=2, cpus=2)
    timed.write("probe", ["pytest", "x"], 0, "2026-11-29T00:00:00+00:00", cost, 11.0, [0.5, 0.7], 0.6)
    record = json.loads((tmp_path / "logs" / "probe.json").read_text())
    assert record["cpu_model"] == cpu_model() and record["isa_overrides"] == {"ATEN_CPU_CAPABILITY": "avx2"}
    assert record["estimate_s"] == 12.3 and record["load_mean"] == 0.6


def test_a_command_timed_afterwards_keeps_its_exit_status(tmp_path):
    # results are records of what happened: a command timed from its `/usr/bin/time -v` log records the
    # exit status and wall time that log printed, not a fixed 0
    timed = study("cost", "timed.py")
    log = tmp_path / "time.log"
    log.write_text("\tCommand being timed: \"mebench run c.yaml\"\n"
                   "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03.5\n"
                   "\tMaximum resident set size (kbytes): 123\n\tExit status: 3\n")
    assert timed.exit_status(log) == 3
    assert timed.elapsed(log) == pytest.approx(3723.5)


def test_the_scale_pages_idle_estimates_come_from_a_script(tmp_path):
    # results are data: results/scale/idle_estimates.json is written by studies/scale/idle_estimates.py,
    # the estimate of each timed command at load 0, not typed
    from types import SimpleNamespace

    idle = study("scale", "idle_estimates.py")
    (tmp_path / "random_seed_1m.json").write_text(json.dumps({"command": "mebench run c.yaml --seeds 0 --threads 1"}))
    seen = []

    def estimate(args, load):
        seen.append((args, load))
        return SimpleNamespace(wall_seconds=100.04, phases={"track_a": 90.04}, line=lambda: "calibrated then")

    got = idle.idle_estimates(tmp_path, {"a_1m": "random_seed_1m", "b_1m": "dfme_1m"}, estimate)
    assert seen == [(["mebench", "run", "c.yaml", "--seeds", "0", "--threads", "1"], 0.0)]
    assert got == {"random_seed_1m": {"command": "mebench run c.yaml --seeds 0 --threads 1", "estimate_s": 100.0,
                                      "phases": {"track_a": 90.0}, "calibration": "calibrated then"}}
