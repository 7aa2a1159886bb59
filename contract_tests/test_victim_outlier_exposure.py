"""Contract §4: victim recipes with Outlier Exposure (configs/victims/*_oe.yaml).

The recipe trains like the plain one plus a uniform-target loss on outlier batches, the victim of
Adaptive Misinformation's reference (sanjaykariyappa/adaptive_misinformation @ c2a3e1b,
admis/utils/model.py:31-34, 121, 146). Its settings fail before any work with one config error
(contract §15.2), and its metadata records the outlier set.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from mebench.defenses.outliers import NO_OUTLIERS, OUTLIER_SEED, synthetic_blobs, synthetic_strokes
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import _images
from mebench.training.loop import OptimizerSpec, train_steps
from mebench.victims.load import victim_metadata
from mebench.victims.outlier_exposure import train_steps_oe, uniform_target_loss
from mebench.victims.recipes import load_recipe, train_victim

ROOT = Path(__file__).resolve().parent.parent
OE_RECIPES = [p for p in sorted((ROOT / "configs" / "victims").glob("*.yaml"))
              if load_recipe(p).outlier_source != NO_OUTLIERS]


def test_uniform_target_loss_is_the_references_cxe_unif():
    # contract §4: the reference's CXE_unif, -(mean_k z_k - logsumexp z) (admis/utils/model.py:31-34)
    z = torch.randn(16, 10, generator=torch.Generator().manual_seed(0)) * 3
    ref = -(z.mean(1) - torch.logsumexp(z, dim=1)).mean()
    assert torch.allclose(uniform_target_loss(z), ref, atol=1e-6)
    assert torch.allclose(uniform_target_loss(torch.zeros(4, 10)), torch.log(torch.tensor(10.0)), atol=1e-6)
    assert uniform_target_loss(z) > uniform_target_loss(torch.zeros(16, 10))


def _fit(oe: bool) -> torch.nn.Module:
    x, y = _images("SYNTH", True)
    torch.manual_seed(0)
    model = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))
    g, spec = torch.Generator().manual_seed(0), OptimizerSpec("sgd", 0.1, 0.9, 0.0)
    xf = x.float() / 255
    if oe:
        return train_steps_oe(model, xf, y, synthetic_blobs(512, (1, 8, 8)), steps=300, batch_size=32,
                              optimizer=spec, generator=g, oe_lambda=1.0)
    return train_steps(model, xf, y, loss_fn=torch.nn.functional.cross_entropy, steps=300, batch_size=32,
                       optimizer=spec, generator=g)


def test_outlier_exposure_lowers_the_victims_confidence_on_outliers_only():
    # contract §4: OE makes the maximum softmax probability an out-of-distribution score
    blobs = synthetic_blobs(256, (1, 8, 8), seed=OUTLIER_SEED + 1).float() / 255  # unseen outliers
    tx, ty = _images("SYNTH", False)
    conf = {}
    for oe in (False, True):
        model = _fit(oe)
        with torch.no_grad():
            conf[oe] = torch.softmax(model(blobs), 1).max(1).values.mean().item()
            acc = (model(tx.float() / 255).argmax(1) == ty).float().mean().item()
        assert acc > 0.8, (oe, acc)  # 4 classes: chance is 0.25
    assert conf[True] < 0.4 < conf[False], conf  # uniform is 0.25


def test_oe_recipe_writes_its_outlier_set_into_the_metadata(tmp_path, fake_mnist):
    # contract §4: PATH.json records the outlier source, loss weight, size and seed; a run's victim
    # metadata (summary.json) carries it
    recipe = dataclasses.replace(load_recipe(ROOT / "configs/victims/mnist_lenet5_oe.yaml"), epochs=1.0)
    train_victim(recipe, tmp_path / "v.pt", data_root=str(tmp_path), progress=False)
    side = json.loads((tmp_path / "v.json").read_text())
    assert side["outlier_exposure"] == {"source": "synthetic_blobs", "lambda": 1.0, "loss": "uniform_target",
                                        "kind": "synthetic", "size": 96, "seed": OUTLIER_SEED}
    assert side["recipe"]["outlier_source"] == "synthetic_blobs"
    cfg = SimpleNamespace(victim_id="v", input_size=(28, 28), channels=1, output_modes_supported=("soft_prob",),
                          normalization=SimpleNamespace(mean=(0.1,), std=(0.3,)), checkpoint_ref=tmp_path / "v.pt",
                          temperature=1.0, oracle_profile="default")
    meta = victim_metadata(cfg, "lenet5", tmp_path / "v.pt")
    assert meta["outlier_exposure"] == side["outlier_exposure"]
    # contract §4 (victim policy), issue 58: the build's environment travels into every run's record
    # (the torch build that trained it)
    assert meta["built_with"] == {"torch": side["versions"]["torch"], "cpu_model": side["machine"]["cpu_model"],
                                  "device": "cpu", "torch_threads": side["machine"]["torch_threads"]}
    (tmp_path / "v.json").write_text(json.dumps({"test_accuracy": 0.9}))  # an older side file: nothing to say
    assert victim_metadata(cfg, "lenet5", tmp_path / "v.pt")["built_with"] is None
    plain = dataclasses.replace(recipe, outlier_source=NO_OUTLIERS)
    train_victim(plain, tmp_path / "p.pt", data_root=str(tmp_path), progress=False)
    assert "outlier_exposure" not in json.loads((tmp_path / "p.json").read_text())


@pytest.mark.parametrize("change, key", [
    ({"outlier_source": "MNIST"}, "outlier_source"),          # the victim's own dataset
    ({"outlier_source": "KMNISTX"}, "outlier_source"),        # unknown
    ({"outlier_source": "CIFAR10"}, "outlier_source"),        # another input shape
    ({"oe_lambda": -1.0}, "oe_lambda"),
    ({"augment": "crop_flip"}, "augment"),                    # the OE loop does not augment
])
def test_oe_recipe_settings_fail_with_one_config_error(tmp_path, change, key):
    # contract §15.2: key, value and rule in one error, before any work
    raw = yaml.safe_load((ROOT / "configs/victims/mnist_lenet5_oe.yaml").read_text())
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**raw, **change}))
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.key == key


@pytest.mark.parametrize("path", OE_RECIPES, ids=lambda p: p.stem)
def test_shipped_oe_victims_never_train_on_a_defense_grids_pool(path):
    # contract §4: an OE victim's outliers are not the attacker's pool of any grid on its dataset
    recipe = load_recipe(path)
    for grid in sorted((ROOT / "configs" / "benchmarks").rglob("*.yaml")):
        cfg = yaml.safe_load(grid.read_text()) or {}
        if (cfg.get("dataset") or {}).get("name") == recipe.dataset:
            pool = ((cfg.get("data_modes") or {}).get("surrogate") or {}).get("surrogate_name")
            assert pool != recipe.outlier_source, (grid.name, pool)


def test_synthetic_strokes_are_deterministic_pen_strokes():
    # contract §10: a synthetic outlier set depends on its seed only
    a, b = synthetic_strokes(300, (1, 28, 28)), synthetic_strokes(300, (1, 28, 28))
    assert a.dtype == torch.uint8 and a.shape == (300, 1, 28, 28) and torch.equal(a, b)
    assert not torch.equal(a, synthetic_strokes(300, (1, 28, 28), seed=OUTLIER_SEED + 1))
    lit = (a > 127).float().mean(dim=(1, 2, 3))
    assert 0 < lit.min() and 0.04 < lit.mean() < 0.2 and lit.max() < 0.35, (lit.min(), lit.mean(), lit.max())
    assert a[:, :, 0].max() == 0 and a[:, :, :, 0].max() == 0   # strokes stay off the border
    assert torch.equal(synthetic_strokes(5, (3, 28, 28))[:, 0], synthetic_strokes(5, (3, 28, 28))[:, 2])
