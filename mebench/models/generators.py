"""Image generators for data-free attacks (DFME, Truong et al., CVPR 2021).

``Generator`` is the DFME reference generator (``dfme/network/gan.py:13-65``, "GeneratorA" of DFAD);
it returns the *pre-activation* map ``a``, and ``to_pixels`` maps ``a`` to pixel space ``[0, 1]``.
Its layers and the layout per input shape are below. Generators are attack-internal, so nothing
here is registered as a model. See docs/attacks/dfme.md.
"""
# ``Generator`` is the DFME reference generator (``dfme/network/gan.py:13-65``,
# "GeneratorA" of DFAD): a linear projection of the noise to a small map, blocks of
# nearest 2x upsampling, 3x3 convolution, batch norm and LeakyReLU(0.2), a 3x3
# convolution to the image channels and a non-affine batch norm. It returns the
# *pre-activation* map ``a``; ``to_pixels`` maps ``a`` to pixel space ``[0, 1]``.
#
# - 1x28x28 (MNIST) and 3x32x32 (CIFAR-10): 2 upsamplings from ``H/4``, channels
#   ``2*ngf -> 2*ngf -> ngf``, the reference layout.
# - 3x224x224 (Sewer-ML, ours): 5 upsamplings from 7x7, channels halving from
#   ``8*ngf`` (a 2-upsampling generator would need a 128x56x56 projection).

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

#: Spatial size of the projected noise is at most this before upsampling starts.
_MAX_INIT_SIZE = 8


class Generator(nn.Module):
    """Noise ``z [N, nz]`` -> pre-activation images ``[N, C, H, W]`` (zero mean, unit variance per channel)."""

    def __init__(self, nz: int, shape: tuple[int, int, int], ngf: int = 64, head_affine: bool = False) -> None:
        super().__init__()
        c, h, w = shape
        n_up = num_upsamplings(h, w)
        self.nz = nz
        self.shape = (c, h, w)
        self.init_size = (h >> n_up, w >> n_up)
        widths = _widths(n_up, ngf)
        self.project = nn.Linear(nz, widths[0] * self.init_size[0] * self.init_size[1])
        self.bn0 = nn.BatchNorm2d(widths[0])
        blocks: list[nn.Module] = []
        for cin, cout in zip(widths[:-1], widths[1:]):
            blocks += [
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(cin, cout, 3, padding=1),
                nn.BatchNorm2d(cout),
                nn.LeakyReLU(0.2, inplace=True),
            ]
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(widths[-1], c, 3, padding=1), nn.BatchNorm2d(c, affine=head_affine))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.project(z.flatten(1))
        out = out.view(out.shape[0], -1, *self.init_size)
        return self.head(self.blocks(self.bn0(out)))


def num_upsamplings(h: int, w: int) -> int:
    """2 for sizes up to 64 (reference layout), else halve until the map is at most 8 wide."""
    n = 2
    while max(h >> n, w >> n) > _MAX_INIT_SIZE:
        n += 1
    if (h >> n) << n != h or (w >> n) << n != w or min(h >> n, w >> n) < 1:
        raise ValueError(f"generator: image size {h}x{w} is not a multiple of 2**{n}; "
                         "supported sizes include 28x28, 32x32 and 224x224")
    return n


def _widths(n_up: int, ngf: int) -> list[int]:
    """Channel widths before and after each upsampling block (length ``n_up + 1``)."""
    if n_up == 2:
        return [2 * ngf, 2 * ngf, ngf]
    return [max((8 * ngf) >> j, 4) for j in range(n_up + 1)]


#: Pixel maps of a pre-activation map ``a`` (``to_pixels``); the first is DFME's reference.
PIXEL_MAPS: tuple[str, ...] = ("normalized_tanh", "unit_tanh")


def to_pixels(pre: torch.Tensor, pixel_map: str, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Map pre-activations ``[N, C, H, W]`` to pixels in ``[0, 1]``.

    - ``normalized_tanh`` (reference): the reference feeds ``tanh(a)`` to the victim as its
      *normalized* input (``dfme/approximate_gradients.py:44``, ``dfme/network/gan.py:65``),
      i.e. pixels ``mean + std * tanh(a)`` per channel. mebench's oracle takes pixels in
      ``[0, 1]``, so they are clamped there; for MNIST that cuts ``[-0.18, 0.44]`` to
      ``[0, 0.44]``, for CIFAR-10 nothing is cut. The clamp sits after ``a``, inside the
      black box that DFME's zeroth-order gradient estimate probes.
    - ``unit_tanh``: ``(tanh(a) + 1) / 2``, the full ``[0, 1]`` range, whatever the normalization.
    """
    t = torch.tanh(pre)
    if pixel_map == "unit_tanh":
        return t.add(1.0).mul(0.5)
    if pixel_map == "normalized_tanh":
        shape = (1, -1) + (1,) * (pre.dim() - 2)
        m = torch.as_tensor(mean, dtype=t.dtype, device=t.device).view(shape)
        s = torch.as_tensor(std, dtype=t.dtype, device=t.device).view(shape)
        return torch.addcmul(m, s, t).clamp_(0.0, 1.0)
    raise ValueError(f"unknown pixel_map {pixel_map!r}; valid: {', '.join(PIXEL_MAPS)}")


def make_generator(nz: int, shape: tuple[int, int, int], ngf: int = 64, head_affine: bool = False) -> Generator:
    """A fresh generator for images of ``shape = (C, H, W)`` (weights from torch's global RNG);
    ``head_affine``: the last batch norm learns a scale and shift (MAZE's ``conv3_gen``), not DFME's."""
    return Generator(nz, tuple(int(s) for s in shape), ngf, head_affine)  # type: ignore[arg-type]


def seeded_generator(nz: int, shape: tuple[int, int, int], ngf: int, seed: int,
                     head_affine: bool = False) -> Generator:
    """A fresh generator whose weights depend on ``seed`` only; torch's global RNG is left untouched.

    DFME and its null control ``untrained_generator`` both build theirs here, so for the
    same seed the control's generator is DFME's generator before its first update.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make_generator(nz, shape, ngf, head_affine)
