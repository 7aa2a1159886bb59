"""Adaptive Misinformation's remaining deviations, measured from the committed records
(docs/defenses/adaptive_misinformation.md, "Deviations from the reference that remain"; issue 42).

``mebench docs`` calls ``tables(set_dir)`` for the blocks the report does not draw:

- ``oe_victim.md``: the defense on the plain victim against the defense on the Outlier-Exposure
  victim (``configs/victims/*_oe.yaml``), same cells and seeds: each victim's undefended and
  defended agreement, the protection (defended − undefended, paired by seed within a victim), the
  utility (defended test accuracy), and the change in protection, OE − plain, paired by seed.
- ``outlier_source.md``: the misinformation model trained with ``synthetic_blobs`` against
  ``synthetic_strokes`` outliers, same victim, cells and seeds.
- ``oe_labels.md``: outlier-exposure labels from the trained, frozen victim (``oe_labels: frozen``,
  the default) against the victim's per-epoch snapshots (``joint``), same victim, cells and seeds
  (``mnist_oe_joint``), with the labelling snapshots' agreement with the final victim.
- ``msp.md``: each victim's maximum softmax probability as the defense's OOD score
  (``oe_victims/msp.json``, written by ``oe_victims/msp.py``).

Intervals: the report's 95 % paired interval (``mebench.report.stats.paired_ci``: Student t with
the 3 seeds here, the percentile bootstrap from 5).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mebench.report.document import Block, fmt_gain, fmt_mean_std, render_markdown, table
from mebench.report.stats import paired_ci

HERE = Path(__file__).resolve().parents[2] / "results" / "adaptive-misinformation"  # the set's records (this script lives in studies/)
BUDGETS = (1000, 10000)

# (dataset, victim kind, record folder, victim_id, defended label, AM recipe as it ran)
OE_SETTINGS = [
    ("MNIST", "plain", "mnist", "mnist_lenet5", "adaptive_misinformation", "reference"),
    ("MNIST", "plain", "mnist_variants", "mnist_lenet5", "am_ref_cpu", "reference_cpu"),
    ("MNIST", "OE", "mnist_oe", "mnist_lenet5_oe", "am_cpu_oe", "reference_cpu"),
    ("FashionMNIST", "plain", "fmnist", "fashionmnist_lenet5", "adaptive_misinformation", "reference"),
    ("FashionMNIST", "OE", "fmnist_oe", "fashionmnist_lenet5_oe", "am_cpu_oe", "reference_cpu"),
]
"""The undefended cells of a plain victim are in ``mnist``/``fmnist`` (``mnist_variants`` ran the
defended cells only, paired with ``mnist``'s undefended ones, as the docs page says)."""
OE_PAIRS = [("MNIST", 1, 2), ("MNIST", 0, 2), ("FashionMNIST", 3, 4)]
"""(plain, OE) rows of ``OE_SETTINGS`` compared; the first MNIST pair runs the same recipe on both."""
JOINT = ("MNIST", "mnist_oe_joint", "mnist_lenet5_oe_snap", "am_cpu_frozen", "am_cpu_joint")
"""(dataset, folder, victim_id, frozen label, joint label) of the OE-label comparison."""
JOINT_TWIN = ("mnist_oe", "mnist_lenet5_oe", "am_cpu_oe")
"""The same defended cells on the OE victim whose weights ``mnist_lenet5_oe_snap`` reproduces bit for bit."""
SOURCE_PAIRS = [("FashionMNIST", "fmnist_oe", "fashionmnist_lenet5_oe", "am_cpu_oe", "am_cpu_strokes_oe")]


def load_records(set_dir: Path) -> dict[tuple, dict[str, Any]]:
    """(folder, victim_id, label, seed) -> {agreement per budget, defended test accuracy}."""
    out: dict[tuple, dict[str, Any]] = {}
    for path in sorted(set_dir.glob("*/cells/*/summary.json")):
        d = json.loads(path.read_text())
        label = d["defense"].get("label") or d["defense"]["name"]
        agree = {r["checkpoint_B"]: r["agreement"] for r in d.get("results") or [] if r.get("track") == "A"}
        util = (d["defense"].get("utility") or {}).get("test_accuracy")
        out[(path.parts[-4], d["victim"]["victim_id"], label, d["seed"])] = {"agreement": agree, "acc": util}
    return out


def _series(recs: dict, folder: str, victim: str, label: str, budget: int) -> dict[int, float]:
    return {k[3]: v["agreement"][budget] for k, v in recs.items()
            if k[:3] == (folder, victim, label) and budget in v["agreement"]}


def _none_folder(folder: str) -> str:
    return {"mnist_variants": "mnist", "fmnist_variants": "fmnist"}.get(folder, folder)


def _paired(a: dict[int, float], b: dict[int, float]) -> Optional[dict[str, float]]:
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    ci = paired_ci([a[s] for s in seeds], [b[s] for s in seeds])
    return {"mean": ci.mean_diff, "lo": ci.ci_lower, "hi": ci.ci_upper, "n": ci.n}


def _gain(p: Optional[dict]) -> str:
    return "–" if p is None else fmt_gain(p["mean"], p["lo"], p["hi"], p["n"])


def _ms(s: dict[int, float]) -> str:
    v = np.array(list(s.values()), dtype=float)
    return "–" if v.size == 0 else fmt_mean_std(float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else None)


def protection(recs: dict, folder: str, victim: str, label: str, budget: int) -> dict[int, float]:
    """Per seed: defended − undefended agreement of the same victim and seed."""
    none = _series(recs, _none_folder(folder), victim, "none", budget)
    dfd = _series(recs, folder, victim, label, budget)
    return {s: dfd[s] - none[s] for s in sorted(set(none) & set(dfd))}


def _acc(recs: dict, folder: str, victim: str, label: str) -> str:
    vals = [v["acc"] for k, v in recs.items() if k[:3] == (folder, victim, label) and v["acc"] is not None]
    return "–" if not vals else f"{float(np.mean(vals)):.4f}"


def oe_table(recs: dict) -> str:
    head = ["dataset", "victim", "AM recipe", "defended test acc",
            *(f"{h} @{b // 1000}k" for b in BUDGETS for h in ("none", "AM", "protection"))]
    rows = []
    for ds, kind, folder, victim, label, recipe in OE_SETTINGS:
        cells = []
        for b in BUDGETS:
            none = _series(recs, _none_folder(folder), victim, "none", b)
            dfd = _series(recs, folder, victim, label, b)
            cells += [_ms(none), _ms(dfd), _gain(_paired(none, dfd))]
        rows.append([ds, f"{victim} ({kind})", f"`{recipe}`", _acc(recs, folder, victim, label), *cells])
    diffs = []
    for ds, i, j in OE_PAIRS:
        p, o = OE_SETTINGS[i], OE_SETTINGS[j]
        cells = []
        for b in BUDGETS:
            cells += [_gain(_paired(_series(recs, _none_folder(p[2]), p[3], "none", b),
                                    _series(recs, _none_folder(o[2]), o[3], "none", b))),
                      _gain(_paired(_series(recs, *p[2:5], b), _series(recs, *o[2:5], b))),
                      _gain(_paired(protection(recs, *p[2:5], b), protection(recs, *o[2:5], b)))]
        diffs.append([ds, f"{p[3]} (`{p[5]}`)", f"{o[3]} (`{o[5]}`)", *cells])
    return render_markdown([
        table(head, rows),
        Block("p", text="OE victim − plain victim, paired by seed: agreement undefended, agreement behind the "
                        "defense, and protection (negative: lower with the OE victim; for protection, a larger drop):"),
        table(["dataset", "plain (recipe)", "OE (recipe)",
               *(f"Δ {h} @{b // 1000}k" for b in BUDGETS for h in ("none", "AM", "protection"))], diffs)])


def source_table(recs: dict) -> str:
    rows, diffs = [], []
    for ds, folder, victim, blobs, strokes in SOURCE_PAIRS:
        for label, source in ((blobs, "synthetic_blobs"), (strokes, "synthetic_strokes")):
            cells = []
            for b in BUDGETS:
                none = _series(recs, folder, victim, "none", b)
                dfd = _series(recs, folder, victim, label, b)
                cells += [_ms(dfd), _gain(_paired(none, dfd))]
            rows.append([ds, victim, f"`{source}` ({label})", _acc(recs, folder, victim, label), *cells])
        diffs.append([ds, victim, *(
            _gain(_paired(_series(recs, folder, victim, blobs, b), _series(recs, folder, victim, strokes, b)))
            for b in BUDGETS)])
    return render_markdown([
        table(["dataset", "victim", "outlier source", "defended test acc",
               *(f"{h} @{b // 1000}k" for b in BUDGETS for h in ("AM", "protection"))], rows),
        Block("p", text="strokes − blobs, agreement behind the defense paired by seed:"),
        table(["dataset", "victim", *(f"Δ @{b // 1000}k" for b in BUDGETS)], diffs)])


def _snapshot_records(set_dir: Path, folder: str, label: str) -> list[dict]:
    """The ``snapshots`` entries the joint cells recorded (summary.json ``defense.fitted.outliers``)."""
    out = []
    for path in sorted((set_dir / folder / "cells").glob("*/summary.json")):
        d = json.loads(path.read_text())
        if (d["defense"].get("label") or d["defense"]["name"]) != label:
            continue
        snaps = (((d["defense"].get("fitted") or {}).get("outliers")) or {}).get("snapshots")
        if snaps:
            out.append(snaps)
    return out


def joint_table(recs: dict, set_dir: Path) -> str:
    _, folder, victim, frozen, joint = JOINT
    rows = []
    for label, name in ((frozen, "`frozen` (trained victim)"), (joint, "`joint` (per-epoch snapshots)")):
        cells = []
        for b in BUDGETS:
            none, dfd = _series(recs, folder, victim, "none", b), _series(recs, folder, victim, label, b)
            cells += [_ms(dfd), _gain(_paired(none, dfd))]
        rows.append([name, _acc(recs, folder, victim, label), *cells])
    diff = [_gain(_paired(_series(recs, folder, victim, frozen, b), _series(recs, folder, victim, joint, b)))
            for b in BUDGETS]
    twin = [_gain(_paired(_series(recs, *JOINT_TWIN, b), _series(recs, folder, victim, frozen, b))) for b in BUDGETS]
    blocks = [
        table(["OE labels", "defended test acc", *(f"{h} @{b // 1000}k" for b in BUDGETS for h in ("AM", "protection"))],
              rows),
        Block("p", text="Paired by seed, agreement behind the defense:"),
        table(["comparison", *(f"Δ @{b // 1000}k" for b in BUDGETS)],
              [["`joint` − `frozen`", *diff],
               [f"`frozen` here − `{JOINT_TWIN[2]}` on {JOINT_TWIN[1]} (same weights, `{JOINT_TWIN[0]}`)", *twin]])]
    snaps = _snapshot_records(set_dir, folder, joint)
    if snaps:
        s = snaps[0]
        blocks.append(Block("p", text=f"Snapshots `{Path(s['path']).name}`: {s['count']}, after victim steps "
                            f"{', '.join(str(v) for v in s['victim_steps'])}; the fit's {s['fit_steps']} steps each read one. "
                            "Agreement of each snapshot's top class with the final victim's on the fit's outlier set: "
                            + ", ".join(f"{a:.4f}" for a in s["agree_with_final"]) + "."))
    return render_markdown(blocks)


def msp_table(set_dir: Path) -> str:
    path = set_dir / "oe_victims" / "msp.json"
    if not path.is_file():
        return "*No `oe_victims/msp.json` yet.*\n"
    data = json.loads(path.read_text())
    rows = []
    for vid, v in data["victims"].items():
        share = v["share_msp_at_least_tau"]
        oe = v["outlier_exposure"]
        rows.append([vid, "none" if not oe else oe["source"] + ", λ " + str(oe["lambda"]), f"{v['test_accuracy']:.4f}",
                     f"{share['test']['0.99']:.4f}", f"{share['pool_test']['0.99']:.4f} ({v['pool']})",
                     f"{share['synthetic_blobs']['0.99']:.4f}", f"{share['synthetic_strokes']['0.99']:.4f}",
                     f"{v['auroc_test_vs_pool']:.4f}"])
    return render_markdown([table(["victim", "outlier exposure", "test acc", "own test MSP ≥ 0.99", "pool test MSP ≥ 0.99",
                                   "blobs MSP ≥ 0.99", "strokes MSP ≥ 0.99", "AUROC own vs pool"], rows)])


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's own tables for ``mebench docs`` (blocks ``adaptive-misinformation/<name>``)."""
    recs = load_records(set_dir)
    return {"oe_victim.md": oe_table(recs), "outlier_source.md": source_table(recs), "msp.md": msp_table(set_dir),
            "oe_labels.md": joint_table(recs, set_dir)}


if __name__ == "__main__":
    for name, text in tables().items():
        print(f"## {name}\n\n{text}")
