"""ActiveThief: budget accounting, pool use, reproducibility and what each strategy selects.

Everything runs on tiny synthetic pools (1x4x4 images) with tiny MLPs, driven by
the engine's own query loop (``mebench.run.engine.collect``) through the real
oracle and query store.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import activethief as at
from mebench.attacks import selection as sel
from mebench.config import build_dataclass
from mebench.docs import cited_defaults
from mebench.config.validation import load_config
from mebench.data.cache import QueryStore
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.run.engine import collect
from mebench.errors import ConfigError, DivergenceError
from mebench.oracle import Oracle
from mebench.state import EngineState
from mebench.victims.wrapper import FrozenVictim

#: The attack pages: "Defaults and their source" is the one place a default is cited.
DOCS = Path(__file__).resolve().parent.parent / "docs" / "attacks"

SHAPE, K = (1, 4, 4), 4
FAST = dict(rounds=3, max_epochs=4, patience=2, batch_size=32, candidate_factor=4.0, dfal_prefilter=40)


def tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, K))


def make_attack(strategy: str, seed: int = 0, mode: str = "soft_prob", budget: int = 240,
                checkpoints: tuple[int, ...] = (60, 240), images: torch.Tensor | None = None, **kw):
    if images is None:
        images = (torch.rand((500, *SHAPE), generator=torch.Generator().manual_seed(7)) * 255).to(torch.uint8)
    params = at.ActiveThiefParams(strategy=strategy, **{**FAST, **kw})
    at.ActiveThief.check_params(params, budget, checkpoints)
    ctx = AttackContext(profile=get_profile("MNIST"), output_mode=mode, num_classes=K, input_shape=SHAPE,
                        device=torch.device("cpu"), seed=seed, generator=torch.Generator().manual_seed(seed),
                        pool=Pool(images, "synthetic"), params=params, checkpoints=checkpoints,
                        max_budget=budget, make_substitute=tiny)
    return ATTACKS.get("activethief")(ctx)


def run(attack, mode: str = "soft_prob"):
    """Drive ``attack`` through the engine loop; returns oracle, state, per-batch pool indices, Track B models."""
    torch.manual_seed(123)
    victim = FrozenVictim(tiny(), "cpu")
    budget, cps = attack.ctx.max_budget, attack.ctx.checkpoints
    oracle = Oracle(victim, mode, budget, SHAPE)
    state = EngineState(budget, cps, QueryStore(budget, SHAPE, mode, K), torch.device("cpu"))
    batches: list[torch.Tensor] = []
    observe = attack.observe
    attack.observe = lambda b, o, s: (batches.append(b.meta["pool_index"]), observe(b, o, s))
    models: dict[int, nn.Module] = {}
    collect(attack, oracle, state, lambda b: models.__setitem__(b, attack.track_b_model(state)))
    return oracle, state, batches, models


# contract 1.1 / 14.2: one query = one image; the run spends exactly the budget, batch by batch.
@pytest.mark.parametrize("strategy", at.STRATEGIES)
@pytest.mark.parametrize("mode", ["soft_prob", "hard_top1"])
def test_exact_counting_and_no_repeats(strategy, mode):
    attack = make_attack(strategy, mode=mode)
    oracle, state, batches, models = run(attack, mode)
    idx = torch.cat(batches)
    assert oracle.queries_used == len(state.store) == 240
    assert idx.numel() == 240 and idx.unique().numel() == 240  # contract 3: no pool image twice
    assert int(attack.used.sum()) == 240 and bool(attack.used[idx].all())
    assert sorted(models) == [60, 240]  # contract 8: Track B at every checkpoint
    # every proposal stops at a round boundary, so checkpoints are round boundaries
    ends = {ph.stop for ph in attack.phases}
    assert set(torch.tensor([b.numel() for b in batches]).cumsum(0).tolist()) <= ends


# contract 14.2: propose returns exactly k images even when k is smaller than a round.
def test_propose_exactly_k_inside_a_round():
    first = make_attack("k_center", budget=60, checkpoints=(60,))
    _, state, batches, _ = run(first)
    attack = make_attack("k_center", budget=400, checkpoints=(60, 400))
    attack.used[torch.cat(batches)] = True
    store = QueryStore(400, SHAPE, "soft_prob", K)
    store.append(*state.store.prefix(60))
    state2 = EngineState(400, (60, 400), store, torch.device("cpu"), queries_used=60)
    assert attack.next_batch_size(state2) > 1 + 7 + 13
    picked = []
    for k in (1, 7, 13):
        batch = attack.propose(k, state2)
        assert len(batch) == k and batch.x.shape == (k, *SHAPE)
        picked.append(batch.meta["pool_index"])
    picked_all = torch.cat(picked)
    assert picked_all.unique().numel() == 21
    assert not bool(torch.isin(picked_all, torch.cat(batches)).any())


# contract 10: a fixed seed reproduces the queried images and the Track B substitute (k_center, the
# smoke strategy, in test_attack_registry.py).
@pytest.mark.parametrize("strategy", ["dfal"])
@pytest.mark.slow
def test_determinism(strategy):
    runs = [run(make_attack(strategy, seed=s)) for s in (3, 3, 4)]
    (_, _, b1, m1), (_, _, b2, m2), (_, _, b3, _) = runs
    assert torch.equal(torch.cat(b1), torch.cat(b2))
    assert not torch.equal(torch.cat(b1), torch.cat(b3))
    probe = torch.rand((32, *SHAPE), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(m1[240](probe), m2[240](probe))


# contract 8 (Track B): trained lazily on D_n only, once per n, and reused by the next round.
def test_track_b_trains_once_on_labelled_data(monkeypatch):
    calls: list[tuple[int, int]] = []
    real = at.fit_substitute

    def spy(model, train, val, *a, **kw):
        calls.append((int(train[0].shape[0]), int(val[0].shape[0])))
        return real(model, train, val, *a, **kw)

    monkeypatch.setattr(at, "fit_substitute", spy)
    attack = make_attack("uncertainty")
    _, state, _, models = run(attack)
    starts = [ph.start for ph in attack.phases if ph.kind == "active"]
    trained_at = sorted(set(starts) | {60, 240})
    assert len(calls) == len(trained_at)  # the checkpoint model is reused by the next round
    for n, (n_train, n_val) in zip(trained_at, calls):
        assert n_train + n_val == n  # only images the oracle labelled (D_n), validation included
        assert n_val == int(attack.is_val[:n].sum())
    assert models[240] is attack.track_b_model(state)


# contract 3 / 7: the plan covers the budget, every checkpoint ends a phase, 20 % of D_B is
# random validation at every checkpoint, and a random seed always precedes the first round.
@settings(max_examples=60, deadline=None)
@given(cps=st.lists(st.integers(1, 5000), min_size=1, max_size=4, unique=True).map(sorted),
       extra=st.integers(0, 500), rounds=st.integers(1, 12),
       schedule=st.sampled_from(at.SCHEDULES))
@pytest.mark.slow
def test_schedule_properties(cps, extra, rounds, schedule):
    budget = cps[-1] + extra
    p = at.ActiveThiefParams(rounds=rounds, schedule=schedule)
    phases = at.plan_schedule(p, budget, tuple(cps))
    assert phases[0].start == 0 and phases[-1].stop == budget
    assert all(a.stop == b.start and a.stop > a.start for a, b in zip(phases, phases[1:]))
    assert set(cps) <= {ph.stop for ph in phases}
    assert phases[0].kind == "seed"
    if schedule == "per_checkpoint":
        for b in cps:
            n_val = sum(min(ph.stop, b) - ph.start for ph in phases if ph.kind == "val" and ph.start < b)
            assert abs(n_val - 0.2 * b) <= len(cps) + 1


# contract 15.2: parameters are validated before any work, with the key and a suggestion.
def test_params_validation():
    with pytest.raises(ConfigError, match="strategy"):
        at.ActiveThief.check_params(at.ActiveThiefParams(strategy="k-center"), 1000, (1000,))
    with pytest.raises(ConfigError, match="val_fraction"):
        at.ActiveThief.check_params(at.ActiveThiefParams(initial_fraction=0.5, val_fraction=0.5), 1000, (1000,))
    with pytest.raises(ConfigError, match="did you mean 'strategy'"):
        build_dataclass(at.ActiveThiefParams, {"strategie": "dfal"}, "attack.params")
    p = build_dataclass(at.ActiveThiefParams, {"optimizer": {"name": "adam", "lr": 0.01}}, "attack.params")
    assert p.optimizer.lr == 0.01 and p.optimizer.name == "adam"
    for key, bad in [("dfal_space", "softmax"), ("dfal_step", "deepfool")]:
        with pytest.raises(ConfigError, match=key):
            at.ActiveThief.check_params(at.ActiveThiefParams(**{key: bad}), 1000, (1000,))


def _cited_reference_values() -> dict[str, object]:
    """The page's "Defaults and their source" lines (mebench.docs.cited_defaults, the one parser);
    every one cites the paper or a ``file:line``."""
    cited = cited_defaults(DOCS / "activethief.md")
    for field, (_, source, _) in cited.items():
        assert re.search(r"\bpaper\b|[\w/]+\.(py|md):\d+", source), f"no paper or file:line for {field}: {source!r}"
    return {field: value for field, (value, _, _) in cited.items()}


# contract 8 (Track B runs the attack's native loop): the native loop's defaults are the authors'
# procedure, and every procedure field cites its source on its docs page (docs/attacks/activethief.md).
def test_defaults_are_the_cited_reference_values():
    cited = _cited_reference_values()
    fields = {f.name for f in dataclasses.fields(at.ActiveThiefParams)} - set(at.NOT_PROCEDURE)
    required = (fields - {"optimizer"}) | {"optimizer.name", "optimizer.lr", "optimizer.weight_decay"}
    assert set(cited) == required
    defaults = at.ActiveThiefParams()
    for field, value in cited.items():
        default = defaults
        for part in field.split("."):
            default = getattr(default, part)
        assert (default, type(default)) == (value, type(value)), field


def _authors_deepfool_norm(model: nn.Module, x: torch.Tensor, steps: int = 20, eta: float = 0.01) -> float:
    """One image, written out step by step as the authors' batch DeepFool does it (softmax, all classes)."""
    prob = lambda v: torch.softmax(model(v[None]), dim=1)[0]  # noqa: E731
    k0 = int(prob(x).argmax())
    z = torch.zeros_like(x)
    for _ in range(steps):
        xadv = (x + (1 + eta) * z).clamp(0, 1)
        y = prob(xadv).detach()
        g = torch.autograd.functional.jacobian(prob, xadv).flatten(1)  # [K, D]
        a, b = (y - y[k0]).abs(), g - g[k0]
        score = a / b.norm(dim=1)
        score[torch.isnan(score)] = float("inf")  # 0/0 (the class k0 itself) is never chosen
        j = int(score.argmin())
        z = z + score[j] * b[j].view_as(x)
    return float(((x + (1 + eta) * z).clamp(0, 1) - x).norm())


def test_default_deepfool_is_the_authors_procedure():
    torch.manual_seed(0)
    model = tiny().eval()
    x = 0.2 + 0.6 * torch.rand((12, *SHAPE), generator=torch.Generator().manual_seed(1))
    p = at.ActiveThiefParams()
    norms = sel.deepfool_batch(model, x, max_iter=p.dfal_max_iter, overshoot=p.dfal_overshoot,
                               num_classes=p.dfal_classes, space=p.dfal_space, early_stop=p.dfal_early_stop,
                               step=p.dfal_step)
    expected = torch.tensor([_authors_deepfool_norm(model, xi) for xi in x])
    torch.testing.assert_close(norms, expected, rtol=1e-4, atol=1e-5)
    textbook = sel.deepfool_batch(model, x, max_iter=20, overshoot=0.02, space="logits", early_stop=True,
                                  step="boundary")
    assert not torch.allclose(norms, textbook)  # the options select a different procedure


# Strategy cases below: each selection is forced, where a uniform random pick of k of m
# candidates would find the planted image with probability k/m only.
def test_uncertainty_picks_max_entropy_point():
    probs = torch.softmax(torch.randn(200, K, generator=torch.Generator().manual_seed(0)) * 6, dim=1)
    probs[137] = 1.0 / K
    assert sel.entropy_select(probs, 1).tolist() == [137]


def test_k_center_picks_far_outlier_then_covers_clusters():
    g = torch.Generator().manual_seed(0)
    centers = torch.tensor([[1.0, 0, 0, 0]]) + 0.01 * torch.rand(20, K, generator=g)
    cand = torch.tensor([[1.0, 0, 0, 0]]) + 0.01 * torch.rand(300, K, generator=g)
    cand[41] = torch.tensor([0, 0, 0, 1.0])
    cand[250:] = torch.tensor([0.5, 0.5, 0, 0]) + 0.01 * torch.rand(50, K, generator=g)
    picks = sel.k_center_greedy(cand, centers, 2, chunk=64)
    assert picks[0].item() == 41 and picks[1].item() >= 250  # one per uncovered cluster


def test_deepfool_matches_linear_distance_and_dfal_picks_nearest():
    lin = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x = 0.4 + 0.2 * torch.rand((64, *SHAPE), generator=torch.Generator().manual_seed(0))
    norms = sel.deepfool_batch(lin, x, max_iter=20, overshoot=0.02, num_classes=None, space="logits",
                               early_stop=True, step="boundary")
    with torch.no_grad():
        f, w = lin(x), lin[1].weight
        k = f.argmax(1)
        d = torch.stack([min((f[i, k[i]] - f[i, j]) / (w[k[i]] - w[j]).norm() for j in range(3) if j != k[i])
                         for i in range(64)])
    torch.testing.assert_close(norms, 1.02 * (d + 1e-4), rtol=1e-3, atol=1e-4)
    order = sel.stable_topk(norms, 5, largest=False)
    assert set(order.tolist()) == set(torch.argsort(d)[:5].tolist())


def _planted_attack(strategy: str, images: torch.Tensor, model: nn.Module, **kw):
    """An attack whose substitute is ``model`` and whose first 30 pool images are labelled."""
    attack = make_attack(strategy, images=images, budget=60, checkpoints=(60,), candidate_factor=None, **kw)
    attack._substitute = lambda state: model
    labelled = images[:30].float() / 255
    with torch.no_grad():
        attack._centers = torch.softmax(model(labelled), dim=1)  # what training at n=30 caches
    store = QueryStore(60, SHAPE, "soft_prob", K)
    store.append(labelled, torch.full((30, K), 1.0 / K))
    attack.used[:30] = True
    attack.is_val[:] = False
    return attack, EngineState(60, (60,), store, torch.device("cpu"), queries_used=30)


def _two_feature_model() -> nn.Module:
    """logits = 10 * (pixel0, pixel1, 0, 0): class 0 vs 1 is decided by pixel0 - pixel1."""
    lin = nn.Linear(16, K, bias=False)
    with torch.no_grad():
        lin.weight.zero_()
        lin.weight[0, 0] = lin.weight[1, 1] = 10.0
    return nn.Sequential(nn.Flatten(), lin).eval()


def _pool(first_two: list[tuple[float, float]]) -> torch.Tensor:
    x = torch.zeros((len(first_two), *SHAPE))
    x[:, 0, 0, 0] = torch.tensor([a for a, _ in first_two])
    x[:, 0, 0, 1] = torch.tensor([b for _, b in first_two])
    return (x * 255).round().to(torch.uint8)


@pytest.mark.parametrize("strategy,expected", [("uncertainty", 77), ("dfal", 77), ("k_center", 91)])
def test_attack_strategies_pick_planted_image(strategy, expected):
    # pixel pairs: labelled images and most of the pool are confidently class 0 (1, 0);
    # image 77 sits on the class 0/1 boundary (0.5, 0.5); image 91 is confidently class 1 (0, 1).
    pairs = [(1.0, 0.0)] * 120
    pairs[77], pairs[91] = (0.5, 0.5), (0.0, 1.0)
    for i in range(95, 120):
        pairs[i] = (0.9, 0.1 + 0.01 * (i - 95))
    attack, state = _planted_attack(strategy, _pool(pairs), _two_feature_model())
    picked = attack.propose(1, state).meta["pool_index"].tolist()
    assert picked == [expected]


def test_dfal_k_center_prefilters_then_diversifies():
    # near-boundary candidates: 40-49 are (0.55, 0.45) duplicates, 60 is (0.45, 0.55) across the
    # boundary; rho = 11 keeps exactly those; k-center then takes 60 (different output) before a duplicate.
    pairs = [(1.0, 0.0)] * 120
    for i in range(40, 50):
        pairs[i] = (0.55, 0.45)
    pairs[60] = (0.45, 0.55)
    attack, state = _planted_attack("dfal_k_center", _pool(pairs), _two_feature_model(), dfal_prefilter=11)
    picked = attack.propose(2, state).meta["pool_index"].tolist()
    assert 60 in picked and all(40 <= i < 50 or i == 60 for i in picked)


def test_macro_f1_and_divergence():
    pred, target = torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 1, 1])
    # class 0: p=1/2 r=1 f=2/3; class 1: p=1 r=1/3 f=1/2; class 2: f=0
    assert at.macro_f1(pred, target, 4) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    p = dataclasses.replace(at.ActiveThiefParams(), max_epochs=2, batch_size=8,
                            optimizer=dataclasses.replace(at.ActiveThiefParams().optimizer, lr=float("inf")))
    x = torch.rand(16, *SHAPE)
    with pytest.raises(DivergenceError):
        at.fit_substitute(tiny(), (x, torch.randint(0, K, (16,))), (x[:0], torch.zeros(0, dtype=torch.long)),
                          p, "hard_top1", K, torch.Generator().manual_seed(0))


# contract 8 / 14.3 / 16.2: the engine runs ActiveThief end to end and reports both tracks.
def test_engine_run_reports_both_tracks(make_cfg):
    from mebench.run.engine import run as engine_run

    cfg = make_cfg(attack={"name": "activethief", "label": "activethief_kcenter",
                           "params": {"strategy": "k_center", "rounds": 2, "max_epochs": 3, "batch_size": 64}})
    result = engine_run(cfg, progress=False)
    (seed,) = result.seeds
    assert seed.summary["queries_used"] == 500 and seed.summary["status"] == "complete"
    assert sorted((r["checkpoint_B"], r["track"]) for r in seed.rows) == [(200, "A"), (200, "B"), (500, "A"), (500, "B")]
    assert all(0.0 <= r["agreement"] <= 1.0 for r in seed.rows)
    assert not (seed.directory / ".query_cache").exists()


ROOT = Path(__file__).resolve().parent.parent
CONFIGS = [ROOT / "configs" / "mnist_lenet5_activethief.yaml", *sorted((ROOT / "configs" / "activethief").glob("*.yaml"))]


# contract 8 (Track B is the attack's own procedure): a config labelled like the paper runs the
# authors' procedure; one that deviates says so in its label (_fast) and gives each deviation's
# reference value in a comment.
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_label_tells_paper_preset_from_fast_variant(path):
    cfg = load_config(path, check_files=False)
    assert cfg.attack.name == "activethief"
    deviations = set(cfg.attack.params) - {"strategy"}
    if not cfg.attack.label.endswith("_fast"):
        assert not deviations, f"{path.name}: a paper preset overrides {sorted(deviations)}"
        return
    assert deviations
    text = path.read_text()
    for key in deviations:
        assert re.search(rf"^\s+{key}:.*# (paper|authors' code)\b", text, re.M), f"{path.name}: {key} uncommented"
