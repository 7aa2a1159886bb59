"""Defenses as answer transforms of the oracle (contract §1.1, §1.2, §7, §15.2).

A defense never changes the query count, always answers with probability
vectors (or labels), is what Track A trains on, and bad parameters or
defense × output-mode combinations fail before any work with one config error.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mebench.run import engine
from mebench.defenses import DEFENSES, Defense, DefenseContext, build_answers, make_defense
from mebench.defenses.mad import Mad, angular_objective
from mebench.defenses.misinformation import AdaptiveMisinformation
from mebench.errors import BudgetExhausted, ConfigError
from mebench.models.registry import build_model
from mebench.oracle import Oracle
from mebench.testing import _images
from mebench.config.validation import defense_params, validate
from mebench.victims.wrapper import FrozenVictim
from mebench.run.plan import resolve, site

SHAPE = (1, 8, 8)
PARAMS = {"temperature": {"temperature": 3.0}, "topk": {"k": 2}, "rounding": {"decimals": 1},
          "gaussian_noise": {"sigma": 0.2}, "reverse_sigmoid": {"beta": 0.7, "gamma": 0.4},
          "mad": {"epsilon": 0.8}, "adaptive_misinformation": {"tau": 0.8, "epochs": 8.0, "lr": 0.1},
          "prada": {"min_distances": 10}, "modelguard_w": {"epsilon": 0.5}, "modelguard_s": {"epsilon": 0.5},
          "grad2": {"epsilon": 0.6, "epochs": 2.0, "schedule_epochs": 10.0}}
_FITTED: dict = {}


def _victim() -> FrozenVictim:
    torch.manual_seed(0)
    return FrozenVictim(build_model("tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)), "cpu")


def _context() -> DefenseContext:
    return DefenseContext(victim=_victim(), num_classes=4, input_shape=SHAPE, device=torch.device("cpu"),
                          train_split=lambda: _images("SYNTH", True),
                          make_model=lambda arch=None: build_model(arch or "tiny_mlp", 1, 4, (8, 8), (0.5,), (0.25,)))


def _defense(name: str, **params) -> Defense:
    cls = DEFENSES.get(name)
    p = cls.Params(**{**PARAMS.get(name, {}), **params})
    state = None
    if cls.fits:  # fitted once per parameter set, as the engine does
        key = (name, repr(p))
        if key not in _FITTED:
            _FITTED[key] = cls.fit(p, _context())
        state = _FITTED[key]
    return make_defense(name, p, torch.Generator().manual_seed(0), state)


def _oracle(name: str, mode: str, budget: int, **params) -> Oracle:
    return Oracle(build_answers(_victim(), 1.0, _defense(name, **params)), mode, budget, SHAPE)


def test_every_defense_is_listed_with_its_paper():
    assert {"none", "temperature", "top1", "topk", "rounding", "gaussian_noise", "reverse_sigmoid", "mad",
            "adaptive_misinformation", "prada", "modelguard_w", "modelguard_s", "grad2"} <= set(DEFENSES)
    assert all(DEFENSES.get(n).paper for n in DEFENSES)


@pytest.mark.parametrize("name", sorted(DEFENSES.names()))
@given(budget=st.integers(0, 150), sizes=st.lists(st.integers(1, 40), max_size=6),
       scale=st.floats(0.0, 1.0))
def test_a_defense_never_changes_the_count_and_answers_probability_vectors(name, budget, sizes, scale):
    # contract 1.1, 1.2: one image is one query behind any defense; answers stay valid
    for mode in sorted(DEFENSES.get(name).output_modes):
        plain, defended = _oracle("none", mode, budget), _oracle(name, mode, budget)
        for n in sizes:
            x = torch.rand(n, *SHAPE) * scale
            if plain.queries_used + n > budget:
                for oracle in (plain, defended):
                    with pytest.raises(BudgetExhausted):
                        oracle.query(x)
                continue
            plain.query(x)
            y = defended.query(x).y
            if mode == "soft_prob":
                assert y.shape == (n, 4) and bool((y >= 0).all()) and torch.allclose(y.sum(1), torch.ones(n))
            else:
                assert y.shape == (n,) and y.dtype == torch.int64 and bool(((y >= 0) & (y < 4)).all())
            assert defended.queries_used == plain.queries_used


def test_top1_answers_are_the_hard_top1_answers():
    # contract 1.2: the top1 defense under soft_prob says exactly what a hard_top1 oracle says
    x = torch.rand(64, *SHAPE)
    soft = _oracle("top1", "soft_prob", 64).query(x).y
    hard = _oracle("none", "hard_top1", 64).query(x).y
    assert torch.equal(soft.argmax(1), hard) and torch.equal(soft.sum(1), torch.ones(64))
    assert set(soft.unique().tolist()) <= {0.0, 1.0}


class _Recorder:
    """The engine's query store, keeping what the oracle answered and what Track A read."""

    def __init__(self, store):
        self.store, self.answers, self.reads = store, [], {}

    def __getattr__(self, name):
        return getattr(self.__dict__["store"], name)

    def __len__(self):
        return len(self.store)

    def append(self, x, y):
        self.answers.append(y.clone())
        self.store.append(x, y)

    def prefix(self, n, device="cpu"):
        x, y = self.store.prefix(n, device)
        self.reads[n] = y.clone()
        return x, y


@pytest.mark.parametrize("name", ["top1", "rounding", "reverse_sigmoid", "mad", "adaptive_misinformation",
                                  "modelguard_w", "modelguard_s", "grad2"])
def test_track_a_trains_on_what_the_defended_oracle_returned(make_cfg, tmp_path, name):
    # contract 7: D_B is the defended answers, query for query; the count is still exact
    cfg = make_cfg(defense={"name": name, "params": PARAMS.get(name, {})}, cache={"enabled": False})
    validate(cfg, check_files=False)
    prep = engine.prepare(resolve(cfg), site(cfg))
    store = _Recorder(engine.make_store(resolve(cfg), site(cfg), prep, None))
    oracle = engine.make_oracle(resolve(cfg, 0), prep)
    result = engine.run_seed(resolve(cfg, 0), site(cfg), prep, tmp_path / "seed_0", progress=False, oracle=oracle, store=store)
    answered = torch.cat(store.answers)
    assert result.summary["queries_used"] == 500 and answered.shape[0] == 500
    for n, y in store.reads.items():
        assert torch.equal(y, answered[:n])
    plain_cfg = make_cfg()
    plain = engine.make_oracle(resolve(plain_cfg, 0), prep).answers
    x = torch.rand(32, *SHAPE)
    assert not torch.allclose(oracle.answers.probs(x), plain.probs(x))  # the defense did act
    cost = result.summary["defense"]["utility"]
    assert cost["test_images"] == prep.evaluator.x.shape[0] and cost["seconds_per_1000_answers"] > 0
    assert 0 < cost["mean_abs_perturbation"] < 1
    if name == "top1":  # the label survives, the confidences do not
        assert cost["agreement_with_undefended"] == 1.0
        assert cost["test_accuracy"] == pytest.approx(prep.evaluator.victim_accuracy())


@pytest.mark.parametrize("defense, key, words", [
    ({"name": "nodefense"}, "defense.name", "unknown defense"),
    ({"name": "topk", "params": {"k": 0}}, "defense.params.k", "at least 1"),
    ({"name": "reverse_sigmoid", "params": {"gamma": 0}}, "defense.params.gamma", "> 0"),
    ({"name": "rounding", "params": {"digits": 2}}, "defense.params.digits", "unknown key"),
    ({"name": "gaussian_noise", "params": {"sigma": -1}}, "defense.params.sigma", ">= 0"),
    ({"name": "mad", "params": {"epsilon": -0.1}}, "defense.params.epsilon", ">= 0"),
    ({"name": "mad", "params": {"ydist": "linf"}}, "defense.params.ydist", "one of"),
    ({"name": "adaptive_misinformation", "params": {"tau": 1.5}}, "defense.params.tau", "in \\[0, 1\\]"),
    ({"name": "adaptive_misinformation", "params": {"nu": 0}}, "defense.params.nu", "> 0"),
    ({"name": "adaptive_misinformation", "params": {"epochs": 0}}, "defense.params.epochs", "> 0"),
    ({"name": "modelguard_w", "params": {"epsilon": 1e-5}}, "defense.params.epsilon", ">= 0.0002"),
    ({"name": "modelguard_s", "params": {"epsilon": -1.0}}, "defense.params.epsilon", ">= 0"),
    ({"name": "modelguard_s", "params": {"ydist": "kl"}}, "defense.params.ydist", "one of"),
    ({"name": "grad2", "params": {"epsilon": 2.5}}, "defense.params.epsilon", "in \\[0, 2\\]"),
    ({"name": "grad2", "params": {"target": "max_norm"}}, "defense.params.target", "one of"),
    ({"name": "grad2", "params": {"schedule_epochs": 5.0}}, "defense.params.schedule_epochs", ">= epochs"),
    ({"name": "grad2", "params": {"surrogate_data": "CIFAR10"}}, "defense.params.surrogate_data", "input shape"),
])
def test_bad_defense_settings_fail_before_any_work(make_cfg, defense, key, words):
    # contract 15.2: one ConfigError naming the key, the value and the rule
    with pytest.raises(ConfigError, match=words) as e:
        validate(make_cfg(defense=defense), check_files=False)
    assert e.value.key == key


def test_a_probability_defense_on_hard_labels_is_refused(make_cfg):
    cfg = make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"},
                   defense={"name": "reverse_sigmoid"})
    with pytest.raises(ConfigError, match="hard_top1 answer does not carry") as e:
        validate(cfg, check_files=False)
    assert e.value.key == "defense.name"
    for name in ("adaptive_misinformation", "prada", "mad"):  # they can change or watch labels
        validate(make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"},
                          defense={"name": name}), check_files=False)
    for name, words in (("top1", "label alone"), ("mad", "MAD-argmax keeps every top-1 label")):
        with pytest.raises(ConfigError, match=words):  # a hard_top1 cell would repeat the undefended one
            validate(make_cfg(victim={"output_mode": "hard_top1"}, attack={"output_mode": "hard_top1"},
                              defense={"name": name, "params": {"argmax": True} if name == "mad" else {}}),
                     check_files=False)
    assert defense_params(make_cfg(defense={"name": "topk", "params": {"k": 3}})).k == 3


@given(st.integers(2, 12), st.floats(0.0, 2.5), st.sampled_from(["l1", "l2"]), st.booleans(), st.integers(0, 2**31 - 1))
def test_mad_stays_in_the_epsilon_ball_and_mad_argmax_keeps_the_label(k, eps, ydist, argmax, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.softmax(4 * torch.randn(16, k, generator=g, dtype=torch.float64), 1)
    surrogate = torch.nn.Linear(6, k).double()
    mad = Mad(Mad.Params(epsilon=eps, ydist=ydist, argmax=argmax), g, surrogate)
    out = mad.apply(y, torch.randn(16, 6, generator=g, dtype=torch.float64))
    dist = (out - y).abs().sum(1) if ydist == "l1" else (out - y).norm(dim=1)
    assert bool((dist <= eps + 1e-6).all()) and bool((out >= 0).all()) and torch.allclose(out.sum(1), torch.ones(16, dtype=out.dtype))
    if argmax:
        assert torch.equal(out.argmax(1), y.argmax(1))


def test_mad_objective_is_the_last_layer_jacobian_objective():
    # G = d(-log F_k)/dW of the last linear layer, computed by autograd, gives the same angular
    # objective as the closed form MAD uses (p - target, with the layer input h cancelled)
    torch.manual_seed(0)
    body, head = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh()).double(), torch.nn.Linear(7, 4).double()
    x = torch.randn(1, 5, dtype=torch.float64)
    y = torch.softmax(3 * torch.randn(1, 4, dtype=torch.float64), 1)
    targets = torch.softmax(2 * torch.randn(1, 6, 4, dtype=torch.float64), 2)
    nll = -torch.log_softmax(head(body(x)), dim=1)[0]
    G = torch.stack([torch.autograd.grad(nll[k], head.weight, retain_graph=True)[0].flatten() for k in range(4)])
    unit = lambda v: v / v.norm()  # noqa: E731
    expected = torch.stack([(unit(G.T @ t) - unit(G.T @ y[0])).pow(2).sum() for t in targets[0]])
    p = torch.softmax(head(body(x)), 1).detach()
    assert torch.allclose(angular_objective(p, y, targets)[0], expected, atol=1e-9)


def test_mad_picks_the_best_vertex():
    g = torch.Generator().manual_seed(1)
    y = torch.softmax(3 * torch.randn(32, 5, generator=g, dtype=torch.float64), 1)
    surrogate = torch.nn.Linear(3, 5).double()
    x = torch.randn(32, 3, generator=g, dtype=torch.float64)
    out = Mad(Mad.Params(epsilon=10.0), g, surrogate).apply(y, x)  # epsilon large: the answer is y* itself
    p = torch.softmax(surrogate(x), 1).detach()
    vertices = torch.eye(5, dtype=torch.float64)[None].expand(32, -1, -1)
    best = angular_objective(p, y, vertices).argmax(1)
    assert torch.allclose(out, torch.nn.functional.one_hot(best, 5).double())


def test_adaptive_misinformation_answers_in_distribution_and_misinforms_out_of_it():
    am = _defense("adaptive_misinformation")
    x, labels = _images("SYNTH", False)
    x = x.float().div(255)
    victim = _victim()
    y = torch.softmax(victim.logits(x), 1)
    out = am.apply(y, x)
    mis = torch.softmax(am.state(x), 1)
    # the misinformation model learned to avoid the true class
    assert mis.gather(1, labels[:, None]).mean() < 0.5 / 4
    confident = y.max(1).values > 0.8 + 0.01
    assert torch.allclose(out[confident], y[confident], atol=1e-3)
    unsure = y.max(1).values < 0.8 - 0.01
    assert torch.allclose(out[unsure], mis[unsure], atol=1e-3)
    assert isinstance(am, AdaptiveMisinformation) and bool(((am.alpha(y) >= 0) & (am.alpha(y) <= 1)).all())
