"""Any model as a victim: TorchScript, ONNX and Python callables behind the same oracle (§4).

A tiny SYNTH victim (mebench checkpoint) is exported to TorchScript and ONNX and wrapped as a
callable in a module written to a temporary folder; every format must answer like the checkpoint
and give the same Random run. Broken victims fail before any work with one line; a slow victim
is measured and warned about.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest
import torch

from mebench.run import engine
from mebench.run.plan import resolve, site
from mebench.errors import ConfigError, SlowVictimWarning, VictimLoadError
from mebench.config.validation import validate
from mebench.victims.formats import export_victim, measure_throughput, throughput_warning
from mebench.victims.registry import build_victim
from mebench.victims.wrapper import FrozenVictim

CALLABLES = '''
import time
import numpy as np
import torch
from types import SimpleNamespace

from mebench.models.registry import Normalized
from mebench.victims.load import victim_network
from mebench.run.plan import resolve, site

CHECKPOINT = {checkpoint!r}


def net():
    v = SimpleNamespace(checkpoint_ref=CHECKPOINT, arch=None, channels=1, input_size=(8, 8))
    return victim_network(v, 4)[0]


def module():                      # an nn.Module that normalizes inside
    return Normalized(net(), [0.5], [0.25]).eval()


def numpy_probs():                 # NHWC numpy pixels in, probabilities out
    m = module()
    def predict(batch):
        assert isinstance(batch, np.ndarray) and batch.shape[-1] == 1
        with torch.no_grad():
            return torch.softmax(m(torch.from_numpy(batch).permute(0, 3, 1, 2)), dim=1).numpy()
    return predict


def slow():                        # 20 ms per call
    m = module()
    def predict(x):
        time.sleep(0.02)
        return m(x)
    return predict


def wrong_shape():
    return lambda x: torch.zeros(x.shape[0], 3)


def nan_outputs():
    return lambda x: torch.full((x.shape[0], 4), float("nan"))


def not_probs():
    return lambda x: torch.full((x.shape[0], 4), 0.5)


def fails_on_shape():
    return torch.nn.Linear(10, 4)


NOT_A_FUNCTION = 3
'''


@pytest.fixture
def victims(tmp_path, synth_victim_path, monkeypatch):
    """Paths and references of the same tiny victim in every format."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "synth_victims.py").write_text(textwrap.dedent(CALLABLES.format(checkpoint=str(synth_victim_path))))
    monkeypatch.syspath_prepend(str(pkg))
    ts = export_victim(synth_victim_path, "torchscript", tmp_path / "victim.ts")
    return {"mebench": {"checkpoint_ref": str(synth_victim_path)},
            "torchscript": {"format": "torchscript", "checkpoint_ref": str(ts)},
            "callable": {"format": "callable", "checkpoint_ref": "synth_victims:module", "normalizes": True},
            "callable_numpy": {"format": "callable", "checkpoint_ref": "synth_victims:numpy_probs",
                               "normalizes": True, "layout": "nhwc", "outputs": "probs"}}


def answers(cfg, x):
    model, meta = build_victim(cfg.victim, 4)
    return FrozenVictim(model, "cpu").probs(x), meta


# contract 4: a callable taking NHWC numpy arrays and returning probabilities answers like the
# checkpoint to float tolerance; only the mebench checkpoint has an architecture (every registered
# format at its plain settings: test_format_registry.py).
def test_a_numpy_callable_answers_like_the_checkpoint(make_cfg, victims):
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    ref, meta = answers(make_cfg(), x)
    assert meta["format"] == "mebench" and meta["arch"] == "tiny_mlp"
    cfg = make_cfg(victim=victims["callable_numpy"])
    validate(cfg)
    got, meta = answers(cfg, x)
    assert torch.allclose(got, ref, atol=1e-6) and meta["input_layout"] == "nhwc" and meta["outputs"] == "probs"
    assert meta["callable"] == "synth_victims:numpy_probs" and meta["checkpoint_sha256"] is None
    assert meta["arch"] is None


# contract 4 / 10: the same Random run (metrics.csv rows) from the checkpoint, its TorchScript
# export and the callable, bit for bit.
@pytest.mark.slow
def test_the_same_random_run_from_every_exact_format(make_cfg, victims):
    rows = {}
    for name in ("mebench", "torchscript", "callable"):
        cfg = make_cfg(victim=victims[name], cache={"enabled": False}, run={"name": f"fmt_{name}"})
        (seed,) = engine.run(cfg, progress=False).seeds
        rows[name] = [{k: v for k, v in r.items() if k not in ("run_name",)} for r in seed.rows]
    assert rows["mebench"] == rows["torchscript"] == rows["callable"]
    assert len(rows["mebench"]) == 2


# contract 15.2: a broken victim fails before any work, with one line naming the reference and
# what is wrong.
@pytest.mark.parametrize("victim,words", [
    ({"format": "torchscript"}, "not a TorchScript file"),                        # a mebench checkpoint
    ({"format": "callable", "checkpoint_ref": "no_such_module_xyz:load"}, "cannot be imported"),
    ({"format": "callable", "checkpoint_ref": "synth_victims"}, "package.module:function"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:missing"}, "names nothing"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:NOT_A_FUNCTION"}, "not callable"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:wrong_shape"}, "shape [8, 3]"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:nan_outputs"}, "NaN"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:not_probs", "outputs": "probs"}, "do not sum to 1"),
    ({"format": "callable", "checkpoint_ref": "synth_victims:fails_on_shape"}, "fails on input shape [8, 1, 8, 8]"),
], ids=["not-torchscript", "import", "no-colon", "missing", "not-callable", "shape", "nan", "not-probs", "input"])
def test_bad_victims_are_one_line(make_cfg, victims, victim, words):
    cfg = make_cfg(victim=victim)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == "victim.checkpoint_ref" and words in str(err.value) and "\n" not in str(err.value)


def test_onnx_format_rejects_a_file_that_is_not_onnx(make_cfg):
    pytest.importorskip("onnxruntime")
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim={"format": "onnx"}))  # the mebench checkpoint
    assert "not an ONNX model" in str(err.value) and "\n" not in str(err.value)


# contract 15.2: the format settings themselves are checked first.
@pytest.mark.parametrize("victim,key", [
    ({"format": "keras"}, "victim.format"), ({"outputs": "scores", "format": "callable"}, "victim.outputs"),
    ({"layout": "nhwc", "format": "torchscript"}, "victim.layout"), ({"normalizes": True}, "victim.normalizes"),
    ({"format": "callable", "arch": "tiny_mlp", "checkpoint_ref": "synth_victims:module"}, "victim.arch"),
    ({"throughput_floor": -1.0}, "victim.throughput_floor")])
def test_bad_format_settings(make_cfg, victims, victim, key):
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim=victim), check_files=False)
    assert err.value.key == key


# contract 4 (throughput): the oracle's victim is timed on start and recorded; a deliberately slow
# callable is measured as slow and warned about with the run's estimated time.
def test_throughput_is_measured_and_a_slow_victim_warned(make_cfg, victims):
    cfg = make_cfg(victim={"format": "callable", "checkpoint_ref": "synth_victims:slow", "normalizes": True,
                           "throughput_floor": 100000.0})
    with pytest.warns(SlowVictimWarning, match=r"below victim.throughput_floor .* 500 queries"):
        prep = engine.prepare(resolve(cfg), site(cfg))
    rate = prep.victim_meta["throughput_images_per_s"]
    assert 0 < rate < 256 / 0.02 * 1.05  # at most one 256-image batch per 20 ms
    fast = make_cfg()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowVictimWarning)
        assert engine.prepare(resolve(fast), site(fast)).victim_meta["throughput_images_per_s"] > rate
    assert throughput_warning(50.0, 100.0, 1_000_000) is not None and "333.3 min" in throughput_warning(
        50.0, 100.0, 1_000_000)
    assert throughput_warning(150.0, 100.0, 10) is None
    assert measure_throughput(lambda x: x, (1, 8, 8), torch.device("cpu")) > 0


def test_cli_export_and_bad_reference_without_traceback(tmp_path, synth_victim_path, capsys):
    from mebench.cli import main

    out = tmp_path / "v.ts"
    assert main(["victim", "export", str(synth_victim_path), "--format", "torchscript", "--out", str(out)]) == 0
    assert out.is_file()
    assert main(["victim", "export", str(tmp_path / "missing.pt"), "--format", "torchscript", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "Traceback" not in err
    with pytest.raises(VictimLoadError):
        export_victim(out, "onnx", tmp_path / "v.onnx")  # a TorchScript file is not a mebench checkpoint
