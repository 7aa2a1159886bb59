"""No attack's queries or Track B substitute depend on the test split (contract §8, §9).

The engine's evaluator holds the victim's test split; an attack gets its AttackContext and
the query store only. Reading a guard on a loader proves little (the split is already in
memory, and a loader can be reached many ways), so this test asks what matters: run the same
seed twice through ``engine.run_seed``, the second time with a *different* test split (every
way of reading SYNTH's test split returns other images and labels), and require the same
queries, the same answers and bit-identical Track B weights at every checkpoint. A positive
control shows the check catches an attack whose Track B reads the test split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import torch

from mebench.attacks import ATTACKS as ATTACK_CLASSES
from mebench.testing import swap_synth_test_split
from mebench.run.plan import resolve, site
from test_dfme import TINY as TINY_DFME  # each generative attack's tiny preset lives in its own test module
from test_dfms import TINY as TINY_DFMS
from test_maze import TINY as TINY_MAZE

#: Whole engine runs per variant: every attack's test-split independence is in the fast tier
#: (test_attack_registry.py::test_track_b_does_not_depend_on_the_test_split).
pytestmark = pytest.mark.slow
DATA_FREE = {"dataset": {"data_mode": "data_free", "surrogate_name": None}}


def SMOKE(name: str) -> dict[str, Any]:  # noqa: N802 (reads like the TINY presets beside it)
    """The attack's registered smoke parameters; the base config's Random ``batch_size`` is dropped
    (``None`` deletes a key in ``deep_update``) unless the attack has one of its own."""
    return {"batch_size": None, **ATTACK_CLASSES.get(name).smoke_params}

# (id, attack section, other sections): every attack with a Track B of its own
ATTACKS = [
    ("jbda", {"name": "jbda", "params": {"augmentation": "jbda", "round_epochs": 1, "final_epochs": 1}}, {}),
    ("jb_self", {"name": "jbda", "output_mode": "hard_top1",
                 "params": {"augmentation": "jb_self", "round_epochs": 1, "final_epochs": 1}}, {}),
    ("jb_top3", {"name": "jbda", "params": {"augmentation": "jb_top", "round_epochs": 1, "final_epochs": 1}}, {}),
    ("knockoff", {"name": "knockoff", "params": {"epochs": 1}}, {}),
    ("knockoff_adaptive", {"name": "knockoff", "params": {"epochs": 1, "strategy": "adaptive"}}, {}),
    ("copycat", {"name": "copycat", "output_mode": "hard_top1", "params": {"epochs": 1}}, {}),
    ("dissector", {"name": "dissector", "output_mode": "hard_top1",
                   "params": {"epochs": 1, "batch_size": 32, "initial_budget": 20, "splits": [20, 40, 100],
                              "num_erasings": 3}},
     {"substitute": {"arch": "simple_cnn"}}),  # Grad-CAM needs a convolution
    ("activethief", {"name": "activethief", "params": {"strategy": "k_center", "rounds": 2, "max_epochs": 2,
                                                       "patience": 1, "batch_size": 32}}, {}),
    ("dfme", {"name": "dfme", "params": TINY_DFME}, DATA_FREE),
    ("maze", {"name": "maze", "params": TINY_MAZE}, DATA_FREE),
    ("dfms", {"name": "dfms", "params": TINY_DFMS}, {}),
    ("dfms_hl", {"name": "dfms_hl", "output_mode": "hard_top1", "params": TINY_DFMS}, {}),
    # the attacks since 2022, at their registered smoke parameters
    ("disguide", {"name": "disguide", "params": SMOKE("disguide")}, DATA_FREE),
    ("dual_students", {"name": "dual_students", "params": SMOKE("dual_students")}, DATA_FREE),
    ("ideal", {"name": "ideal", "output_mode": "hard_top1", "params": SMOKE("ideal")}, DATA_FREE),
    ("qedg", {"name": "qedg", "output_mode": "hard_top1", "params": SMOKE("qedg")}, DATA_FREE),
    ("swiftthief", {"name": "swiftthief", "params": SMOKE("swiftthief")}, {}),
]


def fingerprint(cfg, out: Path, tamper: Optional[Callable[[Any], None]] = None) -> dict[str, Any]:
    """Run seed 0 of ``cfg``; the queries, answers, Track B weights per checkpoint and the test split used."""
    from mebench.run import engine

    prep = engine.prepare(resolve(cfg), site(cfg))
    seen: dict[str, Any] = {"x": [], "y": [], "b": {}}
    real_make = engine.make_attack

    def make(*args: Any, **kwargs: Any) -> Any:
        attack = real_make(*args, **kwargs)
        if tamper is not None:
            tamper(attack)
        observe, track_b_model = attack.observe, attack.track_b_model

        def spy_observe(batch, out_, state):
            seen["x"].append(batch.x.detach().clone())
            seen["y"].append(out_.y.detach().clone())
            return observe(batch, out_, state)

        def spy_track_b(state):
            model = track_b_model(state)
            seen["b"][state.queries_used] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            return model

        attack.observe, attack.track_b_model = spy_observe, spy_track_b
        return attack

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "make_attack", make)
        result = engine.run_seed(resolve(cfg, 0), site(cfg), prep, out, progress=False)
    assert result.summary["status"] == "complete" and result.summary["queries_used"] == cfg.budget.max_budget
    if ATTACK_CLASSES.get(cfg.attack.name).has_track_b:  # controls have no loop of their own
        assert sorted(seen["b"]) == list(cfg.budget.checkpoints)
    return {"x": torch.cat(seen["x"]), "y": torch.cat(seen["y"]), "b": seen["b"],
            "test_x": prep.evaluator.x.detach().clone(), "disclaimer": result.summary.get("disclaimer"),
            "agreement_b": [r["agreement"] for r in result.rows if r["track"] == "B"]}


def same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"]) and a["b"].keys() == b["b"].keys()
            and all(a["b"][k].keys() == b["b"][k].keys()
                    and all(torch.equal(a["b"][k][n], b["b"][k][n]) for n in a["b"][k]) for k in a["b"]))


def config(make_cfg, attack: dict[str, Any], other: dict[str, Any]):
    mode = attack.get("output_mode", "soft_prob")
    return make_cfg(**{"victim": {"output_mode": mode}, "cache": {"enabled": False},
                       "budget": {"max_budget": 300, "checkpoints": [100, 300]}, **other,
                       "attack": {"output_mode": mode, **attack},
                       "dataset": {"seed_size": 30, **other.get("dataset", {})}})


#: The variants whose parameters no registered attack's ``smoke_params`` covers: every registered
#: attack (jbda, knockoff, copycat, dissector, activethief, dfme, maze, dfms, dfms_hl) is checked at
#: its smoke parameters by test_attack_registry.py::test_track_b_does_not_depend_on_the_test_split.
VARIANTS = [a for a in ATTACKS if a[0] in ("jb_self", "jb_top3", "knockoff_adaptive")]


# contract 8 / 9: Track B (and every query) is the same whatever the test split holds
@pytest.mark.parametrize("attack,other", [a[1:] for a in VARIANTS], ids=[a[0] for a in VARIANTS])
def test_track_b_and_queries_do_not_depend_on_the_test_split(make_cfg, tmp_path, monkeypatch, attack, other):
    from mebench.config.validation import validate

    cfg = config(make_cfg, attack, other)
    validate(cfg)
    first = fingerprint(cfg, tmp_path / "a")
    swap_synth_test_split(monkeypatch)
    second = fingerprint(cfg, tmp_path / "b")
    assert not torch.equal(first["test_x"], second["test_x"])  # the test split really changed...
    assert first["agreement_b"] != second["agreement_b"]  # ...and the scores with it
    assert same_run(first, second)  # the attack did not notice


def test_the_check_catches_a_track_b_that_reads_the_test_split(make_cfg, tmp_path, monkeypatch):
    # positive control: a Track B that reads the test split (here through the data loader,
    # as an attack could) changes when the split changes, and the check above would fail
    from mebench.data.datasets import load_split

    def peek(attack: Any) -> None:
        track_b_model = attack.track_b_model

        def model_after_peeking(state):
            model = track_b_model(state)
            x, _ = load_split("SYNTH", Path("."), False)
            with torch.no_grad():
                next(model.parameters()).add_(x.float().mean() * 1e-3)
            return model

        attack.track_b_model = model_after_peeking

    cfg = config(make_cfg, *next(a[1:] for a in ATTACKS if a[0] == "copycat"))
    first = fingerprint(cfg, tmp_path / "a", peek)
    swap_synth_test_split(monkeypatch)
    second = fingerprint(cfg, tmp_path / "b", peek)
    assert torch.equal(first["x"], second["x"]) and not same_run(first, second)
