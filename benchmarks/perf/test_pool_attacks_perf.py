"""Cost of the query step of Knockoff Nets, CopycatCNN and the JBDA family on a 60k pool
(pytest-benchmark), each beside a bare PyTorch loop doing the same work in the same run.

- ``knockoff`` / ``copycat``: selecting the next 10,000 images of a 60,000-image uint8 pool
  (a seeded permutation, the images read as float) — against ``torch.randperm`` plus indexing.
- ``jbda`` / ``jb_self``: one augmentation round's synthesis over 60,000 answered images with
  LeNet-5 (one signed input gradient each) — against a bare per-batch FGSM loop.
- ``jb_top``: jb-top3's synthesis (8 targeted PGD steps towards 3 classes) for 20,000 answered
  images, i.e. 60,000 new images — against a bare targeted-PGD loop.

- ``knockoff_adaptive``: choosing 10,000 images of a labelled 60,000-image pool with the gradient
  bandit, 8 per step (policy draw, rewards, H update, the online knockoff's SGD step) — against a
  bare loop doing the same draws, forward passes and SGD steps without mebench's bookkeeping.
- ``dissector``: one CAM-driven erasing step over 60,000 answered originals (Grad-CAM, 10 erased
  variants each, the substitute's scores, the top 15,000) — against a bare Grad-CAM + masking loop.

The round's substitute training is left out (its cost is ``train_epochs``'s, the same loop as the
other attacks' Track B). Runs on CUDA when available.

    pytest benchmarks/perf/test_pool_attacks_perf.py --benchmark-only
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from mebench.attacks import ATTACKS, AttackContext
from mebench.attacks import dissector, jbda, knockoff
from mebench.data.cache import QueryStore
from mebench.data.pools import Pool
from mebench.data.profiles import get_profile
from mebench.models.registry import build_model
from mebench.state import EngineState

SHAPE, K, POOL, TAKE = (1, 28, 28), 10, 60_000, 10_000
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def lenet(dev: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("lenet5", 1, K, (28, 28), [0.1307], [0.3081]).to(dev).eval()


def pool() -> torch.Tensor:
    return torch.randint(0, 256, (POOL, *SHAPE), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def context(name: str, params, dev: torch.device, images: torch.Tensor, budget: int) -> AttackContext:
    return AttackContext(profile=get_profile("MNIST"), output_mode="hard_top1", num_classes=K, input_shape=SHAPE,
                         device=dev, seed=0, generator=torch.Generator().manual_seed(0),
                         pool=Pool(images, "synthetic"), params=params, checkpoints=(budget,), max_budget=budget,
                         make_substitute=lambda: lenet(dev), data_mode="surrogate", seed_size=100)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["knockoff", "copycat"])
def test_mebench_random_pool_selection(benchmark, name, device):
    dev, images = torch.device(device), pool()
    cls = ATTACKS.get(name)

    def step() -> torch.Tensor:
        attack = cls(context(name, cls.Params(), dev, images, POOL))
        batch = attack.propose(TAKE, None)
        sync(dev)
        return batch.meta["pool_index"]

    picked = benchmark.pedantic(step, rounds=3, iterations=1, warmup_rounds=1)
    assert picked.unique().numel() == TAKE


@pytest.mark.parametrize("device", DEVICES)
def test_bare_random_pool_selection(benchmark, device):
    dev, images = torch.device(device), pool()

    def step() -> torch.Tensor:
        idx = torch.randperm(POOL, generator=torch.Generator().manual_seed(0))[:TAKE]
        x = images[idx].to(dev).float().div_(255.0)
        sync(dev)
        return x

    assert benchmark.pedantic(step, rounds=3, iterations=1, warmup_rounds=1).shape == (TAKE, *SHAPE)


def answered_state(dev: torch.device, n: int) -> tuple[EngineState, torch.Tensor, torch.Tensor]:
    """A state holding ``n`` answered images (labels), as at the start of a JBDA round."""
    x = torch.rand((n, *SHAPE), generator=torch.Generator().manual_seed(1)).to(dev)
    y = torch.randint(0, K, (n,), generator=torch.Generator().manual_seed(2)).to(dev)
    store = QueryStore(2 * n + 4 * n, SHAPE, "hard_top1", K)
    store.append(x, y)
    return EngineState(6 * n, (6 * n,), store, dev, queries_used=n), x, y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("augmentation,n", [("jbda", POOL), ("jb_self", POOL), ("jb_top", POOL // 3)])
def test_mebench_jbda_synthesis(benchmark, augmentation, n, device):
    dev = torch.device(device)
    state, _, _ = answered_state(dev, n)
    params = jbda.JbdaParams(augmentation=augmentation)
    attack = ATTACKS.get("jbda")(context("jbda", params, dev, pool()[:100], state.max_budget))
    model = lenet(dev)
    attack._train = lambda x, y, epochs, lr, tag: model  # the round's substitute is already trained

    def step() -> torch.Tensor:
        attack.round = -1
        out = attack._augment(state)[0]  # the images to query
        sync(dev)
        return out

    out = benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0)
    assert out.shape[0] == n * (3 if augmentation == "jb_top" else 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("augmentation,n", [("fgsm", POOL), ("targeted_pgd", POOL // 3)])
def test_bare_jbda_synthesis(benchmark, augmentation, n, device):
    dev = torch.device(device)
    _, x, y = answered_state(dev, n)
    model = lenet(dev)
    for q in model.parameters():
        q.requires_grad_(False)

    def fgsm() -> torch.Tensor:
        out = []
        for xs, ys in zip(x.split(4096), y.split(4096)):
            xs = xs.clone().requires_grad_(True)
            (g,) = torch.autograd.grad(F.cross_entropy(model(xs), ys, reduction="sum"), xs)
            out.append((xs + 0.1 * g.sign()).clamp(0, 1).detach())
        return torch.cat(out)

    def pgd() -> torch.Tensor:
        out = []
        for xs, ys in zip(x.split(4096), y.split(4096)):
            xs = xs.repeat_interleave(3, dim=0)
            t = ((ys + 1) % K).repeat_interleave(3)
            d = torch.zeros_like(xs)
            for _ in range(8):
                d.requires_grad_(True)
                (g,) = torch.autograd.grad(model(xs + d).gather(1, t.view(-1, 1)).sum(), d)
                d = (d.detach() + 0.01 * g.sign()).clamp(-0.1, 0.1)
            out.append((xs + d).clamp(0, 1))
        return torch.cat(out)

    def step() -> torch.Tensor:
        out = fgsm() if augmentation == "fgsm" else pgd()
        sync(dev)
        return out

    out = benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0)
    assert out.shape[0] == n * (3 if augmentation == "targeted_pgd" else 1)


def labels() -> torch.Tensor:
    return torch.randint(0, K, (POOL,), generator=torch.Generator().manual_seed(3))


STEP = 8


@pytest.mark.parametrize("device", DEVICES)
def test_mebench_knockoff_adaptive_selection(benchmark, device):
    dev, images = torch.device(device), pool()
    answers = torch.softmax(torch.randn(TAKE, K, generator=torch.Generator().manual_seed(4)) * 3, 1).to(dev)
    from mebench.types import OracleOutput

    def step() -> int:
        ctx = context("knockoff", knockoff.KnockoffParams(strategy="adaptive"), dev, images, TAKE)
        ctx = dataclasses.replace(ctx, pool=Pool(images, "synthetic", labels()), output_mode="soft_prob")
        attack = ATTACKS.get("knockoff")(ctx)
        for s in range(0, TAKE, STEP):
            batch = attack.propose(STEP, None)
            attack.observe(batch, OracleOutput("soft_prob", answers[s:s + STEP]), None)
        sync(dev)
        return sum(attack.adaptive.used)

    assert benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0) == TAKE


@pytest.mark.parametrize("device", DEVICES)
def test_bare_knockoff_adaptive_selection(benchmark, device):
    dev, images, lab = torch.device(device), pool(), labels()
    answers = torch.softmax(torch.randn(TAKE, K, generator=torch.Generator().manual_seed(4)) * 3, 1).to(dev)

    def step() -> int:
        g = torch.Generator().manual_seed(0)
        queues = [torch.nonzero(lab == c).flatten() for c in range(K)]
        used, H, N = [0] * K, torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.float64)
        model = lenet(dev).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        mean_r, t = 0.0, 0
        for s in range(0, TAKE, STEP):
            arms = torch.multinomial(torch.softmax(H - H.max(), 0), STEP, replacement=True, generator=g).tolist()
            idx = []
            for a in arms:
                idx.append(int(queues[a][used[a]]))
                used[a] += 1
            x = images[torch.tensor(idx)].to(dev).float().div_(255.0)
            y = answers[s:s + STEP]
            with torch.no_grad():
                r = (-(y * F.log_softmax(model(x), 1)).sum(1)).clamp(0, 1).double().cpu()
            for a, ri in zip(arms, r.tolist()):
                t += 1
                N[a] += 1
                mean_r += (ri - mean_r) / t
                pi = torch.softmax(H - H.max(), 0)
                H -= (ri - mean_r) / float(N[a]) * pi
                H[a] += (ri - mean_r) / float(N[a])
            loss = F.kl_div(F.log_softmax(model(x), 1), y, reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
        sync(dev)
        return sum(used)

    assert benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0) == TAKE


@pytest.mark.parametrize("device", DEVICES)
def test_mebench_dissector_cde(benchmark, device):
    dev = torch.device(device)
    state, _, _ = answered_state(dev, POOL)
    attack = ATTACKS.get("dissector")(context("dissector", dissector.DissectorParams(), dev, pool(), state.max_budget))
    model = lenet(dev)
    attack._round_model = lambda state: model  # the round's substitute is already trained
    attack.original = list(range(POOL))

    def step() -> torch.Tensor:
        attack.erased = set()
        out = attack._cde(state, POOL // 4)
        sync(dev)
        return out

    assert benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0).shape == (POOL // 4, *SHAPE)


@pytest.mark.parametrize("device", DEVICES)
def test_bare_dissector_cde(benchmark, device):
    dev = torch.device(device)
    _, x, y = answered_state(dev, POOL)
    model = lenet(dev)
    conv = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)][-1]

    def step() -> torch.Tensor:
        g = torch.Generator(device=dev).manual_seed(0)
        best, score = [], []
        for xs, ys in zip(x.split(512), y.split(512)):
            acts = {}
            h = conv.register_forward_hook(lambda m, i, o: acts.__setitem__("a", o))
            out = model(xs)
            h.remove()
            (gr,) = torch.autograd.grad(out.max(1).values.sum(), acts["a"])
            cam = F.relu((gr.mean((2, 3), keepdim=True) * acts["a"]).sum(1, keepdim=True)).detach()
            cam = F.interpolate(cam, size=SHAPE[1:], mode="bilinear", align_corners=False).flatten(1)
            peak = cam.argmax(1)
            r, c = peak // SHAPE[2], peak % SHAPE[2]
            side = torch.randint(3, 8, (len(xs), 10), generator=g, device=dev)
            rows = torch.arange(SHAPE[1], device=dev).view(1, 1, -1, 1)
            cols = torch.arange(SHAPE[2], device=dev).view(1, 1, 1, -1)
            box = ((rows - r.view(-1, 1, 1, 1)).abs() * 2 < side[..., None, None]) & \
                  ((cols - c.view(-1, 1, 1, 1)).abs() * 2 < side[..., None, None])
            v = torch.where(box.unsqueeze(2), torch.tensor(0.1307, device=dev), xs.unsqueeze(1))
            with torch.no_grad():
                p = torch.softmax(model(v.flatten(0, 1)), 1).view(len(xs), 10, K)
            pick = p.gather(2, ys.view(-1, 1, 1).expand(-1, 10, 1)).squeeze(2).argmin(1)
            best.append(v[torch.arange(len(xs)), pick])
            score.append(p[torch.arange(len(xs)), pick].max(1).values)
        out = torch.cat(best)[torch.topk(torch.cat(score), POOL // 4).indices]
        sync(dev)
        return out

    assert benchmark.pedantic(step, rounds=1, iterations=1, warmup_rounds=0).shape == (POOL // 4, *SHAPE)
