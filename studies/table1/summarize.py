"""Prediction Poisoning's Table 1 (Orekondy, Schiele and Fritz, ICLR 2020), no-defense column, beside
mebench's records: the attacker's model's test accuracy after 50,000 queries (Track B), 3 seeds, the
reference code's quirk rows and which gap each explains (docs/results/table1.md).

Reads the seed-runs of ``results/table1`` (the cells of ``configs/benchmarks/table1/{mnist,fashionmnist}.yaml``)
and gives ``mebench docs`` the table ``table1.md`` (``mebench.report.reproduction``).

    python studies/table1/summarize.py     # prints the table
"""

from __future__ import annotations

import json
from pathlib import Path

from mebench.report.reproduction import Quirk, reproduction_markdown

HERE = Path(__file__).resolve().parents[2] / "results" / "table1"  # the set's records

#: Table 1, "undefended" column, in percent (typed from the paper).
PAPER = {("MNIST", "knockoff_pp"): 99.0, ("MNIST", "jbda"): 89.2, ("MNIST", "jb_self"): 89.4,
         ("MNIST", "jb_top3"): 87.3,
         ("FashionMNIST", "knockoff_pp"): 69.2, ("FashionMNIST", "jbda"): 38.7, ("FashionMNIST", "jb_self"): 45.8,
         ("FashionMNIST", "jb_top3"): 68.7}

#: The reference code's quirks, each its own row of the grids (docs/attacks/jbda.md).
QUIRKS = {"jbda_refspace": Quirk("jbda", "step in normalized space"),
          "jbda_refdata": Quirk("jbda", "data set updated in place"),
          "jbda_reference": Quirk("jbda", "both"),
          "jb_self_reference": Quirk("jb_self", "normalized step, in-place data set, stored x + δ"),
          "jb_top3_refspace": Quirk("jb_top3", "step in normalized space")}


def tables(set_dir: Path = HERE) -> dict[str, str]:
    summaries = [json.loads(p.read_text()) for p in sorted(set_dir.glob("*/summary.json"))]
    return {"table1.md": reproduction_markdown(summaries, PAPER, QUIRKS)}


if __name__ == "__main__":
    print(tables(HERE)["table1.md"])
