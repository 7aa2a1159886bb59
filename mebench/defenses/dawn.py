"""DAWN: Szyller, Atli, Marchal, Asokan, "DAWN: Dynamic Adversarial Watermarking of Neural Networks",
ACM Multimedia 2021 (arXiv:1906.00830); code ssg-research/dawn-dynamic-adversarial-watermarking-of-neural-networks.

A keyed hash of each query image decides whether its answer is watermarked (about ``rate`` of the
queries); a watermarked query is answered with a wrong label that the key and the image fix, so a
repeated query gets the same answer. The defense keeps every watermarked (image, wrong label) it
served, in stream order (``watermarks``), for the owner's verification
(``mebench.verification.dawn``). Its answers are charged like any other. Page: docs/defenses/dawn.md.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Optional

import torch

from mebench.defenses.base import Defense, register_defense
from mebench.errors import ConfigError


@register_defense
class Dawn(Defense):
    name, space = "dawn", "probs"
    paper = "Szyller, Atli, Marchal, Asokan, ACM MM 2021 (DAWN)"

    @dataclass(frozen=True)
    class Params:
        rate: float = 0.005       # filter.py:30 (probability = 5 / 1000)
        precision: int = 16       # filter.py:30 (bits of the hash compared with the bound)
        key: str = "mebench-dawn"  # the owner's secret (filter.py:22-26 draws one from a fixed seed)

    @classmethod
    def check_params(cls, params: Any, output_mode: str) -> None:
        if not 0 < params.rate < 1:
            raise ConfigError("defense.params.rate", params.rate, "must lie in (0, 1): the share of watermarked answers")
        if not 1 <= params.precision <= 64:
            raise ConfigError("defense.params.precision", params.precision, "must lie in [1, 64] (bits of the hash)")
        if not params.key:
            raise ConfigError("defense.params.key", params.key, "must be a non-empty string (the owner's secret)")
        if params.rate * 2 ** params.precision < 1:
            raise ConfigError("defense.params.rate", params.rate,
                              f"is below the resolution of {params.precision} bits: raise defense.params.precision")

    def __init__(self, params: Any, generator: torch.Generator, state: Any = None) -> None:
        super().__init__(params, generator, state)
        self.bound = int(2 ** params.precision * params.rate)
        self.answered = 0
        self._index: list[int] = []
        self._images: list[torch.Tensor] = []
        self._labels: list[int] = []
        self._seen: set[bytes] = set()

    def digest(self, image: torch.Tensor) -> bytes:
        """HMAC-SHA256 of one image's float32 bytes under the key (filter.py:43-54)."""
        raw = image.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
        return hmac.new(self.params.key.encode("utf-8"), raw, hashlib.sha256).digest()

    def marks(self, d: bytes, top1: int, num_classes: int) -> Optional[int]:
        """The wrong label the digest ``d`` gives an answer whose top-1 is ``top1``, or None when the
        answer is not watermarked: the first ``precision`` bits below the bound (filter.py:56); the
        label from the next 64 bits, uniform over the other classes."""
        if int.from_bytes(d[:8], "big") >> (64 - self.params.precision) >= self.bound:
            return None
        return (top1 + 1 + int.from_bytes(d[8:16], "big") % (num_classes - 1)) % num_classes

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        top1 = scores.argmax(dim=1).tolist()
        k = scores.shape[1]
        images = x.detach().to("cpu", torch.float32).contiguous()  # one copy off the device per batch
        for i, image in enumerate(images):
            d = self.digest(image)
            wrong = self.marks(d, top1[i], k)
            if wrong is None:
                continue
            out[i, [top1[i], wrong]] = scores[i, [wrong, top1[i]]]  # the wrong label takes the top probability
            if d not in self._seen:
                self._seen.add(d)
                self._index.append(self.answered + i)
                self._images.append(image.clone())
                self._labels.append(wrong)
        self.answered += len(x)
        return out

    def watermarks(self, upto: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The distinct watermarked images served (float32, CPU) and their wrong labels, in stream
        order; ``upto``: only those among the first ``upto`` answered images (a checkpoint's B)."""
        n = len(self._index) if upto is None else sum(1 for i in self._index if i < upto)
        if n == 0:
            return torch.empty(0), torch.empty(0, dtype=torch.long)
        return torch.stack(self._images[:n]), torch.tensor(self._labels[:n], dtype=torch.long)

    def record(self) -> dict[str, Any]:
        """What a run records: images answered, distinct watermarks served, the bound's exact rate."""
        return {"answered": self.answered, "watermarks": len(self._index),
                "rate": self.bound / 2 ** self.params.precision}
