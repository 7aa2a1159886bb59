"""``example_noise`` keeps mebench's attack contract, checked with mebench's own smoke runs.

``mebench.testing.smoke_run`` runs a registered attack at its ``smoke_params`` on mebench's tiny
synthetic data set through the engine's query loop (the same runs as mebench's registry-driven
contract tests, ``contract_tests/test_attack_registry.py``, which also pick up an installed attack).
"""

import torch

import mebench_example.attack  # noqa: F401  (registers example_noise; installed, the entry point does)
from mebench.attacks import ATTACKS
from mebench.testing import SMOKE_BUDGET, SMOKE_CHECKPOINTS, smoke_params, smoke_run, synthetic_victim_net


def test_exact_budget_reproducible_and_blind_to_the_answers():
    main, other = synthetic_victim_net(300, 0), synthetic_victim_net(40, 7)
    first, again, elsewhere = smoke_run("example_noise", main), smoke_run("example_noise", main), \
        smoke_run("example_noise", other)
    # contract 1.1: the oracle's count is each checkpoint exactly, at odd remainders
    assert first["queries_used"] == first["seen"] == SMOKE_BUDGET
    assert first["at_checkpoint"] == {b: b for b in SMOKE_CHECKPOINTS}
    # contract 10: the same seed sends the same queries
    assert torch.equal(first["x"], again["x"]) and torch.equal(first["y"], again["y"])
    # contract 9: the attack says its queries do not depend on its state, and they do not
    assert not ATTACKS.get("example_noise").queries_depend_on_state(smoke_params(ATTACKS.get("example_noise")))
    assert torch.equal(first["x"], elsewhere["x"]) and not torch.equal(first["y"], elsewhere["y"])
