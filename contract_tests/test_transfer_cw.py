"""Carlini–Wagner L2 in the transfer probe (``mebench.probes.transferability.transfer.cw_l2``; contract §19's FGSM/PGD/CW).

Checked against the behaviour the attack is defined by, where it is known in closed form: on a
linear classifier the smallest L2 perturbation that flips an image is its distance to the decision
hyperplane, along the hyperplane's normal. Then the probe's rows: CW at every ε of the curve plus
ε 1 (unclipped), for the substitute and both references, never leaving the ε-ball or [0, 1].
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mebench.models.registry import build_model
from mebench.probes.transferability.transfer import METHODS, TransferEvaluator, TransferSettings, cw_l2
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)


def linear(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 2)).eval()


# closed form: for logits W x + b with 2 classes, the minimal L2 flip of x is |m| / ||w|| along -sign(m) w,
# where w = W_y - W_other and m = w.x + b_y - b_other; CW (κ 0) finds it within 5 % + 0.001, just across.
@pytest.mark.slow
def test_cw_finds_the_minimal_l2_perturbation_of_a_linear_model():
    model = linear(0)
    g = torch.Generator().manual_seed(1)
    x = 0.4 + 0.2 * torch.rand((6, *SHAPE), generator=g)  # interior: the box does not bind
    y = model(x).argmax(1)
    W, b = model[1].weight.detach(), model[1].bias.detach()
    w = W[y] - W[1 - y]
    margin = (w * x.flatten(1)).sum(1) + b[y] - b[1 - y]
    want = margin / w.norm(dim=1)
    adv = cw_l2(model, x, y, steps=150, binary_steps=6, lr=0.01)
    delta = (adv - x).flatten(1)
    got = delta.norm(dim=1)
    assert bool((model(adv).argmax(1) != y).all())
    assert bool((got >= want * 0.999).all()) and bool((got <= want * 1.05 + 1e-3).all()), (got, want)
    cos = -(delta * w).sum(1) / (got * w.norm(dim=1))
    assert bool((cos > 0.95).all()), cos  # a random direction in 64 dimensions: about 0.1


def test_cw_stays_in_the_pixel_box_and_leaves_the_model_grads_alone():
    model = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval()
    x = (torch.rand((20, *SHAPE), generator=torch.Generator().manual_seed(2)) > 0.5).float()  # pixels at 0 and 1
    y = model(x).argmax(1)
    adv = cw_l2(model, x, y, steps=20, binary_steps=2)
    assert float(adv.min()) >= 0.0 and float(adv.max()) <= 1.0
    assert all(p.grad is None for p in model.parameters())


def _evaluator(victim: FrozenVictim, n: int = 40) -> TransferEvaluator:
    g = torch.Generator().manual_seed(3)
    x = (torch.rand((n, *SHAPE), generator=g) * 255).round().to(torch.uint8)
    y = victim.logits(x.float() / 255).argmax(1)
    settings = TransferSettings(eps=(0.1, 0.3), pgd_steps=1, pgd_alpha=0.05, n_images=n, batch_size=16, alpha_eps=0.3,
                                cw_steps=10, cw_binary_steps=2)
    return TransferEvaluator(victim, x, y, settings, ("pgd", "cw"), torch.Generator().manual_seed(11))


# contract §19: CW is one of the probe's methods, with rows for the victim and the independent references.
def test_cw_rows_for_every_eps_and_both_references():
    assert "cw" in METHODS
    victim = FrozenVictim(build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval(), "cpu")
    ev = _evaluator(victim)
    refs = [build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval() for _ in range(2)]
    rows = ev.reference_rows(5, refs) + ev.rows(refs[0], 5, 100, "A")
    cw = [r for r in rows if r["method"] == "cw"]
    assert {(r["track"], r["member"], r["eps"]) for r in cw} == {
        (t, m, e) for t, m in (("victim", None), ("independent", 0), ("independent", 1), ("A", None))
        for e in (0.1, 0.3, 1.0)}
    assert all(r["steps"] == 20 and r["alpha"] == 0.01 and r["n_images"] == 40 for r in cw)
    white = [r for r in cw if r["track"] == "victim" and r["eps"] == 1.0][0]
    assert white["success_rate"] == pytest.approx(white["substitute_success_rate"])  # crafted on the victim itself
    assert white["success_rate"] > 0.5


# the clipped rows never leave the ε-ball: at ε 0 nothing could change, so ε tiny flips (almost) nothing
def test_cw_rows_clip_into_the_eps_ball():
    victim = FrozenVictim(build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval(), "cpu")
    ev = _evaluator(victim)
    ev.settings = TransferSettings(eps=(1e-6,), pgd_steps=1, pgd_alpha=0.05, n_images=40, batch_size=16,
                                   cw_steps=10, cw_binary_steps=2)
    rows = [r for r in ev.reference_rows(5) if r["method"] == "cw"]
    tiny, full = rows
    assert tiny["eps"] == 1e-6 and full["eps"] == 1.0
    assert tiny["success_rate"] <= 0.05 < full["success_rate"]


# the report: CW has its own leaderboard column and rows in the headline table, beside PGD, at the
# headline ε (0.2 on MNIST) and the largest checkpoint; the references appear in the headline table.
def test_report_shows_cw_beside_pgd_at_the_headline_eps():
    import pandas as pd

    from mebench.report.transfer import headline_rows, transfer_table, with_transfer_column

    cond = {"dataset": "MNIST", "victim_id": "v", "label": "dfme", "data_mode": "data_free", "output_mode": "soft_prob"}
    rows = []
    for seed in (0, 1):
        for method, base in (("pgd", 0.5), ("cw", 0.2)):
            for eps in (0.1, 0.2, 1.0):
                for track, b in (("A", 1000), ("A", 10000), ("victim", 0)):
                    rows.append({**cond, "seed": seed, "track": track, "checkpoint_B": b, "method": method,
                                 "eps": eps, "member": None, "success_rate": base + eps / 10 + b / 1e6 + seed / 100})
    frame = pd.DataFrame(rows)
    board = pd.DataFrame([{**cond, "track": "A"}])
    out = with_transfer_column(board, frame).iloc[0]
    assert out["transfer_B"] == out["cw_transfer_B"] == 10000
    assert out["transfer_eps"] == out["cw_transfer_eps"] == 0.2
    assert out["cw_transfer_mean"] == pytest.approx(0.2 + 0.02 + 0.01 + 0.005)
    assert out["transfer_mean"] == pytest.approx(0.5 + 0.02 + 0.01 + 0.005)
    head = headline_rows(transfer_table(frame))
    assert {(r[3], r[4], r[5]) for r in head} == {("A", "10k", "PGD"), ("victim", "reference", "PGD"),
                                                 ("A", "10k", "CW L2"), ("victim", "reference", "CW L2")}
