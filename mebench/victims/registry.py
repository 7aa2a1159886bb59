"""``FORMATS``: how each ``victim.format`` is read (contract §4), one registered entry per format.

A format is a small class: capabilities as data (read by validation, config path resolution and
the run plan without importing torch) and hooks that load the model (``load``), check it before any
work (``check``) and describe it (``describe``). Built-ins: ``mebench``, ``torchscript``, ``onnx``,
``callable``; a third-party package adds one through the ``mebench.victim_formats`` entry-point
group with ``@register_format`` (see ``examples/mebench_example/``). This module imports no torch:
the hooks import ``mebench.victims.formats`` when called. See docs/extending/victim-format.md.
"""
# A format's capabilities: does ``victim.checkpoint_ref`` name a file, does the file carry the whole
# victim, which ``victim.layout`` values it takes, which optional package it needs.

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional

from mebench.registry import Registry

if TYPE_CHECKING:
    from torch import nn


class VictimFormat:
    """Base class of a victim format: set the class attributes, implement ``load``.

    ``load`` returns the model as the format gives it (taking the pixels the config's
    ``victim.normalizes`` says, returning what ``victim.outputs`` says) and the metadata only the
    format knows (a file's ``checkpoint_sha256``, a callable's name and package version); mebench
    adds the normalization, the probe batch, the log-probabilities and the common §4 fields.
    """

    name: ClassVar[str] = ""
    #: ``victim.checkpoint_ref`` is a file: resolved from the config's folder, required to exist
    #: and hashed into the run plan. ``False``: a reference such as ``"package.module:function"``.
    reads_file: ClassVar[bool] = True
    #: The file holds the whole victim (architecture, unnormalized network returning logits):
    #: ``victim.arch`` is allowed, ``victim.outputs``/``victim.normalizes`` are not.
    whole_victim: ClassVar[bool] = False
    #: ``victim.layout`` values the format takes.
    layouts: ClassVar[frozenset[str]] = frozenset({"nchw"})
    #: An optional package the format needs (an extra), or ``None``.
    requires: ClassVar[Optional[str]] = None

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
        """The model as the format gives it and the format's own metadata (raise ``VictimLoadError``)."""
        raise NotImplementedError

    @classmethod
    def check(cls, v: Any, num_classes: int) -> None:
        """Raise what building the victim would raise, before any work (default: build and probe it
        once per file version)."""
        check_by_building(v, num_classes)

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        """The ``victim`` config keys of the mebench checkpoint ``checkpoint`` in this format, its
        files written under ``folder`` (which is on ``sys.path`` while it is used): what the
        registry-driven contract tests (``contract_tests/test_format_registry.py``) run every format
        with. ``None`` (not declared) fails those tests."""
        return None

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The format's capabilities, as ``mebench list`` and the docs show them."""
        return {"name": cls.name, "reads_file": cls.reads_file, "whole_victim": cls.whole_victim,
                "layouts": sorted(cls.layouts), "requires": cls.requires, "doc": (cls.__doc__ or "").split("\n")[0]}


FORMATS: Registry[type[VictimFormat]] = Registry("victim format", "mebench.victim_formats")
#: ``victim.outputs`` and ``victim.layout`` values, whatever the format.
OUTPUTS = ("logits", "probs")
LAYOUTS = ("nchw", "nhwc")


def register_format(cls: type[VictimFormat]) -> type[VictimFormat]:
    """Class decorator: register a victim format under ``cls.name`` (duplicates raise)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} must set a non-empty 'name'")
    return FORMATS.register(cls.name)(cls)


def reads_file(name: str) -> bool:
    """Whether format ``name``'s ``victim.checkpoint_ref`` names a file; an unknown name counts as
    one (validation reports the unknown format by itself)."""
    return name not in FORMATS or FORMATS.get(name).reads_file


def build_victim(v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
    """The victim as a module taking [0, 1] pixels and returning logits, with its §4 metadata: the
    format's ``load``, then (unless it holds the whole victim) the config's normalization, a probe batch
    and log-probabilities (``mebench.victims.formats``)."""
    from mebench.models.registry import Normalized
    from mebench.victims.formats import LogProbs, probe

    fmt = FORMATS.get(v.format)
    if fmt.whole_victim:  # normalization, logits and metadata come with the file
        model, meta = fmt.load(v, num_classes)
        meta.update({"format": v.format, "input_layout": "nchw"})
        return model, meta
    net, meta = fmt.load(v, num_classes)
    model = net if v.normalizes else Normalized(net, v.normalization.mean, v.normalization.std)
    probe(model, v, num_classes)
    if v.outputs == "probs":
        model = LogProbs(model)
    meta = {
        "victim_id": v.victim_id, "format": v.format, "checkpoint_ref": str(v.checkpoint_ref),
        "input_size": list(v.input_size), "channels": v.channels, "input_layout": v.layout,
        "outputs": v.outputs, "normalizes_inside": v.normalizes,
        "normalization": None if v.normalizes else {"mean": list(v.normalization.mean),
                                                    "std": list(v.normalization.std)},
        "output_modes_supported": list(v.output_modes_supported), "arch": None,
        "temperature": v.temperature, "oracle_profile": v.oracle_profile, "zoo": v.zoo,
        "checkpoint_sha256": None, **meta,
    }
    return model, meta


@lru_cache(maxsize=16)
def _checked(v: Any, num_classes: int, stamp: tuple) -> None:
    build_victim(v, num_classes)


def check_victim(v: Any, num_classes: int) -> None:
    """Raise what ``build_victim`` would raise, before any work (the format's ``check`` hook)."""
    FORMATS.get(v.format).check(v, num_classes)


def check_by_building(v: Any, num_classes: int) -> None:
    """Build and probe the victim once per file version (``VictimFormat.check``'s default)."""
    stamp: tuple = ()
    if FORMATS.get(v.format).reads_file:
        st = Path(v.checkpoint_ref).stat()
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    _checked(v, num_classes, stamp)


@register_format
class MebenchFormat(VictimFormat):
    """A ``mebench victim train`` checkpoint: weights-only, with its architecture."""

    name = "mebench"
    whole_victim = True

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
        from mebench.victims.load import load_victim_module

        return load_victim_module(v, num_classes)

    @classmethod
    def check(cls, v: Any, num_classes: int) -> None:
        from mebench.victims.load import check_victim_checkpoint

        check_victim_checkpoint(v, num_classes)

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        return {"format": cls.name, "checkpoint_ref": str(checkpoint)}


@register_format
class TorchScriptFormat(VictimFormat):
    """A TorchScript file, read with ``torch.jit.load``."""

    name = "torchscript"

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
        from mebench.victims.formats import load_torchscript, sha256_of

        return load_torchscript(v.checkpoint_ref), {"checkpoint_sha256": sha256_of(v.checkpoint_ref)}

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        from mebench.victims.formats import export_victim

        return {"format": cls.name, "checkpoint_ref": str(export_victim(checkpoint, cls.name, folder / "victim.ts"))}


@register_format
class OnnxFormat(VictimFormat):
    """An ONNX file, run by onnxruntime on the CPU (the ``onnx`` extra)."""

    name = "onnx"
    requires = "onnxruntime"

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
        from mebench.victims.formats import OnnxVictim, sha256_of

        return OnnxVictim(v.checkpoint_ref), {"checkpoint_sha256": sha256_of(v.checkpoint_ref)}

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        from mebench.victims.formats import export_victim

        return {"format": cls.name, "checkpoint_ref": str(export_victim(checkpoint, cls.name, folder / "victim.onnx"))}


@register_format
class CallableFormat(VictimFormat):
    """``"package.module:function"``: called once, returns an ``nn.Module`` or a function of a batch."""

    name = "callable"
    reads_file = False
    layouts = frozenset({"nchw", "nhwc"})

    @classmethod
    def load(cls, v: Any, num_classes: int) -> tuple["nn.Module", dict[str, Any]]:
        from mebench.victims.formats import load_callable

        return load_callable(v.checkpoint_ref, v.layout)

    @classmethod
    def smoke_victim(cls, checkpoint: Path, folder: Path) -> Optional[Mapping[str, Any]]:
        # a module of its own per checkpoint: Python caches an imported module by its name
        import hashlib

        name = "mebench_smoke_victim_" + hashlib.sha256(str(checkpoint).encode()).hexdigest()[:12]
        (folder / f"{name}.py").write_text("from functools import partial\n\n"
                                           "from mebench.victims.formats import checkpoint_network\n\n"
                                           f"network = partial(checkpoint_network, {str(checkpoint)!r})\n")
        return {"format": cls.name, "checkpoint_ref": f"{name}:network"}


__all__ = ["FORMATS", "LAYOUTS", "OUTPUTS", "VictimFormat", "build_victim", "check_by_building", "check_victim",
           "reads_file", "register_format"]
