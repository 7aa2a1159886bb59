"""Transfer-relevant fidelity, the cached reference ensemble, the init-variance probe and the
report's transfer page (issue 44; ``mebench.probes.transferability.fidelity``, ``mebench.probes.transferability.refcache``,
``mebench.probes.variance``, ``mebench.report.transfer``)."""

from __future__ import annotations

import csv
import statistics

import pandas as pd
import pytest
import torch

from mebench.run import engine
from mebench.probes.transferability import refcache
from mebench.probes.transferability.fidelity import FidelityEvaluator, mean_cosine, uniform_noise
from mebench.probes.variance import InitOnlyTrainer, init_seeds, measure
from mebench.models.registry import build_model
from mebench.report.transfer import transfer_table
from mebench.training.loop import OptimizerSpec
from mebench.training.track_a import TrackASpec, TrackATrainer
from mebench.probes.transferability.transfer import TransferEvaluator, TransferSettings
from mebench.victims.wrapper import FrozenVictim

SHAPE = (1, 8, 8)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)).eval()


class _Constant(torch.nn.Module):
    """Always answers class 0; its input gradient is exactly zero."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor([4.0, 0.0, 0.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias + 0.0 * x.flatten(1).sum(1, keepdim=True)


def _fidelity(victim: torch.nn.Module, n: int = 64) -> FidelityEvaluator:
    g = torch.Generator().manual_seed(5)
    x = torch.rand((n, *SHAPE), generator=g)
    with torch.no_grad():
        y = victim(x).argmax(1)
    off = {"uniform_noise": uniform_noise(n, SHAPE, 3), "other": torch.rand((n, *SHAPE), generator=g)}
    return FidelityEvaluator(victim, x, y, off)


def test_the_victim_itself_has_fidelity_one_and_a_constant_model_the_share_it_happens_to_match():
    # identical model: every off-manifold answer agrees and every input gradient points the same way
    victim = _model(0)
    ev = _fidelity(victim)
    same = ev.values(_model(0))
    assert same["agreement_uniform_noise"] == same["agreement_other"] == 1.0
    assert same["grad_cosine"] == pytest.approx(1.0, abs=1e-6)
    # a constant model agrees exactly where the victim answers 0, and has no gradient (cosine 0)
    const = ev.values(_Constant())
    for name, images in ev.off.items():
        want = float((victim(images).argmax(1) == 0).double().mean())
        assert const[f"agreement_{name}"] == want
    assert const["grad_cosine"] == 0.0


def test_gradient_cosine_is_the_mean_per_image_cosine():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, -1.0], [0.0, 0.0]])
    assert mean_cosine(a, b) == pytest.approx((1.0 - 1.0 + 0.0) / 3)


@pytest.mark.parametrize("scale", [1e-24, 1e-12, 1.0, 1e12])
def test_gradient_cosine_stays_a_cosine_for_vanishing_gradients(scale):
    """A confident substitute's input gradients can be ~1e-20 (their squares underflow in float32); the
    cosine is scale-free, so it is the same at every scale and lies in [-1, 1] (float32 gave ~3e7)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 784, generator=g), torch.randn(5, 784, generator=g)
    b[0] = a[0]  # one row identical in direction
    want = mean_cosine(a.double(), b.double())
    got = mean_cosine(a * scale, b)
    assert -1.0 <= got <= 1.0 and got == pytest.approx(want, abs=1e-6)
    assert mean_cosine(torch.full((1, 784), scale), torch.full((1, 784), 1e-3)) == pytest.approx(1.0)


def test_another_model_has_fidelity_below_one_and_rows_name_each_measure():
    victim = _model(0)
    ev = _fidelity(victim)
    rows = ev.rows(_model(7), seed=1, budget=200, track="A")
    values = {r["measure"]: r["value"] for r in rows}
    assert set(values) == {"agreement_uniform_noise", "agreement_other", "grad_cosine"}
    assert values["grad_cosine"] < 0.99 and all(r["checkpoint_B"] == 200 and r["track"] == "A" for r in rows)


# ------------------------------------------------------------------ the reference ensemble and its cache
def _spec(seed: int = 3) -> TrackASpec:
    return TrackASpec("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,), seed, 32, 0.05, OptimizerSpec(), "hard_top1")


def _data(n: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.rand((n, *SHAPE), generator=g) * 255).to(torch.uint8), torch.randint(0, 4, (n,), generator=g)


@pytest.fixture
def counted(monkeypatch, tmp_path):
    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = TrackATrainer.train
    monkeypatch.setattr(TrackATrainer, "train", lambda self, *a, **k: calls.append(self.spec.init_seed) or real(self, *a, **k))
    return calls


def test_a_cached_reference_is_not_trained_again_and_equals_the_trained_one(counted, monkeypatch):
    x, y = _data()
    fp = refcache.data_fingerprint(x, y)
    assert not refcache.is_cached(_spec(), "cpu", fp)
    first = refcache.load_or_train(_spec(), "cpu", x, y)
    assert refcache.is_cached(_spec(), "cpu", fp) and len(counted) == 1
    second = refcache.load_or_train(_spec(), "cpu", x, y)
    assert len(counted) == 1  # a hit: read, not trained
    for k, v in first.state_dict().items():
        assert torch.equal(v, second.state_dict()[k])
    monkeypatch.setattr(refcache.identity, "code_identity", lambda: "0.0+src.other")
    assert not refcache.is_cached(_spec(), "cpu", fp)  # another code identity misses
    refcache.load_or_train(_spec(), "cpu", x, y)
    assert len(counted) == 2
    x2 = x.clone()
    x2[0, 0, 0, 0] ^= 1
    assert refcache.data_fingerprint(x2, y) != fp  # one pixel of other data misses too


def test_a_corrupt_entry_is_retrained_not_trusted(counted):
    x, y = _data()
    refcache.load_or_train(_spec(), "cpu", x, y)
    path = refcache.entry(refcache.cache_key(_spec(), "cpu", torch.get_num_threads(), refcache.data_fingerprint(x, y)))
    path.write_bytes(b"not a torch file")
    model = refcache.load_or_train(_spec(), "cpu", x, y)
    assert len(counted) == 2 and isinstance(model, torch.nn.Module)
    refcache.load_or_train(_spec(), "cpu", x, y)
    assert len(counted) == 2  # rewritten whole: the next read hits


def test_ensemble_members_differ_and_never_start_at_the_victims_seed(tmp_path):
    side = tmp_path / "victim.json"
    side.write_text('{"recipe": {"arch": "tiny_mlp", "seed": 3, "epochs": 2, "batch_size": 50, '
                    '"optimizer": {"name": "sgd", "lr": 0.05}}}')
    specs = refcache.reference_specs(_spec(3), 4, str(tmp_path / "victim.pt"), 200)
    assert len(specs) == 4 and len({s.init_seed for s in specs}) == 4
    assert specs[0].init_seed == 3  # Track A's recipe from init_seed
    assert specs[1].init_seed == 4 and specs[1].batch_size == 50 and specs[1].optimizer.lr == 0.05  # the victim's recipe, seed + 1
    assert TrackATrainer(specs[1], "cpu").steps(200) == 8  # ceil(2 epochs * 200 / 50)
    assert all(s.init_seed != 3 for s in specs[1:])


def test_the_ensemble_reports_its_spread():
    # contract §10: each member's PGD starts have their own stream; three reference members: the report pools them into one mean ± sample std
    victim = FrozenVictim(_model(0), "cpu")
    g = torch.Generator().manual_seed(3)
    x = (torch.rand((80, *SHAPE), generator=g) * 255).round().to(torch.uint8)
    y = victim.logits(x.float() / 255).argmax(1)
    ev = TransferEvaluator(victim, x, y, TransferSettings((0.1, 0.3), 2, 0.05, 80, alpha_eps=0.3), ("pgd",),
                           torch.Generator().manual_seed(1))
    rows = ev.reference_rows(7, [_model(1), _model(2), _model(3)])
    members = [r for r in rows if r["track"] == "independent" and r["eps"] == 0.3]
    assert [r["member"] for r in members] == [0, 1, 2]
    rates = [r["success_rate"] for r in members]
    assert len(set(rates)) > 1
    frame = pd.DataFrame(rows).assign(dataset="SYNTH", victim_id="v", label="random", data_mode="surrogate",
                                      output_mode="soft_prob")
    table = transfer_table(frame)
    ind = table[(table["track"] == "independent") & (table["eps"] == 0.3)].iloc[0]
    assert ind["n"] == 3 and ind["mean"] == pytest.approx(statistics.mean(rates))
    assert ind["std"] == pytest.approx(statistics.stdev(rates))


# ------------------------------------------------------------------ the init-variance probe
def test_init_seeds_are_derived_distinct_and_avoid_the_fixed_and_victim_inits():
    # contract §8: no probe model starts at Track A's fixed init or at the victim's own
    seeds = init_seeds(1234, 6, avoid=(0, None))
    assert seeds == init_seeds(1234, 6, avoid=(0,)) and len(set(seeds)) == 6
    assert 1234 not in seeds and 0 not in seeds
    assert init_seeds(1234, 3, avoid=seeds[:2]) == seeds[2:5]  # an avoided seed is skipped, not reused


def test_only_the_initialization_varies():
    base = TrackATrainer(_spec(3), "cpu")
    other = InitOnlyTrainer(base, 99)
    a, b = base.fresh_model().state_dict(), other.fresh_model().state_dict()
    assert not all(torch.equal(v, b[k]) for k, v in a.items())
    assert other.spec == base.spec  # batch order (seeded by spec.init_seed) and recipe unchanged
    assert all(torch.equal(v, InitOnlyTrainer(base, 3).fresh_model().state_dict()[k]) for k, v in a.items())


def test_the_probe_scores_k_models_on_the_same_data():
    x, y = _data(120)

    class _Eval:
        def score(self, model):
            from mebench.types import Metrics
            return Metrics(acc_gt=float(sum(p.detach().abs().sum() for p in model.parameters())), agreement=0.5), 0.1

    rows = measure(TrackATrainer(_spec(3), "cpu"), x.float() / 255, y, _Eval(), seed=2, k=3)
    assert {r["init"] for r in rows} == {0, 1, 2} and {r["metric"] for r in rows} == {"acc_gt", "agreement"}
    assert all(r["checkpoint_B"] == 120 and r["seed"] == 2 for r in rows)
    assert len({r["value"] for r in rows if r["metric"] == "acc_gt"}) == 3  # three different models


# ------------------------------------------------------------------ end to end: run, then report
@pytest.mark.slow
def test_report_draws_the_curves_and_lists_fidelity_and_init_spread(make_cfg, tmp_path):
    from mebench.report.writer import write_report

    cfg = make_cfg(run={"output_dir": str(tmp_path / "runs"), "seeds": [0, 1]},
                   measure={"transfer": {"methods": ["pgd"], "images": 30, "eps": [0.1, 0.2], "references": 2},
                            "init_variance": {"inits": 2}})
    seed_dir = engine.run(cfg, progress=False).seeds[0].directory
    init = list(csv.DictReader((seed_dir / "init_variance.csv").open()))
    assert {r["init"] for r in init} == {"0", "1"} and {"pgd@0.2", "grad_cosine", "agreement"} <= {r["metric"] for r in init}
    files = write_report(tmp_path / "runs", tmp_path / "report", n_bootstrap=50)
    curves = [k for k in files if k.startswith("transfer_curves_") and k.endswith("_png")]
    assert curves and files[curves[0]].stat().st_size > 1000
    md = files["transfer_md"].read_text()
    assert "gradient cosine" in md and "agreement, uniform noise" in md and "init range" in md
    table = pd.read_csv(files["transfer_csv"])
    assert set(table["eps"]) == {0.1, 0.2} and (table[table["track"] == "independent"]["n"] == 4).all()  # 2 members x 2 seeds


def test_missing_members_names_what_a_run_would_train(counted):
    x, y = _data()
    assert len(refcache.missing_members(_spec(), 3, None, "cpu", x, y)) == 3
    refcache.reference_ensemble(_spec(), 2, None, "cpu", x, y)
    missing = refcache.missing_members(_spec(), 3, None, "cpu", x, y)
    assert len(counted) == 2 and len(missing) == 1 and missing[0] == refcache.reference_specs(_spec(), 3, None, 200)[2]
