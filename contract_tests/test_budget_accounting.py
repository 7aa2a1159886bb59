"""Contract §1.1, §1.2, §14.1, §17.1: one query is one image; the oracle never overdraws."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.errors import BudgetExhausted, OracleInputError
from mebench.models.registry import build_model
from mebench.defenses import build_answers
from mebench.defenses.output import Temperature
from mebench.oracle import AnswerPipeline, AnswerTransform, Oracle
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)


def make_oracle(budget: int, mode: str = "soft_prob") -> Oracle:
    torch.manual_seed(0)
    model = build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))
    return Oracle(FrozenVictim(model, "cpu"), mode, budget, SHAPE)


@given(budget=st.integers(0, 300), sizes=st.lists(st.integers(1, 80), max_size=12))
def test_any_sequence_of_batches_is_counted_exactly_and_never_overdraws(budget, sizes):
    # contract 1.1: the budget decrements by the number of images; an overdraw raises and counts nothing
    oracle = make_oracle(budget)
    expected = 0
    for n in sizes:
        if expected + n <= budget:
            out = oracle.query(torch.rand(n, *SHAPE))
            expected += n
            assert len(out) == n
        else:
            with pytest.raises(BudgetExhausted):
                oracle.query(torch.rand(n, *SHAPE))
        assert oracle.queries_used == expected
        assert oracle.budget_left == budget - expected
        assert 0 <= oracle.queries_used <= budget


def test_overdraw_returns_nothing_not_a_partial_batch():
    # contract 1.1: never a silent partial batch
    oracle = make_oracle(10)
    oracle.query(torch.rand(7, *SHAPE))
    with pytest.raises(BudgetExhausted, match="overdraw"):
        oracle.query(torch.rand(4, *SHAPE))
    assert oracle.queries_used == 7
    assert len(oracle.query(torch.rand(3, *SHAPE))) == 3
    assert oracle.budget_left == 0


@pytest.mark.parametrize("bad, why", [
    (torch.rand(4, 1, 8, 9), "shape"),
    (torch.rand(4, 3, 8, 8), "shape"),
    (torch.rand(1, 8, 8), "shape"),
    ((torch.rand(4, 1, 8, 8) * 255).to(torch.uint8), "dtype"),
    (torch.rand(4, 1, 8, 8) + 1.0, "range"),
    (torch.rand(4, 1, 8, 8) - 1.0, "range"),
    (torch.full((4, 1, 8, 8), float("nan")), "NaN"),
    (torch.where(torch.arange(256).view(4, 1, 8, 8) == 5, float("inf"), 0.5), "infinite"),
    (torch.empty(0, 1, 8, 8), "empty"),
])
def test_malformed_queries_are_rejected_and_not_counted(bad, why):
    # contract 14.1: wrong shape, dtype or range, NaN/inf: a clear error, nothing counted
    oracle = make_oracle(100)
    with pytest.raises(OracleInputError) as e:
        oracle.query(bad)
    assert oracle.queries_used == 0
    assert str(e.value)
    if why in ("NaN", "infinite"):
        assert "NaN or infinite" in str(e.value)
    else:
        assert why.lower() in str(e.value).lower()


def test_soft_prob_is_softmax_at_temperature_one_and_hard_is_its_argmax():
    # contract 1.2: soft_prob = raw softmax at T = 1.0; hard_top1 = top-1 label
    soft, hard = make_oracle(100, "soft_prob"), make_oracle(100, "hard_top1")
    x = torch.rand(16, *SHAPE)
    p = soft.query(x)
    assert p.kind == "soft_prob" and p.y.shape == (16, 4)
    logits = soft.victim.model(x)
    torch.testing.assert_close(p.y, torch.softmax(logits, dim=1))
    torch.testing.assert_close(p.y.sum(1), torch.ones(16))
    h = hard.query(x)
    assert h.kind == "hard_top1" and h.y.dtype == torch.int64 and h.y.shape == (16,)
    assert torch.equal(h.y, p.y.argmax(1))


def test_engine_uses_exactly_the_max_budget(make_cfg):
    # contract 1.1, 17.1: a run queries exactly max_budget images, no more and no fewer
    import json

    from mebench.run import engine

    cfg = make_cfg(budget={"max_budget": 333, "checkpoints": [100, 333]}, attack={"params": {"batch_size": 64}})
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["queries_used"] == 333 == summary["budget"]


def test_engine_rejects_an_attack_that_proposes_the_wrong_number_of_images(make_cfg, monkeypatch):
    # contract 14.2: propose(k) returns exactly k images
    from mebench.run import engine
    from mebench.attacks.random import RandomAttack
    from mebench.types import QueryBatch

    orig = RandomAttack.propose

    def one_short(self, k, state):
        b = orig(self, k, state)
        return QueryBatch(b.x[:-1], b.meta)

    monkeypatch.setattr(RandomAttack, "propose", one_short)
    with pytest.raises(RuntimeError, match="proposed"):
        engine.run(make_cfg(), progress=False)


def _tempered(t: float) -> Temperature:
    return Temperature(Temperature.Params(t), torch.Generator())


class _Round(AnswerTransform):
    """A probability-space step that coarsens answers (a defense-like transform) and counts its calls."""

    name, space = "round", "probs"

    def __init__(self) -> None:
        self.images = 0

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.images += int(x.shape[0])
        r = torch.round(scores * 4) / 4 + 1e-3
        return r / r.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
@given(budget=st.integers(0, 200), sizes=st.lists(st.integers(1, 60), max_size=8))
def test_answer_transforms_leave_the_budget_accounting_unchanged(mode, budget, sizes):
    # contract 1.1, 1.2: victim -> transforms -> output mode; one image is one query whatever the transforms do
    plain = make_oracle(budget, mode)
    rounding = _Round()
    pipeline = AnswerPipeline(plain.answers.victim, [_tempered(2.0), rounding])
    piped = Oracle(pipeline, mode, budget, SHAPE)
    for n in sizes:
        x = torch.rand(n, *SHAPE)
        if plain.queries_used + n > budget:
            for oracle in (plain, piped):
                with pytest.raises(BudgetExhausted):
                    oracle.query(x)
        else:
            a, b = plain.query(x), piped.query(x)
            assert len(a) == len(b) == n
            if mode == "soft_prob":
                assert torch.allclose(b.y.sum(dim=1), torch.ones(n))
            else:
                z = plain.answers.victim.logits(x) / 2.0
                want = rounding.apply(torch.softmax(z, dim=1), x).argmax(dim=1)
                rounding.images -= n
                assert torch.equal(b.y, want)  # the label is the top-1 of the transformed answer
        assert piped.queries_used == plain.queries_used
        assert rounding.images == piped.queries_used  # each charged image passed the transform once


def test_transform_order_and_reference_answers():
    # contract 1.2, 1.3: logits steps precede probability steps; metrics see only reference steps (temperature)
    victim = make_oracle(10).answers.victim
    with pytest.raises(ValueError, match="logits come before"):
        AnswerPipeline(victim, [_Round(), _tempered(2.0)])
    x = torch.rand(5, *SHAPE)
    pipeline = AnswerPipeline(victim, [_tempered(2.0), _Round()])
    tempered = torch.softmax(victim.logits(x) / 2.0, dim=1)
    assert torch.allclose(pipeline.reference_probs(x), tempered)
    assert not torch.allclose(pipeline.probs(x), tempered)
    assert torch.equal(build_answers(victim, 1.0).probs(x), victim.probs(x))  # T = 1: no step at all
    assert [t["name"] for t in build_answers(victim, 0.5).describe()] == ["temperature"]
