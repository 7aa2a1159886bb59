"""What the victim's build does to the leaderboard on FashionMNIST: the same table as
``studies/leaderboard-builds-mnist/summarize.py`` (whose functions it runs), on the records of
``results/leaderboard-builds-fashionmnist`` (docs/results/leaderboard.md, "Victim builds").

    python studies/leaderboard-builds-fashionmnist/summarize.py     # prints the table
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "results" / "leaderboard-builds-fashionmnist"  # the set's records


def _mnist_study():
    spec = importlib.util.spec_from_file_location("leaderboard_builds_study", ROOT / "studies" / "leaderboard-builds-mnist"
                                                  / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables(set_dir: Path = HERE) -> dict[str, str]:
    return _mnist_study().tables(set_dir)


if __name__ == "__main__":
    print(tables(HERE)["spread.md"])
