"""Which registered attacks the leaderboard's records cover on its victim: every attack in every output
mode it supports, its rows in ``results/leaderboard-mnist`` and whether it has its 3-seed row at 1k and
10k (``mebench.report.coverage``). Gives ``mebench docs`` the table ``coverage.md``
(docs/results/leaderboard.md, "Where it stands").

    python studies/leaderboard-mnist/summarize.py     # prints the table
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "results" / "leaderboard-mnist"  # the set's records


def tables(set_dir: Path = HERE) -> dict[str, str]:
    from mebench.report.coverage import coverage_markdown, registered_attacks

    summaries = [json.loads(p.read_text()) for p in sorted(set_dir.glob("*/summary.json"))]
    return {"coverage.md": coverage_markdown(summaries, registered_attacks())}


if __name__ == "__main__":
    print(tables(HERE)["coverage.md"])
