"""Reference victims trained by mebench's own recipes (``configs/victims/*.yaml``).

Victim weights cannot be downloaded, so mebench ships recipes that train them
reproducibly: a seeded step loop on the victim dataset's train split (tensors
in memory, optional on-device random-crop + flip augmentation), cross-entropy,
an optimizer with a cosine schedule, then the test accuracy is measured and
written next to the checkpoint in ``PATH.json``. See docs/guide/victims.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F

from mebench.run.artifacts import atomic_write_json
from mebench.config import build_dataclass, read_yaml_file
from mebench.data.augment import crop_flip
from mebench.data.datasets import load_split, resolve_data_root
from mebench.data.profiles import PROFILES, get_profile
from mebench.defenses.outliers import NO_OUTLIERS, check_outlier_source, outlier_images
from mebench.errors import ConfigError
from mebench.support.inference import eval_logits
from mebench.models.registry import MODELS, Normalized
from mebench.registry import unknown_name_message
from mebench.support.runinfo import library_versions, machine_info
from mebench.training.loop import OptimizerSpec, train_steps
from mebench.config.validation import check_device, check_folder_name
from mebench.victims.load import save_victim
from mebench.victims.snapshots import EpochSnapshots, snapshot_path
from mebench.victims.outlier_exposure import oe_record, train_steps_oe


@dataclass(frozen=True)
class VictimRecipe:
    name: str
    dataset: str
    arch: str
    epochs: float = 5.0
    batch_size: int = 128
    optimizer: OptimizerSpec = OptimizerSpec()
    augment: str = "none"
    seed: int = 0
    min_test_accuracy: float = 0.0
    device: str = "cpu"
    zoo: Optional[str] = None   # the victim zoo this recipe belongs to (a grid's `victims: [{zoo: NAME}]`)
    outlier_source: str = "none"  # Outlier Exposure set (mebench.victims.outlier_exposure); none: a plain victim
    oe_lambda: float = 1.0        # weight of the uniform-target loss on outliers (the AM reference's λ = 1)
    snapshots: bool = False       # also write the weights after every epoch to PATH.snapshots.pt (snapshot_path)


AUGMENTS = ("none", "crop_flip")


def load_recipe(path: str | Path) -> VictimRecipe:
    """Read and check a recipe; every mistake is one ``ConfigError`` naming key, value and rule."""
    raw = read_yaml_file(Path(path), "victim recipe not found (the shipped ones are in configs/victims/)")
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError("<root>", type(raw).__name__, "a victim recipe must hold a mapping of keys")
    recipe = build_dataclass(VictimRecipe, raw or {}, "")
    check_folder_name("name", recipe.name)  # it becomes victims/<name>.pt
    if recipe.augment not in AUGMENTS:
        raise ConfigError("augment", recipe.augment, f"must be one of {', '.join(AUGMENTS)}")
    if recipe.arch not in MODELS:
        raise ConfigError("arch", recipe.arch, f"unknown model; valid: {', '.join(MODELS.names())}")
    if recipe.dataset not in PROFILES or not PROFILES.get(recipe.dataset).victim_dataset:
        victims = [n for n in PROFILES.names() if PROFILES.get(n).victim_dataset]
        raise ConfigError("dataset", recipe.dataset, unknown_name_message("victim dataset", recipe.dataset, victims))
    check_device("device", recipe.device, present=False)  # the machine is checked where training starts
    for key, value in (("epochs", recipe.epochs), ("batch_size", recipe.batch_size),
                       ("optimizer.lr", recipe.optimizer.lr)):
        if not value > 0:
            raise ConfigError(key, value, "must be > 0")
    prof = PROFILES.get(recipe.dataset)
    check_outlier_source(recipe.outlier_source, "outlier_source", recipe.dataset, None,
                         (prof.channels, *prof.input_size))
    if not recipe.oe_lambda >= 0:
        raise ConfigError("oe_lambda", recipe.oe_lambda, "must be >= 0")
    if recipe.outlier_source != NO_OUTLIERS and recipe.augment != "none":
        raise ConfigError("augment", recipe.augment, "must be none when outlier_source is set "
                                                     "(the outlier-exposure loop does not augment)")
    return recipe


RECIPES_DIR = Path("configs") / "victims"


def zoo_recipes(folder: Path, zoo: Optional[str] = None) -> list[tuple[Path, VictimRecipe]]:
    """The recipes under ``folder`` (sorted by file name), only the members of ``zoo`` if given;
    with ``zoo`` set and no member found, a ``ConfigError`` naming the zoos that exist."""
    found = [(p, load_recipe(p)) for p in sorted(Path(folder).glob("*.yaml"))]
    if zoo is None:
        return found
    members = [(p, r) for p, r in found if r.zoo == zoo]
    if not members:
        zoos = sorted({r.zoo for _, r in found if r.zoo})
        raise ConfigError("zoo", zoo, f"no recipe in {folder} belongs to it; zoos: {', '.join(zoos) or 'none'}")
    return members


def train_victim(recipe: VictimRecipe, out: Path, data_root: Optional[str] = None,
                 progress: bool = True, download: bool = False) -> dict[str, Any]:
    """Train, evaluate and save a victim; returns its metadata (also written to ``out.json``).

    ``download`` lets torchvision fetch the dataset into the data root (``--download``).
    """
    t0 = time.perf_counter()
    check_device("device", recipe.device)
    prof = get_profile(recipe.dataset)
    root = resolve_data_root(data_root, command="victim train")
    device = torch.device(recipe.device)
    x, y = load_split(prof.name, root, train=True, download=download, command="victim train")
    tx, ty = load_split(prof.name, root, train=False, download=download, command="victim train")
    torch.manual_seed(recipe.seed)
    net = MODELS.get(recipe.arch)(prof.channels, prof.num_classes, prof.input_size)
    model = Normalized(net, prof.mean, prof.std).to(device)
    xf = x.to(device).float().div_(255.0)
    steps = math.ceil(recipe.epochs * x.shape[0] / recipe.batch_size)
    from tqdm.auto import tqdm

    g = torch.Generator().manual_seed(recipe.seed)
    x_oe = outlier_images(recipe.outlier_source, int(x.shape[0]), (prof.channels, *prof.input_size),
                          lambda name, train: load_split(name, root, train=train, download=download,
                                                         command="victim train"))
    snaps = EpochSnapshots(net, int(x.shape[0]), recipe.batch_size, steps) if recipe.snapshots else None

    def on_step(step: int) -> None:
        bar.update()
        if snaps is not None:
            snaps(step)

    with tqdm(total=steps, desc=f"victim {recipe.name}", unit="step", disable=not progress or None) as bar:
        if x_oe is not None:
            train_steps_oe(model, xf, y.to(device), x_oe.to(device), steps=steps, batch_size=recipe.batch_size,
                           optimizer=recipe.optimizer, generator=g, oe_lambda=recipe.oe_lambda, on_step=on_step)
        else:
            train_steps(model, xf, y.to(device), loss_fn=F.cross_entropy, steps=steps, batch_size=recipe.batch_size,
                        optimizer=recipe.optimizer, generator=g,
                        transform=crop_flip if recipe.augment == "crop_flip" else None, on_step=on_step)
    acc = _accuracy(model, tx, ty)
    sha = save_victim(out, net, recipe.arch, prof.num_classes, prof.channels, prof.input_size)
    meta = {"victim_id": recipe.name, "arch": recipe.arch, "dataset": prof.name, "test_accuracy": acc,
            "checkpoint": str(out), "sha256": sha, "recipe": asdict(recipe), "train_steps": steps,
            "train_seconds": time.perf_counter() - t0, "machine": machine_info(str(device)),
            "versions": library_versions()}  # the torch build: a victim's bytes depend on it
    if recipe.outlier_source != NO_OUTLIERS:
        meta["outlier_exposure"] = oe_record(recipe.outlier_source, recipe.oe_lambda, x_oe)
    if snaps is not None:
        meta["snapshots"] = snaps.save(snapshot_path(out), recipe.arch)
    atomic_write_json(out.with_suffix(".json"), meta)
    return meta


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy of ``model`` on uint8 images ``x`` (on the model's device)."""
    pred = eval_logits(model, x).argmax(1).cpu()
    return int((pred == y).sum()) / x.shape[0]
