"""Knockoff Nets, the JBDA family (jbda, jb_self, jb_top) and CopycatCNN: budget accounting at
odd remainders, what each query is, reproducibility and the reference values (that no attack's
Track B depends on the test split: ``test_track_b_test_split.py``).

Tiny synthetic pools (1x4x4 images) and tiny MLPs, driven by the engine's own query loop
(``mebench.run.engine.collect``) through the real oracle and query store.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import copycat, dissector, jbda, knockoff, maze
from mebench.data.cache import QueryStore
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.run.engine import collect
from mebench.errors import ConfigError
from mebench.oracle import Oracle
from mebench.state import EngineState
from mebench.testing import SpyNet
from mebench.victims.wrapper import FrozenVictim

#: The attack pages: "Defaults and their source" is the one place a default is cited.
DOCS = Path(__file__).resolve().parent.parent / "docs" / "attacks"

SHAPE, K = (1, 4, 4), 4
FAST = {"jbda": dict(round_epochs=2, final_epochs=2, batch_size=32),
        "knockoff": dict(epochs=2, batch_size=32), "copycat": dict(epochs=2, batch_size=32)}
# (attack, params, output mode, data mode)
CASES = [("jbda", {"augmentation": "jbda"}, "soft_prob", "seed"),
         ("jbda", {"augmentation": "jb_self"}, "hard_top1", "surrogate"),
         ("jbda", {"augmentation": "jb_top"}, "soft_prob", "seed"),
         ("jbda", {"augmentation": "jb_top", "kappa": 5, "sigma": 1}, "hard_top1", "surrogate"),
         ("jbda", {"dataset_update": "reference_inplace"}, "soft_prob", "seed"),
         ("jbda", {"augmentation": "jb_self", "dataset_update": "reference_inplace", "kappa": 5, "sigma": 1},
          "hard_top1", "surrogate"),
         ("jbda", {"augmentation": "jb_self", "dataset_update": "reference_inplace",
                   "stored_image": "reference_x_plus_delta"}, "soft_prob", "seed"),
         ("knockoff", {}, "soft_prob", "surrogate"),
         ("knockoff", {}, "hard_top1", "seed"),
         ("copycat", {}, "hard_top1", "surrogate"),
         ("knockoff", {"strategy": "adaptive"}, "soft_prob", "surrogate"),
         ("knockoff", {"strategy": "adaptive", "reward": "loss"}, "hard_top1", "surrogate")]
IDS = [f"{a}-{p.get('augmentation', p.get('strategy', a))}-{m}-{d}" + ("-kappa" if "kappa" in p else "")
       + ("-inplace" if "dataset_update" in p else "")
       + ("-mirror" if "stored_image" in p else "")
       + (f"-{p['reward']}" if "reward" in p else "") for a, p, m, d in CASES]
#: The cases other than an attack's smoke run (its smoke_params' configuration, whose budget and
#: reproducibility test_attack_registry.py checks): the variants only this module runs.
SMOKE_CASES = {("knockoff", "soft_prob", "surrogate"), ("copycat", "hard_top1", "surrogate")}
VARIANTS = [(c, i) for c, i in zip(CASES, IDS) if c[1] or (c[0], c[2], c[3]) not in SMOKE_CASES]


def as_params(cases: list) -> list:
    """``(case, id)`` pairs as pytest params; JBDA's kappa variants (a targeted PGD per image) are slow."""
    return [pytest.param(*c, id=i, marks=[pytest.mark.slow] if "kappa" in i else []) for c, i in cases]


def tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, K))


def pool_images(n: int = 3000) -> torch.Tensor:
    return (torch.rand((n, *SHAPE), generator=torch.Generator().manual_seed(7)) * 255).to(torch.uint8)


def pool_labels(n: int = 3000, classes: int = 5) -> torch.Tensor:
    """The pool's own labels (5 classes, uneven sizes), as a surrogate dataset has them."""
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(8)).clamp_max(classes - 1)


def make_attack(name: str, params: dict, mode: str, data_mode: str, seed: int = 0, budget: int = 1001,
                checkpoints: tuple[int, ...] = (997, 1001), seed_size: int = 20):
    cls = ATTACKS.get(name)
    p = cls.Params(**{**FAST[name], **params})
    cls.check_params(p, budget, checkpoints)
    ctx = AttackContext(profile=get_profile("MNIST"), output_mode=mode, num_classes=K, input_shape=SHAPE,
                        device=torch.device("cpu"), seed=seed, generator=torch.Generator().manual_seed(seed),
                        pool=Pool(pool_images(), "synthetic", pool_labels()), params=p, checkpoints=checkpoints,
                        max_budget=budget, make_substitute=tiny, data_mode=data_mode, seed_size=seed_size)
    return cls(ctx)


def run(attack):
    """Drive ``attack`` through the engine loop; returns oracle, state, batches and Track B models."""
    torch.manual_seed(123)
    spy = SpyNet(tiny())
    victim = FrozenVictim(spy, "cpu")
    mode, budget, cps = attack.ctx.output_mode, attack.ctx.max_budget, attack.ctx.checkpoints
    oracle = Oracle(victim, mode, budget, SHAPE)
    state = EngineState(budget, cps, QueryStore(budget, SHAPE, mode, K), torch.device("cpu"))
    batches = []
    observe = attack.observe
    attack.observe = lambda b, o, s: (batches.append(b), observe(b, o, s))
    models: dict[int, nn.Module] = {}
    collect(attack, oracle, state, lambda b: models.__setitem__(b, attack.track_b_model(state)))
    assert spy.seen == oracle.queries_used  # every image the victim saw went through the oracle
    return oracle, state, batches, models


# contract 1.1 / 14.2: every image the victim sees is one query, Jacobian-augmentation rounds
# included; the run spends exactly the budget at odd remainders (997, 1001) and Track B is
# reported at both checkpoints.
@pytest.mark.parametrize("name,params,mode,data_mode", as_params(VARIANTS))
def test_exact_budget_at_odd_remainders(name, params, mode, data_mode):
    attack = make_attack(name, params, mode, data_mode)
    oracle, state, batches, models = run(attack)
    assert oracle.queries_used == len(state.store) == sum(len(b) for b in batches) == 1001
    assert sorted(models) == [997, 1001]
    x, _ = state.store.prefix(1001)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0  # contract 2.2: images in [0, 1]


# contract 3: a pool attack never queries a pool image twice. JBDA's seed set is distinct pool
# images; its later queries are its procedure's own images, each within λ (L∞) of the image it
# augments: the answered image, or the x + δ the reference's jb-self keeps for it (an augmentation
# can undo an earlier one, so JBDA may repeat an image: the reference does too).
@pytest.mark.parametrize("name,params,mode,data_mode", as_params(zip(CASES, IDS)))
def test_no_image_answered_twice_unless_the_procedure_says_so(name, params, mode, data_mode):
    attack = make_attack(name, params, mode, data_mode)
    _, state, batches, _ = run(attack)
    x, _ = state.store.prefix(1001)
    flat = x.flatten(1)
    if name != "jbda":
        idx = torch.cat([b.meta["pool_index"] for b in batches])
        assert idx.unique().numel() == 1001
        assert flat.unique(dim=0).shape[0] == 1001  # the stored images too, not only the indices
        return
    assert batches[0].meta["round"] == -1 and len(batches[0]) == 20
    assert flat[:20].unique(dim=0).shape[0] == 20
    source = torch.cat([b.meta["source"] for b in batches[1:]])
    assert source.numel() == 1001 - 20 and bool((source < torch.arange(20, 1001)).all())
    kept = torch.cat(attack._stored).flatten(1) if "stored_image" in params else flat
    assert float((flat[20:] - kept[source]).abs().max()) <= 0.1 + 1e-6


# contract 10: a fixed seed (and thread count) reproduces the queries and the Track B substitute;
# another seed changes them.
@pytest.mark.parametrize("name,params,mode,data_mode", as_params(VARIANTS))
def test_reproducible_for_a_fixed_seed(name, params, mode, data_mode):
    (_, s1, _, m1), (_, s2, _, m2), (_, s3, _, _) = [
        run(make_attack(name, params, mode, data_mode, seed=s, budget=300, checkpoints=(300,))) for s in (3, 3, 4)]
    assert torch.equal(s1.store.prefix(300)[0], s2.store.prefix(300)[0])
    assert torch.equal(s1.store.prefix(300)[1], s2.store.prefix(300)[1])
    assert not torch.equal(s1.store.prefix(300)[0], s3.store.prefix(300)[0])
    probe = torch.rand((32, *SHAPE), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(m1[300](probe), m2[300](probe))


# JBDA reference (jacobian.py:198-199): the step's sign flips with period tau, with Python's
# half-to-even round: + for rounds 0-2, - for 3-7, + for 8-12.
def test_jbda_step_sign_schedule():
    signs = [jbda.step_for_round(0.1, 5, r) > 0 for r in range(13)]
    assert signs == [True] * 3 + [False] * 5 + [True] * 5
    assert jbda.step_for_round(0.1, None, 7) == 0.1


# JBDA / jb-self: x + λ sign(∇_x CE) raises the substitute's loss on the victim's label (moves away
# from it), x − λ sign(...) lowers it; jb-top's targeted PGD raises the target logit, stays in
# the L∞ ball and in [0, 1].
def test_jacobian_directions_and_targeted_pgd():
    torch.manual_seed(0)
    model = tiny()
    x = torch.rand(64, *SHAPE) * 0.8 + 0.1
    labels = model(x).argmax(dim=1)
    g = jbda.fgsm_sign(model, x, labels)
    ce = lambda z: torch.nn.functional.cross_entropy(model(z), labels, reduction="none")  # noqa: E731
    with torch.no_grad():
        assert bool((ce(x + 0.01 * g) >= ce(x) - 1e-6).all()) and bool((ce(x - 0.01 * g) <= ce(x) + 1e-6).all())
    targets = (labels + 1) % K
    out = targeted_pgd_out = jbda.targeted_pgd(model, x, targets, 0.1, 0.01, 8)
    assert float((out - x).abs().max()) <= 0.08 + 1e-6 and 0.0 <= float(out.min()) and float(out.max()) <= 1.0
    with torch.no_grad():
        assert bool((model(targeted_pgd_out).gather(1, targets.view(-1, 1)) >
                     model(x).gather(1, targets.view(-1, 1))).float().mean() > 0.9)


# jb-top: each source image gets topk queries, towards the substitute's most likely classes other
# than the victim's label, image-major; |D| grows (1 + topk)-fold per round.
def test_jb_top_round_structure():
    attack = make_attack("jbda", {"augmentation": "jb_top", "topk": 2}, "hard_top1", "seed",
                         budget=20 + 40 + 120, checkpoints=(180,))
    _, state, batches, _ = run(attack)
    rounds = {}
    for b in batches:
        rounds.setdefault(b.meta["round"], []).append(b)
    assert {r: sum(len(b) for b in bs) for r, bs in rounds.items()} == {-1: 20, 0: 40, 1: 120}
    src = torch.cat([b.meta["source"] for b in rounds[0]])
    assert torch.equal(src, torch.arange(20).repeat_interleave(2))
    _, y = state.store.prefix(180)
    assert y.shape == (180,)


# contract 14.1 / 15.2: capability rules fail before any work with one line naming the key.
def test_capabilities_and_bad_params(make_cfg):
    meta = {n: ATTACKS.get(n).describe() for n in ("jbda", "knockoff", "copycat")}
    assert meta["copycat"]["output_modes"] == ["hard_top1"] and meta["copycat"]["data_modes"] == ["surrogate"]
    assert meta["jbda"]["state_dependent_queries"] and all(m["has_track_b"] for m in meta.values())
    for name, bad in [("augmentation", "jbtop3"), ("step_size", 0.0), ("tau", 0), ("topk", 0), ("final_epochs", 0)]:
        with pytest.raises(ConfigError, match=name):
            jbda.Jbda.check_params(jbda.JbdaParams(**{name: bad}), 1000, (1000,))
    for name, bad in [("epochs", 0), ("lr", -1.0), ("momentum", 1.0), ("lr_step", 0)]:
        with pytest.raises(ConfigError, match=name):
            knockoff.KnockoffNets.check_params(knockoff.KnockoffParams(**{name: bad}), 1000, (1000,))
    from mebench.config.validation import validate

    for attack, key in [({"name": "copycat", "output_mode": "soft_prob"}, "attack.output_mode"),
                        ({"name": "jbda", "params": {"augmentation": "jbtop3"}}, "attack.params.augmentation")]:
        with pytest.raises(ConfigError) as err:
            validate(make_cfg(attack=attack), check_files=False)
        assert err.value.key == key and "\n" not in str(err.value)


# contract 6 / 8: each attack's defaults are the values its docs page cites from the reference code
# (mebench.docs.cited_defaults, the one parser), every parameter is cited, and every "-" citation
# names a file and line ("*" lines: parameters no reference code has, with the reason).
@pytest.mark.parametrize("page,params", [("jbda", jbda.JbdaParams), ("knockoff", knockoff.KnockoffParams),
                                         ("copycat", copycat.CopycatParams), ("dissector", dissector.DissectorParams),
                                         ("maze", maze.Params)],
                         ids=["jbda", "knockoff", "copycat", "dissector", "maze"])
def test_defaults_are_the_cited_reference_values(page, params):
    lines = cited_defaults(DOCS / f"{page}.md")
    for field, (_, source, kind) in lines.items():
        assert kind == "*" or re.search(r"[\w/]+\.py:\d+", source), f"no file:line for {field}: {source!r}"
    cited = {field: value for field, (value, _, _) in lines.items()}
    assert set(cited) == {f.name for f in dataclasses.fields(params)}
    defaults = params()
    for name, value in cited.items():
        got = getattr(defaults, name)
        assert got == value and type(got) is type(value), f"{name}: default {got!r}, cited {value!r}"


# Knockoff adaptive (paper section 4.1.2): rewards stay in [0, 1] and finite for any answers and any
# knockoff logits, extreme ones included (another implementation's rewards turn NaN/inf there).
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), scale=st.sampled_from([1.0, 1e3, 1e30]), onehot=st.booleans(),
       reward=st.sampled_from(knockoff.REWARDS), seed=st.integers(0, 2**16))
def test_adaptive_rewards_stay_finite(n, scale, onehot, reward, seed):
    g = torch.Generator().manual_seed(seed)
    sampler = knockoff.AdaptiveSampler(pool_labels(), torch.Generator().manual_seed(0), reward, 3)
    for _ in range(3):
        logits = torch.randn(n, K, generator=g) * scale
        y = torch.softmax(torch.randn(n, K, generator=g) * scale, dim=1)
        if onehot:
            y = torch.nn.functional.one_hot(y.argmax(1), K).float()
        r = sampler.rewards(y, logits)
        assert bool(torch.isfinite(r).all()) and float(r.min()) >= 0.0 and float(r.max()) <= 1.0 + 1e-9
        _, arms = sampler.draw(n)
        sampler.update(arms, r)
        assert bool(torch.isfinite(sampler.policy()).all())


# the gradient bandit moves its policy toward the class that pays, and never draws an image twice
# or from an exhausted class.
def test_adaptive_bandit_learns_the_rewarding_class():
    labels = pool_labels()
    sampler = knockoff.AdaptiveSampler(labels, torch.Generator().manual_seed(0), "all", 10)
    drawn = []
    for _ in range(150):
        idx, arms = sampler.draw(4)
        drawn.append(idx)
        sampler.update(arms, (arms == 2).double())
    pi = sampler.policy()
    assert int(pi.argmax()) == 2 and float(pi[2]) > 0.5
    idx = torch.cat(drawn)
    assert idx.unique().numel() == len(idx)
    assert float((labels[idx] == sampler.classes[2]).double().mean()) > 0.5


# Knockoff adaptive needs the pool's own labels: refused in seed mode before any work, with one line.
def test_adaptive_needs_a_labelled_pool(make_cfg):
    from mebench.config.validation import validate

    with pytest.raises(ConfigError) as err:
        validate(make_cfg(attack={"name": "knockoff", "params": {"strategy": "adaptive"}},
                          dataset={"data_mode": "seed", "surrogate_name": None}), check_files=False)
    assert err.value.key == "attack.params.strategy" and "surrogate" in str(err.value) and "\n" not in str(err.value)
    validate(make_cfg(attack={"name": "knockoff", "params": {"strategy": "adaptive"}}), check_files=False)
    for key, bad in (("strategy", "bandit"), ("reward", "entropy"), ("step_batch", 0)):
        with pytest.raises(ConfigError, match=key):
            knockoff.KnockoffNets.check_params(knockoff.KnockoffParams(**{key: bad}), 1000, (1000,))


# contract 2.2 / 6: the named variant that takes JBDA's step in the reference code's normalized
# space keeps every augmented image in [mean, mean + std] (the reference's clip of x + δ to [0, 1]
# on normalized values), with a pixel step of λ·std; the default keeps the paper's pixel space.
def test_jbda_step_space_normalized_reproduces_the_reference_clip(make_cfg, tmp_path):
    from test_track_b_test_split import config, fingerprint

    def queries(space: str) -> torch.Tensor:
        attack = {"name": "jbda", "params": {"round_epochs": 1, "final_epochs": 1, "step_space": space}}
        return fingerprint(config(make_cfg, attack, {}), tmp_path / space)["x"]

    pixel, normalized = queries("pixel"), queries("normalized")
    seed = 30  # config()'s seed set, queried first and unchanged
    assert torch.equal(pixel[:seed], normalized[:seed])
    lo, hi = 0.1307, 0.1307 + 0.3081
    aug = normalized[seed:]
    assert aug.min() >= lo - 1e-6 and aug.max() <= hi + 1e-6
    assert pixel[seed:].min() < lo or pixel[seed:].max() > hi  # the default is not squashed
    with pytest.raises(ConfigError, match="step_space"):
        jbda.Jbda.check_params(jbda.JbdaParams(step_space="logit"), 1000, (1000,))


# contract 1.1 / 3 / 6: the named variant with the reference code's in-place data set
# (jacobian.py:187, 234-238) queries each round's images as 2^r identical copies, every copy
# charged, and its own model trains on about seed-size distinct images; the default keeps every answer.
def test_jbda_reference_inplace_dataset_keeps_copies_of_the_latest_augmentation():
    attack = make_attack("jbda", {"dataset_update": "reference_inplace", "tau": None}, "soft_prob", "seed")
    oracle, state, batches, _ = run(attack)
    assert oracle.queries_used == len(state.store) == 1001
    rounds: dict[int, list[torch.Tensor]] = {}
    for b in batches:
        rounds.setdefault(b.meta["round"], []).append(b.x)
    sizes = {r: sum(len(x) for x in xs) for r, xs in rounds.items()}
    assert sizes == {-1: 20, 0: 20, 1: 40, 2: 80, 3: 160, 4: 320, 5: 361}  # |D| doubles; the last round is cut
    for r in (1, 2, 3, 4):  # D = 2^r copies of the previous round's 20 augmentations, queried in that order
        x = torch.cat(rounds[r]).flatten(1)
        copies = x.view(2 ** r, 20, -1)
        assert torch.equal(copies, copies[:1].expand_as(copies))
    x, _ = attack._data_set(state)  # the final model's D: rewritten rows then their copy (jacobian.py:237-238)
    assert x.shape[0] == 640 + 361 and x.flatten(1).unique(dim=0).shape[0] == 40
    union = make_attack("jbda", {"tau": None}, "soft_prob", "seed")
    _, ustate, _, _ = run(union)
    assert union._data_set(ustate)[0].flatten(1).unique(dim=0).shape[0] > 900
    with pytest.raises(ConfigError, match="dataset_update"):
        jbda.Jbda.check_params(jbda.JbdaParams(augmentation="jb_top", dataset_update="reference_inplace"), 1000, (1000,))
    with pytest.raises(ConfigError, match="dataset_update"):
        jbda.Jbda.check_params(jbda.JbdaParams(dataset_update="inplace"), 1000, (1000,))


# contract 1.1 / 3 / 6: the named variant with the reference code's jb-self data set
# (jacobian.py:223-235) queries x - delta and keeps x + delta with that answer in the attacker's own
# data set; the victim, the oracle's count and the answer log (Track A's data) see x - delta alone.
def test_jb_self_reference_x_plus_delta_keeps_the_mirror_image():
    params = {"augmentation": "jb_self", "stored_image": "reference_x_plus_delta", "tau": None}
    attack = make_attack("jbda", params, "soft_prob", "seed")
    oracle, state, batches, _ = run(attack)
    assert oracle.queries_used == len(state.store) == 1001
    logged, y = state.labelled()
    assert torch.equal(logged, torch.cat([b.x for b in batches]))  # the log holds what was queried
    kept, ky = attack._data_set(state)
    assert torch.equal(ky, y) and torch.equal(kept[:20], logged[:20])  # the seed set is kept as queried
    src = torch.cat([b.meta["source"] for b in batches])[20:]
    base, q, k = kept[src].flatten(1), logged[20:].flatten(1), kept[20:].flatten(1)
    inside = (q > 0) & (q < 1)  # no clip on x - delta: x + delta and x - delta mirror the source
    assert inside.float().mean() > 0.5
    assert torch.allclose((k + q)[inside], 2 * base[inside], atol=1e-5)
    assert (k != q).any(dim=1).float().mean() > 0.9  # almost every kept image differs from its query
    default = make_attack("jbda", {"augmentation": "jb_self", "tau": None}, "soft_prob", "seed")
    _, dstate, _, _ = run(default)
    assert torch.equal(default._data_set(dstate)[0], dstate.labelled()[0])
    assert torch.equal(dstate.labelled()[0][:40], logged[:40])  # round 0 is built before the sets differ
    with pytest.raises(ConfigError, match="stored_image"):
        jbda.Jbda.check_params(jbda.JbdaParams(stored_image="reference_x_plus_delta"), 1000, (1000,))
    with pytest.raises(ConfigError, match="stored_image"):
        jbda.Jbda.check_params(jbda.JbdaParams(augmentation="jb_self", stored_image="mirror"), 1000, (1000,))
