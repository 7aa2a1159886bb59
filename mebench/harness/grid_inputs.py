"""What a benchmark grid's cells read, checked when pytest collects them (one line, nothing created).

Without these checks a grid with no data root, or whose data root lacks a dataset, collected
fine and then failed in every cell with the same traceback at run time (issue 43). ``load_grid``
calls ``check_inputs`` (the data root, and the victim file of a grid left with no cell); the
plugin calls ``check_datasets`` on the cells ``-k``/``-m`` selected, so a selection that needs
only the datasets at hand still runs. See docs/guide/grid.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from mebench.errors import GridError, UntrainedVictims

if TYPE_CHECKING:
    from mebench.harness.grid import Cell, Grid


def check_inputs(grid: Grid) -> None:
    """What every cell reads, checked once when the grid is collected (one line, nothing created),
    not by each cell when it runs: the data root (a set ``dataset.data_root`` is checked with each
    cell's config; ``$MEBENCH_DATA_ROOT`` here), and a victim checkpoint when the grid has no other
    victim to run (a grid whose other victims exist leaves the missing ones out, with a note).
    The datasets' files are checked for the selected cells only (``check_datasets``)."""
    if not grid.cells:
        missing = [n.replace("left out victim", "victim", 1) for n in grid.notes if n.startswith("left out victim")]
        if missing:
            raise UntrainedVictims(f"{grid.path}: no cell to run: {'; '.join(missing)}")
        return
    for root, download in sorted({(c.cfg.dataset.data_root, c.cfg.dataset.download) for c in grid.cells}, key=str):
        _data_root(root, download, grid.path)


def _fetches(root: Optional[str]) -> bool:
    """Whether a cell's missing public datasets are fetched on first use: the default data root (no
    ``dataset.data_root``, no ``MEBENCH_DATA_ROOT``) without ``MEBENCH_OFFLINE=1``."""
    from mebench.data.datasets import offline

    return not root and not os.environ.get("MEBENCH_DATA_ROOT") and not offline()


def _data_root(root: Optional[str], download: bool, where: object) -> tuple[Path, str]:
    """The data root a cell reads and where it came from; ``GridError`` when it is not a folder."""
    from mebench.data.datasets import HINTS, resolve_data_root

    folder = resolve_data_root(root, "grid")
    source = ("dataset.data_root" if root else "MEBENCH_DATA_ROOT" if os.environ.get("MEBENCH_DATA_ROOT")
              else "the default data root; MEBENCH_OFFLINE=1 refuses downloads")
    if _fetches(root):
        return folder, source
    if not download and not folder.is_dir():
        raise GridError(f"{where}: data root {folder} ({source}) is not a folder: {HINTS['grid'][0]}, "
                        "to the folder holding the datasets (torchvision layout)")
    return folder, source


def check_datasets(cells: Sequence[Cell]) -> None:
    """The selected cells' datasets (victim, surrogate, benign clients) are in their data root, so a
    missing one is one line before any cell runs; nothing is checked where a cell may download."""
    from mebench.data.datasets import HINTS

    checked: set[tuple[Optional[str], str]] = set()
    for c in cells:
        d = c.cfg.dataset
        names = {d.name, d.surrogate_name, c.cfg.measure_params("detection").get("benign_dataset")} - {None}
        todo = sorted(n for n in names if (d.data_root, n) not in checked)
        if d.download or not todo or _fetches(d.data_root):
            continue
        folder, source = _data_root(d.data_root, False, c.id)
        for name in todo:
            checked.add((d.data_root, name))
            absent = _absent_files(name, folder)
            if absent:
                raise GridError(f"{c.id}: dataset {name} is not in the data root {folder} ({source}): "
                                f"{', '.join(absent)} not found; {HINTS['grid'][0]} to the folder holding it, "
                                f"or {HINTS['grid'][1]}")


def _absent_files(dataset: str, folder: Path) -> list[str]:
    """The files the dataset's profile names (torchvision's layout) that are not under ``folder``;
    entries that describe a pattern rather than name a path (``<class>/*.png``, ``a .. b``) are skipped."""
    from mebench.data.profiles import PROFILES

    exact = [f for f in PROFILES.get(dataset).files if not any(ch in f for ch in "<*? ")]
    return [f for f in exact if not (folder / f).exists()]
