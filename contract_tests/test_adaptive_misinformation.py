"""Adaptive Misinformation follows its reference recipe (issue 42; docs/defenses/adaptive_misinformation.md).

Reference: sanjaykariyappa/adaptive_misinformation @ c2a3e1b. Defenses are oracle wrappers
(contract §19); their settings fail before any work with one config error (contract §15.2).
Everything runs on the tiny synthetic world of ``mebench.testing`` (8 x 8 images, 4 classes).
"""

from __future__ import annotations

import pytest
import torch

from mebench.defenses import DefenseContext, make_defense
from mebench.defenses.misinformation import RECIPES, AdaptiveMisinformation, step_lr_factor
from mebench.defenses.outliers import OUTLIER_SEED, synthetic_blobs, victim_top_class
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import _images
from mebench.config.validation import defense_params, validate
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)
AM = "adaptive_misinformation"


def _victim() -> FrozenVictim:
    torch.manual_seed(0)
    return FrozenVictim(build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)), "cpu")


def _context(victim: FrozenVictim, make_model=None) -> DefenseContext:
    make = make_model or (lambda arch=None: build_model(arch or "tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)))
    return DefenseContext(victim=victim, num_classes=4, input_shape=SHAPE, device=torch.device("cpu"),
                          train_split=lambda: _images("SYNTH", True), make_model=make)


def test_defaults_are_the_reference_values():
    # contract §19: the default recipe is the reference's (README.md:18, admis/utils/defense.py:51,
    # admis/defender/train.py:31, admis/utils/model.py:358-364; tau as README.md:25-35 documents it)
    p = AdaptiveMisinformation.Params()
    assert (p.recipe, p.tau, p.nu, p.epochs, p.batch_size, p.lr) == ("reference", 0.99, 10000.0, 20.0, 128, 0.1)
    assert (p.lr_schedule, p.lr_step, p.lr_gamma, p.outlier_source) == ("step", 10.0, 0.1, "synthetic_blobs")
    old = AdaptiveMisinformation.Params(recipe="mebench_v1")  # the named pre-issue-42 recipe
    assert (old.tau, old.nu, old.epochs, old.lr, old.lr_schedule, old.outlier_source) == \
        (0.9, 1000.0, 2.0, 0.01, "cosine", "none")
    cpu = AdaptiveMisinformation.Params(recipe="reference_cpu", tau=0.7)  # a set field wins over the recipe
    assert (cpu.epochs, cpu.lr_step, cpu.lr, cpu.tau, cpu.nu) == (5.0, 2.5, 0.1, 0.7, 10000.0)
    assert set(RECIPES) == {"reference", "reference_cpu", "mebench_v1"}


def test_the_reference_schedule_steps_the_lr_every_ten_epochs():
    # StepLR(10, 0.1) on 20 epochs (README.md:18, admis/utils/model.py:362-364, 412-414)
    n, bs = 1000, 100  # 10 steps per epoch
    factors = [step_lr_factor(s, bs, n, 10.0, 0.1) for s in range(200)]
    assert factors[:100] == [1.0] * 100
    assert factors[100:] == pytest.approx([0.1] * 100)


def test_oe_batches_are_labelled_by_the_victims_top_class():
    # contract §19: every step trains on an in-distribution batch with its true labels plus as many
    # outlier images labelled with the victim's argmax (admis/utils/model.py:117-129)
    victim = _victim()
    x_train, y_train = _images("SYNTH", True)
    seen: list[torch.Tensor] = []

    def make_model(arch=None):
        model = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))
        model.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
        return model

    labels: list[torch.Tensor] = []
    import mebench.defenses.misinformation as mis

    real_loss = mis.misinformation_loss
    params = AdaptiveMisinformation.Params(epochs=0.2, batch_size=50)
    try:
        mis.misinformation_loss = lambda logits, y: (labels.append(y.clone()), real_loss(logits, y))[1]
        AdaptiveMisinformation._fit(params, _context(victim, make_model))
    finally:
        mis.misinformation_loss = real_loss
    assert len(seen) == len(labels) == round(0.2 * x_train.shape[0] / 50)
    train_rows = {bytes(r) for r in (x_train.flatten(1)).numpy()}
    for xb, yb in zip(seen, labels):
        assert xb.shape[0] == yb.shape[0] == 100
        inside, outside = (xb[:50] * 255).round().to(torch.uint8), xb[50:]
        assert all(bytes(r) in train_rows for r in inside.flatten(1).numpy())  # in-distribution half
        assert set(outside.unique().tolist()) <= {0.0, 1.0}  # the outlier half: synthetic blobs
        top = victim.logits(outside).argmax(1)
        assert torch.equal(yb[50:], top)
    # the labels are informative: the victim does not answer every blob with one class
    assert torch.cat([y[50:] for y in labels]).unique().numel() > 1


def test_victim_top_class_is_the_argmax_of_the_victims_answer():
    victim = _victim()
    x = synthetic_blobs(300, SHAPE)
    assert torch.equal(victim_top_class(victim, x, batch_size=64), victim.probs(x.float() / 255).argmax(1))


def test_synthetic_outliers_are_deterministic_blobs():
    a, b = synthetic_blobs(500, (1, 28, 28)), synthetic_blobs(500, (1, 28, 28))
    assert a.dtype == torch.uint8 and torch.equal(a, b)
    assert set(a.unique().tolist()) == {0, 255}
    lit = (a > 0).float().flatten(1).mean(1)
    assert float(lit.min()) >= 0.09 and float(lit.max()) <= 0.41
    assert not torch.equal(a, synthetic_blobs(500, (1, 28, 28), seed=OUTLIER_SEED + 1))


@pytest.mark.parametrize("source, words", [
    ("SYNTHSUR", "must not be the attacker's pool dataset of the same cell"),
    ("SYNTH", "must not be the victim's own dataset"),
    ("SYNTH32SUR", "input shape"),
    ("kmnst", "must be one of"),
])
def test_the_outlier_source_is_never_the_pool(make_cfg, source, words):
    # contract §15.2: one config error, before any work, naming key, value and rule
    cfg = make_cfg(defense={"name": AM, "params": {"outlier_source": source}})
    with pytest.raises(ConfigError, match=words) as e:
        validate(cfg, check_files=False)
    assert e.value.key == "defense.params.outlier_source" and "\n" not in str(e.value)
    assert source in str(e.value)


@pytest.mark.parametrize("params, key, words", [
    ({"recipe": "paper"}, "defense.params.recipe", "one of"),
    ({"lr_schedule": "linear"}, "defense.params.lr_schedule", "one of"),
    ({"lr_gamma": 0}, "defense.params.lr_gamma", "\\(0, 1\\]"),
    ({"lr_step": -1}, "defense.params.lr_step", "> 0"),
])
def test_bad_recipe_settings_are_one_config_error(make_cfg, params, key, words):
    # contract §15.2
    with pytest.raises(ConfigError, match=words) as e:
        validate(make_cfg(defense={"name": AM, "params": params}), check_files=False)
    assert e.value.key == key


def test_the_default_and_the_named_variants_validate(make_cfg):
    for params in ({}, {"recipe": "mebench_v1", "tau": 0.7}, {"recipe": "reference_cpu"}, {"outlier_source": "none"}):
        cfg = make_cfg(defense={"name": AM, "params": params})
        validate(cfg, check_files=False)
    assert defense_params(make_cfg(defense={"name": AM})).outlier_source == "synthetic_blobs"


def test_the_outlier_source_is_recorded_and_a_fit_is_shared_across_tau():
    # the defense's record names its outlier set; cells differing only in tau or nu share one fit
    victim = _victim()
    ctx = _context(victim)
    p = AdaptiveMisinformation.Params(epochs=0.1)
    model = AdaptiveMisinformation.fit(p, ctx)
    assert AdaptiveMisinformation.fit(AdaptiveMisinformation.Params(epochs=0.1, tau=0.5, nu=10.0), ctx) is model
    record = make_defense(AM, p, torch.Generator(), model).describe()["outliers"]
    assert record["source"] == "synthetic_blobs" and record["kind"] == "synthetic"
    assert record["labels"] == "victim_top_class" and record["seed"] == OUTLIER_SEED
    assert record["size"] == _images("SYNTH", True)[0].shape[0] and record["fit_seconds"] >= 0
    v1 = AdaptiveMisinformation.Params(recipe="mebench_v1", epochs=0.1)
    v1_model = AdaptiveMisinformation.fit(v1, ctx)
    assert v1_model is not model
    assert make_defense(AM, v1, torch.Generator(), v1_model).describe()["outliers"]["kind"] == "none"
