"""Every member of the model, dataset, probe and adaptive-strategy registries, straight from the
registry (built-ins and entry-point plugins alike), so a member is checked the day it is registered
(issue 55; attacks and victim formats have their own registry-driven modules,
``test_attack_registry.py`` and ``test_format_registry.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import mebench.probes  # noqa: F401  (registers the built-in probes)
from mebench.attacks.adaptive import ADAPTIVE
from mebench.data.profiles import PROFILES
from mebench.models.registry import MODELS, build_model
from mebench.probes.base import PROBES

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOCS_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))


# contract §5: every registered architecture builds for both image shapes the profiles use, takes
# [0, 1] pixels and answers one logit per class; its parameters are all trainable.
@pytest.mark.parametrize("arch", MODELS.names())
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_every_model_builds_and_answers(arch, shape):
    model = build_model(arch, shape[0], 10, shape[1:], (0.5,) * shape[0], (0.25,) * shape[0]).eval()
    with torch.no_grad():
        out = model(torch.rand(3, *shape))
    assert out.shape == (3, 10) and bool(torch.isfinite(out).all())
    assert all(p.requires_grad for p in model.parameters())
    assert f"`{arch}`" in DOCS_TEXT or arch in DOCS_TEXT, f"{arch}: no docs page names it"


# contract §2-3: every dataset profile is self-consistent, and a victim dataset's surrogates are
# registered with its image shape.
@pytest.mark.parametrize("name", PROFILES.names())
def test_every_dataset_profile_is_consistent(name):
    p = PROFILES.get(name)
    assert p.name == name and p.num_classes >= 2 and len(p.input_shape) == 3
    assert len(p.mean) == len(p.std) == p.input_shape[0] and all(s > 0 for s in p.std)
    assert p.train_size >= 0 and p.test_size >= 0 and (p.train_size > 0 or not p.downloadable)  # 0: read from a folder
    for s in p.surrogates if p.victim_dataset else ():
        assert s in PROFILES and PROFILES.get(s).input_shape == p.input_shape, (name, s)


# every probe: named as registered, typed defaults that build, declared metrics, a docs page.
@pytest.mark.parametrize("name", PROBES.names())
def test_every_probe_declares_itself(name):
    cls = PROBES.get(name)
    assert cls.name == name
    assert dataclasses.is_dataclass(cls.Params) and dataclasses.is_dataclass(cls.Params())
    assert isinstance(cls.metrics, tuple)
    probe = cls()
    assert dataclasses.is_dataclass(probe.params) and probe.measurements() == []
    assert f"`{name}`" in DOCS_TEXT, f"probe {name}: no docs page names it"


# every adaptive strategy: its defaults build and pass its rules; expand sends repeats copies of
# each image, grouped; keep returns one answer row per charged answer.
@pytest.mark.parametrize("name", ADAPTIVE.names())
def test_every_adaptive_strategy_keeps_its_shape(name):
    cls = ADAPTIVE.get(name)
    assert cls.name == name and cls.paper and cls.output_modes
    params = cls.Params()
    cls.check(params)
    strategy = cls(params, torch.Generator().manual_seed(0))
    x = torch.rand(5, 1, 8, 8)
    if cls.needs_defense:  # a defense-aware attacker first builds what it needs from its copy of the defense
        strategy.prepare(lambda probs, images: probs, x, 4)
    sent = strategy.expand(x)
    assert strategy.repeats >= 1 and sent.shape == (5 * strategy.repeats, 1, 8, 8)
    assert float(sent.min()) >= 0 and float(sent.max()) <= 1
    groups = torch.arange(5).repeat_interleave(strategy.repeats)
    y = torch.softmax(torch.randn(len(sent), 4), 1)
    kept = strategy.keep(y, groups)
    assert kept.shape == y.shape and bool(torch.isfinite(kept).all())
    assert f"`{name}`" in DOCS_TEXT, f"adaptive strategy {name}: no docs page names it"
