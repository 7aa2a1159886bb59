"""Adaptive attackers (``mebench.attacks.adaptive``): every answer is charged (contract §1.1), the store
keeps one record per charged query (§7: D_B is the first B), and the attacker only ever sees the
defended answers (what ``keep`` makes of them)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks.adaptive import ADAPTIVE, AdaptiveAttack, group_mean
from mebench.data.cache import QueryStore
from mebench.data.pools import Pool
from mebench.data.profiles import PROFILES
from mebench.run.engine import collect
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.oracle import AnswerPipeline, AnswerTransform, Oracle
from mebench.support.seeding import generator
from mebench.state import EngineState
from mebench.testing import (SMOKE_BUDGET, SMOKE_CHECKPOINTS, _images, register_synthetic, smoke_params,
                             smoke_substitute)
from mebench.victims.wrapper import FrozenVictim

register_synthetic()
#: pool attacks with fast smoke runs: the axis wraps any of them
POOL_ATTACKS = ("random", "knockoff", pytest.param("activethief", marks=pytest.mark.slow))  # copycat, dissector: labels only
MARK = torch.tensor([0.1, 0.2, 0.3, 0.4])


class Spy(AnswerTransform):
    """A defense that answers ``MARK`` plus tiny fresh noise, and records every answer it gives:
    an answer the attacker sees that is not built from these was never defended."""

    name, space = "spy", "probs"

    def __init__(self) -> None:
        self.given: list[torch.Tensor] = []
        self.g = torch.Generator().manual_seed(7)

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        noise = 0.01 * torch.rand(scores.shape, generator=self.g)
        out = (MARK + noise) / (MARK + noise).sum(dim=1, keepdim=True)
        self.given.append(out)
        return out


_NET: dict[str, Any] = {}


@pytest.fixture
def make_cfg(tmp_path):
    """A parsed SYNTH config with overrides; its victim file is never read (validation without files)."""
    from mebench.config import parse_config
    from mebench.testing import deep_update, synthetic_config_dict

    return lambda **over: parse_config(deep_update(synthetic_config_dict(tmp_path), over))


def run(attack_name: str, adaptive: dict[str, Any]) -> dict[str, Any]:
    """One smoke-sized run (budget 257, checkpoints 100/257) of a pool attack behind ``Spy``."""
    if "net" not in _NET:  # untrained: the spy answers in its place anyway
        torch.manual_seed(0)
        _NET["net"] = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))
    cls = ATTACKS.get(attack_name)
    profile = PROFILES.get("SYNTH")
    images, labels = _images("SYNTHSUR", True)
    ctx = AttackContext(profile=profile, output_mode="soft_prob", num_classes=4, input_shape=profile.input_shape,
                        device=torch.device("cpu"), seed=0, generator=generator(0, "attack"),
                        pool=Pool(images, "SYNTHSUR", labels), params=smoke_params(cls),
                        checkpoints=SMOKE_CHECKPOINTS, max_budget=SMOKE_BUDGET, make_substitute=smoke_substitute)
    inner = cls(ctx)
    attack: Any = inner
    if adaptive:
        s = ADAPTIVE.get(adaptive["strategy"])
        params = s.Params(**{k: v for k, v in adaptive.items() if k != "strategy"})
        attack = AdaptiveAttack(inner, s(params, generator(0, "adaptive")))
    seen: list[torch.Tensor] = []
    observe = inner.observe
    inner.observe = lambda b, o, st: (seen.append(o.y.clone()), observe(b, o, st))
    spy = Spy()
    oracle = Oracle(AnswerPipeline(FrozenVictim(_NET["net"], "cpu"), [spy]), "soft_prob", SMOKE_BUDGET,
                    profile.input_shape)
    state = EngineState(SMOKE_BUDGET, SMOKE_CHECKPOINTS, QueryStore(SMOKE_BUDGET, profile.input_shape,
                                                                    "soft_prob", 4), torch.device("cpu"))
    at: dict[int, int] = {}
    collect(attack, oracle, state, lambda b: at.__setitem__(b, oracle.queries_used))
    x, y = state.store.prefix(oracle.queries_used)
    return {"oracle": oracle, "at": at, "x": x, "y": y, "given": torch.cat(spy.given), "seen": torch.cat(seen)}


@pytest.mark.parametrize("strategy", ["multi_query", "smoothing"])
def test_every_answer_is_charged_at_odd_remainders(strategy):
    # contract 1.1: k answers of one image cost k queries; checkpoints 100 and 257 are not multiples of k = 3
    r = run("random", {"strategy": strategy, "k": 3})
    assert r["oracle"].queries_used == SMOKE_BUDGET
    assert r["at"] == {100: 100, 257: 257}
    assert len(r["given"]) == SMOKE_BUDGET  # the victim answered as many images as were charged
    assert len(r["y"]) == SMOKE_BUDGET  # contract 7: one record per charged query, D_B is the first B
    # the attack proposed ceil(100/3) + ceil(157/3) = 34 + 53 images and observed one kept answer each
    assert len(r["seen"]) == 34 + 53


def test_multi_query_keeps_each_images_mean_answer():
    # contract 7: the record of a charged query is its image and the answer the attacker kept (the group mean)
    r = run("random", {"strategy": "multi_query", "k": 3})
    groups = torch.cat([torch.arange(34).repeat_interleave(3)[:100], 34 + torch.arange(53).repeat_interleave(3)[:157]])
    assert torch.equal(r["x"][0], r["x"][2]) and not torch.equal(r["x"][2], r["x"][3])
    assert torch.allclose(r["y"], group_mean(r["given"], groups), atol=1e-6)
    assert torch.allclose(r["y"][99], r["given"][99])  # the remainder's last image was asked once


def test_smoothing_sends_the_image_and_augmented_copies():
    r = run("random", {"strategy": "smoothing", "k": 3})
    assert not torch.equal(r["x"][0], r["x"][1]) and not torch.equal(r["x"][1], r["x"][2])
    assert float((r["x"][0] - r["x"][1]).abs().mean()) < 0.5  # a copy, not another image
    assert torch.allclose(r["y"][0], r["y"][2]) and not torch.allclose(r["y"][2], r["y"][3])


@pytest.mark.parametrize("attack_name", POOL_ATTACKS)
@pytest.mark.parametrize("strategy", ["naive", "argmax", "multi_query"])
def test_the_attacker_never_sees_an_undefended_answer(attack_name, strategy):
    # contract 14.1: the oracle is the only door; an adaptive attacker sees only what the defense gave
    adaptive = {} if strategy == "naive" else {"strategy": strategy, **({"k": 2} if strategy == "multi_query" else {})}
    r = run(attack_name, adaptive)
    seen, y = r["seen"], r["y"]
    if strategy == "argmax":
        assert torch.equal(seen.argmax(dim=1), torch.full((len(seen),), 3))  # MARK's top-1, one-hot
        assert torch.equal(seen.sum(dim=1), torch.ones(len(seen))) and set(seen.unique().tolist()) == {0.0, 1.0}
    else:
        assert float((seen - MARK).abs().max()) < 0.01  # every observed answer is a marked (defended) one
    assert float((y - MARK).abs().max()) < 0.01 or strategy == "argmax"


def test_argmax_keeps_only_the_top1():
    r = run("random", {"strategy": "argmax"})
    assert torch.equal(r["y"], torch.nn.functional.one_hot(r["given"].argmax(dim=1), 4).float())


@pytest.mark.parametrize("adaptive, key, rule", [
    ({"strategy": "argmx"}, "attack.adaptive.strategy", "did you mean 'argmax'"),
    ({"strategy": "multi_query", "k": 1}, "attack.adaptive.k", "k >= 2"),
    ({"strategy": "multi_query", "kk": 3}, "attack.adaptive", "kk"),
    ({"k": 3}, "attack.adaptive", "strategy"),
])
def test_bad_adaptive_config_is_one_clear_error(make_cfg, adaptive, key, rule):
    # contract 15.2: config errors fail before any work, naming key, value and rule
    from mebench.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate(make_cfg(attack={"adaptive": adaptive}), check_files=False)
    assert e.value.key.startswith(key) and rule in str(e.value)


def test_argmax_needs_probabilities(make_cfg):
    from mebench.config.validation import validate

    with pytest.raises(ConfigError, match="top-1 label"):
        validate(make_cfg(attack={"output_mode": "hard_top1", "adaptive": {"strategy": "argmax"}},
                          victim={"output_mode": "hard_top1"}), check_files=False)


def test_the_strategy_is_in_the_plan_and_the_label(make_cfg):
    # contract 10: the plan (and its hash) says what ran; naive plans hash as before the axis existed
    from mebench.run.plan import resolve

    naive, adaptive = make_cfg(), make_cfg(attack={"adaptive": {"strategy": "multi_query"}})
    assert "adaptive" not in naive.to_dict()["attack"] and "adaptive" not in resolve(naive).to_dict()["attack"]
    assert resolve(adaptive).attack.adaptive == {"strategy": "multi_query", "k": 4}
    assert resolve(naive).hash != resolve(adaptive).hash
    assert (naive.attack_label(), adaptive.attack_label()) == ("random", "random.multi_query")


def test_recover_denoises_a_known_defense():
    # the recover attacker's estimate of the undefended answer is nearer to it than the defended answer
    # (ModelGuard Table_Recover, wb_recover.py:379-415); it builds its table from its own copy of the defense
    from mebench.attacks.recover import Recover, RecoverParams, defense_in_prob_space
    from mebench.defenses import DEFENSES, make_defense

    rs = make_defense("reverse_sigmoid", DEFENSES.get("reverse_sigmoid").Params(), torch.Generator().manual_seed(0))
    strategy = Recover(RecoverParams(table_size=4000, tolerance=0.01), torch.Generator().manual_seed(1))
    strategy.prepare(defense_in_prob_space(rs), torch.rand(10, 1, 8, 8), 4)
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(3 * torch.randn(200, 4, generator=g), dim=1)  # confident, like a victim
    y = rs.apply(p, torch.rand(200, 1, 8, 8))
    kept = strategy.keep(y, torch.arange(200))
    assert torch.allclose(kept.sum(dim=1), torch.ones(200), atol=1e-5)
    naive, recovered = (y - p).abs().sum(dim=1).mean(), (kept - p).abs().sum(dim=1).mean()
    assert recovered < 0.5 * naive, (float(recovered), float(naive))



GRID = """
name: g
seeds: [0]
budgets: [100]
run: {device: cpu}
victim: {victim_id: synth_mlp, checkpoint_ref: synth_victim.pt}
dataset: {name: SYNTH, data_root: .}
data_modes:
  surrogate: {surrogate_name: SYNTHSUR}
substitute: {arch: tiny_mlp}
output_modes: [soft_prob]
defenses: [{name: none}, {name: reverse_sigmoid}]
attacks:
  - name: random
    variants: [{label: random}, {label: random, adaptive: {strategy: argmax}}]
"""


def test_a_grid_variant_is_adaptive_and_its_cell_id_says_so(tmp_path, synth_victim_path):
    # contract 16.2: naive and adaptive rows are never one condition (their ids and labels differ)
    from mebench.harness.grid import load_grid

    (tmp_path / "synth_victim.pt").write_bytes(synth_victim_path.read_bytes())
    (tmp_path / "grid.yaml").write_text(GRID)
    cells = {c.id: c for c in load_grid(tmp_path / "grid.yaml", tmp_path).cells}
    assert sorted(cells) == ["g-random-reverse_sigmoid-surrogate-soft_prob-s0", "g-random-surrogate-soft_prob-s0",
                             "g-random.argmax-reverse_sigmoid-surrogate-soft_prob-s0",
                             "g-random.argmax-surrogate-soft_prob-s0"]
    adaptive = cells["g-random.argmax-reverse_sigmoid-surrogate-soft_prob-s0"]
    assert adaptive.cfg.attack.adaptive == {"strategy": "argmax"} and adaptive.label == "random.argmax"
    assert cells["g-random-surrogate-soft_prob-s0"].cfg.attack.adaptive == {}
