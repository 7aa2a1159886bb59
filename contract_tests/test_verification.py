"""Ownership verification (issue 56, the method layer): every registered verifier, straight from the
registry, so a new one is checked the day it is registered; DAWN's defense behind the oracle.

Contract §1.1 and §14.1 bound what verification may do: the oracle is the only door to the victim
and the attack's budget is the attack's, so a verifier queries the suspect only (counted by the
``Suspect``), a watermarking defense's answers are charged like any other, and a negative model is
trained on ground truth alone. §15.2: a verifier's parameters fail before any work, naming the key.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from mebench.cli import main
from mebench.defenses import DEFENSES, build_answers, make_defense
from mebench.defenses.dawn import Dawn
from mebench.errors import BudgetExhausted, ConfigError
from mebench.models.registry import build_model
from mebench.oracle import Oracle
from mebench.testing import _images
from mebench.verification import VERIFIERS, OwnerData, Suspect, decide, make_verifier, negatives_needed
from mebench.verification.negatives import train_negative, train_negatives
from mebench.victims.wrapper import FrozenVictim

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (1, 8, 8)
#: Small settings so each method prepares and scores in well under a second on the tiny world.
FAST = {"dataset_inference": {"points": 30, "fit_points": 60, "walks": 5, "steps": 20, "noise": 0.02, "epochs": 200}}
DAWN_TEST = {"rate": 0.2}


def _model() -> torch.nn.Module:
    return build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,))


class _Counting(torch.nn.Module):
    """A model that counts the images it is shown (the victim, to prove scoring never reaches it)."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net, self.seen = net, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += len(x)
        return self.net(x)


@pytest.fixture(scope="module")
def world():
    """The owner's data (SYNTH), a victim that learned the private split, an independent model trained
    on other SYNTH images, and, behind a ``dawn`` oracle, an extraction's clone and its defense."""
    x, y = _images("SYNTH", True)
    xt, yt = _images("SYNTH", False)
    owner = OwnerData.from_uint8((x[:200], y[:200]), (xt[:200], yt[:200]))
    victim_net = _Counting(train_negative(_model, owner.train_x, owner.train_y, seed=0, steps=600, fraction=1.0))
    independent = train_negative(_model, x[1000:1200].float() / 255, y[1000:1200], seed=1, steps=400, fraction=1.0)
    victim = FrozenVictim(victim_net, "cpu")
    defense = make_defense("dawn", Dawn.Params(**DAWN_TEST), torch.Generator().manual_seed(0))
    oracle = Oracle(build_answers(victim, 1.0, defense), "hard_top1", 200, SHAPE)
    queries = _images("SYNTHSUR", True)[0][:200].float() / 255
    answers = torch.cat([oracle.query(queries[i:i + 50]).y for i in range(0, 200, 50)])
    clone = train_negative(_model, queries, answers, seed=2, steps=400, fraction=1.0, lr=1e-2)
    return {"owner": owner, "victim": victim, "victim_net": victim_net, "independent": independent,
            "defense": defense, "oracle": oracle, "clone": clone}


def _verifier(name: str):
    cls = VERIFIERS.get(name)
    return make_verifier(name, cls.Params(**FAST.get(name, {})))


def _derived(world, name: str) -> torch.nn.Module:
    """The positive: the victim itself, or for a method that reads its defense's marks (DAWN) the clone
    an extraction trained on those marked answers (the victim never answers its own watermarks)."""
    return world["clone"] if VERIFIERS.get(name).needs_defense else copy.deepcopy(world["victim_net"].net)


# every verifier: named as registered, a paper, its authors' code at a commit, typed defaults that pass
# its own rules (§15.2), and a docs page that cites that commit.
@pytest.mark.parametrize("name", VERIFIERS.names())
def test_every_verifier_declares_itself(name):
    cls = VERIFIERS.get(name)
    assert cls.name == name and cls.paper and "@" in cls.reference
    assert cls.suspect_output in ("label", "logits")
    assert cls.needs_defense is None or cls.needs_defense in DEFENSES
    assert dataclasses.is_dataclass(cls.Params) and dataclasses.is_dataclass(cls.Params())
    cls.check_params(cls.Params())
    page = ROOT / "docs" / "verification" / f"{name}.md"
    assert page.is_file(), f"verifier {name}: no page docs/verification/{name}.md"
    assert cls.reference.split("@")[1] in page.read_text(encoding="utf-8"), f"{page} does not cite the commit"
    assert f"verification/{name}.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


# contract §14.1 (issue 56): every verifier prepares on the owner's side and scores a suspect by
# querying the suspect alone, exactly the images it declares; the victim is not shown one image and
# the oracle's count does not move while it scores; a model derived from the victim scores above an
# independently trained one.
@pytest.mark.parametrize("name", VERIFIERS.names())
def test_every_verifier_scores_the_derived_model_above_an_independent_one(world, name):
    verifier, oracle, victim_net = _verifier(name), world["oracle"], world["victim_net"]
    used = oracle.queries_used
    state = verifier.prepare(world["victim"], world["owner"], torch.Generator().manual_seed(0), world["defense"])
    seen = victim_net.seen
    scores = {}
    for kind, model in (("derived", _derived(world, name)), ("independent", world["independent"])):
        suspect = Suspect(model)
        scores[kind] = verifier.score(state, suspect)
        assert isinstance(scores[kind], float) and math.isfinite(scores[kind]), (name, kind, scores[kind])
        assert suspect.queries == verifier.suspect_queries(state) > 0, (name, kind)
    assert victim_net.seen == seen and oracle.queries_used == used
    assert scores["derived"] > scores["independent"], (name, scores)


# issue 56: the owner's key is fixed by its generator, so every suspect meets the same queries.
@pytest.mark.parametrize("name", VERIFIERS.names())
def test_every_verifier_is_deterministic_given_its_generator(world, name):
    verifier, suspect_model = _verifier(name), world["independent"]
    first, second = (verifier.score(verifier.prepare(world["victim"], world["owner"], torch.Generator().manual_seed(3),
                                                     world["defense"]), Suspect(suspect_model)) for _ in range(2))
    assert first == second


# contract §1.1 (issue 56): DAWN is an ordinary defense behind the oracle: one image is one query whether
# or not its answer is watermarked, at odd remainders too, and a batch that would overdraw is refused
# whole by both oracles.
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_dawn_answers_are_charged_like_any_other(world, mode):
    victim = world["victim"]
    plain = Oracle(build_answers(victim, 1.0, None), mode, 101, SHAPE)
    dawn = make_defense("dawn", Dawn.Params(rate=0.3), torch.Generator().manual_seed(0))
    defended = Oracle(build_answers(victim, 1.0, dawn), mode, 101, SHAPE)
    images = torch.rand(101, *SHAPE, generator=torch.Generator().manual_seed(1))
    start = 0
    for n in (7, 13, 1, 29, 50, 1):
        x = images[start:start + n]
        a, b = plain.query(x).y, defended.query(x).y
        start += n
        assert plain.queries_used == defended.queries_used == start
        labels = (a.argmax(1), b.argmax(1)) if mode == "soft_prob" else (a, b)
        marked = labels[0] != labels[1]
        assert int(marked.sum()) == len(dawn.watermarks(start)[1]) - len(dawn.watermarks(start - n)[1])
    for oracle in (plain, defended):
        with pytest.raises(BudgetExhausted):
            oracle.query(images[:2])
        assert oracle.queries_used == 101
    assert dawn.answered == 101 and 0 < len(dawn.watermarks()[1]) < 101


# issue 56: DAWN marks a share of about `rate` of the queries, decided by the key and the image alone:
# a repeated image gets the same wrong label (recorded once), another key marks other images, the
# wrong label is never the victim's, and the soft answer is the victim's with two entries swapped.
def test_dawn_marks_by_key_and_image(world):
    victim = world["victim"]
    x = torch.rand(4000, *SHAPE, generator=torch.Generator().manual_seed(5))
    probs = victim.probs(x)

    def defended(key: str) -> tuple[Dawn, torch.Tensor]:
        d = make_defense("dawn", Dawn.Params(rate=0.05, key=key), torch.Generator())
        return d, d.apply(probs, x)

    d, out = defended("owner")
    marked = (out != probs).any(1)
    assert abs(float(marked.float().mean()) - 0.05) < 0.015
    assert torch.equal(out.sort(1).values, probs.sort(1).values)
    assert bool((out[marked].argmax(1) != probs[marked].argmax(1)).all())
    images, labels = d.watermarks()
    assert torch.equal(images, x[marked]) and torch.equal(labels, out[marked].argmax(1))
    again = d.apply(probs[:100], x[:100])
    assert torch.equal(again, out[:100]) and len(d.watermarks()[1]) == int(marked.sum())
    assert d.answered == 4100
    _, other = defended("someone else")
    assert not torch.equal((other != probs).any(1), marked)


# issue 56: the DAWN verifier reads the run's dawn defense and nothing else; with fewer watermarks
# served than it needs, it has no evidence (-inf) and sends nothing.
def test_dawn_verifier_needs_its_defense_and_enough_watermarks(world):
    verifier = make_verifier("dawn")
    with pytest.raises(ValueError, match="'dawn' defense"):
        verifier.prepare(world["victim"], world["owner"], torch.Generator(), None)
    state = verifier.prepare(world["victim"], world["owner"], torch.Generator(), world["defense"], upto=0)
    suspect = Suspect(world["clone"])
    assert verifier.score(state, suspect) == -math.inf and suspect.queries == verifier.suspect_queries(state) == 0


# contract §1.1 (issue 56): a negative model never sees a victim answer: the helper takes images and
# ground-truth labels only, and while it trains no victim and no oracle can answer.
def test_negatives_train_on_ground_truth_and_never_call_the_victim(world, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a negative model asked the victim")

    for target, attr in ((FrozenVictim, "logits"), (FrozenVictim, "probs"), (Oracle, "query")):
        monkeypatch.setattr(target, attr, refuse)
    owner, victim_net = world["owner"], world["victim_net"]
    seen = victim_net.seen
    negatives = train_negatives(_model, owner.public_x, owner.public_y, count=2, seed=10, steps=300)
    assert victim_net.seen == seen and len(negatives) == 2
    for model in negatives:
        with torch.no_grad():
            assert float((model(owner.public_x).argmax(1) == owner.public_y).float().mean()) > 0.8
    with torch.no_grad():
        assert not torch.equal(negatives[0](owner.public_x), negatives[1](owner.public_x))


# issue 56: scores become TPR at FPR <= 1 % and 0.1 % against the negatives; a rate is resolved only
# with at least 1 / FPR negatives (100 and 1,000).
def test_decisions_at_one_and_a_tenth_percent_need_their_negatives():
    assert negatives_needed(0.01) == 100 and negatives_needed(0.001) == 1000
    positives = [0.9, 0.95, 0.3]
    few = decide(positives, [i / 1000 for i in range(100)], n_boot=50)
    assert few["0.01"]["resolved"] and not few["0.001"]["resolved"]
    assert few["0.01"]["negatives_needed"] == 100 and few["0.001"]["negatives_needed"] == 1000
    many = decide(positives, [i / 2000 for i in range(1000)], n_boot=50)
    assert many["0.01"]["resolved"] and many["0.001"]["resolved"]
    assert many["0.01"]["tpr"] == pytest.approx(2 / 3) and many["0.01"]["fpr"] <= 0.01
    assert few["0.01"]["tpr_ci95"] is not None


# contract §15.2: a verifier's parameter out of range is one ConfigError naming measure.verification.<name>.<field>.
@pytest.mark.parametrize("name,field,value", [("akh", "queries", 0), ("sac", "queries", 1),
                                              ("dataset_inference", "noise", 0.0), ("dataset_inference", "walks", 1),
                                              ("dawn", "min_watermarks", 0)])
def test_bad_verifier_params_name_their_key(name, field, value):
    cls = VERIFIERS.get(name)
    with pytest.raises(ConfigError) as err:
        cls.check_params(dataclasses.replace(cls.Params(), **{field: value}))
    assert err.value.key == f"measure.verification.{name}.{field}" and "\n" not in str(err.value)


@pytest.mark.parametrize("params,key", [({"rate": 0.0}, "rate"), ({"rate": 1.0}, "rate"), ({"precision": 0}, "precision"),
                                        ({"key": ""}, "key"), ({"rate": 1e-6, "precision": 8}, "rate")])
def test_bad_dawn_settings_name_their_key(params, key):
    # contract §15.2: the defense's rules
    with pytest.raises(ConfigError) as err:
        Dawn.check_params(Dawn.Params(**params), "soft_prob")
    assert err.value.key == f"defense.params.{key}"


# issue 56: `mebench list verifiers` names each method with its paper and what the suspect must answer.
def test_list_verifiers(capsys):
    assert main(["list", "verifiers"]) == 0
    out = capsys.readouterr().out
    for name in VERIFIERS.names():
        line = next(line for line in out.splitlines() if line.split() and line.split()[0] == name)
        assert VERIFIERS.get(name).paper in line and VERIFIERS.get(name).suspect_output in line


# issue 56: the verification probe scores every checkpoint substitute (Track A and B) with each named
# verifier, as long rows of measurements.csv, and never moves the oracle: the run's metrics rows and
# queries are the same bytes with and without it.
@pytest.mark.slow  # two engine runs
def test_the_verification_probe_scores_each_substitute_and_never_queries_the_victim(make_cfg, tmp_path, monkeypatch):
    import csv

    from mebench.harness.cost import estimate
    from mebench.run import engine

    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "cache"))  # no earlier test's negatives
    tiny = {"budget": {"max_budget": 100, "checkpoints": [50, 100]}}
    plain = engine.run(make_cfg(**tiny), progress=False)
    probe = {"methods": ["akh", "sac"], "negatives": 4, "negative_steps": 10, "sac": {"queries": 20}}
    cfg = make_cfg(**tiny, measure={"verification": probe})
    negatives = lambda: estimate([cfg], threads=1).phases["verification_negatives"]  # noqa: E731  (asks the cache)
    assert negatives() > 0
    probed = engine.run(cfg, progress=False)
    assert negatives() == 0.0  # the estimate knows the run left them in the cache
    a, b = plain.directory / "seed_0", probed.directory / "seed_0"
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    summary = json.loads((b / "summary.json").read_text())
    assert summary["queries_used"] == json.loads((a / "summary.json").read_text())["queries_used"] == 100
    ver = summary["verification"]
    assert set(ver["methods"]) == {"akh", "sac"} and ver["methods"]["sac"]["params"] == {"queries": 20}
    # the owner's negatives: scored once under the owner's key, the same list for every checkpoint
    assert ver["negatives"]["count"] == 4 and {len(v["*"]) for v in ver["negatives"]["scores"].values()} == {4}
    with (b / "measurements.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["probe"] == "verification"]
    scored = {(r["checkpoint_B"], r["track"]) for r in rows}
    tracks = {(str(r["checkpoint_B"]), r["track"]) for r in summary["results"]}
    assert scored == tracks and len(scored) >= 2
    for metric in ("akh_score", "sac_score", "akh_queries", "sac_queries"):
        assert len([r for r in rows if r["metric"] == metric]) == len(tracks)
    assert all(float(r["value"]) > 0 for r in rows if r["metric"].endswith("_queries"))


# issue 56: an unknown or repeated verifier is one config error naming the key, before any work.
@pytest.mark.parametrize("methods", [["akh", "nope"], ["akh", "akh"], []])
def test_the_verification_probe_refuses_unknown_methods(make_cfg, methods):
    from mebench.config.validation import validate
    from mebench.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        validate(make_cfg(measure={"verification": {"methods": methods}}), check_files=False)
    assert e.value.key == "measure.verification.methods"


# issue 56: a method's parameters come from measure.verification.<method>; a section for a method the
# run does not use, or a value out of range, is one config error naming the key, before any work.
@pytest.mark.parametrize("section,key", [({"sac": {"queries": 1}}, "measure.verification.sac.queries"),
                                         ({"dataset_inference": {"walks": 3}}, "measure.verification.dataset_inference"),
                                         ({"akh": {"nope": 1}}, "measure.verification.akh.nope"),
                                         ({"negatives": 0}, "measure.verification.negatives"),
                                         ({"negative_archs": ["nope"]}, "measure.verification.negative_archs")])
def test_verification_settings_fail_before_work_naming_their_key(make_cfg, section, key):
    from mebench.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate(make_cfg(measure={"verification": {"methods": ["akh", "sac"], **section}}), check_files=False)
    assert e.value.key == key and "\n" not in str(e.value)


def test_verification_method_params_reach_the_method():
    from mebench.probes.verification import VerificationProbe

    p = VerificationProbe.configure({"methods": ["akh", "dataset_inference"], "dataset_inference": {"walks": 4}})
    assert p.params_of("dataset_inference").walks == 4 and p.params_of("akh") is None


# issue 56: the owner's population is trained on the test split's second half only: disjoint from the
# public points it is scored on and from the private split; it is cached, so a second call trains nothing.
def test_the_negative_population_is_disjoint_from_the_public_points_and_cached(monkeypatch):
    from mebench.verification import negatives as neg

    x, y = _images("SYNTH", False)
    public, held = neg.split_public(x, y)
    assert len(public[0]) + len(held[0]) == len(x) and torch.equal(torch.cat([public[0], held[0]]), x)
    pop = neg.Population(count=3, archs=("tiny_mlp",), steps=5, seed=7)
    make = lambda arch: build_model(arch, 1, 4, (8, 8), (0.5,), (0.25,))  # noqa: E731
    first, paths = neg.population(pop, make, held[0].float() / 255, held[1])
    ids = [p.stem for p in paths]
    assert len(first) == 3 and len(set(ids)) == 3
    monkeypatch.setattr(neg, "train_negative", lambda *a, **k: pytest.fail("a cached negative was trained again"))
    again, paths2 = neg.population(pop, make, held[0].float() / 255, held[1])
    ids2 = [p.stem for p in paths2]
    assert ids2 == ids and all(torch.equal(p, q) for a, b in zip(first, again)
                                for p, q in zip(a.state_dict().values(), b.state_dict().values()))


# issue 56: decisions over a result set. With one owner key every clone meets the same negatives and
# the keyed rate is the plain bootstrap; with a key per run (DAWN) each clone meets its own threshold.
def test_keyed_rates_read_like_the_plain_bootstrap_with_one_key():
    from mebench.detection.rates import bootstrap_tpr_at_fpr, keyed_tpr_at_fpr

    g = torch.Generator().manual_seed(0)
    neg = torch.randn(100, generator=g).tolist()
    pos = [5.0, 0.0, 4.0]
    one = keyed_tpr_at_fpr(pos, [0, 0, 0], [neg], 0.01)
    plain = bootstrap_tpr_at_fpr(pos, neg, 0.01)
    assert one["tpr"] == plain["tpr"] == pytest.approx(2 / 3) and one["threshold"] == plain["threshold"]
    assert one["resolved"] and not keyed_tpr_at_fpr(pos, [0, 0, 0], [neg], 0.001)["resolved"]
    high = [v + 10 for v in neg]  # the second clone's own negatives sit above every clone
    assert keyed_tpr_at_fpr(pos, [0, 1, 0], [neg, high], 0.01)["tpr"] == pytest.approx(2 / 3)
    assert keyed_tpr_at_fpr(pos, [1, 0, 1], [neg, high], 0.01)["tpr"] == 0.0


def _replicate_by_replicate(pos, keys, sets, fpr, n_boot, seed):
    """The keyed bootstrap as its definition reads, on the same resamples (``rates._draws``): per replicate,
    set each threshold on its resampled negatives and count the resampled clones above their own."""
    import numpy as np

    from mebench.detection.rates import _draws, tpr_at_fpr

    pos, keys, sets = np.asarray(pos), np.asarray(keys), [np.asarray(s) for s in sets]
    pick, *picks = _draws(np.random.default_rng(seed), (pos.size, *(s.size for s in sets)), n_boot)
    tprs = []
    for b in range(n_boot):
        cuts = [tpr_at_fpr([0.0], s[q[b]], fpr)["threshold"] for s, q in zip(sets, picks)]
        tprs.append(float(np.mean([pos[i] > cuts[keys[i]] for i in pick[b]])))
    return [float(v) for v in np.percentile(tprs, [2.5, 97.5])]


# issue 56: the vectorised bootstrap (the report's time) gives the intervals its definition gives, to the last digit.
@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([-math.inf, -1.0, 0.0, 0.5, 1.0, 2.0]), min_size=1, max_size=6),
       st.lists(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 1.5]), min_size=1, max_size=120), min_size=1, max_size=3),
       st.sampled_from([0.001, 0.01, 0.1, 0.5]), st.integers(0, 3))
def test_the_bootstrap_intervals_are_those_of_one_replicate_at_a_time(pos, sets, fpr, seed):
    from mebench.detection.rates import bootstrap_tpr_at_fpr, keyed_tpr_at_fpr

    keys = [i % len(sets) for i in range(len(pos))]
    got = keyed_tpr_at_fpr(pos, keys, sets, fpr, n_boot=50, seed=seed)["tpr_ci95"]
    assert got == _replicate_by_replicate(pos, keys, sets, fpr, 50, seed)
    plain = bootstrap_tpr_at_fpr(pos, sets[0], fpr, n_boot=50, seed=seed)["tpr_ci95"]
    assert plain == _replicate_by_replicate(pos, [0] * len(pos), sets[:1], fpr, 50, seed)


def test_the_report_decides_each_condition_from_the_records():
    from mebench.report.load import RunRecord
    from mebench.report.verification import evasion_lines, verification_frame, verification_table

    def record(seed, attack, score, collapsed=False):
        ver = {"methods": {"akh": {}}, "negatives": {"count": 100, "scores": {"akh": {"*": [i / 1000 for i in range(100)]}}},
               "scores": [{"track": "A", "checkpoint_B": 1000, "method": "akh", "score": score, "queries": 100}]}
        health = [{"track": "A", "checkpoint_B": 1000, "pred_top_share": 1.0 if collapsed else 0.2, "victim_top_share": 0.11},
                  {"track": "B", "checkpoint_B": 1000, "pred_top_share": 0.98, "victim_top_share": 0.11}]  # another track's
        return RunRecord(rows=[], summary={"status": "complete", "seed": seed, "verification": ver,
                                           "attack": {"label": attack, "output_mode": "soft_prob"},
                                           "dataset": {"name": "SYNTH", "data_mode": "surrogate"},
                                           "victim": {"victim_id": "v"}, "defense": {"name": "none"},
                                           "training_health": health})

    recs = [record(s, "thief", 0.5) for s in range(3)] + [record(s, "null", 0.03 * s) for s in range(3)]
    recs += [record(s, "part", 0.5 if s == 0 else 0.0) for s in range(3)]
    recs += [record(s, "flat", 0.5, collapsed=s > 0) for s in range(3)]
    t = verification_table(verification_frame(recs), n_boot=200).set_index("attack")
    assert t.loc["thief", "tpr_at_0.01"] == 1.0 and t.loc["null", "tpr_at_0.01"] == 0.0
    assert t.loc["thief", "clones"] == 3 and t.loc["thief", "negatives"] == 100
    assert bool(t.loc["thief", "resolved_0.01"]) and not bool(t.loc["thief", "resolved_0.001"])
    assert t.loc["flat", "collapsed"] == 2 and t.loc["thief", "collapsed"] == 0  # Track B's flags are not Track A's
    lines = evasion_lines(t.reset_index())  # the page's paragraph: who evades which method, from the same table
    assert lines[0] == ("akh at 1k: catches every clone of flat (surrogate, soft_prob) [2/3 collapsed], thief "
                        "(surrogate, soft_prob); some clones of part (surrogate, soft_prob) 1/3; is evaded by null "
                        "(surrogate, soft_prob).")
    assert lines[1].startswith("[k/n collapsed] marks a condition where k of its n clones collapsed")
    assert lines[2:] == ["FPR 1% is resolved in every cell (100 negatives; 100 resolve it).",
                         "FPR 0.1% is resolved in no cell (100 negatives; 1,000 resolve it)."]
    assert "[k/n collapsed]" not in " ".join(evasion_lines(t.drop(index="flat").reset_index()))


# issue 56: behind the dawn defense, each checkpoint's substitutes (Track A and B) are scored on the
# watermarks served up to that checkpoint, and the negatives are scored on the same set: a track may
# score its substitute before the probe's own checkpoint hook runs, and must not meet an older set.
@pytest.mark.slow  # one engine run
def test_dawn_scores_each_checkpoint_on_the_watermarks_served_so_far(make_cfg):
    from mebench.run import engine

    cfg = make_cfg(budget={"max_budget": 100, "checkpoints": [50, 100]}, defense={"name": "dawn", "params": DAWN_TEST},
                   measure={"verification": {"methods": ["dawn"], "negatives": 3, "negative_steps": 5}})
    ver = json.loads((engine.run(cfg, progress=False).directory / "seed_0" / "summary.json").read_text())["verification"]
    scored = {(s["track"], s["checkpoint_B"]): s["queries"] for s in ver["scores"] if s["method"] == "dawn"}
    budgets = {b for _, b in scored}
    assert budgets == {50, 100} and set(ver["negatives"]["scores"]["dawn"]) == {"50", "100"}
    per_budget = {b: {q for (_, bb), q in scored.items() if bb == b} for b in budgets}
    assert all(len(v) == 1 for v in per_budget.values())  # both tracks meet one set per checkpoint
    assert 0 < per_budget[50].pop() < per_budget[100].pop()  # the later set holds the earlier one and more
