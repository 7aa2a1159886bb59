"""Budget–performance curves, the primary output of the benchmark (contract §0, §1.3).

One figure per (dataset, output mode), one panel per metric that has data
(``kl_mean``/``l1_mean`` exist only for ``soft_prob``, §1.3; ``l1_mean`` is the
mean absolute error over classes, titled "L1 (MAE over classes)"): budget on a log x
axis, the mean over seeds as a line with a ±1 sample-std band, Track A solid
and Track B dashed (§8), one colour per attack label + data mode (kept the same
in every figure of a report), and the victim's test accuracy as a dotted
horizontal reference on the ``acc_gt`` panel. Written as PNG and SVG. See docs/guide/reports.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from mebench.report.aggregate import METRIC_TITLES  # noqa: E402
from mebench.report.document import budget_label  # noqa: E402
from mebench.report.load import METRIC_COLUMNS  # noqa: E402

TRACK_STYLE = {"A": dict(linestyle="-", marker="o"), "B": dict(linestyle="--", marker="s")}
CURVE_KEYS = ("label", "data_mode", "substitute_arch", "victim_id")


def slug(text: str) -> str:
    """File-name safe lower-case form of a dataset or mode name."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


def colour_map(agg: pd.DataFrame) -> dict[tuple[str, str], tuple[float, ...]]:
    """One stable colour per (attack label, data mode) across all figures."""
    conds = sorted({(r.label, r.data_mode) for r in agg[["label", "data_mode"]].itertuples()})
    cmap = plt.get_cmap("tab10" if len(conds) <= 10 else "tab20")
    return {c: cmap(i % cmap.N) for i, c in enumerate(conds)}


def _curve_name(key: tuple[str, ...], varying: set[str]) -> str:
    label, mode, arch, victim = key
    extra = [v for k, v in (("substitute_arch", arch), ("victim_id", victim)) if k in varying]
    return " · ".join([f"{label} ({mode})", *extra])


def _draw_panel(ax: plt.Axes, sub: pd.DataFrame, colours: dict) -> None:
    for key, curve in sub.groupby([*CURVE_KEYS, "track"], sort=True):
        curve = curve.sort_values("checkpoint_B")
        x, mean, std = (curve[c].to_numpy(dtype=float) for c in ("checkpoint_B", "mean", "std"))
        colour = colours[(key[0], key[1])]
        ax.plot(x, mean, color=colour, lw=1.8, ms=4, **TRACK_STYLE.get(key[4], {}))
        band = np.isfinite(std)
        if band.any():
            ax.fill_between(x[band], (mean - std)[band], (mean + std)[band], color=colour,
                            alpha=0.18, linewidth=0)


def _legend_handles(agg: pd.DataFrame, colours: dict, varying: set[str],
                    victims: pd.DataFrame) -> list[Line2D]:
    handles = []
    for key in sorted({tuple(r) for r in agg[list(CURVE_KEYS)].itertuples(index=False)}):
        handles.append(Line2D([], [], color=colours[(key[0], key[1])], lw=2.5,
                              label=_curve_name(key, varying)))
    for track in sorted(agg["track"].unique()):
        handles.append(Line2D([], [], color="0.3", label=f"Track {track}",
                              **TRACK_STYLE.get(track, {})))
    for _, v in victims.iterrows():
        handles.append(Line2D([], [], color="black", ls=":", lw=1.2,
                              label=f"victim {v['victim_id']} acc {v['victim_test_accuracy']:.3f}"))
    return handles


def plot_curves(agg: pd.DataFrame, victims: pd.DataFrame, title: str,
                colours: dict) -> plt.Figure:
    """The figure for one (dataset, output mode) slice of the aggregate table."""
    metrics = [m for m in METRIC_COLUMNS if (agg["metric"] == m).any()]
    ncols = 2 if len(metrics) > 1 else 1
    nrows = int(np.ceil(len(metrics) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows + 1.0),
                             squeeze=False, layout="constrained")
    varying = {k for k in ("substitute_arch", "victim_id") if agg[k].nunique() > 1}
    budgets = sorted(agg["checkpoint_B"].unique())
    for ax, metric in zip(axes.flat, metrics):
        _draw_panel(ax, agg[agg["metric"] == metric], colours)
        if metric == "acc_gt":
            for _, v in victims.iterrows():
                ax.axhline(v["victim_test_accuracy"], color="black", ls=":", lw=1.2)
        ax.set_xscale("log")
        ax.set_xticks(budgets, [budget_label(int(b)) for b in budgets])
        ax.minorticks_off()
        ax.set_title(METRIC_TITLES.get(metric, metric), fontsize=10)
        ax.set_xlabel("query budget B (images, log scale)")
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    handles = _legend_handles(agg, colours, varying, victims)
    fig.suptitle(title, fontsize=11)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
               fontsize=8, frameon=False)
    return fig


def write_curve_figures(agg: pd.DataFrame, victims: pd.DataFrame, out_dir: Path,
                        draw: bool = True) -> dict[tuple[str, str], dict[str, Path]]:
    """PNG + SVG per (dataset, output mode); returns {(dataset, mode): {"png", "svg"}}. ``draw``
    False: the paths the figures would have, none drawn (``mebench docs`` keeps no image; drawing
    is most of a report's time)."""
    colours = colour_map(agg)
    written: dict[tuple[str, str], dict[str, Path]] = {}
    for (dataset, mode), sub in agg.groupby(["dataset", "output_mode"], sort=True):
        stem = out_dir / f"curves_{slug(dataset)}_{slug(mode)}"
        paths = {"png": stem.with_suffix(".png"), "svg": stem.with_suffix(".svg")}
        written[(dataset, mode)] = paths
        if not draw:
            continue
        vic = victims[(victims["dataset"] == dataset) & (victims["output_mode"] == mode)]
        seeds = int(sub["n_seeds"].max())
        title = f"{dataset} · {mode} — mean ± std over seeds (up to {seeds} per point)"
        fig = plot_curves(sub, vic, title, colours)
        fig.savefig(paths["png"], dpi=130)
        fig.set_layout_engine("none")  # keep the layout just computed: no second solve
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in SVG
            fig.savefig(paths["svg"])
        plt.close(fig)
    return written


def scatter_points(matrix: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """What each utility-vs-protection figure shows: per (dataset, output mode), Track A rows at the
    largest budget some defended run reached with a finite agreement, with ``x`` its utility (the
    defended test accuracy; the victim's own for ``none``). A slice without one defended point to
    draw gets no figure: no empty plot is ever written."""
    points: dict[tuple[str, str], pd.DataFrame] = {}
    top = matrix[(matrix["track"] == "A") & np.isfinite(matrix["agreement_mean"].astype(float))]
    for (dataset, mode), m in top.groupby(["dataset", "output_mode"], sort=True):
        defended = m[(m["defense"] != "none") & np.isfinite(m["defense_test_accuracy"].astype(float))]
        if defended.empty:
            continue
        m = m[m["checkpoint_B"] == defended["checkpoint_B"].max()]
        own = m["victim_test_accuracy"] if "victim_test_accuracy" in m else pd.Series(np.nan, index=m.index)
        fallback = m.loc[m["defense"] != "none", "defense_test_accuracy"].max()
        x = np.where(m["defense"] == "none", own.fillna(fallback), m["defense_test_accuracy"])
        m = m.assign(x=x.astype(float))
        points[(dataset, mode)] = m[np.isfinite(m["x"])]
    return points


def write_defense_scatter(matrix: pd.DataFrame, out_dir: Path,
                          draw: bool = True) -> dict[tuple[str, str], dict[str, Path]]:
    """Utility vs protection, one figure per (dataset, output mode) that has a defended point
    (:func:`scatter_points`): each attack's Track A agreement (y) against each defense's defended
    test accuracy (x), one marker series per victim and attack. Returns {(dataset, mode): {"png", "svg"}}
    (``draw``: as in :func:`write_curve_figures`)."""
    files: dict[tuple[str, str], dict[str, Path]] = {}
    for (dataset, mode), m in scatter_points(matrix).items():
        paths = {ext: out_dir / f"defenses_{slug(dataset)}_{slug(mode)}.{ext}" for ext in ("png", "svg")}
        files[(dataset, mode)] = paths
        if not draw:
            continue
        budget = int(m["checkpoint_B"].max())
        several = m["base_victim"].nunique() > 1
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for (victim, label, dm), g in m.groupby(["base_victim", "label", "data_mode"], sort=True):
            ax.scatter(g["x"], g["agreement_mean"], label=f"{label} ({dm})" + (f" · {victim}" if several else ""))
            for xi, yi, d in zip(g["x"], g["agreement_mean"], g["defense"]):
                ax.annotate(d, (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("defended test accuracy (utility for honest users)")
        ax.set_ylabel(f"Track A agreement @{budget_label(budget)} (lower: better protection)")
        ax.set_title(f"{dataset} · {mode}: utility vs protection", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        for ext, path in paths.items():
            fig.savefig(path, dpi=120 if ext == "png" else None)
        plt.close(fig)
    return files


def write_transfer_curves(table: pd.DataFrame, out_dir: Path, draw: bool = True) -> dict[str, dict[str, Path]]:
    """Success against ε (``mebench.report.transfer.transfer_table``), one PNG + SVG per (dataset,
    victim, output mode), one panel per method: every condition and track at its largest checkpoint
    (mean ± 1 std band over seeds, Track A solid and B dashed), the white-box victim dotted black
    and the independent ensemble dotted grey (mean ± std over members and seeds). ``draw``: as in
    :func:`write_curve_figures`."""
    written: dict[str, dict[str, Path]] = {}
    if table.empty:
        return written
    colours = colour_map(table)
    for (dataset, victim, mode), sub in table.groupby(["dataset", "victim_id", "output_mode"], sort=True):
        key = f"{slug(dataset)}_{slug(victim)}_{slug(mode)}"
        stem = out_dir / f"transfer_curves_{key}"
        paths = {"png": stem.with_suffix(".png"), "svg": stem.with_suffix(".svg")}
        written[key] = paths
        if not draw:
            continue
        methods = sorted(sub["method"].unique())
        fig, axes = plt.subplots(1, len(methods), figsize=(5.2 * len(methods), 4.0), squeeze=False,
                                 layout="constrained")
        for ax, method in zip(axes[0], methods):
            _draw_transfer_panel(ax, sub[sub["method"] == method], colours)
            ax.set_title(method.upper(), fontsize=10)
        fig.suptitle(f"{dataset} · {victim} · {mode} — transfer success against ε", fontsize=11)
        fig.savefig(paths["png"], dpi=130)
        fig.set_layout_engine("none")
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            fig.savefig(paths["svg"])
        plt.close(fig)
    return written


def _draw_transfer_panel(ax: plt.Axes, sub: pd.DataFrame, colours: dict) -> None:
    refs = {"victim": dict(color="black", linestyle=":"), "independent": dict(color="0.55", linestyle=":")}
    drawn: set[str] = set()
    for (label, mode, track), g in sub.groupby(["label", "data_mode", "track"], sort=True):
        if track in drawn:  # every condition of a victim carries the same references: draw them once
            continue
        drawn.update({track} & set(refs))
        g = g[g["checkpoint_B"] == g["checkpoint_B"].max()].sort_values("eps")
        x, mean, std = (g[c].to_numpy(dtype=float) for c in ("eps", "mean", "std"))
        if track in refs:
            style, name = refs[track], f"{track} (reference)"
        else:
            style = dict(color=colours.get((label, mode), "C0"), **TRACK_STYLE.get(track, {}))
            name = f"{label} ({mode}) {track}, B={budget_label(int(g['checkpoint_B'].iloc[0]))}"
        ax.plot(x, mean, lw=1.6, ms=4, label=name, **style)
        band = np.isfinite(std)
        if band.any():
            ax.fill_between(x[band], (mean - std)[band], (mean + std)[band], color=style["color"], alpha=0.15, lw=0)
    ax.set_xlabel("ε (L∞, pixels in [0, 1])")
    ax.set_ylabel("success rate on the victim")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
