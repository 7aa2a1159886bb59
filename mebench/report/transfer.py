"""Transferability in the report: success against ε, what predicts it, and the init's spread.

Reads, beside each complete seed folder's ``metrics.csv``, its ``transfer.csv``, ``fidelity.csv``
and ``init_variance.csv`` (folders without them add no rows) and writes ``transfer.csv``,
``fidelity.csv``, ``init_variance.csv``, ``transfer.md`` and success-vs-ε curves (what each holds
is below). The headline ε is the dataset profile's ``transfer_headline_eps``, or the ε nearest it
that was measured. See docs/transferability.md.
"""
# Reads, beside each complete seed folder's ``metrics.csv``, its ``transfer.csv``,
# ``fidelity.csv`` and ``init_variance.csv`` (``mebench.probes.transferability.transfer``, ``mebench.probes.transferability.fidelity``,
# ``mebench.probes.variance``); folders without them (older runs, runs without
# ``measure.transfer.methods``) simply add no rows. Writes:
#
# - ``transfer.csv``: mean, sample std and count over seeds of every success rate per condition,
#   track, checkpoint, method and ε; the ``independent`` reference pools its ensemble members
#   (mean and spread over members and seeds);
# - ``fidelity.csv``: per condition, track and checkpoint, test agreement (``metrics.csv``) beside
#   the off-manifold agreements, the input-gradient cosine and PGD success at the headline ε;
# - ``init_variance.csv``: per condition and metric, the spread over run seeds (Track A's fixed
#   init) beside the spread over initializations (mean over seeds of the std over inits);
# - ``transfer.md`` with those tables, and success-vs-ε curves (``transfer_curves_*.png|svg``).
#
# The headline ε (the leaderboard's transfer numbers, PGD and CW) is the dataset profile's
# ``transfer_headline_eps`` (0.2 on MNIST-like data), or the ε nearest it that was measured.

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from mebench.report.document import Block, budget_label, fmt_mean_std, fmt_value, table
from mebench.report.load import UNKNOWN, RunRecord, mapping_section

COND = ("dataset", "victim_id", "label", "data_mode", "output_mode")
FILES = ("transfer", "fidelity", "init_variance")
REFERENCE_TRACKS = ("victim", "independent")


def _condition(rec: RunRecord) -> dict[str, Any]:
    s = rec.summary or {}
    attack, dataset = mapping_section(s, "attack"), mapping_section(s, "dataset")
    return {"dataset": str(dataset.get("name") or UNKNOWN),
            "victim_id": str(mapping_section(s, "victim").get("victim_id") or UNKNOWN),
            "label": str(attack.get("label") or attack.get("name") or UNKNOWN),
            "data_mode": str(dataset.get("data_mode") or ""), "output_mode": str(attack.get("output_mode") or "")}


def read_frames(records: Iterable[RunRecord], sources: set[str] | None = None) -> dict[str, pd.DataFrame]:
    """{file stem: rows of every complete seed folder (restricted to ``sources`` when given), with
    its condition columns}. A missing or unreadable file adds nothing."""
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in FILES}
    for rec in records:
        folder = Path(rec.source)
        if not rec.ok or not folder.is_dir() or (sources is not None and rec.source not in sources):
            continue
        for name in FILES:
            path = folder / f"{name}.csv"
            try:
                frame = pd.read_csv(path) if path.is_file() else None
            except (OSError, ValueError, pd.errors.ParserError):
                frame = None
            if frame is not None and len(frame):
                parts[name].append(frame.assign(**_condition(rec)))
    return {name: pd.concat(p, ignore_index=True) if p else pd.DataFrame() for name, p in parts.items()}


def headline_eps(dataset: str, measured: Iterable[float]) -> float:
    """The profile's ``transfer_headline_eps`` (0.2 when the profile is unknown), or the measured ε nearest it."""
    try:
        from mebench.data.profiles import get_profile

        want = float(get_profile(dataset).transfer_headline_eps)
    except Exception:  # noqa: BLE001 - an unregistered dataset in an old record
        want = 0.2
    eps = sorted({float(e) for e in measured})
    return min(eps, key=lambda e: (abs(e - want), e)) if eps else want


def _stats(g: pd.DataFrame, column: str) -> pd.Series:
    v = pd.to_numeric(g[column], errors="coerce").dropna()
    return pd.Series({"mean": v.mean() if len(v) else np.nan, "std": v.std(ddof=1) if len(v) > 1 else np.nan,
                      "n": len(v)})


def transfer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and count of ``success_rate`` per condition, track, checkpoint, method and ε
    (over seeds; for the ``independent`` ensemble over members and seeds)."""
    if frame.empty:
        return pd.DataFrame(columns=[*COND, "track", "checkpoint_B", "method", "eps", "mean", "std", "n"])
    keys = [*COND, "track", "checkpoint_B", "method", "eps"]
    out = frame.groupby(keys, sort=True).apply(_stats, "success_rate", include_groups=False).reset_index()
    return out.astype({"n": int})


def fidelity_table(fidelity: pd.DataFrame, transfer: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """Per condition, track and checkpoint: mean ± std over seeds of test agreement, each fidelity
    measure and PGD success at the headline ε (``success_pgd``), in one wide table."""
    if fidelity.empty:
        return pd.DataFrame()
    wide = fidelity[fidelity["track"].isin(["A", "B"])].pivot_table(
        index=[*COND, "track", "checkpoint_B", "seed"], columns="measure", values="value").reset_index()
    if not transfer.empty:
        pgd = transfer[(transfer["method"] == "pgd") & transfer["track"].isin(["A", "B"])]
        eps = {d: headline_eps(d, pgd[pgd["dataset"] == d]["eps"]) for d in pgd["dataset"].unique()}
        pgd = pgd[[abs(e - eps[d]) < 1e-9 for d, e in zip(pgd["dataset"], pgd["eps"])]]
        wide = wide.merge(pgd[[*COND, "track", "checkpoint_B", "seed", "success_rate"]].rename(
            columns={"success_rate": "success_pgd"}), how="left")
    if not results.empty and "agreement" in results:
        agree = results[[*COND, "track", "checkpoint_B", "seed", "agreement"]].rename(columns={"agreement": "agreement_test"})
        wide = wide.merge(agree, how="left")
    measures = [c for c in ("agreement_test", "agreement_uniform_noise", "agreement_untrained_generator",
                            "grad_cosine", "success_pgd") if c in wide]
    grouped = wide.groupby([*COND, "track", "checkpoint_B"], sort=True)
    out = grouped[measures].agg(["mean", "std"])
    out.columns = [f"{m}_{s}" for m, s in out.columns]
    return out.join(grouped.size().rename("n_seeds")).reset_index()


def init_variance_table(init: pd.DataFrame, transfer: pd.DataFrame, fidelity: pd.DataFrame,
                        results: pd.DataFrame) -> pd.DataFrame:
    """Per condition, checkpoint and metric: the std over run seeds of Track A at its fixed init
    (``seed_std``) beside the std over the other inits (``init_std``: mean over seeds; ``init_min`` /
    ``init_max`` over all inits and seeds), with both means."""
    if init.empty:
        return pd.DataFrame()
    keys = [*COND, "checkpoint_B", "metric"]
    fixed = {k: g["value"] for k, g in _fixed_init_values(transfer, fidelity, results).groupby(keys)}
    rows = []
    for key, g in init.groupby(keys, sort=True):
        per_seed = g.groupby("seed")["value"]
        f = fixed.get(key, pd.Series(dtype=float))
        rows.append({**dict(zip([*COND, "checkpoint_B", "metric"], key)),
                     "seed_mean": f.mean() if len(f) else np.nan, "seed_std": f.std(ddof=1) if len(f) > 1 else np.nan,
                     "n_seeds": int(g["seed"].nunique()), "init_mean": float(g["value"].mean()),
                     "init_std": float(per_seed.std(ddof=1).mean()), "init_min": float(g["value"].min()),
                     "init_max": float(g["value"].max()), "n_inits": int(g.groupby("seed")["init"].nunique().max())})
    return pd.DataFrame(rows)


def _fixed_init_values(transfer: pd.DataFrame, fidelity: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """Track A at its fixed init, long format (condition, checkpoint, seed, metric, value), named
    as ``init_variance.csv`` names them."""
    parts = []
    cols = [*COND, "checkpoint_B", "seed", "metric", "value"]
    if not results.empty:
        a = results[results["track"] == "A"]
        for m in ("acc_gt", "agreement", "kl_mean", "l1_mean"):
            if m in a:
                parts.append(a.assign(metric=m, value=a[m])[cols])
    if not transfer.empty:
        t = transfer[transfer["track"] == "A"]
        parts.append(t.assign(metric=[f"{m}@{e:g}" for m, e in zip(t["method"], t["eps"])], value=t["success_rate"])[cols])
    if not fidelity.empty:
        f = fidelity[fidelity["track"] == "A"]
        parts.append(f.assign(metric=f["measure"])[cols])
    return pd.concat(parts, ignore_index=True).dropna(subset=["value"]) if parts else pd.DataFrame(columns=cols)


def _ms(mean: float, std: float) -> str:
    """``mean ± std``; the mean alone when there is no spread to show (one value)."""
    if pd.isna(mean):
        return "–"
    return fmt_value(mean) if pd.isna(std) else fmt_mean_std(mean, std)


def _name(r: Any) -> str:
    return f"{r.label} ({r.data_mode}, {r.output_mode})"


#: Methods the leaderboard and the headline table show at the headline ε, with their column prefix.
HEADLINE_METHODS: tuple[tuple[str, str, str], ...] = (("pgd", "transfer", "PGD"), ("cw", "cw_transfer", "CW L2"))


def headline_rows(table_: pd.DataFrame) -> list[list[str]]:
    """The leaderboard's transfer numbers: PGD and CW success at the headline ε, largest checkpoint
    per condition, track and method, with the references of the same dataset and victim."""
    rows = []
    for method, _, title in HEADLINE_METHODS:
        sub = table_[table_["method"] == method]
        for (dataset, victim), g in sub.groupby(["dataset", "victim_id"], sort=True):
            eps = headline_eps(dataset, g["eps"])
            g = g[(g["eps"] - eps).abs() < 1e-9]
            for key, t in g.groupby(["label", "data_mode", "output_mode", "track"], sort=True):
                r = t.sort_values("checkpoint_B").iloc[-1]
                where = "reference" if r.track in REFERENCE_TRACKS else budget_label(int(r.checkpoint_B))
                rows.append([dataset, victim, _name(r), r.track, where, title, f"{eps:g}", _ms(r["mean"], r["std"]),
                             str(int(r.n))])
    return rows


def transfer_blocks(tt: pd.DataFrame, fid: pd.DataFrame, iv: pd.DataFrame, figures: dict[str, str]) -> list[Block]:
    """``transfer.md``: the headline table, the curves, fidelity beside agreement, init spread."""
    blocks = [Block("h1", "mebench transferability"), Block("p", (
        "Untargeted L∞ FGSM and PGD, and Carlini–Wagner L2 (its perturbation clipped into each L∞ ε-ball; at "
        "ε 1 unclipped), crafted on each checkpoint substitute and scored on the victim (share of test "
        "images the victim classified correctly that it misclassifies after the attack; mebench.probes.transferability.transfer). "
        "References: 'victim' crafts on the victim itself (white-box), 'independent' on models of the "
        "substitute's architecture trained on the victim's training data with true labels (an ensemble: "
        "mean ± std over its members and seeds). Mean ± sample std over seeds; n counts the rows pooled."))]
    blocks += [Block("h2", "Transfer success at the headline ε (leaderboard column)"),
               table(["dataset", "victim", "attack", "track", "B", "method", "ε", "success", "n"], headline_rows(tt))]
    for name, png in sorted(figures.items()):
        blocks += [Block("h2", f"Success against ε · {name}"), Block("img", f"success against ε, {name}", src=png)]
    if not fid.empty:
        heads = [("agreement_test", "test agreement"), ("agreement_uniform_noise", "agreement, uniform noise"),
                 ("agreement_untrained_generator", "agreement, untrained generator"),
                 ("grad_cosine", "gradient cosine"), ("success_pgd", "PGD success (headline ε)")]
        heads = [(k, h) for k, h in heads if f"{k}_mean" in fid]
        rows = [[_name(r), r.track, budget_label(int(r.checkpoint_B)),
                 *[_ms(getattr(r, f"{k}_mean"), getattr(r, f"{k}_std")) for k, _ in heads]] for r in fid.itertuples()]
        blocks += [Block("h2", "What predicts transfer: fidelity beside agreement"), Block("p", (
            "Agreement with the victim's top-1 on test images, on uniform-noise images and on an untrained "
            "DFME generator's images (off the data manifold, where ε 0.2–0.3 perturbations land), and the mean "
            "cosine between the substitute's and the victim's input gradients of the cross-entropy at the victim's "
            "label on the transfer images (mebench.probes.transferability.fidelity).")),
            table(["attack", "track", "B", *[h for _, h in heads]], rows)]
    if not iv.empty:
        rows = [[_name(r), budget_label(int(r.checkpoint_B)), r.metric, _ms(r.seed_mean, r.seed_std),
                 _ms(r.init_mean, r.init_std), f"{r.init_min:.3f}–{r.init_max:.3f}", f"{r.n_seeds} × {r.n_inits}"]
                for r in iv.itertuples()]
        blocks += [Block("h2", "Track A: spread over seeds and over initializations"), Block("p", (
            "Seeds: Track A at its fixed init (substitute.init_seed) over run seeds, mean ± std. Inits: the same "
            "D_B trained from other initializations (measure.init_variance; batch order unchanged), mean over all "
            "and the std over inits averaged over seeds; range over every init and seed (mebench.probes.variance).")),
            table(["attack", "B", "metric", "seeds (fixed init)", "inits", "init range", "seeds × inits"], rows)]
    return blocks


def with_transfer_column(board: pd.DataFrame, transfer: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard with, per method of ``HEADLINE_METHODS`` that some run measured, ``<prefix>_mean``/
    ``_std``/``_eps``/``_B`` (``transfer_*`` for PGD, ``cw_transfer_*`` for CW): success at the headline ε
    at each row's largest measured checkpoint (mean ± std over seeds); unchanged when none was measured."""
    if transfer.empty:
        return board
    tt = transfer_table(transfer)
    for method, prefix, _ in HEADLINE_METHODS:
        sub = tt[(tt["method"] == method) & tt["track"].isin(["A", "B"])]
        if sub.empty:
            continue
        keep = []
        for dataset, g in sub.groupby("dataset"):
            eps = headline_eps(dataset, g["eps"])
            g = g[(g["eps"] - eps).abs() < 1e-9]
            keep.append(g.sort_values("checkpoint_B").groupby([*COND, "track"]).tail(1))
        names = {"mean": f"{prefix}_mean", "std": f"{prefix}_std", "eps": f"{prefix}_eps", "checkpoint_B": f"{prefix}_B"}
        best = pd.concat(keep).rename(columns=names)
        board = board.merge(best[[*COND, "track", *names.values()]], on=[*COND, "track"], how="left")
    return board


def transfer_cell(row: pd.Series, prefix: str = "transfer") -> str:
    """A leaderboard transfer cell: ``mean ± std @B``, or ``–``."""
    if pd.isna(row.get(f"{prefix}_mean", np.nan)):
        return "–"
    return f"{_ms(row[f'{prefix}_mean'], row[f'{prefix}_std'])} @{budget_label(int(row[f'{prefix}_B']))}"


def write_transfer_report(frames: dict[str, pd.DataFrame], results: pd.DataFrame, out: Path,
                          figures_too: bool = True) -> dict[str, Path]:
    """Write the module's tables, figures (unless ``figures_too`` is False: ``transfer.md`` still
    names them) and ``transfer.md`` when any folder measured transfer (``frames``: ``read_frames``);
    returns {file key: path} of the files written (empty when none did)."""
    from mebench.report.plots import write_transfer_curves

    if frames["transfer"].empty and frames["init_variance"].empty:
        return {}
    tt = transfer_table(frames["transfer"])
    fid = fidelity_table(frames["fidelity"], frames["transfer"], results)
    iv = init_variance_table(frames["init_variance"], frames["transfer"], frames["fidelity"], results)
    files: dict[str, Path] = {}
    for name, frame in (("transfer", tt), ("fidelity", fid), ("init_variance", iv)):
        if not frame.empty:
            files[f"{name}_csv"] = out / f"{name}.csv"
            frame.to_csv(files[f"{name}_csv"], index=False)
    figures = write_transfer_curves(tt, out, draw=figures_too)
    if figures_too:
        files.update({f"transfer_curves_{key}_{ext}": p for key, paths in figures.items() for ext, p in paths.items()})
    from mebench.report.document import render_markdown

    files["transfer_md"] = out / "transfer.md"
    files["transfer_md"].write_text(render_markdown(transfer_blocks(tt, fid, iv, {k: p["png"].name for k, p in figures.items()})),
                                    encoding="utf-8")
    return files
