"""A model an attack trains in its own loop that reaches a NaN loss (§8 Track B, §10, §11).

``train_fresh`` trains such a model again from a fresh initialisation and batch order derived
from the run seed (``attack.divergence_restarts``, default 2), so the run stays reproducible, and
every restart is recorded in ``summary.json`` (``attack_restarts``, ``health_flags``) and in the
report's health table; with 0 restarts, or when every attempt diverges, the run ends with
``DivergenceError``. A training that never diverges is untouched, which is why the default leaves
every earlier result as it was. A benchmark grid sets it per attack (``divergence_restarts`` beside
``params``), checked when the grid is built.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mebench.run import engine
from mebench.attacks import AttackContext, base
from mebench.data.profiles import get_profile
from mebench.errors import ConfigError, DivergenceError
from mebench.report import write_report
from mebench.config.validation import validate

SHAPE, K = (1, 4, 4), 3


def tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, K))


def ctx_with(restarts: int) -> AttackContext:
    return AttackContext(profile=get_profile("MNIST"), output_mode="hard_top1", num_classes=K, input_shape=SHAPE,
                         device=torch.device("cpu"), seed=3, generator=torch.Generator().manual_seed(3), pool=None,
                         params=None, checkpoints=(100,), max_budget=100, make_substitute=tiny,
                         divergence_restarts=restarts)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.rand(96, *SHAPE, generator=g), torch.randint(0, K, (96,), generator=g)


class NanFirst:
    """Cross-entropy, except NaN for the first ``bad`` calls (one epoch of 3 batches per attempt)."""

    def __init__(self, bad: int) -> None:
        self.bad, self.calls = bad, 0

    def __call__(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        loss = nn.functional.cross_entropy(logits, y)
        return loss * float("nan") if self.calls <= self.bad else loss


def train(ctx: AttackContext, loss, tag: str = "jbda-round-2") -> nn.Module:
    x, y = data()
    return base.train_fresh(ctx, x, y, tag, epochs=2, lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=32,
                            loss_fn=loss)


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_diverged_attack_model_is_trained_again_from_a_seeded_restart_and_recorded():
    ctx = ctx_with(2)
    model = train(ctx, NanFirst(bad=3))  # the first attempt's first epoch is NaN
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert ctx.restarts == [{"model": "jbda-round-2", "examples": 96, "restart": 1, "of": 2,
                             "error": "training loss became NaN or infinite in epoch 1 of 2"}]
    # the restart is the training of (run seed, tag + "-restart1"): reproducible, and not the first draw again
    assert same(model, train(ctx_with(0), NanFirst(bad=0), "jbda-round-2-restart1"))
    assert not same(model, train(ctx_with(0), NanFirst(bad=0)))


def test_a_training_that_never_diverges_is_the_same_with_or_without_restarts():
    with_restarts, without = ctx_with(2), ctx_with(0)
    assert same(train(with_restarts, NanFirst(bad=0)), train(without, NanFirst(bad=0)))
    assert with_restarts.restarts == [] == without.restarts


def test_without_restarts_a_diverged_attack_model_ends_the_run():
    ctx = ctx_with(0)
    with pytest.raises(DivergenceError, match="NaN or infinite in epoch 1 of 2"):
        train(ctx, NanFirst(bad=3))
    assert ctx.restarts == []


def test_when_every_attempt_diverges_the_error_names_the_setting():
    ctx = ctx_with(2)
    with pytest.raises(DivergenceError, match=r"jbda-round-2: .* each of its 2 restart\(s\) \(attack.divergence_restarts\)"):
        train(ctx, NanFirst(bad=10**6))
    assert [r["restart"] for r in ctx.restarts] == [1, 2]


@pytest.mark.parametrize("value", [-1, 1.5, True, "two"])
def test_divergence_restarts_must_be_a_count(make_cfg, value):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(attack={"divergence_restarts": value}), check_files=False)
    assert "attack.divergence_restarts" in str(e.value)
    assert make_cfg().attack.divergence_restarts == 2


@pytest.mark.slow
def test_a_restart_in_a_run_is_in_the_summary_the_cell_flags_and_the_report(make_cfg, tmp_path, monkeypatch):
    real, calls = base.train_epochs, []

    def first_round_diverges(model, x, y, **kw):  # the attack's first trained model reaches a NaN loss
        calls.append(len(x))
        if len(calls) == 1:
            raise DivergenceError("training loss became NaN or infinite in epoch 4 of 20")
        return real(model, x, y, **kw)

    monkeypatch.setattr(base, "train_epochs", first_round_diverges)
    from mebench.testing import QUICK_JBDA

    cfg = make_cfg(**QUICK_JBDA)
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["queries_used"] == 500
    assert summary["attack_restarts"] == [{"model": "jbda-round-0", "examples": 20, "restart": 1, "of": 2,
                                           "error": "training loss became NaN or infinite in epoch 4 of 20"}]
    assert [f for f in summary["health_flags"] if "restarted" in f] == [
        "attack model jbda-round-0 restarted: training loss became NaN or infinite in epoch 4 of 20 on 20 "
        "examples; trained again from a fresh initialisation and batch order (restart 1 of at most 2)"]
    with pytest.warns(UserWarning, match=r"and 1 attack model\(s\) restarted after a NaN loss"):
        files = write_report(res.directory, tmp_path / "report")
    assert "jbda-round-0 restarted" in files["health_csv"].read_text()
    assert "attack model jbda-round-0 restarted" in files["health_md"].read_text()


GRID = """\
name: synth
register: ["mebench.testing:register_synthetic"]
seeds: [0]
budgets: [100]
run: {device: cpu}
victim: {victim_id: synth_mlp, checkpoint_ref: synth_victim.pt}
dataset: {name: SYNTH, data_root: .}
data_modes:
  seed: {seed_size: 50}
substitute: {arch: tiny_mlp}
output_modes: [soft_prob]
attacks:
  - name: random
  - name: jbda
    divergence_restarts: RESTARTS
"""


@pytest.mark.parametrize("restarts", [0, 3])
def test_a_grid_attack_sets_its_cells_divergence_restarts(tmp_path, synth_victim_path, restarts):
    from mebench.harness.grid import load_grid

    (tmp_path / "synth_victim.pt").write_bytes(synth_victim_path.read_bytes())
    (tmp_path / "grid.yaml").write_text(GRID.replace("RESTARTS", str(restarts)))
    cells = {c.attack: c for c in load_grid(tmp_path / "grid.yaml", tmp_path).cells}
    assert cells["jbda"].cfg.attack.divergence_restarts == restarts
    assert cells["random"].cfg.attack.divergence_restarts == 2  # the default


def test_a_grid_with_a_bad_divergence_restarts_names_the_key(tmp_path, synth_victim_path):
    from mebench.harness.grid import GridError, load_grid

    (tmp_path / "synth_victim.pt").write_bytes(synth_victim_path.read_bytes())
    (tmp_path / "grid.yaml").write_text(GRID.replace("RESTARTS", "-1"))
    with pytest.raises(GridError, match=r"grid.yaml: config key 'attack.divergence_restarts' = -1: must be an integer >= 0"):
        load_grid(tmp_path / "grid.yaml", tmp_path)
