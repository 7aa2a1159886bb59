"""Any model as a victim: mebench checkpoints, TorchScript, ONNX and Python callables (contract §4).

``victim.format`` names an entry of ``FORMATS`` (``mebench.victims.registry``, where a third-party
format registers too), which says how ``victim.checkpoint_ref`` is read; ``victim.outputs``,
``victim.layout`` and ``victim.normalizes`` say how to call it (below). Whatever the format, the
victim sits behind the same frozen, budgeted oracle, and it is probed on a batch before any work:
every way it can fail is one ``VictimLoadError`` line. See docs/extending/victim-format.md and
docs/guide/victims.md.
"""
# ``victim.format`` names an entry of ``FORMATS`` (``mebench.victims.registry``, where a third-party
# format registers too), which says how ``victim.checkpoint_ref`` is read; the built-ins:
#
# - ``mebench``: a mebench victim checkpoint (``mebench.victims.load``), the only format that
#   carries an architecture;
# - ``torchscript``: a file for ``torch.jit.load``;
# - ``onnx``: a file run by onnxruntime (the optional extra ``[onnx]``);
# - ``callable``: ``"package.module:function"``; the function, called with no arguments, returns
#   an ``nn.Module`` or a function from a float batch to outputs.
#
# ``victim.outputs`` says whether the model returns ``logits`` or ``probs`` (probabilities are
# turned into log-probabilities, whose softmax is the same vector); ``victim.layout`` whether a
# callable takes NCHW torch tensors (``nchw``) or NHWC numpy arrays (``nhwc``);
# ``victim.normalizes`` whether the model normalizes its input itself (then it gets the [0, 1]
# pixels; otherwise mebench applies ``victim.normalization`` first, as for its own checkpoints).
# Whatever the format, the victim sits behind the same frozen, budgeted oracle.
#
# Before any work the model is probed on a batch of the profile's input shape: a file that is not
# the declared format, a callable that cannot be imported, outputs of the wrong shape, with NaN, or
# probabilities that do not sum to 1 are one ``VictimLoadError`` line. On start the engine measures
# the victim's throughput (``measure_throughput``) and warns below ``victim.throughput_floor``.

from __future__ import annotations

import importlib
import time
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from mebench.errors import ConfigError, VictimLoadError
from mebench.support.extras import missing_message
from mebench.models.registry import Normalized

PROBE_BATCH = 8
PROB_TOLERANCE = 1e-3


class FunctionVictim(nn.Module):
    """A plain function from a batch to outputs, as a module (``layout`` nhwc: numpy in and out)."""

    def __init__(self, fn: Callable[[Any], Any], layout: str) -> None:
        super().__init__()
        self.fn, self.layout = fn, layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arg: Any = x
        if self.layout == "nhwc":
            arg = np.ascontiguousarray(x.detach().permute(0, 2, 3, 1).cpu().numpy())
        out = self.fn(arg)
        return torch.as_tensor(np.asarray(out) if not isinstance(out, torch.Tensor) else out,
                               dtype=torch.float32).to(x.device)


class OnnxVictim(nn.Module):
    """An onnxruntime session as a module (CPU execution; NCHW float32 in, one output used)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        try:
            import onnxruntime as ort
        except ImportError:
            raise ConfigError("victim.format", "onnx", missing_message("onnxruntime", "an ONNX victim")) from None
        try:
            self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own error types for a file that is not ONNX
            raise VictimLoadError(path, f"is not an ONNX model onnxruntime can load ({type(e).__name__})") from None
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arr = np.ascontiguousarray(x.detach().cpu().numpy().astype(np.float32))
        out = self.session.run(None, {self.input_name: arr})[0]
        return torch.from_numpy(np.asarray(out, dtype=np.float32)).to(x.device)


class LogProbs(nn.Module):
    """Probabilities in, their logarithm out (softmax of it is the same distribution)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).clamp_min(1e-30).log()


def import_callable(ref: str) -> tuple[Callable[[], Any], str]:
    """The function named ``package.module:function`` and its package's version (or ``None``)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise VictimLoadError(ref, "is not a callable reference: write it as 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise VictimLoadError(ref, f"cannot be imported: {type(e).__name__}: {e}") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise VictimLoadError(ref, f"names nothing: module '{module_name}' has no '{attr}'")
    if not callable(fn):
        raise VictimLoadError(ref, f"is not callable ({type(fn).__name__})")
    top = module_name.split(".")[0]
    version = getattr(importlib.import_module(top), "__version__", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version(top)
        except Exception:
            version = None
    return fn, version


def load_torchscript(ref: str) -> nn.Module:
    """A TorchScript file as a module (``torchscript`` format)."""
    try:
        with warnings.catch_warnings():  # torch marks TorchScript deprecated; it still loads
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(ref, map_location="cpu")
    except Exception as e:
        raise VictimLoadError(ref, f"is not a TorchScript file torch.jit.load can read ({type(e).__name__})") from None


def load_callable(ref: str, layout: str) -> tuple[nn.Module, dict[str, Any]]:
    """What ``package.module:function`` returns, as a module, with its name and package version
    (``callable`` format)."""
    fn, version = import_callable(ref)
    try:
        made = fn()
    except Exception as e:
        raise VictimLoadError(ref, f"failed when called: {type(e).__name__}: {e}") from None
    if isinstance(made, nn.Module):
        net = made
    elif callable(made):
        net = FunctionVictim(made, layout)
    else:
        raise VictimLoadError(ref, f"returned {type(made).__name__}, not an nn.Module or a function")
    return net, {"callable": ref, "package_version": version}


def sha256_of(path: str) -> str:
    from mebench.victims.load import sha256_file

    return sha256_file(path)


def probe(model: nn.Module, v: Any, num_classes: int) -> None:
    """Run the victim on a batch of the profile's input shape; one line for every way it can fail."""
    shape = (PROBE_BATCH, v.channels, *v.input_size)
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    ref = v.checkpoint_ref
    try:
        model.eval()
        with torch.no_grad():
            out = model(x)
    except VictimLoadError:
        raise
    except Exception as e:
        raise VictimLoadError(ref, f"fails on input shape {list(shape)}: {type(e).__name__}: "
                                   f"{failure_cause(e)}".rstrip(": ")) from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (PROBE_BATCH, num_classes):
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise VictimLoadError(ref, f"returns outputs of shape {got} for input {list(shape)}; "
                                   f"expected [{PROBE_BATCH}, {num_classes}]")
    if not bool(torch.isfinite(out).all()):
        raise VictimLoadError(ref, f"returns NaN or infinite {v.outputs}")
    if v.outputs == "probs":
        sums = out.sum(dim=1)
        if float(out.min()) < -PROB_TOLERANCE or float((sums - 1).abs().max()) > PROB_TOLERANCE:
            raise VictimLoadError(ref, f"returns probabilities that are negative or do not sum to 1 (row sums "
                                       f"{float(sums.min()):.4g}..{float(sums.max()):.4g}); "
                                       "set victim.outputs: logits if it returns logits")


def failure_cause(error: BaseException) -> str:
    """An exception's whole message on one line; a TorchScript interpreter error keeps its headline and
    the error that ended it (its last line, e.g. ``RuntimeError: mat1 and mat2 shapes cannot be multiplied``),
    not the serialized-code traceback between them, whose first line alone names no cause."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    if len(lines) > 1 and any(ln.startswith("Traceback of TorchScript") for ln in lines):
        lines = [lines[0], lines[-1]]
    return " ".join(lines)


def measure_throughput(forward: Callable[[torch.Tensor], Any], input_shape: tuple[int, ...],
                       device: torch.device, batch: int = 256, min_seconds: float = 0.1,
                       max_repeats: int = 10) -> float:
    """Images per second of ``forward`` on a fixed batch of ``batch`` images (after one warm-up)."""
    x = torch.rand((batch, *input_shape), generator=torch.Generator().manual_seed(0)).to(device)

    def once() -> None:
        forward(x)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    once()
    n, t0 = 0, time.perf_counter()
    while n < max_repeats:
        once()
        n += 1
        if time.perf_counter() - t0 >= min_seconds:
            break
    return n * batch / max(time.perf_counter() - t0, 1e-9)


def throughput_warning(images_per_s: float, floor: float, budget: int) -> Optional[str]:
    """The warning for a victim slower than ``floor`` images/s, with the run's estimated query time."""
    if images_per_s >= floor:
        return None
    seconds = budget / max(images_per_s, 1e-9)
    return (f"the victim answers {images_per_s:,.0f} images/s, below victim.throughput_floor "
            f"({floor:,.0f}/s): answering this run's {budget:,} queries alone takes about "
            f"{seconds / 60:,.1f} min per seed")


def checkpoint_network(checkpoint: Path | str) -> nn.Module:
    """A mebench victim checkpoint's unnormalized network in eval mode (normalized input, logits out):
    what ``export_victim`` writes, and what the callable format's smoke victim returns."""
    return _checkpoint_network(checkpoint)[0]


def _checkpoint_network(checkpoint: Path | str) -> tuple[nn.Module, tuple[int, ...]]:
    from types import SimpleNamespace

    from mebench.victims.load import read_checkpoint, victim_network

    obj = read_checkpoint(Path(checkpoint))
    if not isinstance(obj, dict) or "arch" not in obj:
        raise VictimLoadError(checkpoint, "is not a mebench victim checkpoint (export needs its architecture)")
    v = SimpleNamespace(checkpoint_ref=str(checkpoint), arch=None, channels=int(obj["channels"]),
                        input_size=tuple(obj["input_size"]))
    net, _ = victim_network(v, int(obj["num_classes"]))
    return net.eval(), (v.channels, *v.input_size)


def export_victim(checkpoint: Path, fmt: str, out: Path) -> Path:
    """Write a mebench victim checkpoint's network as TorchScript or ONNX at ``out``.

    The exported model is the checkpoint's unnormalized network (it takes normalized input and
    returns logits), so a config that names it keeps the checkpoint's ``victim.normalization``
    and ``normalizes: false`` and gets the same answers.
    """
    net, shape = _checkpoint_network(checkpoint)
    x = torch.rand((2, *shape), generator=torch.Generator().manual_seed(0))
    if fmt not in ("torchscript", "onnx"):
        raise ConfigError("--format", fmt, "must be torchscript or onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # torch marks both exporters deprecated; both still write valid files
        warnings.simplefilter("ignore", (FutureWarning, DeprecationWarning))
        if fmt == "torchscript":
            with torch.no_grad():
                torch.jit.trace(net, x).save(str(out))
        else:
            torch.onnx.export(net, (x,), str(out), dynamo=False, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}})
    return out


__all__ = ["probe", "measure_throughput", "throughput_warning", "export_victim", "import_callable", "FunctionVictim",
           "OnnxVictim", "LogProbs", "load_torchscript", "load_callable", "checkpoint_network"]
