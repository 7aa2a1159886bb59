"""Pool subset-selection strategies of ActiveThief (Pal et al., AAAI 2020, "Active learning strategies").

Every function takes the substitute's view of the candidates and returns *positions into the
candidate list* (int64, on the CPU), never pool indices: the caller maps them back. All work is
chunked so a pool of 100k-1M images fits in a few GiB, and runs on whatever device the model and
tensors live on. The strategies (``entropy_select``, ``k_center_greedy``, ``deepfool_norms``) are
described below and on docs/attacks/activethief.md.
"""
# - ``entropy_select``: the k candidates whose substitute softmax has the largest
#   entropy (uncertainty sampling, Lewis & Gale 1994).
# - ``k_center_greedy``: greedy core-set selection (Sener & Savarese, ICLR 2018)
#   in the substitute's output-probability space with L2 distance; the labelled
#   training points are the initial centers.
# - ``deepfool_norms``: the L2 size of a DeepFool perturbation (Moosavi-Dezfooli
#   et al., CVPR 2016) of each candidate; DFAL (Ducoffe & Precioso 2018) queries
#   the candidates with the smallest one, i.e. those nearest the substitute's
#   decision boundary. By default it follows the ActiveThief authors' code (a
#   fixed number of steps on the softmax over all classes, see
#   ``mebench.attacks.activethief``); textbook DeepFool on the logits with an
#   early exit at the flip is an option.

from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from mebench.support.inference import chunked

ImageLoader = Callable[[torch.Tensor], torch.Tensor]


def _chunks(n: int, size: int) -> Iterator[slice]:
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def stable_topk(scores: torch.Tensor, k: int, largest: bool) -> torch.Tensor:
    """Positions of the ``k`` best scores; ties go to the earlier position (deterministic)."""
    order = torch.argsort(scores, descending=largest, stable=True)
    return order[:k].cpu()


@torch.no_grad()
def predict_probs(model: nn.Module, load: ImageLoader, index: torch.Tensor, chunk: int) -> torch.Tensor:
    """Softmax outputs ``[m, K]`` of ``model`` on the images ``load(index)``, chunk by chunk."""
    if index.numel() == 0:
        raise ValueError("no candidates to score")
    model.eval()
    return chunked(lambda idx: F.softmax(model(load(idx)), dim=1), index, index.device, chunk)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of each row, with 0 log 0 = 0."""
    return -(probs * torch.log(probs.clamp_min(1e-12))).sum(dim=1)


def entropy_select(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Uncertainty strategy: the ``k`` rows with the highest entropy."""
    return stable_topk(entropy(probs), k, largest=True)


def min_distances(points: torch.Tensor, centers: torch.Tensor, chunk: int) -> torch.Tensor:
    """L2 distance from every row of ``points`` to its nearest row of ``centers`` (inf if none).

    Rows of ``points`` are processed ``chunk`` at a time against column blocks of
    ``centers``, so memory stays at ``chunk * chunk`` floats.
    """
    out = torch.full((points.shape[0],), float("inf"), device=points.device)
    for rows in _chunks(int(points.shape[0]), chunk):
        for cols in _chunks(int(centers.shape[0]), chunk):
            d = torch.cdist(points[rows], centers[cols]).amin(dim=1)
            out[rows] = torch.minimum(out[rows], d)
    return out


def k_center_greedy(cand: torch.Tensor, centers: torch.Tensor, k: int, chunk: int = 4096) -> torch.Tensor:
    """Greedy k-center: repeatedly take the candidate farthest from every center so far.

    ``cand`` ``[m, K]`` and ``centers`` ``[n, K]`` are output-probability vectors.
    Each pick becomes a center. The greedy loop is sequential by nature; each
    pick costs one matrix-vector product over the candidates (squared L2
    distances via ``|a|^2 - 2 a.b + |b|^2``, which rank like L2 distances).
    """
    m = int(cand.shape[0])
    if k > m:
        raise ValueError(f"cannot pick {k} of {m} candidates")
    d2 = min_distances(cand, centers, chunk).square()
    sq = (cand * cand).sum(dim=1)
    picks = torch.empty(k, dtype=torch.long)
    for i in range(k):
        j = int(torch.argmax(d2))
        picks[i] = j
        torch.minimum(d2, torch.addmv(sq, cand, cand[j], alpha=-2.0).add_(sq[j]), out=d2)
        d2[j] = -1.0  # never picked twice, even when every distance is 0
    return picks


DFAL_SPACES = ("probs", "logits")
DFAL_STEPS = ("gap", "boundary")


def _outputs(model: nn.Module, x: torch.Tensor, space: str) -> torch.Tensor:
    logits = model(x)
    return F.softmax(logits, dim=1) if space == "probs" else logits


def _perturbed(x0: torch.Tensor, r: torch.Tensor, overshoot: float) -> torch.Tensor:
    return (x0 + (1.0 + overshoot) * r).clamp(0.0, 1.0)


def _deepfool_step(model: nn.Module, x0: torch.Tensor, r: torch.Tensor, k0: torch.Tensor,
                   rivals: torch.Tensor, overshoot: float, space: str, step: str) -> torch.Tensor:
    """One DeepFool iteration for a batch: the new accumulated perturbation.

    Linearizes ``f_j - f_k0`` (``f``: softmax or logits) around the current
    perturbed image for every rival ``j``, picks the rival with the smallest
    ``|f_j - f_k0| / ||grad||`` and moves along that gradient difference: by
    ``|f_j - f_k0| / ||grad||`` times the gradient difference (``gap``, a step
    of length ``|f_j - f_k0|``) or onto the linearized boundary plus 1e-4
    (``boundary``, Moosavi-Dezfooli et al.). A rival with a zero gradient
    difference and a zero gap is skipped; a row left with no finite choice gets
    a non-finite step, which the caller treats as "never reaches a boundary".
    """
    xa = _perturbed(x0, r, overshoot).requires_grad_(True)
    out = _outputs(model, xa, space)
    f = out.gather(1, rivals) - out.gather(1, k0[:, None])  # [b, c-1]
    grads = [torch.autograd.grad(f[:, j].sum(), xa, retain_graph=j + 1 < f.shape[1])[0].flatten(1)
             for j in range(f.shape[1])]
    w = torch.stack(grads, dim=1)  # [b, c-1, D]
    w_norm = torch.linalg.vector_norm(w, dim=2)
    ratio = f.detach().abs() / w_norm
    ratio = torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)
    best = ratio.argmin(dim=1)
    ar = torch.arange(best.numel(), device=best.device)
    scale = ratio[ar, best] if step == "gap" else (ratio[ar, best] + 1e-4) / w_norm[ar, best]
    return (r + (scale[:, None] * w[ar, best]).view_as(r)).detach()


def deepfool_batch(model: nn.Module, x: torch.Tensor, *, max_iter: int, overshoot: float,
                   num_classes: int | None = None, space: str = "probs", early_stop: bool = False,
                   step: str = "gap") -> torch.Tensor:
    """L2 norm of the DeepFool perturbation of each image in ``x``; smaller = nearer the boundary.

    The perturbed image ``clip(x + (1 + overshoot) r, 0, 1)`` is linearized in
    ``space`` (``probs``: the substitute's softmax, ``logits``). Rivals of the
    clean top class are the ``num_classes - 1`` runners-up (all other classes
    when ``None``). Without ``early_stop`` every image takes exactly
    ``max_iter`` steps and the norm is that of the final perturbation; with it
    an image leaves the batch when its label flips (norm at the flip) and
    keeps ``inf`` if it never flips. A non-finite perturbation gives ``inf``.
    """
    with torch.no_grad():
        out = _outputs(model, x, space)
    c = out.shape[1] if num_classes is None else max(2, min(num_classes, out.shape[1]))
    top = out.topk(c, dim=1).indices
    k0, rivals = top[:, 0], top[:, 1:]
    norms = torch.full((x.shape[0],), float("inf"), device=x.device)
    r = torch.zeros_like(x)
    live = torch.arange(x.shape[0], device=x.device)
    for _ in range(max_iter):
        with torch.enable_grad():
            r[live] = _deepfool_step(model, x[live], r[live], k0[live], rivals[live], overshoot, space, step)
        live = live[torch.isfinite(r[live].flatten(1)).all(dim=1)]
        if early_stop:
            with torch.no_grad():
                x_adv = _perturbed(x[live], r[live], overshoot)
                done = model(x_adv).argmax(dim=1) != k0[live]
                norms[live[done]] = torch.linalg.vector_norm((x_adv[done] - x[live[done]]).flatten(1), dim=1)
            live = live[~done]
        if live.numel() == 0:
            break
    if not early_stop:
        final = _perturbed(x[live], r[live], overshoot) - x[live]
        norms[live] = torch.linalg.vector_norm(final.flatten(1), dim=1)
    return norms


def deepfool_norms(model: nn.Module, load: ImageLoader, index: torch.Tensor, *, max_iter: int,
                   overshoot: float, num_classes: int | None, space: str, early_stop: bool, step: str,
                   chunk: int) -> torch.Tensor:
    """``deepfool_batch`` norms of the images ``load(index)``, ``chunk`` images at a time."""
    model.eval()
    parts = [deepfool_batch(model, load(index[s]), max_iter=max_iter, overshoot=overshoot,
                            num_classes=num_classes, space=space, early_stop=early_stop, step=step)
             for s in _chunks(int(index.numel()), chunk)]
    return torch.cat(parts)
