"""Every attack runs end to end on CUDA on CIFAR-shaped images (contract §1.1, §13).

On a machine with a GPU, each attack with a Track B of its own (the list of
``test_track_b_test_split``, tiny presets) runs one seed through ``engine.run_seed`` with
``run.device: cuda`` on SYNTH32, a synthetic CIFAR-shaped world (3x32x32, 10 classes;
``mebench.testing``): the victim, the attack's models and both tracks on the GPU. Each run
must stop at its odd budget exactly, score finite metrics at every checkpoint, and hand Track B
a model whose weights live on the GPU. Without CUDA the module skips with its reason; the same
attacks run on the CPU in their own modules.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from mebench.metrics import METRIC_NAMES
from test_track_b_test_split import ATTACKS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA paths: no GPU on this machine (the same attacks run on the CPU elsewhere)")


@pytest.fixture(scope="module")
def cifar_victim(tmp_path_factory) -> str:
    from mebench.testing import synthetic_victim

    return str(synthetic_victim(tmp_path_factory.mktemp("v") / "synth32_victim.pt", dataset="SYNTH32"))


def cuda_config(make_cfg, victim: str, attack: dict[str, Any], other: dict[str, Any]):
    mode = attack.get("output_mode", "soft_prob")
    data_mode = other.get("dataset", {}).get("data_mode", "surrogate")
    dataset = {"name": "SYNTH32", "data_mode": data_mode, "seed_size": 30,
               "surrogate_name": "SYNTH32SUR" if data_mode == "surrogate" else None}
    return make_cfg(**{**other, "run": {"device": "cuda"}, "cache": {"enabled": False},
                       "victim": {"victim_id": "synth32_mlp", "checkpoint_ref": victim, "output_mode": mode},
                       "budget": {"max_budget": 301, "checkpoints": [97, 301]}, "dataset": dataset,
                       "attack": {"output_mode": mode, **attack}})


# contract 1.1 / 13: the same budget, checkpoints and metrics on CUDA as on the CPU
@pytest.mark.parametrize("attack,other", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_runs_on_cuda_with_cifar_shaped_images(make_cfg, cifar_victim, tmp_path, attack, other):
    from mebench import engine
    from mebench.config.validation import validate

    cfg = cuda_config(make_cfg, cifar_victim, attack, other)
    validate(cfg)
    prep = engine.prepare(cfg)
    devices: dict[int, set[str]] = {}
    real_make = engine.make_attack

    def make(*args: Any, **kwargs: Any) -> Any:
        made = real_make(*args, **kwargs)
        track_b_model = made.track_b_model

        def spy(state):
            model = track_b_model(state)
            devices[state.queries_used] = {p.device.type for p in model.parameters()}
            return model

        made.track_b_model = spy
        return made

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "make_attack", make)
        result = engine.run_seed(cfg, 0, prep, tmp_path / "run", progress=False)
    summary = result.summary
    assert summary["status"] == "complete" and summary["queries_used"] == 301
    assert devices == {97: {"cuda"}, 301: {"cuda"}}
    rows = [r for r in result.rows if r["track"] in ("A", "B")]
    assert sorted((r["track"], r["checkpoint_B"]) for r in rows) == [("A", 97), ("A", 301), ("B", 97), ("B", 301)]
    for r in rows:  # KL and L1 are empty (None) for hard_top1
        values = [r[k] for k in METRIC_NAMES if r[k] is not None]
        assert r["agreement"] is not None and all(math.isfinite(v) for v in values), r
