"""Transferability (``mebench.probes.transferability.transfer``): crafted on the substitute, scored on the victim.

FGSM is one ε·sign(∇) step, PGD never leaves the ε-ball or the pixel range, only images the
victim classifies correctly are used, and the victim is reached outside the oracle: the budget
is untouched and the attack's run is the same with and without the measurement.
"""

from __future__ import annotations

import csv
import itertools
import json
import shutil

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.run import engine, world
from mebench.errors import ConfigError
from mebench.probes.transferability.fidelity import FidelityEvaluator, uniform_noise
from mebench.models.registry import build_model
from mebench.probes.transferability.transfer import TransferEvaluator, TransferSettings, input_grad, correct_subset, fgsm, pgd
from mebench.config.validation import validate
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval()


@given(eps=st.floats(0.01, 0.3), seed=st.integers(0, 10))
def test_fgsm_is_one_signed_gradient_step(eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = eps + (1 - 2 * eps) * torch.rand((16, *SHAPE), generator=g)  # interior: no clipping
    y = torch.randint(0, 4, (16,), generator=g)
    model = _model()
    adv = fgsm(model, x, y, eps)
    torch.testing.assert_close(adv, x + eps * input_grad(model, x, y).sign())


@given(eps=st.floats(0.0, 0.5), steps=st.integers(0, 6), alpha=st.floats(0.001, 0.3), seed=st.integers(0, 10))
def test_pgd_stays_in_the_eps_ball_and_the_pixel_range(eps, steps, alpha, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((8, *SHAPE), generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    adv = pgd(_model(), x, y, eps, steps, alpha, torch.Generator().manual_seed(seed))
    assert float((adv - x).abs().max()) <= eps + 1e-6
    assert float(adv.min()) >= 0.0 and float(adv.max()) <= 1.0


@given(n_test=st.integers(1, 300), n=st.integers(1, 80), seed=st.integers(0, 50))
def test_only_images_the_victim_gets_right_are_used(n_test, n, seed):
    victim = FrozenVictim(_model(seed % 3), "cpu")
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand((n_test, *SHAPE), generator=g) * 255).round().to(torch.uint8)
    y = torch.randint(0, 4, (n_test,), generator=g)
    correct = int((victim.logits(x.float() / 255).argmax(1) == y).sum())
    images, labels = correct_subset(victim, x, y, n, torch.Generator().manual_seed(seed))
    assert images.shape[0] == labels.shape[0] == min(n, correct) and images.dtype == torch.float32
    assert torch.equal(victim.logits(images).argmax(1), labels)  # every image is one the victim gets right
    again, _ = correct_subset(victim, x, y, n, torch.Generator().manual_seed(seed))
    assert torch.equal(images, again)  # seeded


def test_transfer_is_never_charged_and_never_changes_the_run(make_cfg, tmp_path):
    # contract 1.1: the victim is reached outside the oracle; metrics.csv is the same with and without it
    plain = make_cfg(run={"output_dir": str(tmp_path / "plain")})
    measured = make_cfg(run={"output_dir": str(tmp_path / "measured")},
                        measure={"transfer": {"methods": ["fgsm", "pgd"], "images": 40}})
    a = engine.run(plain, progress=False).seeds[0]
    b = engine.run(measured, progress=False).seeds[0]
    assert a.summary["queries_used"] == b.summary["queries_used"] == 500
    assert (a.directory / "metrics.csv").read_bytes() == (b.directory / "metrics.csv").read_bytes()
    rows = list(csv.DictReader((b.directory / "transfer.csv").open()))
    curve = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)  # the profile's transfer_eps_curve
    assert {(int(r["checkpoint_B"]), r["track"], r["member"], r["method"], float(r["eps"])) for r in rows} == {
        (b, track, member, method, eps) for b, track, member in (
            (0, "victim", ""),  # the white-box reference on the victim itself
            (0, "independent", "0"), (0, "independent", "1"), (0, "independent", "2"),  # the reference ensemble
            (200, "A", ""), (500, "A", "")) for method in ("fgsm", "pgd") for eps in curve}
    whitebox = [r for r in rows if r["track"] == "victim"]
    assert all(r["success_rate"] == r["substitute_success_rate"] for r in whitebox)
    assert all(0 <= float(r["success_rate"]) <= 1 for r in rows)
    pgd_rows = [r for r in rows if r["method"] == "pgd"]  # the step size scales with ε: 0.01 at 0.3
    assert all(abs(float(r["alpha"]) - float(r["eps"]) / 30) < 1e-9 and r["steps"] == "40" for r in pgd_rows)
    fidelity = list(csv.DictReader((b.directory / "fidelity.csv").open()))
    assert {(int(r["checkpoint_B"]), r["track"], r["measure"]) for r in fidelity} >= {
        (500, "A", "agreement_uniform_noise"), (500, "A", "agreement_untrained_generator"), (500, "A", "grad_cosine")}
    assert all(float(r["value"]) == 1.0 for r in fidelity if r["track"] == "victim")  # the victim agrees with itself
    assert not (a.directory / "transfer.csv").exists() and b.summary["timings_s"]["transfer"] > 0


def test_bad_transfer_settings_fail_before_any_work(make_cfg):
    with pytest.raises(ConfigError, match="distinct methods") as e:
        validate(make_cfg(measure={"transfer": {"methods": ["deepfool"]}}), check_files=False)
    assert e.value.key == "measure.transfer.methods"
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(measure={"transfer": {"methods": ["fgsm"], "images": 0}}), check_files=False)
    assert e.value.key == "measure.transfer.images"


# ------------------------------------------------------------------ issue 44: rates that mean one thing
def _evaluator(victim: FrozenVictim, n: int = 120) -> TransferEvaluator:
    """A tiny evaluator whose PGD start matters: one step of ε/6 from a start anywhere in ε (0.15 and 0.3)."""
    g = torch.Generator().manual_seed(3)
    x = (torch.rand((n, *SHAPE), generator=g) * 255).round().to(torch.uint8)
    y = victim.logits(x.float() / 255).argmax(1)  # every image one the victim gets right
    settings = TransferSettings(eps=(0.15, 0.3), pgd_steps=1, pgd_alpha=0.05, n_images=n, batch_size=32, alpha_eps=0.3)
    return TransferEvaluator(victim, x, y, settings, ("fgsm", "pgd"), torch.Generator().manual_seed(11))


def test_evaluating_rows_in_any_order_gives_the_same_rates():
    # contract §10: every random draw comes from the run seed and its purpose, so a transfer rate
    # does not depend on which rows (checkpoints, tracks, references) were evaluated before it
    victim = FrozenVictim(_model(0), "cpu")
    cells = [(_model(1), 200, "A"), (_model(2), 200, "B"), (_model(3), 500, "A"), (_model(4), 500, "B")]

    def rates(order):
        ev = _evaluator(victim)
        ev.fidelity = FidelityEvaluator(victim.model, ev.x, ev.y, {"uniform_noise": uniform_noise(50, SHAPE, 7)})
        rows = [r for i in order for r in ev.rows(cells[i][0], 7, cells[i][1], cells[i][2])]
        return {(r["checkpoint_B"], r["track"], r.get("method", r.get("measure")), r.get("eps")): (
            r.get("success_rate", r.get("value")), r.get("substitute_success_rate"), r.get("substitute_n_images"))
            for r in rows}

    first = rates((0, 1, 2, 3))
    assert len({v[0] for k, v in first.items() if k[2] == "pgd"}) > 1  # the rates are not trivially equal
    for order in itertools.islice(itertools.permutations(range(4)), 1, None, 5):
        assert rates(order) == first, order
    assert rates((2,)) == {k: v for k, v in first.items() if k[:2] == (500, "A")}  # alone, too


class _AlwaysZero(torch.nn.Module):
    """Answers class 0 for every image, whatever the input (gradient zero: the attack cannot move it)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor([4.0, 0.0, 0.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias + 0.0 * x.flatten(1).sum(1, keepdim=True)


def test_substitute_success_counts_only_images_it_classifies_as_the_victim_does():
    # the substitute misclassifies every image whose (victim-correct) label is not 0 before any
    # attack; those are no success of the attack, and on the rest the attack cannot move it
    victim = FrozenVictim(_model(0), "cpu")
    ev = _evaluator(victim)
    zeros = int((ev.y == 0).sum())
    assert 0 < zeros < ev.y.numel()
    for row in ev.rows(_AlwaysZero(), 7, 200, "A"):
        assert row["substitute_n_images"] == zeros and row["n_images"] == ev.y.numel()
        assert row["substitute_success_rate"] == 0.0  # was (n - zeros) / n counting the misclassified
    whitebox = ev.reference_rows(7)
    assert all(r["substitute_n_images"] == r["n_images"] for r in whitebox)  # the victim agrees with itself


def _victim_with_recipe(tmp_path, synth_victim_path, recipe):
    path = tmp_path / "victim.pt"
    shutil.copy(synth_victim_path, path)
    if recipe is not None:
        path.with_suffix(".json").write_text(json.dumps({"arch": "tiny_mlp", "recipe": recipe}))
    return str(path)


def test_a_track_a_init_that_reproduces_the_victims_fails_in_one_line(make_cfg, tmp_path, synth_victim_path):
    # contract §8 / §15.2: Track A's fixed init must not be the victim's own (same arch and seed)
    ref = _victim_with_recipe(tmp_path, synth_victim_path, {"arch": "tiny_mlp", "seed": 7})
    same = {"checkpoint_ref": ref}
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(victim=same, substitute={"init_seed": 7}))
    assert (e.value.key, e.value.value) == ("substitute.init_seed", 7)
    assert "\n" not in str(e.value) and "allow_victim_init" in str(e.value) and "tiny_mlp" in str(e.value)
    validate(make_cfg(victim=same, substitute={"init_seed": 7, "allow_victim_init": True}))  # meant: allowed
    validate(make_cfg(victim=same, substitute={"init_seed": 8}))  # another seed
    validate(make_cfg(victim=same, substitute={"init_seed": 7, "arch": "lenet5"}))  # another architecture
    (tmp_path / "bare").mkdir()
    unknown = _victim_with_recipe(tmp_path / "bare", synth_victim_path, None)  # no PATH.json
    validate(make_cfg(victim={"checkpoint_ref": unknown}, substitute={"init_seed": 7}))  # nothing recorded: passes
