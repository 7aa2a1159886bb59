"""Run folders and atomic writes (contract §11, §16).

Layout: ``<output_dir>/<run_name>/<timestamp>/seed_<s>/`` with
``run_config.yaml``, ``summary.json``, ``metrics.csv`` (exactly the §16.2
columns, long format) and ``final_substitute.ckpt``; the timestamp folder also
gets ``aggregate.csv`` (mean ± std over seeds). Every file is written to a
temporary file in the same folder, flushed, fsynced and renamed over the target,
so a crash never leaves half a file.
See docs/guide/runs.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from mebench.metricspec import METRIC_NAMES
from mebench.support.naming import latest_stamp_dir, make_stamp_dir
from mebench.support.serial import jsonable

if TYPE_CHECKING:  # torch-free at import: the report reads the schema below without torch
    from mebench.types import CheckpointResult

#: What identifies a row's condition (§16.2); seeds of one condition aggregate together.
IDENTITY_COLUMNS: tuple[str, ...] = ("attack", "data_mode", "output_mode", "victim_id", "substitute_arch")
METRICS_COLUMNS: tuple[str, ...] = ("seed", "checkpoint_B", "track", *METRIC_NAMES, *IDENTITY_COLUMNS)

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give results normal permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """JSON with numbers kept as numbers; non-finite floats become null."""
    atomic_write_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def atomic_save_torch(obj: Any, path: Path) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(Path(path), buf.getvalue())


def metrics_row(r: CheckpointResult, ident: dict[str, str]) -> dict[str, Any]:
    """One metrics.csv row (empty KL/L1 for hard_top1)."""
    return {"seed": r.seed, "checkpoint_B": r.checkpoint_B, "track": r.track,
            **{name: getattr(r.metrics, name) for name in METRIC_NAMES}, **ident}


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Atomically write ``rows`` with exactly ``columns``; ``None`` becomes an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else _fmt(row[k])) for k in columns})
    atomic_write_text(path, buf.getvalue())


def write_metrics_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """metrics.csv with exactly the §16.2 columns."""
    write_csv(path, METRICS_COLUMNS, rows)


def _fmt(v: Any) -> Any:
    return repr(v) if isinstance(v, float) else v


def read_metrics_csv(path: Path) -> list[dict[str, Any]]:
    """The rows of a whole metrics.csv as the engine made them: ``seed`` and ``checkpoint_B`` integers,
    each metric a float (``None`` for an empty cell), the identity columns strings."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ints, floats = ("seed", "checkpoint_B"), set(METRIC_NAMES)
    return [{k: (int(v) if k in ints else (None if v == "" else float(v)) if k in floats else v)
             for k, v in r.items()} for r in rows]


def new_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """``<output_dir>/<run_name>/<UTC timestamp>``, created exclusively (a suffix on a clash), so two
    runs started in the same second never share one (``naming.make_stamp_dir``)."""
    return make_stamp_dir(Path(output_dir) / run_name)


#: Held by the process running in a run folder (``run_folder_lock``); removed when it leaves.
RUN_LOCK = ".mebench-run.lock"


@contextmanager
def run_folder_lock(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s run lock while the block runs; a second process (``--resume`` of the same
    folder) gets ``RunFolderBusy`` naming the holder's pid at once, instead of failing later on a
    file the first one is writing."""
    import fcntl

    from mebench.errors import RunFolderBusy

    path = Path(directory) / RUN_LOCK
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RunFolderBusy(f"another mebench run (pid {holder}) is running in {directory}: wait for it to "
                                "finish, then resume it again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def latest_run_dir(output_dir: str | Path, run_name: str) -> "Path | None":
    """The latest ``<output_dir>/<run_name>/<stamp>`` folder (by time, then clash suffix), if any."""
    return latest_stamp_dir(Path(output_dir) / run_name)


#: The one schema of every aggregate.csv (run folders, grid reports, ``mebench report``).
AGGREGATE_KEYS: tuple[str, ...] = ("dataset", *IDENTITY_COLUMNS, "checkpoint_B", "track", "metric")
AGGREGATE_COLUMNS: tuple[str, ...] = (*AGGREGATE_KEYS, "mean", "std", "n_seeds", "seeds")


def seed_aggregate(long: Any, keys: Sequence[str]) -> Any:
    """The one aggregation over seeds: per group of ``keys`` of a long frame (``seed``, ``value``),
    the mean, the sample std (ddof=1; NaN for one seed, never a misleading 0), the seed count
    and the seeds (``"0;1;2"``)."""
    return long.groupby(list(keys), sort=True).agg(
        mean=("value", "mean"),
        std=("value", lambda v: v.std(ddof=1)),
        n_seeds=("value", "count"),
        seeds=("seed", lambda v: ";".join(str(x) for x in sorted(v))),
    ).reset_index()


def aggregate_rows(rows: Sequence[dict[str, Any]], dataset: str = "") -> list[dict[str, Any]]:
    """Mean ± sample std over seeds per condition, checkpoint, track and metric (``AGGREGATE_COLUMNS``).

    Rows without a ``dataset`` key get ``dataset`` (metrics.csv rows have none).
    """
    import pandas as pd

    if not rows:
        return []
    df = pd.DataFrame([{"dataset": dataset, **r} for r in rows])
    id_vars = [k for k in AGGREGATE_KEYS if k != "metric"]
    long = df.melt(id_vars=[*id_vars, "seed"], value_vars=list(METRIC_NAMES), var_name="metric")
    long = long.dropna(subset=["value"])
    long["value"] = long["value"].astype(float)
    recs = seed_aggregate(long, AGGREGATE_KEYS).to_dict(orient="records")
    for r in recs:
        r["checkpoint_B"] = int(r["checkpoint_B"])
        r["n_seeds"] = int(r["n_seeds"])
        r["std"] = None if (r["std"] is None or not math.isfinite(r["std"])) else float(r["std"])
    return recs


def write_aggregate_csv(path: Path, recs: Sequence[dict[str, Any]]) -> None:
    write_csv(path, AGGREGATE_COLUMNS, recs)
