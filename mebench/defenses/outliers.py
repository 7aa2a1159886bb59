"""Outlier-exposure images for a defender's fit, and the rule that keeps them off the attacker's pool.

The default source is synthetic (``synthetic_blobs``; ``synthetic_strokes`` a second), because the
reference's KMNIST is absent from mebench's data root and MNIST and FashionMNIST are each other's
attacker pool; ``check_outlier_source`` refuses a named dataset that is the victim's dataset or the
cell's attacker pool. See docs/defenses/adaptive_misinformation.md.
"""
# Adaptive Misinformation's reference trains its misinformation model on outlier-exposure (OE)
# batches from KMNIST next to MNIST (sanjaykariyappa/adaptive_misinformation@c2a3e1b,
# ``README.md:18``, ``-doe KMNIST``). mebench's data root holds MNIST and FashionMNIST only, and its
# defense grids use each as the other's attacker pool, so neither may be the outlier source: a
# defender that trained on the attacker's own pool would be told the answer. The default source is
# therefore synthetic: ``synthetic_blobs``, thresholded smoothed noise in the spirit of the "Blobs"
# anomalies of Hendrycks, Mazeika, Dietterich (ICLR 2019, Outlier Exposure), generated
# deterministically from a fixed seed at the victim's input shape; ``synthetic_strokes`` (pen strokes,
# nearer to handwritten characters) is a second source, to measure how much the choice matters, and
# the outlier set of the ``*_oe`` victim recipes (``mebench.victims.outlier_exposure``). A registered dataset with the
# victim's shape (KMNIST, the reference's choice, where the data root has it) may be named instead;
# ``check_outlier_source`` refuses one that is the victim's dataset or the cell's attacker pool.

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from mebench.errors import ConfigError

NO_OUTLIERS = "none"
SYNTHETIC_SOURCES = ("synthetic_blobs", "synthetic_strokes")
OUTLIER_SEED = 20192
"""Seed of the synthetic outliers: fixed, like the defender's own seed, so every cell meets the same defense."""

SplitLoader = Callable[[str, bool], "tuple[torch.Tensor, torch.Tensor]"]


def check_outlier_source(source: str, key: str, victim_dataset: Optional[str], pool: Optional[str],
                         input_shape: Optional[tuple[int, ...]] = None) -> None:
    """One ``ConfigError`` when ``source`` is unknown, has the wrong shape, or is in-distribution or the pool.

    ``pool`` is the attacker's pool dataset of the cell (``dataset.surrogate_name``), ``victim_dataset``
    the victim's own: outliers drawn from either are not outliers, or are the attacker's queries.
    """
    if source == NO_OUTLIERS or source in SYNTHETIC_SOURCES:
        return
    from mebench.data.profiles import PROFILES

    if source not in PROFILES:
        valid = [NO_OUTLIERS, *SYNTHETIC_SOURCES, *(n for n in PROFILES.names() if n != victim_dataset)]
        raise ConfigError(key, source, f"must be one of {valid}: '{NO_OUTLIERS}', a synthetic source "
                                       "or a registered dataset with the victim's input shape")
    if source == pool:
        raise ConfigError(key, source, "the outlier source must not be the attacker's pool dataset of the "
                                       f"same cell (dataset.surrogate_name = {pool})")
    if source == victim_dataset:
        raise ConfigError(key, source, "the outlier source must not be the victim's own dataset (dataset.name)")
    if input_shape is not None and tuple(PROFILES.get(source).input_shape) != tuple(input_shape):
        raise ConfigError(key, source, f"an outlier dataset has the victim's input shape {tuple(input_shape)}")


def _gaussian_kernel(sigma: float) -> torch.Tensor:
    radius = max(1, math.ceil(2 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``(N, 1, H, W)`` with reflected borders."""
    k = _gaussian_kernel(sigma)
    r = (k.numel() - 1) // 2
    x = F.conv2d(F.pad(x, (r, r, 0, 0), mode="replicate"), k.view(1, 1, 1, -1))
    return F.conv2d(F.pad(x, (0, 0, r, r), mode="replicate"), k.view(1, 1, -1, 1))


def synthetic_blobs(n: int, shape: tuple[int, int, int], seed: int = OUTLIER_SEED, chunk: int = 4096) -> torch.Tensor:
    """``n`` uint8 images of shape ``shape``: white blobs on black, 10-40 % of each image lit.

    Uniform noise blurred at a scale of 1/14 of the image side (2 px at 28 x 28), thresholded at a
    per-image quantile; built in chunks with one generator, so the set depends on ``seed`` only.
    """
    c, h, w = shape
    g = torch.Generator().manual_seed(seed)
    sigma = max(h, w) / 14.0
    out = torch.empty((n, c, h, w), dtype=torch.uint8)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        noise = torch.rand((m * c, 1, h, w), generator=g)
        smooth = _blur(noise, sigma).view(m, c * h * w)
        lit = 0.1 + 0.3 * torch.rand((m, 1), generator=g)
        ranks = ((1.0 - lit) * (c * h * w - 1)).long()
        thresholds = smooth.sort(dim=1).values.gather(1, ranks)
        out[start:start + m] = ((smooth > thresholds).to(torch.uint8) * 255).view(m, c, h, w)
    return out


def synthetic_strokes(n: int, shape: tuple[int, int, int], seed: int = OUTLIER_SEED, chunk: int = 2048,
                      max_strokes: int = 5) -> torch.Tensor:
    """``n`` uint8 images of shape ``shape``: 2 to ``max_strokes`` straight pen strokes, white on black.

    A second synthetic source, nearer to handwritten characters (the reference's KMNIST) than
    blobs are: each stroke joins two uniform points of the central 70 % of the image, drawn
    anti-aliased with a pen 1-2 px wide at 28 x 28 (scaled with the side). Depends on ``seed`` only.
    """
    c, h, w = shape
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    pix = torch.stack([ys.flatten(), xs.flatten()], dim=1)  # (H*W, 2)
    side = torch.tensor([h - 1, w - 1], dtype=torch.float32)
    out = torch.empty((n, c, h, w), dtype=torch.uint8)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        a = (0.15 + 0.7 * torch.rand((m, max_strokes, 1, 2), generator=g)) * side
        b = (0.15 + 0.7 * torch.rand((m, max_strokes, 1, 2), generator=g)) * side
        pen = (0.5 + 0.5 * torch.rand((m, 1, 1), generator=g)) * max(h, w) / 28.0
        used = torch.arange(max_strokes)[None, :] < torch.randint(2, max_strokes + 1, (m, 1), generator=g)
        ab = b - a
        t = (((pix - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-6)).clamp(0, 1)  # (m, k, H*W)
        dist = (pix - (a + t[..., None] * ab)).norm(dim=-1)
        ink = (pen + 0.5 - dist).clamp(0, 1) * used[..., None]
        img = (ink.amax(dim=1) * 255).round().to(torch.uint8).view(m, 1, h, w)
        out[start:start + m] = img.expand(m, c, h, w)
    return out


def outlier_images(source: str, n: int, shape: tuple[int, int, int],
                   load_split: Optional[SplitLoader] = None) -> Optional[torch.Tensor]:
    """The outlier set of ``source`` (uint8): ``None`` for ``none``, ``n`` synthetic images, or a
    dataset's train split."""
    if source == NO_OUTLIERS:
        return None
    if source == "synthetic_blobs":
        return synthetic_blobs(n, shape)
    if source == "synthetic_strokes":
        return synthetic_strokes(n, shape)
    if load_split is None:
        raise ConfigError("defense.params.outlier_source", source,
                          "a dataset outlier source needs the defense context's load_split (engine.defense_context)")
    images, _ = load_split(source, True)
    return images


@torch.no_grad()
def victim_top_class(victim, images: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """The victim's argmax class of each uint8 image: the label the reference gives an OE image
    (``admis/utils/model.py:127``, ``torch.max(outputs_all[batch:])``)."""
    labels = [victim.logits(images[i:i + batch_size].float().div_(255.0)).argmax(dim=1).cpu()
              for i in range(0, images.shape[0], batch_size)]
    return torch.cat(labels)
