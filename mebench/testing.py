"""A tiny synthetic world for fast tests of the engine and of attack plugins.

``register_synthetic()`` adds (once per process) the dataset profiles ``SYNTH``, ``SYNTHSUR``,
``SYNTH32`` and ``SYNTH32SUR`` and the model ``tiny_mlp`` (details below);
``synthetic_victim(path)`` trains a ``tiny_mlp`` victim on SYNTH in well under a second, and
``synthetic_config(tmp_path, **overrides)`` returns a valid ``RunConfig`` for it. The images are
class prototypes plus noise, so a substitute can really learn from the victim: metrics move with
the budget. See docs/guide/tests.md.
"""
# ``register_synthetic()`` adds (once per process):
#
# - dataset profiles ``SYNTH`` (victim dataset, 1x8x8, 4 classes) and
#   ``SYNTHSUR`` (its surrogate), read from generated tensors, not from disk;
# - CIFAR-shaped profiles ``SYNTH32`` (victim dataset, 3x32x32, 10 classes) and ``SYNTH32SUR``,
#   for the paths that need real image sizes (convolutions, the generators, CUDA);
# - a model ``tiny_mlp`` (one hidden layer of 32 units).

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from mebench.config import RunConfig, parse_config
from mebench.data.profiles import PROFILES, DatasetProfile, register_dataset
from mebench.models.registry import MODELS, register_model

SYNTH_SHAPE = (1, 8, 8)
SYNTH_CLASSES = 4
SYNTH_SIZES = {"SYNTH": (4000, 600), "SYNTHSUR": (5000, 500), "SYNTH32": (2000, 300), "SYNTH32SUR": (2000, 300)}
SYNTH32_SHAPE = (3, 32, 32)
SYNTH32_CLASSES = 10
#: name -> (image shape, classes)
_WORLDS = {"SYNTH": (SYNTH_SHAPE, SYNTH_CLASSES), "SYNTHSUR": (SYNTH_SHAPE, SYNTH_CLASSES),
           "SYNTH32": (SYNTH32_SHAPE, SYNTH32_CLASSES), "SYNTH32SUR": (SYNTH32_SHAPE, SYNTH32_CLASSES)}


def _images(name: str, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    n_train, n_test = SYNTH_SIZES[name]
    n = n_train if train else n_test
    shape, classes = _WORLDS[name]
    victim = not name.endswith("SUR")
    g = torch.Generator().manual_seed((7 if victim else 11) + int(train))
    protos = torch.Generator().manual_seed(3)
    centers = 0.35 + 0.3 * torch.rand((classes, *shape), generator=protos)
    labels = torch.randint(0, classes, (n,), generator=g)
    spread = 0.3 if victim else 0.45  # the surrogate is "out of domain": noisier
    x = (centers[labels] + spread * torch.randn((n, *shape), generator=g)).clamp(0, 1)
    return (x * 255).round().to(torch.uint8), labels


def register_synthetic() -> None:
    """Register SYNTH, SYNTHSUR, SYNTH32, SYNTH32SUR and tiny_mlp (idempotent)."""
    if "SYNTH" in PROFILES:
        return
    norm = ((0.5,), (0.25,))
    norm3 = ((0.5,) * 3, (0.25,) * 3)
    for name, serves in (("SYNTH32", ()), ("SYNTH32SUR", ("SYNTH32",))):
        n_train, n_test = SYNTH_SIZES[name]
        register_dataset(DatasetProfile(name, 3, (32, 32), SYNTH32_CLASSES, *norm3, train_size=n_train,
                                        test_size=n_test, victim_dataset=not serves, serves=serves,
                                        reader=lambda root, train, download, name=name: _images(name, train)))
    register_dataset(DatasetProfile("SYNTH", 1, (8, 8), SYNTH_CLASSES, *norm, train_size=SYNTH_SIZES["SYNTH"][0],
                                    test_size=SYNTH_SIZES["SYNTH"][1], victim_dataset=True,
                                    reader=lambda root, train, download: _images("SYNTH", train)))
    register_dataset(DatasetProfile("SYNTHSUR", 1, (8, 8), SYNTH_CLASSES, *norm,
                                    train_size=SYNTH_SIZES["SYNTHSUR"][0], test_size=SYNTH_SIZES["SYNTHSUR"][1],
                                    serves=("SYNTH",), reader=lambda root, train, download: _images("SYNTHSUR", train)))
    if "tiny_mlp" not in MODELS:
        @register_model("tiny_mlp")
        def tiny_mlp(channels: int, num_classes: int, input_size: tuple[int, int]) -> nn.Module:
            return nn.Sequential(nn.Flatten(), nn.Linear(channels * input_size[0] * input_size[1], 32),
                                 nn.ReLU(), nn.Linear(32, num_classes))


def synthetic_victim(path: Path, steps: int = 300, seed: int = 0, dataset: str = "SYNTH") -> Path:
    """Train and save a tiny_mlp victim on SYNTH (about 90 % test accuracy), or on ``dataset``."""
    from mebench.victims.load import save_victim

    path = Path(path)
    if path.is_file():
        return path
    (channels, *size), classes = _WORLDS[dataset]
    save_victim(path, synthetic_victim_net(steps, seed, dataset).net, "tiny_mlp", classes, channels, tuple(size))
    return path


def synthetic_victim_net(steps: int = 300, seed: int = 0, dataset: str = "SYNTH") -> nn.Module:
    """The network ``synthetic_victim`` saves, in memory: a trained tiny_mlp taking [0, 1] pixels
    (a ``Normalized`` wrapper, the network itself at ``.net``)."""
    from mebench.models.registry import Normalized
    from mebench.training.loop import OptimizerSpec, train_steps

    register_synthetic()
    torch.manual_seed(seed)
    (channels, *size), classes = _WORLDS[dataset]
    net = MODELS.get("tiny_mlp")(channels, classes, tuple(size))
    model = Normalized(net, (0.5,) * channels, (0.25,) * channels)
    x, y = _images(dataset, True)
    train_steps(model, x.float() / 255, y, loss_fn=nn.functional.cross_entropy, steps=steps, batch_size=128,
                optimizer=OptimizerSpec("adam", lr=3e-3, weight_decay=0.0),
                generator=torch.Generator().manual_seed(seed))
    return model.eval()


def synthetic_config_dict(tmp_path: Path, victim_path: Optional[Path] = None) -> dict[str, Any]:
    """A plain dict config for SYNTH (Random, surrogate, soft_prob, budgets 200/500)."""
    register_synthetic()
    victim_path = victim_path or synthetic_victim(Path(tmp_path) / "synth_victim.pt")
    return {
        "run": {"name": "synth", "seeds": [0], "device": "cpu", "output_dir": str(Path(tmp_path) / "runs")},
        "victim": {"victim_id": "synth_mlp", "checkpoint_ref": str(victim_path), "output_mode": "soft_prob"},
        "dataset": {"name": "SYNTH", "data_mode": "surrogate", "surrogate_name": "SYNTHSUR",
                    "data_root": str(tmp_path)},
        "substitute": {"arch": "tiny_mlp", "init_seed": 1234,
                       "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0}},
        "attack": {"name": "random", "output_mode": "soft_prob", "params": {"batch_size": 64}},
        "budget": {"max_budget": 500, "checkpoints": [200, 500]},
        "cache": {"enabled": True},
    }


#: ``make_cfg(**QUICK_JBDA)``: a JBDA run on the synthetic world that trains each of its models one epoch on a
#: 20-image seed set (a Track B that is trained when asked, in seconds).
QUICK_JBDA: dict[str, Any] = {
    "attack": {"name": "jbda", "output_mode": "soft_prob",
               "params": {"round_epochs": 1, "final_epochs": 1, "batch_size": 32}},
    "dataset": {"data_mode": "seed", "surrogate_name": None, "seed_size": 20}}


def deep_update(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with nested ``updates`` merged in (``None`` deletes a key)."""
    out = copy.deepcopy(base)
    for k, v in updates.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_update(out[k], v)
        else:
            out[k] = copy.deepcopy(v)  # never shares a caller's (or a module constant's) nested values
    return out


def synthetic_config(tmp_path: Path, **overrides: Any) -> RunConfig:
    """A parsed SYNTH ``RunConfig``; keyword arguments are section updates, e.g. ``attack={...}``."""
    return parse_config(deep_update(synthetic_config_dict(tmp_path), overrides))


class CollapsingTrainer:
    """A Track A trainer whose substitute collapses: the real trainer, then the last linear layer
    is made to answer class 0 for every input; with ``diverge`` the second half of the recorded
    losses is set to 5.0 (what a run that learned and then lost it leaves). For the training-health
    tests (``mebench.training.health``)."""

    def __init__(self, real: Any, diverge: bool = False) -> None:
        self.real, self.diverge = real, diverge

    def steps(self, budget: int) -> int:
        return self.real.steps(budget)

    def train(self, x: torch.Tensor, y: torch.Tensor, on_step: Any = None,
              losses: Optional[torch.Tensor] = None) -> nn.Module:
        model = self.real.train(x, y, on_step, losses)
        last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
        with torch.no_grad():
            last.weight.zero_()
            last.bias.copy_(torch.arange(last.bias.numel(), 0, -1, dtype=last.bias.dtype))
        if self.diverge and losses is not None:
            losses[len(losses) // 2:] = 5.0
        return model


class SpyNet(nn.Module):
    """Wraps a network and counts the images that reach its forward pass (what the victim saw)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.seen = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += int(x.shape[0])
        return self.net(x)


def drive_attack(attack: Any, victim_net: nn.Module, shape: tuple[int, ...], classes: int):
    """Run ``attack`` through the engine's own query loop (``mebench.run.engine.collect``) against
    ``victim_net`` behind the real oracle and query store, with Track B taken at every checkpoint.
    Returns ``(oracle, state, batches, models)``: every observed batch, and Track B by checkpoint."""
    from mebench.run.engine import collect

    oracle, state, batches = loop_parts(attack, victim_net, shape, classes)
    models: dict[int, nn.Module] = {}
    collect(attack, oracle, state, lambda b: models.__setitem__(b, attack.track_b_model(state)))
    return oracle, state, batches, models


def loop_parts(attack: Any, victim_net: nn.Module, shape: tuple[int, ...], classes: int) -> tuple[Any, Any, list]:
    """A real oracle around ``victim_net`` and an engine state with an empty query store, sized for
    ``attack``; the list it returns fills with every batch the attack observes."""
    from mebench.data.cache import QueryStore
    from mebench.oracle import Oracle
    from mebench.state import EngineState
    from mebench.victims.wrapper import FrozenVictim

    mode, budget, cps = attack.ctx.output_mode, attack.ctx.max_budget, attack.ctx.checkpoints
    oracle = Oracle(FrozenVictim(victim_net, "cpu"), mode, budget, shape)
    state = EngineState(budget, cps, QueryStore(budget, shape, mode, classes), torch.device("cpu"))
    batches: list = []
    observe = attack.observe
    attack.observe = lambda b, o, s: (batches.append(b), observe(b, o, s))
    return oracle, state, batches


# -- smoke runs of a registered attack (contract_tests/test_attack_registry.py) ---------------------
#: The budget of a smoke run: odd remainders after every checkpoint (contract §1.1).
SMOKE_BUDGET, SMOKE_CHECKPOINTS = 257, (100, 257)


def smoke_params(cls: Any, dataset: str = "SYNTH") -> Any:
    """``cls.Params`` built from the attack's declared ``smoke_params`` the way a config's
    ``attack.params`` is (its data-set defaults under them); a missing declaration is one line."""
    from mebench.config import build_dataclass

    if cls.smoke_params is None:
        raise AssertionError(
            f"attack '{cls.name}' ({cls.__module__}.{cls.__qualname__}) declares no smoke_params: set the class "
            "attribute smoke_params = {...} to attack.params that run in seconds on tiny data "
            "(see docs/extending/attack.md)")
    return build_dataclass(cls.Params, {**cls.dataset_defaults(dataset), **cls.smoke_params}, "attack.params")


def smoke_modes(cls: Any) -> tuple[str, str]:
    """The data mode and output mode of an attack's smoke run: surrogate and soft_prob where it allows them."""
    modes = cls.data_modes
    data_mode = "surrogate" if "surrogate" in modes else "data_free" if "data_free" in modes else sorted(modes)[0]
    output_mode = "soft_prob" if "soft_prob" in cls.output_modes else sorted(cls.output_modes)[0]
    return data_mode, output_mode


def smoke_substitute() -> nn.Module:
    """The substitute of every smoke run: a tiny convolutional net on SYNTH taking [0, 1] pixels
    (a convolution, because some attacks read a convolutional layer, e.g. Grad-CAM)."""
    from mebench.models.registry import Normalized

    (channels, h, w), classes = _WORLDS["SYNTH"]
    net = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * h * w, classes))
    return Normalized(net, (0.5,) * channels, (0.25,) * channels)


def smoke_run(name: str, victim_net: nn.Module, seed: int = 0, budget: int = SMOKE_BUDGET,
              checkpoints: tuple[int, ...] = SMOKE_CHECKPOINTS) -> dict[str, Any]:
    """One seed of the registered attack ``name`` at its ``smoke_params`` on SYNTH (SYNTHSUR as the
    pool), driven by the engine's query loop against ``victim_net``; seeded as the engine seeds a run.

    Returns ``x`` and ``y`` (every query and answer, in order), ``seen`` (images that reached the
    victim), ``queries_used``, ``at_checkpoint`` (the oracle's count when each checkpoint fired) and
    ``track_b`` (per checkpoint, the Track B model's weights, or ``None``)."""
    from mebench.attacks import ATTACKS, AttackContext
    from mebench.data.pools import Pool
    from mebench.run.engine import collect
    from mebench.support.seeding import generator, seed_everything

    register_synthetic()
    cls = ATTACKS.get(name)
    params = smoke_params(cls)
    cls.check_params(params, budget, checkpoints)
    data_mode, output_mode = smoke_modes(cls)
    profile = PROFILES.get("SYNTH")
    pool = None
    if data_mode != "data_free":
        source = "SYNTHSUR" if data_mode == "surrogate" else "SYNTH"  # seed mode: victim-domain images
        images, labels = _images(source, True)
        pool = Pool(images, source, labels if data_mode == "surrogate" else None)
    seed_everything(seed)
    ctx = AttackContext(profile=profile, output_mode=output_mode, num_classes=profile.num_classes,
                        input_shape=profile.input_shape, device=torch.device("cpu"), seed=seed,
                        generator=generator(seed, "attack"), pool=pool, params=params, checkpoints=checkpoints,
                        max_budget=budget, make_substitute=smoke_substitute, data_mode=data_mode, seed_size=30)
    attack = cls(ctx)
    spy = SpyNet(victim_net)
    oracle, state, _ = loop_parts(attack, spy, profile.input_shape, profile.num_classes)
    at: dict[int, int] = {}
    track_b: dict[int, Any] = {}

    def on_checkpoint(b: int) -> None:
        at[b] = oracle.queries_used
        model = attack.track_b_model(state)
        track_b[b] = None if model is None else {k: v.detach().clone() for k, v in model.state_dict().items()}

    collect(attack, oracle, state, on_checkpoint)
    x, y = state.store.prefix(oracle.queries_used)
    return {"x": x.clone(), "y": y.clone(), "seen": spy.seen, "queries_used": oracle.queries_used,
            "at_checkpoint": at, "track_b": track_b}


def swap_synth_test_split(monkeypatch: Any) -> None:
    """From here on, every reader of SYNTH's test split gets other images and labels (the train
    split is untouched): what a test needs to show a result does not depend on the test split."""
    import torch

    real = _images

    def images(name: str, train: bool) -> tuple["torch.Tensor", "torch.Tensor"]:
        x, y = real(name, train)
        if name != "SYNTH" or train:
            return x, y
        g = torch.Generator().manual_seed(99)
        return torch.randint(0, 256, x.shape, generator=g, dtype=torch.uint8), torch.randint(0, 4, y.shape, generator=g)

    monkeypatch.setattr(sys.modules[__name__], "_images", images)
