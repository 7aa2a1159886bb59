"""The measurable deviations of mebench's ModelGuard from the reference code
(docs/defenses/modelguard_w.md and modelguard_s.md, "Deviations from the reference").

For each LeNet-5 victim, on its own test split (what the utility cost sees) and on the defense
grid's attacker pool (the other dataset's test split, in a seeded order):

- ModelGuard-S, centroids in float64 (mebench) against float32 (the reference keeps the victim's
  float32 softmax): the share of answers that are the same vector, and the codebook sizes;
- ModelGuard-W, the same linear program solved by HiGHS's dual simplex (mebench's default,
  ``method="highs"``) and by its interior-point method (``highs-ipm``, followed by crossover to a
  vertex), a stand-in for another solver (the reference's CBC is not installed): the share of
  answers whose two solutions differ by more than 1e-6 in L1, the largest such difference, the
  largest difference in objective, and the seconds per 1,000 answers on one thread; and the same
  program solved 512 answers at a time (mebench) against 32 at a time (the reference's query batch):
  the share of answers whose vertex differs.

Writes ``results/modelguard/deviations.json``, with the code identity, the library versions (SciPy's too),
the machine it ran on (CPU model, the instruction set torch's kernels used and any cap on it, threads) and
each victim's build (sha256, test accuracy): the docs caption reads it as a study record.

    python studies/modelguard/deviations.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from mebench.run.artifacts import atomic_write_text
from mebench.data.datasets import load_split, resolve_data_root
from mebench.data.profiles import get_profile
from mebench.defenses import modelguard
from mebench.defenses.modelguard import LOG_FLOOR, Codebook, modelguard_w_lp
from mebench.models.registry import MODELS, Normalized
from mebench.support.identity import code_identity
from mebench.support.runinfo import library_versions, machine_info

HERE = Path(__file__).resolve().parents[2] / "results" / "modelguard"  # the set's records (this script lives in studies/)
ROOT = HERE.parents[1]
VICTIMS = {"mnist_lenet5": ("MNIST", "FashionMNIST"), "fashionmnist_lenet5": ("FashionMNIST", "MNIST")}
EPSILON = 1.0  # both defenses' reference value
LP_ANSWERS = 2000  # answers per stream for the two LP solvers (each solve costs about a second per 1,000)
ORDER_SEED = 0
REFERENCE_BATCH = 32  # the reference scripts' query batch (scripts/run_cifar10.py:23, ori_batch_size), one LP per batch


def load(victim_id: str, dataset: str) -> torch.nn.Module:
    obj = torch.load(ROOT / "victims" / f"{victim_id}.pt", weights_only=True)
    prof = get_profile(dataset)
    net = MODELS.get(obj["arch"])(prof.channels, prof.num_classes, prof.input_size)
    net.load_state_dict(obj["state_dict"])
    return Normalized(net, prof.mean, prof.std).eval()


@torch.no_grad()
def probs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.softmax(model(b.float() / 255), 1) for b in x.split(2000)])


class Float32Codebook(Codebook):
    """The reference's precision: centroids and distances in the victim's float32."""

    dtype = torch.float32


def codebook_precision(y: torch.Tensor) -> dict:
    k = y.shape[1]
    b64, b32 = Codebook(k, EPSILON, 1), Float32Codebook(k, EPSILON, 1)
    a64, a32 = b64.quantize(y).float(), b32.quantize(y)
    return {"answers": int(y.shape[0]), "same_answer_share": float((a64 == a32).all(1).double().mean()),
            "centroids_float64": b64.sizes(), "centroids_float32": b32.sizes()}


def lp_solvers(y: torch.Tensor) -> dict:
    y = y[:LP_ANSWERS].double()
    t0 = time.perf_counter()
    simplex = modelguard_w_lp(y, EPSILON)
    seconds = time.perf_counter() - t0
    from scipy import optimize

    plain = optimize.linprog

    def ipm(*args, **kwargs):
        return plain(*args, **{**kwargs, "method": "highs-ipm"})

    optimize.linprog = ipm
    try:
        interior = modelguard_w_lp(y, EPSILON)
    finally:
        optimize.linprog = plain
    rows, modelguard.LP_ROWS = modelguard.LP_ROWS, REFERENCE_BATCH
    try:
        small = modelguard_w_lp(y, EPSILON)
    finally:
        modelguard.LP_ROWS = rows
    cost = torch.log(y + LOG_FLOOR)
    gap = (simplex - interior).abs().sum(1)
    batch_gap = (simplex - small).abs().sum(1)
    return {"answers": int(y.shape[0]), "differ_share": float((gap > 1e-6).double().mean()),
            "max_l1_difference": float(gap.max()),
            "max_objective_difference": float(((simplex - interior) * cost).sum(1).abs().max()),
            "seconds_per_1000_answers": 1000 * seconds / y.shape[0], "rows_per_lp": modelguard.LP_ROWS,
            "reference_batch": REFERENCE_BATCH, "differ_share_reference_batch": float((batch_gap > 1e-6).double().mean()),
            "max_objective_difference_reference_batch": float(((simplex - small) * cost).sum(1).abs().max())}


def main() -> None:
    torch.set_num_threads(1)
    root = resolve_data_root(os.environ.get("MEBENCH_DATA_ROOT"), command="run")
    import scipy

    # where it ran, as a seed-run's summary.json says it (the docs caption reads it as a study record)
    out = {"epsilon": EPSILON, "order_seed": ORDER_SEED, "victims": {}, "code_identity": code_identity(),
           "versions": {**library_versions(), "scipy": scipy.__version__}, "machine": machine_info("cpu")}
    for vid, (dataset, pool) in VICTIMS.items():
        model = load(vid, dataset)
        x, _ = load_split(dataset, root, train=False)
        xp, _ = load_split(pool, root, train=False)
        order = torch.randperm(xp.shape[0], generator=torch.Generator().manual_seed(ORDER_SEED))
        streams = {"test": probs(model, x), "pool_test": probs(model, xp[order])}
        meta = json.loads((ROOT / "victims" / f"{vid}.json").read_text())
        out["victims"][vid] = {"dataset": dataset, "pool": pool, "sha256": meta["sha256"],
                               "test_accuracy": meta.get("test_accuracy"),
                               "modelguard_s_precision": {k: codebook_precision(v) for k, v in streams.items()},
                               "modelguard_w_solvers": {k: lp_solvers(v) for k, v in streams.items()}}
    atomic_write_text(HERE / "deviations.json", json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
