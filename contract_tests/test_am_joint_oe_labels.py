"""Adaptive Misinformation's ``oe_labels: joint`` and the victim snapshots it reads (issue 42).

The reference trains victim and misinformation model in one loop and labels each outlier-exposure
batch with the victim's *current* top class (sanjaykariyappa/adaptive_misinformation @ c2a3e1b,
admis/utils/model.py:117-133). ``joint`` approximates that with the victim's per-epoch snapshots
(``mebench.victims.snapshots``): fit step t of T reads snapshot floor(t / T · count). Defenses are
oracle wrappers (contract §19); a victim recipe's files are contract §4; settings that cannot run
fail before any work with one config error (contract §15.2).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from mebench.config.validation import validate
from mebench.defenses import DefenseContext
from mebench.defenses.misinformation import AdaptiveMisinformation, snapshot_index
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import _images
from mebench.victims.snapshots import SNAPSHOT_FORMAT, epoch_end_steps, load_snapshots, snapshot_path
from mebench.victims.wrapper import FrozenVictim

ROOT = Path(__file__).resolve().parent.parent
AM = "adaptive_misinformation"


def test_fit_progress_maps_linearly_onto_the_snapshots():
    # contract §19: step t of T reads snapshot floor(t / T * count); one snapshot (frozen) is always row 0
    assert [snapshot_index(t, 12, 3) for t in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert [snapshot_index(t, 10, 6) for t in range(10)] == [0, 0, 1, 1, 2, 3, 3, 4, 4, 5]
    assert {snapshot_index(t, 2345, 1) for t in range(2345)} == {0}
    # reference_cpu on MNIST (2344 steps) against the 6-epoch OE victim: each snapshot labels a sixth
    counts = torch.bincount(torch.tensor([snapshot_index(t, 2344, 6) for t in range(2344)]))
    assert counts.tolist() == [391, 391, 390, 391, 391, 390]  # snapshot k from step ceil(k * 2344 / 6)


def test_epoch_ends_are_where_the_recipes_epochs_end():
    # contract §4: MNIST's 60,000 images at batch 128 over 6 epochs (2813 steps, as mnist_lenet5_oe.pt)
    assert epoch_end_steps(60000, 128, 2813) == [469, 938, 1407, 1875, 2344, 2813]
    assert epoch_end_steps(100, 30, 5) == [4, 5]  # a partial last epoch ends at the last step
    assert snapshot_path("victims/mnist_lenet5_oe_snap.pt") == Path("victims/mnist_lenet5_oe_snap.snapshots.pt")


@pytest.mark.parametrize("params, words", [
    ({"oe_labels": "joint"}, "needs the victim's per-epoch snapshots"),          # the synthetic victim has none
    ({"oe_labels": "joint", "outlier_source": "none"}, "needs an outlier_source other than none"),
    ({"oe_labels": "current"}, "must be one of"),
])
def test_joint_labels_without_snapshots_is_one_config_error(make_cfg, params, words):
    # contract §15.2: key, value and rule in one line, before any work
    with pytest.raises(ConfigError, match=words) as e:
        validate(make_cfg(defense={"name": AM, "params": params}), check_files=False)
    assert e.value.key == "defense.params.oe_labels" and "\n" not in str(e.value)
    assert params["oe_labels"] in str(e.value)


def _tiny(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))


def test_joint_labels_each_oe_batch_with_the_matching_snapshot(make_cfg, tmp_path, synth_victim_path):
    # contract §19: the first half of the fit is labelled by snapshot 0, the second by snapshot 1 (the final
    # victim); frozen labels every batch with the final victim
    snaps = [_tiny(1), _tiny(2)]
    victim = FrozenVictim(snaps[1], "cpu")
    ckpt = tmp_path / "v.pt"
    torch.save({"format": SNAPSHOT_FORMAT, "arch": "tiny_mlp", "epochs": [1, 2], "steps": [3, 6],
                "state_dicts": [m.net.state_dict() for m in snaps]}, snapshot_path(ckpt))
    assert load_snapshots(snapshot_path(ckpt))["steps"] == [3, 6]
    labels: dict[str, list[torch.Tensor]] = {}
    import mebench.defenses.misinformation as mis

    real_loss = mis.misinformation_loss
    for mode in ("frozen", "joint"):
        seen, out = [], []
        make = lambda arch=None: _hooked(seen)  # noqa: E731
        ctx = DefenseContext(victim=victim, num_classes=4, input_shape=(1, 8, 8), device=torch.device("cpu"),
                             train_split=lambda: _images("SYNTH", True), make_model=make, victim_checkpoint=str(ckpt))
        params = AdaptiveMisinformation.Params(epochs=0.4, batch_size=50, oe_labels=mode)
        try:
            mis.misinformation_loss = lambda logits, y: (out.append(y[50:].clone()), real_loss(logits, y))[1]
            model = AdaptiveMisinformation._fit(params, ctx)
        finally:
            mis.misinformation_loss = real_loss
        oe_inputs = [x[50:] for x in seen[-len(out):]]
        labels[mode] = (out, oe_inputs, model.outlier_record)
    out, xs, record = labels["joint"]
    steps = len(out)
    assert steps == round(0.4 * _images("SYNTH", True)[0].shape[0] / 50) and steps >= 4
    for t, (y, x) in enumerate(zip(out, xs)):
        src = snaps[0] if t < steps / 2 else snaps[1]
        assert torch.equal(y, src(x).argmax(1)), t
    assert any(not torch.equal(snaps[0](x).argmax(1), snaps[1](x).argmax(1)) for x in xs[: steps // 2])
    assert record["oe_labels"] == "joint" and record["labels"] == "victim_snapshot_top_class"
    assert record["snapshots"]["count"] == 2 and record["snapshots"]["victim_steps"] == [3, 6]
    assert record["snapshots"]["fit_steps"] == steps and record["snapshots"]["agree_with_final"][1] == 1.0
    out, xs, record = labels["frozen"]
    assert all(torch.equal(y, snaps[1](x).argmax(1)) for y, x in zip(out, xs))
    assert record["oe_labels"] == "frozen" and "snapshots" not in record


def _hooked(seen: list) -> torch.nn.Module:
    model = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
    return model


def test_a_snapshot_recipe_writes_one_snapshot_per_epoch(tmp_path, fake_mnist):
    # contract §4: PATH.snapshots.pt holds the weights after each epoch, the last equal to the checkpoint's,
    # and the snapshots do not change the training (the checkpoint equals the recipe's without them)

    from mebench.victims.recipes import load_recipe, train_victim

    recipe = load_recipe(ROOT / "configs/victims/mnist_lenet5_oe_snap.yaml")
    assert recipe.snapshots
    recipe = dataclasses.replace(recipe, epochs=2.0, batch_size=32)
    train_victim(recipe, tmp_path / "s.pt", data_root=str(tmp_path), progress=False)
    train_victim(dataclasses.replace(recipe, snapshots=False), tmp_path / "p.pt", data_root=str(tmp_path),
                 progress=False)
    snaps = load_snapshots(tmp_path / "s.snapshots.pt")
    assert snaps["epochs"] == [1, 2] and snaps["steps"] == [3, 6] and snaps["arch"] == "lenet5"
    final = torch.load(tmp_path / "s.pt", weights_only=True)["state_dict"]
    plain = torch.load(tmp_path / "p.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(snaps["state_dicts"][1][k], final[k]) and torch.equal(final[k], plain[k]) for k in final)
    assert any(not torch.equal(snaps["state_dicts"][0][k], final[k]) for k in final)
    meta = json.loads((tmp_path / "s.json").read_text())
    assert meta["snapshots"]["count"] == 2 and meta["snapshots"]["steps"] == [3, 6]
    assert not (tmp_path / "p.snapshots.pt").exists()
    assert "snapshots" not in json.loads((tmp_path / "p.json").read_text())
