"""Every registered attack, at its declared ``smoke_params``, keeps the budget, reproduces and
tells the truth about what its queries depend on (contract §1.1, §7, §8, §9, §10, §14.2, §17).

Parametrized straight from ``ATTACKS`` (built-ins and entry-point plugins alike), so an attack is
tested the day it is registered; an attack that declares no ``smoke_params`` fails here with a
line saying what to add. Each attack runs on the synthetic SYNTH world (1x8x8 images, 4 classes,
SYNTHSUR as the pool) through the engine's own query loop, at a budget of 257 with checkpoints
100 and 257 (odd remainders after each), with ``mebench.testing.smoke_run``.

Family-specific budget edge cases (a phase cut by a checkpoint, budgets smaller than one phase)
stay in each family's own module.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import torch

from mebench.attacks import ATTACKS, Attack, register_attack
from mebench.testing import (SMOKE_BUDGET, SMOKE_CHECKPOINTS, register_synthetic, smoke_params, smoke_run,
                             swap_synth_test_split, synthetic_victim_net)
from mebench.types import QueryBatch

register_synthetic()
NAMES = ATTACKS.names()


@lru_cache(maxsize=None)
def victim(which: str) -> torch.nn.Module:
    """``main``: the usual SYNTH victim; ``other``: another seed, fewer steps (answers many images differently)."""
    return synthetic_victim_net(300, 0) if which == "main" else synthetic_victim_net(40, 7)


@lru_cache(maxsize=None)
def run(name: str, seed: int = 0, which: str = "main", other_test_split: bool = False) -> dict[str, Any]:
    """One smoke run, remembered for the module: several tests read the same run."""
    if not other_test_split:
        return smoke_run(name, victim(which), seed)
    from mebench.data.datasets import load_split

    before = load_split("SYNTH", Path("."), False)[0]
    with pytest.MonkeyPatch.context() as mp:
        swap_synth_test_split(mp)
        assert not torch.equal(load_split("SYNTH", Path("."), False)[0], before)  # the split really changed
        return smoke_run(name, victim(which), seed)


def same_weights(a: dict[int, Any], b: dict[int, Any]) -> bool:
    """Track B weights identical at every checkpoint (``None`` where the attack has no Track B)."""
    return a.keys() == b.keys() and all(
        (a[k] is None and b[k] is None) or (a[k] is not None and b[k] is not None and a[k].keys() == b[k].keys()
                                            and all(torch.equal(a[k][n], b[k][n]) for n in a[k])) for k in a)


def test_the_registry_drives_this_module():
    # a plugin registered through an entry point shows up in ATTACKS.names() and so here
    assert len(NAMES) >= 12 and {"random", "dfme", "knockoff", "activethief"} <= set(NAMES)


# every attack declares tiny parameters that parse like a config's and pass its own rules
@pytest.mark.parametrize("name", NAMES)
def test_declares_valid_smoke_params(name):
    cls = ATTACKS.get(name)
    params = smoke_params(cls)
    cls.check_params(params, SMOKE_BUDGET, SMOKE_CHECKPOINTS)
    assert isinstance(params, cls.Params)


def test_an_attack_without_smoke_params_fails_with_a_clear_message():
    class Undeclared(Attack):
        name = "undeclared_smoke_test_attack"
        data_modes = frozenset({"surrogate"})

        def propose(self, k: int, state: Any) -> QueryBatch:
            raise AssertionError("never run")

    register_attack(Undeclared)
    try:
        with pytest.raises(AssertionError, match=r"attack 'undeclared_smoke_test_attack' .* declares no "
                                                 r"smoke_params: set the class attribute smoke_params"):
            smoke_params(ATTACKS.get("undeclared_smoke_test_attack"))
    finally:
        ATTACKS.unregister("undeclared_smoke_test_attack")


# contract 1.1 / 14.2 / 7: every image is one query; the oracle's count equals each checkpoint
# exactly when it fires (odd remainders 100 and 157); pixels in [0, 1] of the victim's shape;
# contract 8: Track B at every checkpoint for an attack that has one, none otherwise
@pytest.mark.parametrize("name", NAMES)
def test_exact_budget_at_odd_remainders(name):
    r = run(name)
    assert r["seen"] == r["queries_used"] == len(r["x"]) == SMOKE_BUDGET
    assert r["at_checkpoint"] == {b: b for b in SMOKE_CHECKPOINTS}
    assert r["x"].shape == (SMOKE_BUDGET, 1, 8, 8) and float(r["x"].min()) >= 0 and float(r["x"].max()) <= 1
    has_b = ATTACKS.get(name).has_track_b
    assert all((w is not None) == has_b for w in r["track_b"].values())


# contract 10: the same seed gives byte-identical queries, answers and Track B weights;
# another seed gives other queries
@pytest.mark.parametrize("name", NAMES)
def test_reproducible_for_a_fixed_seed(name):
    first = run(name)
    again = smoke_run(name, victim("main"), 0)  # not the remembered run: a fresh one
    assert first["x"].numpy().tobytes() == again["x"].numpy().tobytes()
    assert first["y"].numpy().tobytes() == again["y"].numpy().tobytes()
    assert same_weights(first["track_b"], again["track_b"])
    assert not torch.equal(first["x"], run(name, seed=1)["x"])


# contract 9: an attack that says its queries do not depend on its state sends the very same
# images to a victim that answers differently; one that says they do sends other images
@pytest.mark.parametrize("name", NAMES)
def test_state_dependence_claim_matches_behaviour(name):
    cls = ATTACKS.get(name)
    claim = cls.queries_depend_on_state(smoke_params(cls))
    first, other = run(name), run(name, which="other")
    assert not torch.equal(first["y"], other["y"])  # the answers really changed
    assert torch.equal(first["x"], other["x"]) is not claim


# contract 8 / 9: neither the queries nor Track B depend on the victim's test split (the
# attack never gets it; this checks that no loader hands it over either)
@pytest.mark.parametrize("name", [n for n in NAMES if ATTACKS.get(n).has_track_b])
def test_track_b_does_not_depend_on_the_test_split(name):
    first, swapped = run(name), run(name, other_test_split=True)
    assert torch.equal(first["x"], swapped["x"]) and torch.equal(first["y"], swapped["y"])
    assert same_weights(first["track_b"], swapped["track_b"])
