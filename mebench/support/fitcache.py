"""Models that take minutes to fit and do not depend on the run seed, fitted once per node.

The members of transferability's independent reference ensemble and a defense's own models are
kept on disk (``mebench.support.cachedir``), so other processes, Ray tasks and later runs on the
node read them instead of fitting again. ``load_or_fit`` is the one protocol (below): concurrent
tasks that miss the same entry fit it once, and a code change never reuses an entry.
See docs/guide/configs.md (the cache folder).
"""
# Two kinds of model are like that: the members of transferability's independent reference
# ensemble (``mebench.probes.transferability.refcache``) and a defense's own models (``Defense.fit``, e.g. Adaptive
# Misinformation's misinformation model). A grid process fits each once in memory; this module keeps
# the weights on disk (``mebench.support.cachedir``) so that other processes, Ray tasks and later runs on the
# node read them instead of fitting again.
#
# ``load_or_fit`` is the one protocol: read the entry when it loads; else take the entry's lock
# (``cachedir.entry_lock``), read again (another process may have fitted it while this one waited),
# and only then fit and write the entry atomically. So concurrent tasks that miss the same entry fit
# it once and the others wait and load it; an entry that cannot be read, or does not fit the model,
# is fitted again and rewritten. An entry holds ``{"weights": state_dict, "attrs": JSON}``, read with
# ``torch.load(weights_only=True)``; ``attrs`` carries the fitted model's JSON-able attributes (a
# defense's ``fit_attrs``, e.g. the outlier record a summary reports). The key, beside the entry as
# ``.json``, names everything the weights depend on, code identity included: a code change never
# reuses an entry.

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

from mebench.run import artifacts
from mebench.support import cachedir, identity

#: Defense fits (``fit_defense``); reference members live under ``refcache.KIND``.
DEFENSE_KIND = "defense-fit"


def _load(path: Path, model: nn.Module, attrs: Sequence[str]) -> bool:
    """Load ``path`` into ``model`` (weights and ``attrs``); False when it cannot be read or does not fit."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["weights"])
        values = json.loads(state.get("attrs") or "{}")
        if set(attrs) - set(values):
            return False
    except Exception:  # noqa: BLE001 - any damage means: fit again
        return False
    for name in attrs:
        setattr(model, name, values[name])
    return True


def _store(path: Path, key: dict[str, Any], model: nn.Module, attrs: Sequence[str]) -> None:
    weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    values = json.dumps({name: getattr(model, name) for name in attrs if hasattr(model, name)}, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    artifacts.atomic_save_torch({"weights": weights, "attrs": values}, path)
    artifacts.atomic_write_text(path.with_suffix(".json"), json.dumps(key, sort_keys=True, indent=1))


def load_or_fit(path: Path, key: dict[str, Any], skeleton: Callable[[], nn.Module], fit: Callable[[], nn.Module],
                attrs: Sequence[str] = ()) -> tuple[nn.Module, bool]:
    """The model of entry ``path`` and whether it came from the disk: ``skeleton()`` (a fresh model of
    the fitted one's shape) loaded from the entry, or ``fit()`` run once under the entry's lock and
    stored. Callers keep their in-process caches; this is the node-wide one."""
    model = skeleton()
    if path.is_file() and _load(path, model, attrs):  # the common case: no lock needed to read
        return model, True
    with cachedir.entry_lock(path):
        if path.is_file() and _load(path, model, attrs):  # fitted by another process while we waited
            return model, True
        fitted = fit()
        _store(path, key, fitted, attrs)
    return fitted, False


def defense_key(cls: Any, params: Any, ctx: Any, identity_of: dict[str, Any]) -> Optional[dict[str, Any]]:
    """What a defense's fitted models depend on: the defense and its ``fit_key`` (None: it opts
    out), the victim and data (``identity_of``: dataset, victim file hash, train-split fingerprint),
    the input shape, classes, device, torch threads and code identity."""
    part = cls.fit_key(params)
    if part is None:
        return None
    return {"defense": cls.name, "fit": part, **identity_of, "input_shape": list(ctx.input_shape),
            "num_classes": int(ctx.num_classes), "device": str(torch.device(ctx.device)),
            "threads": torch.get_num_threads(), "code": identity.code_identity()}


def fit_defense(cls: Any, params: Any, ctx: Any, identity_of: dict[str, Any]) -> Any:
    """``cls.fit(params, ctx)`` through the node-wide cache when the defense declares a ``fit_key``
    (its fit returns a model of ``ctx.make_model()``'s shape). A load builds the skeleton under
    ``torch.random.fork_rng`` so that reading the cache leaves the global RNG as it found it."""
    key = defense_key(cls, params, ctx, identity_of)
    if key is None:
        return cls.fit(params, ctx)

    def skeleton() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            return ctx.make_model()

    def fit() -> nn.Module:
        return cls.fit(params, ctx)

    model, _ = load_or_fit(cachedir.entry_path(DEFENSE_KIND, key, ".pt"), key, skeleton, fit, cls.fit_attrs)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()
