"""Contract §4: victim checkpoints load weights-only, carry their metadata, and recipes train."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from mebench.victims.load import load_victim_module, sha256_file
from mebench.victims.recipes import crop_flip, load_recipe, train_victim

RECIPES = sorted(Path(__file__).resolve().parent.parent.joinpath("configs", "victims").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_shipped_recipes_parse(path):
    # contract 4: reference victims come from recipes in configs/victims/
    r = load_recipe(path)
    assert r.name == path.stem and r.min_test_accuracy > 0


def test_checkpoint_loads_weights_only_and_records_sha256(make_cfg, monkeypatch):
    # contract 4: load with torch.load(weights_only=True); checkpoint_ref hash in metadata
    calls = []
    orig = torch.load

    def spy(*a, **k):
        calls.append(k.get("weights_only"))
        return orig(*a, **k)

    monkeypatch.setattr(torch, "load", spy)
    cfg = make_cfg()
    model, meta = load_victim_module(cfg.victim, 4)
    assert calls == [True]
    assert meta["checkpoint_sha256"] == sha256_file(cfg.victim.checkpoint_ref)
    assert meta["arch"] == "tiny_mlp" and meta["victim_id"] == "synth_mlp"


def test_crop_flip_keeps_shape_and_content():
    # victim recipes: on-device augmentation without per-image Python loops
    x = torch.rand(16, 3, 32, 32)
    torch.manual_seed(0)
    y = crop_flip(x)
    assert y.shape == x.shape
    assert not torch.equal(x, y)


@pytest.mark.slow
def test_cifar_recipe_code_path_on_synthetic_data(tmp_path, monkeypatch):
    # contract 4: `mebench victim train` writes PATH.pt and PATH.json with test_accuracy (synthetic CIFAR-10)
    import torchvision.datasets as tvd

    class FakeCIFAR:
        def __init__(self, root, train, download):
            g = torch.Generator().manual_seed(int(train))
            self.targets = torch.randint(0, 10, (96,), generator=g).tolist()
            base = torch.rand(10, 32, 32, 3, generator=g)
            self.data = (base[self.targets] * 255).to(torch.uint8).numpy()

    monkeypatch.setattr(tvd, "CIFAR10", FakeCIFAR)
    recipe = dataclasses.replace(load_recipe(RECIPES[0].parent / "cifar10_cnn.yaml"), epochs=1.0, device="cpu")
    out = tmp_path / "v.pt"
    meta = train_victim(recipe, out, data_root=str(tmp_path), progress=False)
    side = json.loads(out.with_suffix(".json").read_text())
    assert isinstance(side["test_accuracy"], float) and 0 <= side["test_accuracy"] <= 1
    assert side["sha256"] == sha256_file(out) == meta["sha256"]
    obj = torch.load(out, weights_only=True)
    assert obj["arch"] == "simple_cnn" and obj["num_classes"] == 10


def test_bare_state_dict_loads_with_victim_arch(make_cfg, synth_victim_path, tmp_path):
    # contract 4: a bare state_dict is a victim when victim.arch names its architecture
    bare = tmp_path / "bare.pt"
    torch.save(torch.load(synth_victim_path, weights_only=True)["state_dict"], bare)
    ref, _ = load_victim_module(make_cfg().victim, 4)
    model, meta = load_victim_module(make_cfg(victim={"checkpoint_ref": str(bare), "arch": "tiny_mlp"}).victim, 4)
    x = torch.rand(8, 1, 8, 8)
    assert torch.equal(model.eval()(x), ref.eval()(x)) and meta["arch"] == "tiny_mlp"


def test_validation_reads_each_victim_file_version_once(make_cfg, synth_victim_path, tmp_path, monkeypatch):
    # contract 4, 15.2: validate(check_files=True) loads the checkpoint (weights only) before any work,
    # once per file version, so a grid of many cells does not re-read it
    from mebench.config.validation import validate

    path = tmp_path / "v.pt"
    path.write_bytes(Path(synth_victim_path).read_bytes())
    cfg = make_cfg(victim={"checkpoint_ref": str(path)})
    calls = []
    orig = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k.get("weights_only")) or orig(*a, **k))
    validate(cfg)
    validate(cfg)
    assert calls == [True]
    tmp = tmp_path / "v2.pt"
    tmp.write_bytes(path.read_bytes())
    tmp.replace(path)  # a new file version (as a retrained victim would be)
    validate(cfg)
    assert calls == [True, True]
