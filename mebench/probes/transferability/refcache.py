"""The ``independent`` reference of transferability as an ensemble, trained once per machine.

One independent model's transfer depends strongly on its recipe and seed (issue 44 found a
threefold difference on MNIST between Track A's recipe and the victim's own), so the reference
is an ensemble read as mean and spread (``reference_specs``):
See docs/transferability.md.
"""
# - member 0: Track A's recipe over the whole training split with its true labels, from
#   ``substitute.init_seed`` (the single reference mebench used before);
# - member 1: the victim's own recipe (``PATH.json``'s ``recipe``: optimizer, batch size, epochs)
#   for the substitute's architecture, from the recipe's seed + 1 (never the victim's own
#   initialization); when the victim records no usable recipe, Track A's recipe from another seed;
# - members 2…: Track A's recipe from seeds derived from ``init_seed`` (``derive_seed``).
#
# Each model costs minutes (S(N) steps over the whole training split) and does not depend on the run
# seed, so its weights are kept in the machine-wide cache (``mebench.support.cachedir``, kind
# ``reference``), keyed by the training spec, device, torch threads, a fingerprint of the data and
# the code identity: a code change never reuses an entry. Entries are written atomically and read
# with ``torch.load(weights_only=True)``; an entry that cannot be read or does not fit the model is
# trained again and rewritten, never trusted. Processes that miss the same entry at once (Ray tasks
# on one node) train it once: the others wait on the entry's lock and load it (``mebench.support.fitcache``).

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from mebench.support import cachedir, fitcache, identity
from mebench.support.seeding import derive_seed
from mebench.training.track_a import TrackASpec, TrackATrainer

KIND = "reference"


def data_fingerprint(x: torch.Tensor, y: torch.Tensor) -> str:
    """A digest of the training split (shape, all labels, all pixels): the data a reference learns."""
    h = hashlib.sha256(repr((tuple(x.shape), str(x.dtype))).encode())
    h.update(x.contiguous().cpu().numpy().tobytes())
    h.update(y.contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:32]


def cache_key(spec: TrackASpec, device: torch.device | str, threads: int, fingerprint: str,
              code: Optional[str] = None) -> dict[str, Any]:
    """Everything a reference's weights depend on (``code`` defaults to this code's identity)."""
    return {"spec": repr(spec), "device": str(torch.device(device)), "threads": int(threads),
            "data": fingerprint, "code": identity.code_identity() if code is None else code}


def entry(key: dict[str, Any]) -> Path:
    return cachedir.entry_path(KIND, key, ".pt")


def is_cached(spec: TrackASpec, device: torch.device | str, fingerprint: str, threads: Optional[int] = None,
              code: Optional[str] = None) -> bool:
    """Whether a reference trained by ``spec`` on data ``fingerprint`` (``data_fingerprint``) is on
    disk for this device, thread count (default: torch's current) and code identity. Existence
    only: a damaged entry still reads as cached here and is retrained when loaded."""
    threads = torch.get_num_threads() if threads is None else threads
    return entry(cache_key(spec, device, threads, fingerprint, code)).is_file()


def load_or_train(spec: TrackASpec, device: torch.device | str, x: torch.Tensor, y: torch.Tensor,
                  fingerprint: Optional[str] = None) -> nn.Module:
    """The reference trained by ``spec`` on (x uint8, y): from the cache when a readable entry
    exists, else trained by ``TrackATrainer.train`` on x/255 and stored. Concurrent processes on a
    node that miss the same entry train it once (``fitcache.load_or_fit``: one trains under the
    entry's lock, the others wait and load)."""
    trainer = TrackATrainer(spec, device)
    key = cache_key(spec, device, torch.get_num_threads(), fingerprint or data_fingerprint(x, y))
    model, _ = fitcache.load_or_fit(entry(key), key, trainer.fresh_model,
                                    lambda: trainer.train(x.float().div(255.0), y))
    return model.eval()


def victim_recipe(checkpoint_ref: str) -> Optional[dict[str, Any]]:
    """The ``recipe`` of the victim's ``PATH.json``, if it records one."""
    side = Path(checkpoint_ref).with_suffix(".json")
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    recipe = meta.get("recipe") if isinstance(meta, dict) else None
    return recipe if isinstance(recipe, dict) else None


def victim_recipe_spec(base: TrackASpec, recipe: Optional[dict[str, Any]], train_size: int) -> Optional[TrackASpec]:
    """``base`` (the substitute's architecture) trained by the victim's recipe from its seed + 1:
    the recipe's optimizer and batch size, ceil(epochs · N / batch) steps. None when the recipe
    is missing, augments, or records no seed or epochs."""
    from mebench.config import build_dataclass
    from mebench.training.loop import OptimizerSpec

    if not recipe or recipe.get("augment", "none") != "none":
        return None
    seed, epochs, batch = recipe.get("seed"), recipe.get("epochs"), int(recipe.get("batch_size", 128))
    if not isinstance(seed, int) or not isinstance(epochs, (int, float)) or epochs <= 0 or batch <= 0:
        return None
    try:
        optimizer = build_dataclass(OptimizerSpec, recipe.get("optimizer") or {}, "recipe.optimizer")
    except Exception:  # noqa: BLE001 - an unreadable recipe: no such member
        return None
    c = math.ceil(epochs * train_size / batch) / train_size  # S(N) = ceil(c·N) = the recipe's steps
    return dataclasses.replace(base, init_seed=seed + 1, optimizer=optimizer, batch_size=batch,
                               steps_coeff_c=c, output_mode="hard_top1")


def reference_specs(base: TrackASpec, k: int, checkpoint_ref: Optional[str], train_size: int,
                    victim_seed: Optional[int] = None) -> list[TrackASpec]:
    """The ``k`` members' training specs (module docstring), true labels (``hard_top1``)."""
    base = dataclasses.replace(base, output_mode="hard_top1")
    recipe = victim_recipe(checkpoint_ref) if checkpoint_ref else None
    specs = [base]
    own = victim_recipe_spec(base, recipe, train_size)
    if own is not None:
        specs.append(own)
    avoid = {base.init_seed, victim_seed, recipe.get("seed") if recipe else None}
    i = 0
    while len(specs) < k:
        s = derive_seed(base.init_seed, f"reference/{i}") % (2**31)
        i += 1
        if s not in avoid:
            specs.append(dataclasses.replace(base, init_seed=s))
    return specs[:k]


def reference_ensemble(base: TrackASpec, k: int, checkpoint_ref: Optional[str], device: torch.device | str,
                       x: torch.Tensor, y: torch.Tensor, index: Optional[dict[str, Any]] = None) -> list[nn.Module]:
    """The ``k`` reference models, each from the cache or trained once (``load_or_train``); with an
    ``index`` key (``ensemble_key``), the ensemble's entries are recorded under it for estimates."""
    fp = data_fingerprint(x, y)
    specs = reference_specs(base, k, checkpoint_ref, len(x))
    models = [load_or_train(spec, device, x, y, fp) for spec in specs]
    if index is not None:
        cachedir.write_index(INDEX_KIND, index, [entry(cache_key(spec, device, torch.get_num_threads(), fp))
                                                 for spec in specs])
    return models


#: Index entries: which cached models make up the ensemble of a run plan (``ensemble_key``), so a
#: cost estimate can tell, without loading any data, that a run will not train them.
INDEX_KIND = "reference-index"


def ensemble_key(plan: Any, k: int, device: torch.device | str, threads: int) -> dict[str, Any]:
    """What a plan's reference ensemble depends on, as the plan states it: dataset, victim file hash,
    Track A recipe, ensemble size, device, thread count and code identity (not the data's bytes:
    an estimate does not read the data; ``cache_key`` does, for the models themselves)."""
    from mebench.support.serial import jsonable

    return {"dataset": plan.dataset, "victim_sha256": plan.victim.checkpoint_sha256,
            "track_a": jsonable(dataclasses.asdict(plan.track_a)), "k": int(k), "device": str(torch.device(device)),
            "threads": int(threads), "code": identity.code_identity()}


def ensemble_cached(key: dict[str, Any]) -> bool:
    """Whether a run with this ``ensemble_key`` found (or left) every member in the cache."""
    return cachedir.index_complete(INDEX_KIND, key)


def missing_members(base: TrackASpec, k: int, checkpoint_ref: Optional[str], device: torch.device | str,
                    x: torch.Tensor, y: torch.Tensor, threads: Optional[int] = None) -> list[TrackASpec]:
    """The specs of the ensemble members a run would have to train (not in the cache): what a cost
    estimate charges (each costs ``TrackATrainer(spec, device).steps(len(x))`` training steps)."""
    fp = data_fingerprint(x, y)
    return [s for s in reference_specs(base, k, checkpoint_ref, len(x))
            if not is_cached(s, device, fp, threads)]
