"""Every registered victim format answers like the mebench checkpoint it was made from (contract §4).

Parametrized straight from ``FORMATS`` (built-ins and entry-point plugins alike): each format
writes the tiny SYNTH victim in its own form (``VictimFormat.smoke_victim``), validation accepts
the config, and the victim it builds answers like the checkpoint behind the same oracle. A
format whose optional package is missing (``requires``, e.g. onnxruntime) skips with the reason;
one that declares no smoke victim fails with a line saying what to add.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Optional

import pytest
import torch

from mebench.errors import ConfigError
from mebench.config.validation import validate
from mebench.victims.registry import build_victim
from mebench.victims.registry import FORMATS, VictimFormat, reads_file, register_format
from mebench.victims.wrapper import FrozenVictim

NAMES = FORMATS.names()


def smoke_section(fmt: type[VictimFormat], checkpoint, folder) -> dict[str, Any]:
    """The format's smoke victim config keys; a missing declaration is one line."""
    section = fmt.smoke_victim(checkpoint, folder)
    if section is None:
        raise AssertionError(f"victim format '{fmt.name}' ({fmt.__module__}.{fmt.__qualname__}) declares no "
                             "smoke_victim: implement the classmethod smoke_victim(checkpoint, folder) "
                             "(see docs/extending/victim-format.md)")
    return dict(section)


def probs(cfg, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    model, meta = build_victim(cfg.victim, 4)
    return FrozenVictim(model, "cpu").probs(x), meta


def test_the_registry_holds_the_built_in_formats():
    assert {"mebench", "torchscript", "onnx", "callable"} <= set(NAMES)
    assert [n for n in NAMES if not reads_file(n)] == ["callable"] or "callable" not in NAMES


# contract 4: whatever the format, the victim answers like the checkpoint behind the same oracle
# (bit for bit where the format runs the same torch network, to float tolerance otherwise) and
# the metadata names the format and what identifies the model
@pytest.mark.parametrize("name", NAMES)
def test_answers_like_the_checkpoint(name, make_cfg, synth_victim_path, tmp_path, monkeypatch):
    fmt = FORMATS.get(name)
    if fmt.requires and importlib.util.find_spec(fmt.requires) is None:
        pytest.skip(f"victim format {name} needs {fmt.requires}, which is not installed")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = make_cfg(victim=smoke_section(fmt, synth_victim_path, tmp_path))
    validate(cfg)
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    ref, _ = probs(make_cfg(), x)
    got, meta = probs(cfg, x)
    assert meta["format"] == name
    assert torch.allclose(got, ref, atol=1e-5)
    if name in ("mebench", "torchscript", "callable"):
        assert torch.equal(got, ref)
    identity = meta.get("checkpoint_sha256") if fmt.reads_file else meta.get("callable")
    assert isinstance(identity, str) and identity


@pytest.mark.parametrize("name", NAMES)
def test_describes_itself(name):
    info = FORMATS.get(name).describe()
    assert info["name"] == name and info["layouts"] and set(info["layouts"]) <= {"nchw", "nhwc"} and info["doc"]


def test_a_format_without_a_smoke_victim_fails_with_a_clear_message(tmp_path):
    class Undeclared(VictimFormat):
        name = "undeclared_smoke_test_format"

    register_format(Undeclared)
    try:
        with pytest.raises(AssertionError, match=r"victim format 'undeclared_smoke_test_format' .* declares no "
                                                 r"smoke_victim"):
            smoke_section(FORMATS.get("undeclared_smoke_test_format"), tmp_path / "x.pt", tmp_path)
    finally:
        FORMATS.unregister("undeclared_smoke_test_format")


# contract 15.2: validation reads a format's capabilities, not its name: a registered format that
# takes a reference (not a file) and NHWC arrays is accepted as such; an unknown one names the valid ones
def test_validation_reads_the_capabilities(make_cfg, synth_victim_path, tmp_path, monkeypatch):
    class ByReference(VictimFormat):
        """A test format: the callable format under another name."""

        name = "by_reference_test_format"
        reads_file = False
        layouts = frozenset({"nchw", "nhwc"})

        @classmethod
        def load(cls, v: Any, num_classes: int) -> tuple[Any, dict[str, Any]]:
            return FORMATS.get("callable").load(v, num_classes)

        @classmethod
        def smoke_victim(cls, checkpoint, folder) -> Optional[dict[str, Any]]:
            return {**FORMATS.get("callable").smoke_victim(checkpoint, folder), "format": cls.name}

    register_format(ByReference)
    try:
        monkeypatch.syspath_prepend(str(tmp_path))
        section = smoke_section(ByReference, synth_victim_path, tmp_path)
        validate(make_cfg(victim=section))  # no file to find: the reference is imported
        validate(make_cfg(victim={**section, "layout": "nhwc"}), check_files=False)
        with pytest.raises(ConfigError) as err:
            validate(make_cfg(victim={"format": "by_reference_test_formt"}), check_files=False)
        assert err.value.key == "victim.format" and "by_reference_test_format" in str(err.value)
    finally:
        FORMATS.unregister("by_reference_test_format")
