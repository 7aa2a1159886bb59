"""DFMS and DFMS-HL: every image counted at odd budgets, labels only for DFMS-HL, reproducibility,
and proxy data that never holds the victim's own images.

Runs on the synthetic SYNTH world (1x8x8 images, 4 classes, ``tiny_mlp``; the surrogate pool
SYNTHSUR is the proxy) with a tiny GAN, driven by the engine's own query loop through the real
oracle; a spy around the victim network counts every image that reaches its forward pass.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

import pytest
import torch
from torch import nn

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import dfms
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.errors import ConfigError
from mebench.models.registry import build_model
from mebench.testing import SYNTH_CLASSES, SYNTH_SHAPE, SpyNet, drive_attack, register_synthetic
from mebench.config.validation import validate
from mebench.run.plan import resolve, site

register_synthetic()
TINY = dict(batch_size=8, latent_dim=8, generator_width=4, disc_width=4, gan_epochs=1, divgan_epochs=1,
            clone_epochs=2, clone_batch_size=16, init_fraction=0.05, gan_pool_size=100)
POOL_SIZE = 400


def substitute() -> nn.Module:
    p = get_profile("SYNTH")
    return build_model("tiny_mlp", p.channels, p.num_classes, p.input_size, p.mean, p.std)


def proxy_pool() -> Pool:
    images, labels = get_profile("SYNTHSUR").reader(".", True, False)
    return Pool(images[:POOL_SIZE], "SYNTHSUR", labels[:POOL_SIZE])


def make_attack(name: str, budget: int, checkpoints: tuple[int, ...], seed: int = 0, **kw) -> dfms.DFMS:
    params = dfms.Params(**{**TINY, **kw})
    cls = ATTACKS.get(name)
    cls.check_params(params, budget, checkpoints)
    p = get_profile("SYNTH")
    mode = "hard_top1" if name == "dfms_hl" else "soft_prob"
    ctx = AttackContext(profile=p, output_mode=mode, num_classes=p.num_classes, input_shape=p.input_shape,
                        device=torch.device("cpu"), seed=seed, generator=torch.Generator().manual_seed(seed),
                        pool=proxy_pool(), params=params, checkpoints=checkpoints, max_budget=budget,
                        make_substitute=substitute, data_mode="surrogate")
    return cls(ctx)


def run(attack: dfms.DFMS):
    torch.manual_seed(123)
    spy = SpyNet(substitute())
    oracle, state, batches, models = drive_attack(attack, spy, SYNTH_SHAPE, SYNTH_CLASSES)
    return oracle, state, spy, batches, models


# contract 1.1 / 14.2: the run stops exactly at odd budgets (more of them for every attack in
# test_attack_registry.py); the initial sets and every attack iteration are counted, and the
# stages come in the reference's order.
@pytest.mark.parametrize("name", ["dfms", "dfms_hl"])
@pytest.mark.parametrize("budget,checkpoints", [pytest.param(1001, (333, 1001), marks=pytest.mark.slow), (7, (7,)),
                                                (13, (1, 5, 13))])
def test_exact_stop_at_odd_budgets(name, budget, checkpoints):
    attack = make_attack(name, budget, checkpoints)
    oracle, state, spy, batches, models = run(attack)
    assert oracle.queries_used == spy.seen == len(state.store) == budget and oracle.budget_left == 0
    assert sorted(models) == list(checkpoints)
    n_init = dfms.init_set_size(attack.hp, budget)
    phases = [b.meta["phase"] for b in batches]
    sizes = {ph: sum(len(b) for b in batches if b.meta["phase"] == ph) for ph in set(phases)}
    assert sizes.get("initial_set_1", 0) == min(n_init, budget)
    assert sizes.get("initial_set_2", 0) == min(n_init, max(0, budget - n_init))
    assert sizes.get("attack", 0) == max(0, budget - 2 * n_init)
    assert phases == sorted(phases, key=["initial_set_1", "initial_set_2", "attack"].index)
    assert all(len(b) <= attack.hp.batch_size for b in batches if b.meta["phase"] == "attack")


# contract 6.1: DFMS-HL reads labels only (refused for soft_prob); DFMS is the soft-label attack
@pytest.mark.slow
def test_dfms_hl_sees_labels_only(make_cfg):
    attack = make_attack("dfms_hl", 120, (120,))
    kinds = []
    observe = attack.observe
    attack.observe = lambda b, o, s: (kinds.append((o.kind, o.y.dtype, tuple(o.y.shape))), observe(b, o, s))
    run(attack)
    assert kinds and all(k == "hard_top1" and dt == torch.int64 and len(sh) == 1 for k, dt, sh in kinds)
    # built by hand for probabilities (validation bypassed), it refuses before any query
    hl = make_attack("dfms_hl", 120, (120,))
    with pytest.raises(ConfigError) as err:
        ATTACKS.get("dfms_hl")(dataclasses.replace(hl.ctx, output_mode="soft_prob"))
    assert err.value.key == "attack.output_mode" and "top-1" in err.value.rule
    for name, mode in (("dfms_hl", "hard_top1"), ("dfms", "soft_prob")):
        validate(make_cfg(victim={"output_mode": mode}, attack={"name": name, "output_mode": mode, "params": TINY}))
    for name, mode in (("dfms_hl", "soft_prob"), ("dfms", "hard_top1")):
        with pytest.raises(ConfigError) as err:
            validate(make_cfg(victim={"output_mode": mode}, attack={"name": name, "output_mode": mode, "params": TINY}))
        assert err.value.key == "attack.output_mode" and "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(dataset={"data_mode": "data_free", "surrogate_name": None},
                          attack={"name": "dfms", "params": TINY}))
    assert "data_mode" in err.value.key


# contract 3 / issue: proxy data is the surrogate pool only; the initial sets' proxy images are
# distinct pool images, and the GAN's real batches come from the pool
@pytest.mark.slow
def test_proxy_images_come_from_the_pool_only():
    attack = make_attack("dfms", 200, (200,))
    _, state, _, batches, _ = run(attack)
    pool = attack.pool
    used = torch.cat(attack.proxy_used)
    assert len(used) > 0 and int(used.min()) >= 0 and int(used.max()) < len(pool)
    first = batches[0]
    n_proxy = dfms.proxy_count(attack.hp, attack.n_init)
    assert torch.equal(first.x[:n_proxy], pool.get(attack.proxy_index[:n_proxy]))
    assert len(set(attack.proxy_index.tolist())) == len(attack.proxy_index) == 2 * n_proxy
    assert dfms.DFMS.required_pool_size(attack.hp, 200) == 2 * n_proxy
    gan = set(attack.gan_index.tolist())  # the GAN learns from its gan_pool_size pool images only
    assert len(gan) == 100 and set(used.tolist()) <= gan | set(attack.proxy_index.tolist())


def _row_digests(images: torch.Tensor) -> set[bytes]:
    """One sha1 per image (its raw bytes): equal digests, equal images."""
    return {hashlib.sha1(row.tobytes()).digest() for row in images.reshape(len(images), -1).numpy()}


# issue: the pool the engine hands DFMS is the surrogate's train split, and no image DFMS takes from
# it (its proxy queries, its GAN's real batches) is an image of the victim's train or test split
@pytest.mark.parametrize("name", ["dfms", "dfms_hl"])
def test_engine_proxy_holds_none_of_the_victims_images(make_cfg, tmp_path, name):
    from mebench.run import engine

    mode = "hard_top1" if name == "dfms_hl" else "soft_prob"
    cfg = make_cfg(attack={"name": name, "output_mode": mode, "params": TINY}, victim={"output_mode": mode},
                   budget={"max_budget": 200, "checkpoints": [200]}, cache={"enabled": False})
    validate(cfg)
    prep = engine.prepare(resolve(cfg), site(cfg))
    attack = engine.make_attack(resolve(cfg, 0), prep, engine.build_pool(resolve(cfg, 0), prep))
    sur_x, _ = get_profile("SYNTHSUR").reader(".", True, False)
    assert torch.equal(attack.pool.images, sur_x)  # the surrogate's train split, nothing else

    victim = set()
    for train in (True, False):
        victim |= _row_digests(get_profile("SYNTH").reader(".", train, False)[0])
    taken = torch.cat([attack.proxy_index, attack.gan_index])
    assert len(taken) > 0 and not _row_digests(attack.pool.images[taken]) & victim
    assert len(_row_digests(sur_x) & victim) == 0


# issue: every proxy registered for a real victim dataset (its ``serves``: FashionMNIST, EMNIST and
# KMNIST for MNIST, ...) shares no image with the victim's own train or test split; a proxy whose
# files are not under MEBENCH_DATA_ROOT is skipped with the reason (MNIST and FashionMNIST are in CI)
def _proxy_pairs() -> list[tuple[str, str]]:
    from mebench.data.profiles import PROFILES

    return [(victim, name) for victim in ("MNIST", "FashionMNIST") for name in PROFILES.names()
            if victim in PROFILES.get(name).serves]


@functools.lru_cache(maxsize=None)
def _digests(root: str, name: str, train: bool) -> frozenset[bytes]:
    from mebench.data.datasets import load_split

    return frozenset(_row_digests(load_split(name, Path(root), train=train)[0]))


@pytest.mark.parametrize("victim,proxy", _proxy_pairs(), ids=[f"{v}-{p}" for v, p in _proxy_pairs()])
def test_real_proxies_hold_none_of_the_victims_images(data_root, victim, proxy):
    from mebench.errors import DataMissingError

    try:
        pool = _digests(str(data_root), proxy, True)  # the pool is the proxy's train split
    except DataMissingError:
        pytest.skip(f"{proxy} is not under {data_root}")
    own = _digests(str(data_root), victim, True) | _digests(str(data_root), victim, False)
    assert len(pool) > 10000 and len(own) > 60000 and not pool & own


def test_surrogate_equal_to_the_victim_dataset_is_refused(make_cfg):
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(dataset={"surrogate_name": "SYNTH"}, attack={"name": "dfms", "params": TINY}))
    assert err.value.key == "dataset.surrogate_name"
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(attack={"name": "dfms", "params": {**TINY, "init_fraction": 0.8}}))
    assert err.value.key == "attack.params.init_fraction"
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(attack={"name": "dfms", "params": {**TINY, "gan_pool_size": 1}}))
    assert err.value.key == "attack.params.gan_pool_size"


def test_diversity_loss_is_lowest_for_a_batch_spread_over_the_classes():
    spread = torch.eye(4).repeat(2, 1) * 20
    same = torch.zeros(8, 4)
    same[:, 0] = 20
    assert float(dfms.diversity_loss(spread)) == pytest.approx(-torch.log(torch.tensor(4.0)).item(), abs=1e-4)
    assert float(dfms.diversity_loss(same)) == pytest.approx(0.0, abs=1e-4)
