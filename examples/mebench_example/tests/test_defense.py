"""``example_smoothing`` keeps mebench's defense contract: the count is untouched, answers stay
probability vectors with the victim's top-1 label, and bad values fail before any work."""

import pytest
import torch

import mebench_example.defense  # noqa: F401  (registers example_smoothing; installed, the entry point does)
from mebench.defenses import DEFENSES, build_answers
from mebench.errors import ConfigError
from mebench.oracle import Oracle
from mebench.testing import synthetic_config, synthetic_victim_net
from mebench.config.validation import validate
from mebench.victims.wrapper import FrozenVictim


def test_answers_are_smoothed_and_counted_like_any_answer():
    cls = DEFENSES.get("example_smoothing")
    victim = FrozenVictim(synthetic_victim_net(300, 0), "cpu")
    defended = Oracle(build_answers(victim, 1.0, cls(cls.Params(alpha=0.5), torch.Generator())), "soft_prob", 100,
                      (1, 8, 8))
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y, p = defended.query(x).y, victim.probs(x)
    assert defended.queries_used == 64  # contract 1.1: one image, one query, defended or not
    assert torch.allclose(y.sum(1), torch.ones(64)) and torch.allclose(y, 0.5 * p + 0.125)
    assert torch.equal(y.argmax(1), p.argmax(1))


def test_config_rules(tmp_path):
    validate(synthetic_config(tmp_path, defense={"name": "example_smoothing", "params": {"alpha": 0.3}}))
    with pytest.raises(ConfigError) as err:
        validate(synthetic_config(tmp_path, defense={"name": "example_smoothing", "params": {"alpha": 1.0}}))
    assert err.value.key == "defense.params.alpha"
