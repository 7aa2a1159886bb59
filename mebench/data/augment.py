"""Seeded, vectorized image augmentation used to grow the ``seed`` data-mode pool (§3.1).

Each generated image is one seed image under its own random affine transform
(rotation within +/-15 degrees, translation within +/-10 % of the side, scale
0.9-1.1), a brightness/contrast jitter of +/-20 % and Gaussian pixel noise with
std 0.02, then clamped to [0, 1] and quantized to uint8. All parameters are
drawn from one ``torch.Generator``, so the pool is a function of the run seed.
The transforms are applied with ``affine_grid``/``grid_sample`` on whole
batches: there is no per-image Python loop. See docs/guide/data.md.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from mebench.data.rowfile import RowFile

ROTATION_DEG = 15.0
TRANSLATE_FRAC = 0.10
SCALE_RANGE = (0.9, 1.1)
JITTER = 0.2
NOISE_STD = 0.02


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g)


def random_affine_jitter(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Augment float ``[N, C, H, W]`` images in [0, 1]; returns float in [0, 1]."""
    n = x.shape[0]
    ang = _uniform(n, -ROTATION_DEG, ROTATION_DEG, g) * math.pi / 180
    scale = _uniform(n, *SCALE_RANGE, g)
    tx = _uniform(n, -2 * TRANSLATE_FRAC, 2 * TRANSLATE_FRAC, g)  # grid units span 2
    ty = _uniform(n, -2 * TRANSLATE_FRAC, 2 * TRANSLATE_FRAC, g)
    cos, sin = torch.cos(ang) / scale, torch.sin(ang) / scale
    theta = torch.stack([torch.stack([cos, -sin, tx], 1), torch.stack([sin, cos, ty], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    bright = _uniform(n, -JITTER, JITTER, g).view(n, 1, 1, 1)
    contrast = _uniform(n, 1 - JITTER, 1 + JITTER, g).view(n, 1, 1, 1)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = (out - mean) * contrast + mean + bright
    out = out + NOISE_STD * torch.randn(out.shape, generator=g)
    return out.clamp_(0.0, 1.0)


def grow_pool(seeds: torch.Tensor, size: int, g: torch.Generator, chunk: int = 8192,
              on_disk: bool = False) -> "torch.Tensor | RowFile":
    """A uint8 pool of ``size`` images: the seeds themselves first, then augmented copies.

    Copy ``i`` (for ``i >= len(seeds)``) augments seed ``i mod len(seeds)``. ``on_disk``: the pool
    is written chunk by chunk to an anonymous temporary ``RowFile`` (a 1M-image MNIST pool is
    0.8 GB), with the same bytes as in memory.
    """
    n_seed = seeds.shape[0]
    shape = (size, *seeds.shape[1:])
    out = RowFile(shape, np.uint8) if on_disk else torch.empty(shape, dtype=torch.uint8)

    def put(start: int, rows: torch.Tensor) -> None:
        if on_disk:
            out.write(start, rows.numpy())
        else:
            out[start : start + rows.shape[0]] = rows

    put(0, seeds[: min(size, n_seed)])
    for start in range(n_seed, size, chunk):
        stop = min(size, start + chunk)
        src = seeds[torch.arange(start, stop) % n_seed].float().div_(255.0)
        put(start, random_affine_jitter(src, g).mul_(255.0).round_().to(torch.uint8))
    return out


def crop_flip(x: torch.Tensor, pad: int = 4, g: Optional[torch.Generator] = None) -> torch.Tensor:
    """Random crop with ``pad`` zero padding and random horizontal flip, for a whole batch at once
    (``g``: the generator to draw from, on ``x``'s device; ``None``: torch's global one)."""
    n, _, h, w = x.shape
    dev = x.device
    padded = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), device=dev, generator=g)
    dx = torch.randint(0, 2 * pad + 1, (n,), device=dev, generator=g)
    out = _crop(padded, dy, dx, h, w)
    flip = torch.rand(n, device=dev, generator=g) < 0.5
    out[flip] = out[flip].flip(3)
    return out


def _crop(padded: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, h: int, w: int) -> torch.Tensor:
    n, c = padded.shape[:2]
    iy = (dy.view(n, 1) + torch.arange(h, device=padded.device)).view(n, 1, h, 1)
    ix = (dx.view(n, 1) + torch.arange(w, device=padded.device)).view(n, 1, 1, w)
    b = torch.arange(n, device=padded.device).view(n, 1, 1, 1)
    ch = torch.arange(c, device=padded.device).view(1, c, 1, 1)
    return padded[b, ch, iy, ix]


def auto_augment(x: torch.Tensor, g: torch.Generator, policy: str = "cifar10") -> torch.Tensor:
    """torchvision's AutoAugment with one random sub-policy per image, for a whole batch at once.

    ``x``: float pixels in ``[0, 1]``, ``[N, C, H, W]``. Each image draws its sub-policy, each
    op's coin flip and each signed op's sign from ``g`` (on the CPU), exactly the draws
    ``torchvision.transforms.AutoAugment`` makes per image; images that drew the same
    sub-policy, flip and sign share one batched op call (at most 25 sub-policies × 2 ops × 2
    signs calls, whatever the batch size). Ops run on 8-bit images, so the result is quantized
    to multiples of 1/255.
    """
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import autoaugment as aa

    tf = aa.AutoAugment(aa.AutoAugmentPolicy(policy))
    n, _, h, w = x.shape
    space = tf._augmentation_space(10, (h, w))
    out = x.detach().clamp(0.0, 1.0).mul(255.0).round().to(torch.uint8)
    pid = torch.randint(len(tf.policies), (n,), generator=g)
    coin = torch.rand(n, 2, generator=g)
    sign = torch.randint(2, (n, 2), generator=g)
    for k in pid.unique().tolist():
        mine = pid == k
        rows = mine.nonzero().flatten().to(out.device)
        sub = out[rows]
        for j, (op, p, mag_id) in enumerate(tf.policies[k]):
            mags, signed = space[op]
            mag = float(mags[mag_id].item()) if mag_id is not None else 0.0
            apply = (coin[mine, j] <= p).to(out.device)
            negative = (sign[mine, j] == 0).to(out.device) & signed
            for neg in (False, True):
                m = apply & (negative if neg else ~negative)
                if bool(m.any()):
                    sub[m] = aa._apply_op(sub[m], op, -mag if neg else mag,
                                          interpolation=InterpolationMode.NEAREST, fill=None)
        out[rows] = sub
    return out.float().div_(255.0)
