"""Victim checkpoints: saving, loading with ``weights_only=True`` and metadata (contract §4).

A mebench victim checkpoint is a plain dict holding the *unnormalized* network's weights and its
architecture (the layout is below); the normalization comes from the run config. ``PATH.json``
beside it holds its metadata (test accuracy, recipe). Every way a file can fail to be a victim is
one mebench error naming the file (``VictimLoadError`` or ``ConfigError``). See docs/guide/victims.md.
"""
# A mebench victim checkpoint is a plain dict (safe to load with
# ``weights_only=True``)::
#
#     {"format": "mebench-victim/1", "arch": "lenet5", "num_classes": 10,
#      "channels": 1, "input_size": [28, 28], "state_dict": {...}}
#
# holding the *unnormalized* network's weights; the normalization comes from the
# run config. A bare ``state_dict`` also loads when ``victim.arch`` is set.
# ``PATH.json`` beside the checkpoint holds its metadata (test accuracy, recipe).
#
# Every way a file can fail to be a victim is one mebench error naming the file:
# ``VictimLoadError`` for a damaged or foreign file, ``ConfigError`` where the
# config points at the wrong thing (a substitute's weights, a bare state_dict
# without ``victim.arch``, an ``arch`` the weights do not fit).

from __future__ import annotations

import hashlib
import json
import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import nn

from mebench.errors import ConfigError, VictimLoadError
from mebench.models.registry import MODELS, Normalized

FORMAT = "mebench-victim/1"
_FIELDS = {"arch": (str, "a string"), "num_classes": (int, "an integer"), "channels": (int, "an integer"),
           "input_size": ((list, tuple), "a list"), "state_dict": (Mapping, "a mapping")}
_TRAIN_BUILD = "train a victim with `mebench victim train RECIPE`"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def save_victim(path: str | Path, net: nn.Module, arch: str, num_classes: int, channels: int,
                input_size: tuple[int, int]) -> str:
    """Write a victim checkpoint atomically; returns its sha256."""
    from mebench.run.artifacts import atomic_save_torch

    payload = {"format": FORMAT, "arch": arch, "num_classes": num_classes, "channels": channels,
               "input_size": list(input_size),
               "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()}}
    atomic_save_torch(payload, Path(path))
    return sha256_file(path)


def read_checkpoint(path: Path) -> Any:
    """``torch.load(weights_only=True)``; any failure is one ``VictimLoadError`` naming the file.

    torch's own message advises retrying with ``weights_only=False`` (arbitrary
    code execution); it is replaced by what the file looks like.
    """
    try:
        size = path.stat().st_size
    except OSError as e:
        raise VictimLoadError(path, f"cannot be read: {e.strerror or e}") from None
    if size == 0:
        raise VictimLoadError(path, "is empty (0 bytes): not a mebench victim checkpoint, or an interrupted copy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the error below says it all
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for foreign bytes; all mean "not loadable"
            raise VictimLoadError(path, _why_unloadable(path, e)) from None


#: torch's weights-only loader refusing a global it does not allow (torch 2.4-2.15 wording) ...
_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
#: ... and one from a module it blocks outright (``os``/``posix``, ``subprocess``, ``sys``; torch 2.5-2.15
#: wording "Trying to load unsupported GLOBAL posix.system whose module posix is blocked.").
_BLOCKED_GLOBAL = re.compile(r"unsupported GLOBAL ([\w.]+) whose module ([\w.]+) is blocked")
#: torch before 2.5 words both refusals "Unsupported class X"; X's module then tells a blocked one apart.
_UNSUPPORTED_CLASS = re.compile(r"Unsupported class ([\w.]+)")
BLOCKED_MODULES = frozenset({"os", "posix", "nt", "sys", "subprocess", "builtins", "shutil", "socket"})


def _why_unloadable(path: Path, error: Exception) -> str:
    """What a file torch could not load holds, in words; a refusal by the weights-only loader is
    never called damage (the file may be whole, and may have been built to run code when loaded)."""
    text = str(error)
    blocked = _BLOCKED_GLOBAL.search(text)
    old_words = _UNSUPPORTED_CLASS.search(text)
    if blocked is None and old_words and old_words.group(1).rpartition(".")[0] in BLOCKED_MODULES:
        blocked = re.match(r"(([\w.]+)\.\w+)$", old_words.group(1))
    if blocked:
        return (f"refers to {blocked.group(1)}, a global from a module the weights-only loader forbids "
                f"({blocked.group(2)}): a pickle that would run code when loaded, not weights; it was not loaded. "
                f"Use a checkpoint from a source you trust, or {_TRAIN_BUILD}")
    pickled = _UNSUPPORTED_GLOBAL.search(text) or old_words
    if pickled:
        return (f"holds a pickled Python object ({pickled.group(1)}), e.g. a whole model saved with "
                "torch.save(model); mebench loads weights only: save model.state_dict() and set victim.arch, "
                f"or {_TRAIN_BUILD}")
    if "Weights only load failed" in text:  # another refusal by the weights-only unpickler
        return (f"holds something the weights-only loader refuses ({_refusal_detail(text)}); mebench loads "
                f"tensors and plain containers only: save model.state_dict() and set victim.arch, or {_TRAIN_BUILD}")
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    what = "a truncated or corrupt torch archive" if zipped else "not a file written by torch.save"
    return f"is not a mebench victim checkpoint or is damaged ({what}); re-copy it or {_TRAIN_BUILD}"


def _refusal_detail(text: str) -> str:
    """The weights-only unpickler's own reason, without torch's advice around it."""
    found = re.search(r"WeightsUnpickler error: ([^\n]+)", text)
    lines = [found.group(1)] if found else [ln.strip() for ln in text.splitlines()[1:]
                                             if ln.strip() and not ln.strip().startswith("Check the documentation")]
    return (lines[0] if lines else "no reason given").split(" Please use")[0].rstrip(".")


def victim_weights(victim_cfg: Any, num_classes: int) -> tuple[str, Mapping[str, torch.Tensor], bool]:
    """The architecture name, the state_dict at ``victim.checkpoint_ref`` and whether it was bare.

    Checks what the file holds against the config (arch, channels, input size,
    ``num_classes`` of the dataset) and raises one mebench error otherwise.
    """
    path = Path(victim_cfg.checkpoint_ref)
    obj = read_checkpoint(path)
    if not isinstance(obj, Mapping):
        raise VictimLoadError(path, f"is not a mebench victim checkpoint: it holds a {type(obj).__name__}")
    if "format" in obj:
        return _mebench_weights(path, obj, victim_cfg, num_classes)
    if obj and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        return _bare_weights(path, obj, victim_cfg, num_classes)
    keys = ", ".join(repr(k) for k in list(obj)[:6]) or "none"
    nested = next((k for k in ("state_dict", "model_state_dict", "model") if k in obj), None)
    hint = f": save its {nested!r} entry alone and set victim.arch" if nested else f"; {_TRAIN_BUILD}"
    raise VictimLoadError(path, f"is not a mebench victim checkpoint nor a state_dict (a dict with keys {keys}){hint}")


def _mebench_weights(path: Path, obj: Mapping, victim_cfg: Any, num_classes: int) -> tuple[str, Mapping, bool]:
    if obj["format"] != FORMAT:
        raise VictimLoadError(path, f"has format {obj['format']!r}; this mebench reads {FORMAT!r}")
    for key, (kind, words) in _FIELDS.items():
        if not isinstance(obj.get(key), kind):
            raise VictimLoadError(path, f"is damaged: its {FORMAT} field {key!r} is missing or not {words}")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj["state_dict"].items()):
        raise VictimLoadError(path, f"is damaged: its {FORMAT} state_dict holds something other than tensors")
    arch = obj["arch"]
    if victim_cfg.arch is not None and victim_cfg.arch != arch:
        raise ConfigError("victim.arch", victim_cfg.arch,
                          f"does not match the checkpoint '{path}', which holds a '{arch}' victim: "
                          f"set victim.arch: {arch} or remove the key")
    held = (obj["channels"], tuple(obj["input_size"]), obj["num_classes"])
    wanted = (victim_cfg.channels, tuple(victim_cfg.input_size), num_classes)
    if held != wanted:
        raise ConfigError("victim.checkpoint_ref", str(path),
                          f"holds a victim for {_shape_words(*held)} but this config's dataset has "
                          f"{_shape_words(*wanted)}: use a victim trained on this dataset")
    if arch not in MODELS:
        raise VictimLoadError(path, f"holds a '{arch}' victim but no model '{arch}' is registered "
                                    "(is the package that provides it installed?)")
    return arch, obj["state_dict"], False


def _bare_weights(path: Path, state: Mapping, victim_cfg: Any, num_classes: int) -> tuple[str, Mapping, bool]:
    if {"mean", "std"} <= set(state) and all(k in ("mean", "std") or k.startswith("net.") for k in state):
        raise ConfigError("victim.checkpoint_ref", str(path),
                          "is a substitute's weights (the final_substitute.ckpt that `mebench run` writes in each "
                          "seed folder), not a victim checkpoint: point victim.checkpoint_ref at a victim's .pt, "
                          f"or {_TRAIN_BUILD}")
    if victim_cfg.arch is None:
        fits = _archs_fitting(state, victim_cfg, num_classes)
        guess = f" (its weights fit: {', '.join(fits)})" if fits else ""
        raise ConfigError("victim.arch", None,
                          f"the checkpoint '{path}' is a bare state_dict: set victim.arch to its architecture{guess}")
    if victim_cfg.arch not in MODELS:  # validate() names this first; kept for direct callers
        raise ConfigError("victim.arch", victim_cfg.arch, f"unknown model; valid: {', '.join(MODELS.names())}")
    return victim_cfg.arch, state, True


def _shape_words(channels: int, input_size: tuple, num_classes: int) -> str:
    return f"{channels}x{'x'.join(str(s) for s in input_size)} images and {num_classes} classes"


def _shapes(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items()}


def _archs_fitting(state: Mapping, victim_cfg: Any, num_classes: int) -> list[str]:
    """Registered models whose state_dict has exactly these names and shapes (built on the meta device)."""
    want, fits = _shapes(state), []
    for name in MODELS.names():
        try:
            with torch.device("meta"):
                net = MODELS.get(name)(victim_cfg.channels, num_classes, tuple(victim_cfg.input_size))
        except Exception:  # a plugin model that cannot take this shape simply does not fit
            continue
        if _shapes(net.state_dict()) == want:
            fits.append(name)
    return fits


def _mismatch_words(net: nn.Module, state: Mapping) -> str:
    want, got = _shapes(net.state_dict()), _shapes(state)
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    reshaped = [k for k in want if k in got and want[k] != got[k]]
    first = (missing or extra or reshaped or ["?"])[0]
    return (f"{len(missing)} missing, {len(extra)} unexpected and {len(reshaped)} mis-shaped tensors, "
            f"e.g. '{first}'")


def _build(arch: str, state: Mapping, victim_cfg: Any, num_classes: int, bare: bool) -> nn.Module:
    path = victim_cfg.checkpoint_ref
    net = MODELS.get(arch)(victim_cfg.channels, num_classes, tuple(victim_cfg.input_size))
    try:
        net.load_state_dict(state)
    except RuntimeError:
        words = _mismatch_words(net, state)
        if not bare:
            raise VictimLoadError(path, f"is damaged or from another mebench version: its weights do not fit "
                                        f"the '{arch}' model ({words})") from None
        fits = [a for a in _archs_fitting(state, victim_cfg, num_classes) if a != arch]
        where = f"they fit {', '.join(fits)}" if fits else "they fit no registered model for this dataset"
        raise ConfigError("victim.arch", arch, f"does not match the weights in '{path}' ({words}); {where}") from None
    return net


def victim_network(victim_cfg: Any, num_classes: int) -> tuple[nn.Module, str]:
    """The unnormalized victim network with its weights loaded, and its architecture name. A weight
    or buffer that is not finite (NaN, inf) is refused here, naming the tensor: such a victim would
    answer NaN and the run would blame the substitute's training."""
    arch, state, bare = victim_weights(victim_cfg, num_classes)
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise VictimLoadError(victim_cfg.checkpoint_ref, f"is damaged: its weights {name!r} hold NaN or "
                                                             "infinite values (retrain the victim)")
    return _build(arch, state, victim_cfg, num_classes, bare), arch


@lru_cache(maxsize=16)
def _checked(victim_cfg: Any, num_classes: int, path: str, stamp: tuple[int, ...]) -> str:
    return victim_network(victim_cfg, num_classes)[1]


def check_victim_checkpoint(victim_cfg: Any, num_classes: int) -> str:
    """Raise what ``load_victim_module`` would raise, before any work starts; returns the arch.

    Used by ``validate(cfg, check_files=True)``; remembered per file version, so a
    benchmark grid with hundreds of cells reads each victim once.
    """
    path = Path(victim_cfg.checkpoint_ref)
    st = path.stat()
    return _checked(victim_cfg, num_classes, str(path.resolve()), (st.st_ino, st.st_mtime_ns, st.st_size))


def load_victim_module(victim_cfg: Any, num_classes: int) -> tuple[nn.Module, dict[str, Any]]:
    """Build the victim network from ``victim.checkpoint_ref`` (weights only) with normalization.

    Returns the ``Normalized`` model (on CPU) and the §4 metadata.
    """
    net, arch = victim_network(victim_cfg, num_classes)
    model = Normalized(net, victim_cfg.normalization.mean, victim_cfg.normalization.std)
    return model, victim_metadata(victim_cfg, arch, Path(victim_cfg.checkpoint_ref))


def victim_metadata(victim_cfg: Any, arch: str, path: Path) -> dict[str, Any]:
    """Every §4 field, plus the checkpoint hash and what ``PATH.json`` says about the victim."""
    side = path.with_suffix(".json")
    try:
        extra = json.loads(side.read_text()) if side.is_file() else {}
    except (OSError, ValueError):  # a damaged side file loses the recorded accuracy, not the run
        extra = {}
    if not isinstance(extra, dict):
        extra = {}
    return {
        "victim_id": victim_cfg.victim_id,
        "input_size": list(victim_cfg.input_size),
        "channels": victim_cfg.channels,
        "normalization": {"mean": list(victim_cfg.normalization.mean), "std": list(victim_cfg.normalization.std)},
        "output_modes_supported": list(victim_cfg.output_modes_supported),
        "checkpoint_ref": str(victim_cfg.checkpoint_ref),
        "checkpoint_sha256": sha256_file(path),
        "arch": arch,
        "temperature": victim_cfg.temperature,
        "oracle_profile": victim_cfg.oracle_profile,
        "test_accuracy": extra.get("test_accuracy"),
        "recipe": extra.get("recipe"),
        "zoo": getattr(victim_cfg, "zoo", None),
        # the outlier set of an Outlier-Exposure victim (mebench.victims.outlier_exposure); None for a plain one
        "outlier_exposure": extra.get("outlier_exposure"),
        "built_with": built_with(extra),
    }


def built_with(side: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """Where a victim's build was trained, from its ``PATH.json`` (``mebench victim train`` writes
    ``versions`` and ``machine``): the torch build, CPU model, device and threads, since a victim's
    bytes depend on them; ``None`` when the side file records neither (an older or imported victim)."""
    versions, machine = side.get("versions"), side.get("machine")
    versions = versions if isinstance(versions, Mapping) else {}
    machine = machine if isinstance(machine, Mapping) else {}
    if not versions.get("torch") and not machine:
        return None
    return {"torch": versions.get("torch"), "cpu_model": machine.get("cpu_model"),
            "device": machine.get("device"), "torch_threads": machine.get("torch_threads")}
