"""SwiftThief: the round schedule toward each checkpoint, every selected image charged once and the
budget kept exactly (also in KDE sub-rounds), the contrastive phase never querying the victim and
reading only unqueried pool images, the reference's losses, rule and KDE, and its cited defaults.

Tiny synthetic pools (1x8x8 images, 4 classes) and a tiny convolutional substitute, driven by the
engine's own query loop through the real oracle and query store (``mebench.testing.drive_attack``).
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import _contrastive as cl
from mebench.attacks import swiftthief as st
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.docs import cited_defaults
from mebench.errors import ConfigError
from mebench.testing import drive_attack

SHAPE, K = (1, 8, 8), 4
DOCS = Path(__file__).resolve().parents[1] / "docs" / "attacks" / "swiftthief.md"


@lru_cache(maxsize=None)
def victim() -> nn.Module:
    """A fixed random linear victim: these tests need answers that vary with the image, not accuracy."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, K))
    with torch.no_grad():
        net[1].weight.copy_(torch.randn(K, 64, generator=torch.Generator().manual_seed(5)))
        net[1].bias.copy_(-net[1].weight.sum(dim=1) / 2)  # centred on mid-grey images
    return net.eval()


def tiny() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, K))


def make_attack(budget: int = 257, checkpoints: tuple[int, ...] = (100, 257), mode: str = "soft_prob", **kw):
    p = st.SwiftThiefParams(**{**st.SwiftThief.smoke_params, **kw})
    st.SwiftThief.check_params(p, budget, checkpoints)
    images = (torch.rand((1500, *SHAPE), generator=torch.Generator().manual_seed(7)) * 255).to(torch.uint8)
    ctx = AttackContext(profile=get_profile("MNIST"), output_mode=mode, num_classes=K, input_shape=SHAPE,
                        device=torch.device("cpu"), seed=0, generator=torch.Generator().manual_seed(0),
                        pool=Pool(images, "synthetic"), params=p, checkpoints=checkpoints, max_budget=budget,
                        make_substitute=tiny, data_mode="surrogate")
    return ATTACKS.get("swiftthief")(ctx)


class Counting(nn.Module):
    """The victim, counting the images it is asked about."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.seen = net, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += len(x)
        return self.net(x)


# contract 1.1 / 7 / 14.2: the schedule toward each checkpoint is the reference's (10 % at random,
# then rounds of 10 % of that checkpoint, swiftthief.py:50, 144), its phases tile the budget and
# every checkpoint ends one
def test_schedule_is_the_reference_split_toward_each_checkpoint():
    p = st.SwiftThiefParams()
    one = st.plan_schedule(p, 1000, (1000,))
    assert [(ph.kind, ph.stop - ph.start) for ph in one] == [("initial", 100)] + [("round", 100)] * 9
    assert [ph.final for ph in one] == [False] * 9 + [True]
    two = st.plan_schedule(p, 10000, (1000, 10000))[10:]
    # the 1k queries before are the 10 % initial of the 10k plan: an empty initial phase, 9 rounds of 1k
    assert [(ph.kind, ph.start, ph.stop - ph.start, ph.j) for ph in two[:2]] == [("initial", 1000, 0, 0),
                                                                                 ("round", 1000, 1000, 1)]
    assert len(two) == 10 and all(ph.stop - ph.start == 1000 for ph in two[1:]) and two[-1].stop == 10000
    odd = st.plan_schedule(p, 257, (100, 257))
    assert [ph.stop - ph.start for ph in odd] == [10] + [10] * 9 + [0] + [22, 22, 23, 22, 23, 22, 23]
    filled = [ph for ph in odd if ph.stop > ph.start]
    assert all(a.stop == b.start for a, b in zip(filled, filled[1:])) and filled[-1].stop == 257


# contract 1.1: every image the victim sees is one charged query, no pool image is sent twice, the
# budget is met exactly at odd remainders; KDE rounds come in five sub-rounds (swiftthief.py:150-161)
@pytest.mark.parametrize("force_kde", [False, True])
def test_every_selected_image_is_charged_once_and_the_budget_is_exact(monkeypatch, force_kde):
    if force_kde:
        monkeypatch.setattr(st, "use_kde", lambda counts, left: True)
    attack, spy = make_attack(), Counting(victim())
    oracle, state, batches, models = drive_attack(attack, spy, SHAPE, K)
    idx = torch.cat([b.meta["pool_index"] for b in batches])
    assert spy.seen == oracle.queries_used == state.queries_used == len(idx) == 257
    assert len(torch.unique(idx)) == 257 and int(attack.used.sum()) == 257
    assert sorted(models) == [100, 257]
    starts = torch.cumsum(torch.tensor([0] + [len(b) for b in batches]), 0)[:-1].tolist()
    for ph in attack.phases:
        inside = [(len(b), b.meta["rule"]) for b, s in zip(batches, starts) if ph.start <= s < ph.stop]
        assert sum(n for n, _ in inside) == ph.stop - ph.start
        if ph.kind == "initial":
            assert {r for _, r in inside} <= {"random"}
        else:  # a round is one batch by entropy, or five KDE sub-rounds differing by at most one image
            rule = inside[0][1]
            assert {r for _, r in inside} == {rule} and rule == ("kde" if force_kde else attack.rule[attack.phases.index(ph)])
            sizes = [n for n, _ in inside]
            assert len(sizes) == (5 if rule == "kde" else 1) and max(sizes) - min(sizes) <= 1


# the contrastive phase never reaches the victim (it reads stored answers) and its self-supervised
# images are pool images not queried so far (the paper's unqueried set U)
def test_contrastive_phase_never_queries_and_reads_only_unqueried_images(monkeypatch):
    attack, spy = make_attack(), Counting(victim())
    calls, real = [], cl.contrastive_phase

    def watched(tap, heads, load, unlabeled, x_q, t_q, *args, **kw):
        seen = spy.seen
        real(tap, heads, load, unlabeled, x_q, t_q, *args, **kw)
        calls.append((seen, spy.seen, bool(attack.used[unlabeled].any()), len(unlabeled), len(x_q),
                      int(attack.used.sum())))

    monkeypatch.setattr(cl, "contrastive_phase", watched)
    drive_attack(attack, spy, SHAPE, K)
    assert len(calls) == len(attack.phases)  # one contrastive phase per phase, the empty initial one too
    assert all(before == after for before, after, *_ in calls)
    assert not any(overlap for _, _, overlap, *_ in calls)
    assert all(n_u == 32 and n_q == used for *_, n_u, n_q, used in calls)


# swiftthief.py:18-41: KDE once the budget left is at most c_ur * (mean - mean_ur)
def test_rare_class_rule_switches_where_the_reference_does():
    counts = torch.tensor([30, 10, 20, 20])  # mean 20, one class under it with 10: threshold 1 * 10
    assert st.use_kde(counts, 10) and not st.use_kde(counts, 11)
    assert not st.use_kde(torch.tensor([7, 7, 7, 7]), 0)  # no class under the mean: entropy
    counts = torch.tensor([40, 0, 10, 30])  # mean 20, under: 0 and 10 (mean 5): threshold 2 * 15 = 30
    assert st.use_kde(counts, 30) and not st.use_kde(counts, 31)


# the KDE score ranks as sklearn's Gaussian KernelDensity.score_samples (sampling.py:131-148):
# log of the mean Gaussian density, here up to its constant
def test_kde_scores_are_the_gaussian_log_density_up_to_a_constant():
    g = torch.Generator().manual_seed(3)
    centers, points, h = torch.randn(7, 3, generator=g), torch.randn(20, 3, generator=g) * 2, 0.5
    direct = torch.stack([torch.log(torch.stack([torch.exp(-((x - c) ** 2).sum() / (2 * h * h)) / (2 * math.pi * h * h)
                                                              ** 1.5 for c in centers.double()]).mean())
                          for x in points.double()])
    got = st.kde_scores(points, centers, h, chunk=6).double()
    offset = direct - got
    assert torch.allclose(offset, offset[0].expand_as(offset), atol=1e-5)
    assert torch.allclose(offset[0], torch.tensor(-math.log(7) - 1.5 * math.log(2 * math.pi * h * h), dtype=torch.float64),
                          atol=1e-5)


# criterion.py:52-82 with one-hot answers is the supervised SimSiam loss of criterion.py:31-49 (mean
# of -cos over same-class pairs, i != j); confident identical soft answers weigh 1, uniform ones 0
def test_soft_supervised_loss_reduces_to_the_supervised_one_on_labels():
    g = torch.Generator().manual_seed(1)
    p, z, y = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g), torch.tensor([0, 1, 0, 2, 1, 0])
    cos = F.normalize(p, dim=1) @ F.normalize(z, dim=1).T
    pairs = [(i, j) for i in range(6) for j in range(6) if i != j and y[i] == y[j]]
    want = -torch.stack([cos[i, j] for i, j in pairs]).mean()
    assert torch.allclose(cl.soft_supervised_loss(p, z, F.one_hot(y, 3).float()), want, atol=1e-6)
    uniform = torch.full((6, 3), 1 / 3)
    assert float(cl.soft_supervised_loss(p, z, uniform)) == 0.0


# swiftthief.py:92-95: class-balanced costs (1-β)/(1-β^(n+1)) normalised; a class never answered weighs most
def test_class_balanced_costs():
    costs = cl.class_balanced_costs(torch.tensor([0, 100, 100]), 0.99)
    raw = torch.tensor([1.0, 0.01 / (1 - 0.99 ** 101), 0.01 / (1 - 0.99 ** 101)])
    assert torch.allclose(costs, raw / raw.sum()) and abs(float(costs.sum()) - 1) < 1e-6


def test_views_stay_pixels_of_the_input_shape_and_differ():
    x = torch.rand(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    a, b = cl.augment(x, g), cl.augment(x, g)
    assert a.shape == x.shape and float(a.min()) >= 0 and float(a.max()) <= 1 and not torch.equal(a, b)


def test_hard_labels_run_and_keep_the_budget():
    attack, spy = make_attack(budget=120, checkpoints=(120,), mode="hard_top1"), Counting(victim())
    oracle, state, _, models = drive_attack(attack, spy, SHAPE, K)
    assert spy.seen == oracle.queries_used == 120 and state.labelled()[1].dim() == 1 and 120 in models


@pytest.mark.parametrize("key,value", [("round_fraction", 0.0), ("initial_fraction", 1.5), ("cl_batch_size", 1),
                                       ("kde_bandwidth", 0.0), ("cb_beta", 1.0)])
def test_bad_params_fail_with_one_message_naming_the_key(key, value):
    p = dataclasses.replace(st.SwiftThiefParams(), **{key: value})
    with pytest.raises(ConfigError, match=f"attack.params.{key}"):
        st.SwiftThief.check_params(p, 1000, (1000,))


# contract 6 / 8: the defaults are the values docs/attacks/swiftthief.md cites from the reference,
# each "-" line with a file:line
def test_defaults_are_the_cited_reference_values():
    import re

    lines = cited_defaults(DOCS)
    assert set(lines) == {f.name for f in dataclasses.fields(st.SwiftThiefParams)}
    defaults = st.SwiftThiefParams()
    for name, (value, source, kind) in lines.items():
        assert kind == "*" or re.search(r"[\w/]+\.(py|sh):\d+", source), f"no file:line for {name}: {source!r}"
        got = getattr(defaults, name)
        assert got == value and type(got) is type(value), f"{name}: default {got!r}, cited {value!r}"
