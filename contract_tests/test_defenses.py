"""Defenses as answer transforms of the oracle (contract §1.1, §1.2, §7, §15.2).

A defense never changes the query count, always answers with probability
vectors (or labels), is what Track A trains on, and bad parameters or
defense × output-mode combinations fail before any work with one config error.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench import engine
from mebench.defenses import DEFENSES, build_answers, make_defense
from mebench.errors import BudgetExhausted, ConfigError
from mebench.models.registry import build_model
from mebench.oracle import Oracle
from mebench.validation import defense_params, validate
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)
PARAMS = {"temperature": {"temperature": 3.0}, "topk": {"k": 2}, "rounding": {"decimals": 1},
          "gaussian_noise": {"sigma": 0.2}, "reverse_sigmoid": {"beta": 0.7, "gamma": 0.4}}


def _victim() -> FrozenVictim:
    torch.manual_seed(0)
    return FrozenVictim(build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)), "cpu")


def _oracle(name: str, mode: str, budget: int) -> Oracle:
    cls = DEFENSES.get(name)
    defense = make_defense(name, cls.Params(**PARAMS.get(name, {})), torch.Generator().manual_seed(0))
    return Oracle(build_answers(_victim(), 1.0, defense), mode, budget, SHAPE)


def test_every_defense_is_listed_with_its_paper():
    assert {"none", "temperature", "top1", "topk", "rounding", "gaussian_noise", "reverse_sigmoid"} <= set(DEFENSES)
    assert all(DEFENSES.get(n).paper for n in DEFENSES)


@pytest.mark.parametrize("name", sorted(DEFENSES.names()))
@given(budget=st.integers(0, 150), sizes=st.lists(st.integers(1, 40), max_size=6),
       scale=st.floats(0.0, 1.0))
def test_a_defense_never_changes_the_count_and_answers_probability_vectors(name, budget, sizes, scale):
    # contract 1.1, 1.2: one image is one query behind any defense; answers stay valid
    for mode in sorted(DEFENSES.get(name).output_modes):
        plain, defended = _oracle("none", mode, budget), _oracle(name, mode, budget)
        for n in sizes:
            x = torch.rand(n, *SHAPE) * scale
            if plain.queries_used + n > budget:
                for oracle in (plain, defended):
                    with pytest.raises(BudgetExhausted):
                        oracle.query(x)
                continue
            plain.query(x)
            y = defended.query(x).y
            if mode == "soft_prob":
                assert y.shape == (n, 4) and bool((y >= 0).all()) and torch.allclose(y.sum(1), torch.ones(n))
            else:
                assert y.shape == (n,) and y.dtype == torch.int64 and bool(((y >= 0) & (y < 4)).all())
            assert defended.queries_used == plain.queries_used


def test_top1_answers_are_the_hard_top1_answers():
    # contract 1.2: the top1 defense under soft_prob says exactly what a hard_top1 oracle says
    x = torch.rand(64, *SHAPE)
    soft = _oracle("top1", "soft_prob", 64).query(x).y
    hard = _oracle("none", "hard_top1", 64).query(x).y
    assert torch.equal(soft.argmax(1), hard) and torch.equal(soft.sum(1), torch.ones(64))
    assert set(soft.unique().tolist()) <= {0.0, 1.0}


class _Recorder:
    """The engine's query store, keeping what the oracle answered and what Track A read."""

    def __init__(self, store):
        self.store, self.answers, self.reads = store, [], {}

    def __getattr__(self, name):
        return getattr(self.__dict__["store"], name)

    def __len__(self):
        return len(self.store)

    def append(self, x, y):
        self.answers.append(y.clone())
        self.store.append(x, y)

    def prefix(self, n, device="cpu"):
        x, y = self.store.prefix(n, device)
        self.reads[n] = y.clone()
        return x, y


@pytest.mark.parametrize("name", ["top1", "rounding", "reverse_sigmoid"])
def test_track_a_trains_on_what_the_defended_oracle_returned(make_cfg, tmp_path, name):
    # contract 7: D_B is the defended answers, query for query; the count is still exact
    cfg = make_cfg(defense={"name": name, "params": PARAMS.get(name, {})}, cache={"enabled": False})
    validate(cfg, check_files=False)
    prep = engine.prepare(cfg)
    store = _Recorder(engine.make_store(cfg, prep, None))
    oracle = engine.make_oracle(cfg, prep, 0)
    result = engine.run_seed(cfg, 0, prep, tmp_path / "seed_0", progress=False, oracle=oracle, store=store)
    answered = torch.cat(store.answers)
    assert result.summary["queries_used"] == 500 and answered.shape[0] == 500
    for n, y in store.reads.items():
        assert torch.equal(y, answered[:n])
    plain = engine.make_oracle(make_cfg(), prep, 0).answers
    x = torch.rand(32, *SHAPE)
    assert not torch.allclose(oracle.answers.probs(x), plain.probs(x))  # the defense did act
    cost = result.summary["defense"]["utility"]
    assert cost["test_images"] == prep.evaluator.x.shape[0] and cost["seconds_per_1000_answers"] > 0
    assert 0 < cost["mean_abs_perturbation"] < 1
    if name == "top1":  # the label survives, the confidences do not
        assert cost["agreement_with_undefended"] == 1.0
        assert cost["test_accuracy"] == pytest.approx(prep.evaluator.victim_accuracy())


@pytest.mark.parametrize("defense, key, words", [
    ({"name": "nodefense"}, "defense.name", "unknown defense"),
    ({"name": "topk", "params": {"k": 0}}, "defense.params.k", "at least 1"),
    ({"name": "reverse_sigmoid", "params": {"gamma": 0}}, "defense.params.gamma", "> 0"),
    ({"name": "rounding", "params": {"digits": 2}}, "defense.params.digits", "unknown key"),
    ({"name": "gaussian_noise", "params": {"sigma": -1}}, "defense.params.sigma", ">= 0"),
])
def test_bad_defense_settings_fail_before_any_work(make_cfg, defense, key, words):
    # contract 15.2: one ConfigError naming the key, the value and the rule
    with pytest.raises(ConfigError, match=words) as e:
        validate(make_cfg(defense=defense), check_files=False)
    assert e.value.key == key


def test_a_probability_defense_on_hard_labels_is_refused(make_cfg):
    cfg = make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"},
                   defense={"name": "reverse_sigmoid"})
    with pytest.raises(ConfigError, match="hard_top1 answer does not carry") as e:
        validate(cfg, check_files=False)
    assert e.value.key == "defense.name"
    validate(make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"},
                      defense={"name": "top1"}), check_files=False)  # a label defense is fine
    assert defense_params(make_cfg(defense={"name": "topk", "params": {"k": 3}})).k == 3
