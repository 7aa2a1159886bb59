"""Which registered attacks the FashionMNIST leaderboard's records cover: the table of
``studies/leaderboard-mnist/summarize.py`` (whose function it runs) on ``results/leaderboard-fashionmnist``.

    python studies/leaderboard-fashionmnist/summarize.py     # prints the table
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "results" / "leaderboard-fashionmnist"  # the set's records


def tables(set_dir: Path = HERE) -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("leaderboard_mnist_study", ROOT / "studies" / "leaderboard-mnist"
                                                  / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tables(set_dir)


if __name__ == "__main__":
    print(tables(HERE)["coverage.md"])
