"""``example_confidence`` keeps mebench's probe contract: it declares its metrics, checks its
parameters before any work, and measures through the evaluation path (one row per metric for
every substitute it is shown)."""

from types import SimpleNamespace

import pytest
import torch

import mebench_example.probe  # noqa: F401  (registers example_confidence; installed, the entry point does)
from mebench.errors import ConfigError
from mebench.probes import PROBES, Scored


def test_bad_top_k_fails_before_any_work():
    cls = PROBES.get("example_confidence")
    with pytest.raises(ConfigError) as err:
        cls.check(cls.Params(top_k=0), None)
    assert err.value.key == "measure.example_confidence.top_k"


def test_rows_are_the_mean_top_k_probability_of_substitute_and_victim():
    cls = PROBES.get("example_confidence")
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    victim = torch.tensor([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]])
    evaluator = SimpleNamespace(logits=lambda model: logits, victim_probs=victim)
    world = SimpleNamespace(seed=3, prep=SimpleNamespace(evaluator=evaluator))
    probe = cls(cls.Params(top_k=1))
    probe.substitute(world, Scored(track="A", budget=100, model=None, result=None, pred_top_share=0.0))
    got = {r["metric"]: r["value"] for r in probe.measurements()}
    assert set(got) == set(cls.metrics)
    expected = (float(torch.softmax(logits, 1)[0].max()) + 1 / 3) / 2
    assert got["substitute_confidence"] == pytest.approx(expected)
    assert got["victim_confidence"] == pytest.approx(0.7)
    assert {(r["seed"], r["checkpoint_B"], r["track"], r["probe"]) for r in probe.measurements()} == \
        {(3, 100, "A", "example_confidence")}
