"""The maximum softmax probability (MSP) of the plain and the Outlier-Exposure victims as
Adaptive Misinformation's out-of-distribution score (docs/defenses/adaptive_misinformation.md).

For each victim (``victims/<id>.pt``, as ``mebench victim train`` wrote it): its test accuracy, the
share of its own test split and of the defense grid's attacker pool (the other dataset's test
split) whose MSP is at least τ (0.99, the reference's value, and 0.9 / 0.7), the same share on
10,000 images of each synthetic outlier source (a seed the victims never saw), and the AUROC of
MSP separating the own test split (positive) from the pool's. Writes ``msp.json`` next to this file.

    python studies/adaptive-misinformation/oe_victims/msp.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from scipy.stats import rankdata

from mebench.run.artifacts import atomic_write_text
from mebench.data.datasets import load_split, resolve_data_root
from mebench.data.profiles import get_profile
from mebench.defenses.outliers import OUTLIER_SEED, synthetic_blobs, synthetic_strokes
from mebench.models.registry import MODELS, Normalized

HERE = Path(__file__).resolve().parents[3] / "results" / "adaptive-misinformation/oe_victims"  # the set's records (this script lives in studies/)
ROOT = HERE.parents[2]
VICTIMS = {"mnist_lenet5": ("MNIST", "FashionMNIST"), "mnist_lenet5_oe": ("MNIST", "FashionMNIST"),
           "fashionmnist_lenet5": ("FashionMNIST", "MNIST"), "fashionmnist_lenet5_oe": ("FashionMNIST", "MNIST")}
TAUS = (0.99, 0.9, 0.7)


def load(victim_id: str, dataset: str) -> torch.nn.Module:
    obj = torch.load(ROOT / "victims" / f"{victim_id}.pt", weights_only=True)
    prof = get_profile(dataset)
    net = MODELS.get(obj["arch"])(prof.channels, prof.num_classes, prof.input_size)
    net.load_state_dict(obj["state_dict"])
    return Normalized(net, prof.mean, prof.std).eval()


@torch.no_grad()
def msp(model: torch.nn.Module, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    p = torch.cat([torch.softmax(model(b.float() / 255), 1) for b in x.split(2000)])
    top, arg = p.max(1)
    return top.numpy(), arg.numpy()


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting half (Mann-Whitney U / n·m)."""
    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def main() -> None:
    torch.set_num_threads(1)
    root = resolve_data_root(os.environ.get("MEBENCH_DATA_ROOT"), command="run")
    outliers = {"synthetic_blobs": synthetic_blobs(10000, (1, 28, 28), seed=OUTLIER_SEED + 1),
                "synthetic_strokes": synthetic_strokes(10000, (1, 28, 28), seed=OUTLIER_SEED + 1)}
    out = {"taus": list(TAUS), "outlier_seed": OUTLIER_SEED + 1, "victims": {}}
    for vid, (dataset, pool) in VICTIMS.items():
        model = load(vid, dataset)
        x, y = load_split(dataset, root, train=False)
        xp, _ = load_split(pool, root, train=False)
        own, pred = msp(model, x)
        sets = {"test": own, "pool_test": msp(model, xp)[0], **{k: msp(model, v)[0] for k, v in outliers.items()}}
        meta = json.loads((ROOT / "victims" / f"{vid}.json").read_text())
        out["victims"][vid] = {
            "dataset": dataset, "pool": pool, "sha256": meta["sha256"],
            "outlier_exposure": meta.get("outlier_exposure"),
            "test_accuracy": float((pred == y.numpy()).mean()),
            "share_msp_at_least_tau": {k: {str(t): float((v >= t).mean()) for t in TAUS} for k, v in sets.items()},
            "mean_msp": {k: float(v.mean()) for k, v in sets.items()},
            "auroc_test_vs_pool": auroc(own, sets["pool_test"])}
    atomic_write_text(HERE / "msp.json", json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
