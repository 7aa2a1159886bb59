"""What predicts transfer, from the committed records of this set (docs/transferability.md; issue 44).

Every Track A model of the set is one point: per seed folder, Track A at its fixed init
(``metrics.csv``, ``transfer.csv``, ``fidelity.csv``) and each model of the init-variance probe
(``init_variance.csv``), all trained on the same D_B of that seed. For each candidate predictor
(test agreement, agreement on uniform noise, agreement on an untrained generator's images, the
input-gradient cosine with the victim) the table gives Spearman's rank correlation with PGD
success at each measured ε, over all models and per attack, with the number of models.

    python studies/transfer-init/summarize.py     # prints the table
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parents[2] / "results" / "transfer-init"  # the set's records (this script lives in studies/)
PREDICTORS = {"agreement": "test agreement", "agreement_uniform_noise": "agreement, uniform noise",
              "agreement_untrained_generator": "agreement, untrained generator", "grad_cosine": "gradient cosine"}


def _seed_models(folder: Path) -> list[dict]:
    """One dict per Track A model of one seed folder: {metric: value} plus attack and model name."""
    import json

    attack = json.loads((folder / "summary.json").read_text())["attack"]["name"]
    fixed: dict = {"attack": attack, "model": f"{folder}/fixed"}
    metrics = pd.read_csv(folder / "metrics.csv")
    a = metrics[metrics["track"] == "A"].sort_values("checkpoint_B").iloc[-1]
    budget = int(a["checkpoint_B"])
    fixed["agreement"] = float(a["agreement"])
    t = pd.read_csv(folder / "transfer.csv")
    for r in t[(t["track"] == "A") & (t["checkpoint_B"] == budget)].itertuples():
        fixed[f"{r.method}@{r.eps:g}"] = float(r.success_rate)
    f = pd.read_csv(folder / "fidelity.csv")
    for r in f[(f["track"] == "A") & (f["checkpoint_B"] == budget)].itertuples():
        fixed[r.measure] = float(r.value)
    models = [fixed]
    iv = folder / "init_variance.csv"
    if iv.is_file():
        wide = pd.read_csv(iv).pivot_table(index="init", columns="metric", values="value")
        for init, row in wide.iterrows():
            models.append({"attack": attack, "model": f"{folder}/init{init}", **row.to_dict()})
    return models


def model_frame(set_dir: Path = HERE) -> pd.DataFrame:
    """One row per Track A model of every complete seed folder under ``set_dir``."""
    rows = []
    for summary in sorted(set_dir.rglob("seed_*/summary.json")):
        if '"status": "complete"' in summary.read_text() and (summary.parent / "fidelity.csv").is_file():
            rows += _seed_models(summary.parent)
    return pd.DataFrame(rows)


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    return float(x.rank().corr(y.rank()))


def predictors_table(models: pd.DataFrame) -> str:
    """Markdown: rank correlation of each predictor with PGD success at each ε, all models and per attack."""
    targets = sorted(c for c in models.columns if c.startswith("pgd@"))
    groups = [("all", models), *sorted(models.groupby("attack"))]
    heads = ["predictor", *[f"{t.replace('pgd@', 'PGD ε ')} · {name} (n={len(g)})" for t in targets for name, g in groups]]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for key, label in PREDICTORS.items():
        cells = [f"{spearman(g[key], g[t]):+.2f}" for t in targets for _, g in groups]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def tables(set_dir: Path = HERE) -> dict[str, str]:
    """The set's tables for ``mebench docs`` (``<!-- mebench:begin transfer-init/predictors.md -->``)."""
    return {"predictors.md": predictors_table(model_frame(set_dir))}


if __name__ == "__main__":
    print(tables()["predictors.md"])
