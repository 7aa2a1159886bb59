"""The grid's JSON report: cell records gathered from the test reports (with and without xdist), the
report document and its seed aggregate written at the end, and the terminal summary (``JsonReport``,
a part of ``BenchSession``)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest
import yaml

from mebench.harness.cells import CELL_ID_KEY, RECORD_KEY
from mebench.support.naming import make_stamp_dir, unused_stamp_dir


class JsonReport:
    """Records and the JSON report (mixed into ``BenchSession``, whose ``config``, ``options``,
    ``is_worker``, ``cells_dir``, ``started`` and ``messages`` it uses)."""

    config: pytest.Config
    options: Any
    is_worker: bool
    started: float
    messages: list

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.report: Optional[dict[str, Any]] = None
        self.report_path: Optional[Path] = None

    def add_report(self, report: pytest.TestReport) -> None:
        """Collect cell records from test reports (local or sent by xdist workers)."""
        props = dict((p[0], p[1]) for p in report.user_properties)
        cell_id = props.get(CELL_ID_KEY)
        record = props.get(RECORD_KEY)
        if cell_id is None and _crashed(report):  # pytest-xdist's report of a worker that died mid-cell
            nodeid = re.sub(r"@[^\]]*$", "", report.nodeid)  # --dist loadgroup appends "@<group>"
            cell_id = nodeid.rsplit("[", 1)[-1].rstrip("]") if nodeid.endswith("]") else None
        if cell_id is None:
            return
        if _crashed(report):
            self.records[cell_id] = {"id": cell_id, "nodeid": report.nodeid, "status": "error",
                                     "error": _last_line(report), "metrics_rows": [], "summary": {}}
        elif record is not None and (report.when == "call" or record.get("resumed")):
            self.records[cell_id] = record
        elif report.when == "setup" and not report.passed:
            status = "skipped" if report.skipped else "error"
            self.records[cell_id] = {"id": cell_id, "nodeid": report.nodeid, "status": status,
                                     "error": _last_line(report), "metrics_rows": [], "summary": {}}
        elif report.when == "teardown" and report.failed and cell_id in self.records:
            self.records[cell_id] = {**self.records[cell_id], "status": "error",
                                     "error": f"teardown: {_last_line(report)}"}

    # -- controller: report ---------------------------------------------------------------
    def finish(self) -> None:
        """Write the JSON report, the seed aggregate and (``--mebench-report``) the rendered report."""
        if self.is_worker or not self.records:
            return
        from mebench.run import artifacts

        report = self.build_report()
        path = self.json_path()
        aggregate_csv = path.with_name(f"{path.stem}_aggregate.csv")
        report["files"] = {"report": str(path), "aggregate_csv": str(aggregate_csv),
                           "cells_dir": str(self.cells_dir)}
        self.config.hook.pytest_mebench_update_json(config=self.config, report=report)
        from mebench.report.paths import portable_grid_report  # paths relative to report.json: runs/ can move

        artifacts.atomic_write_json(path, portable_grid_report(slim_cells(report), path))
        artifacts.write_aggregate_csv(aggregate_csv, report["aggregate"])
        self.report, self.report_path = report, path
        if self.options.report_dir is not None:
            self.messages.append(_render_report(path, self.options.report_dir))

    def json_path(self) -> Path:
        """``--mebench-json``, else ``report.json`` beside the cells folder (``report-<stamp>.json`` when a
        resumed run's folder has one); with ``--mebench-cells``, in a new run folder of its own."""
        if self.options.json_path is not None:
            return self.options.json_path
        if self.options.cells_dir is not None and self.options.resumed_from is None:
            assert self.options.runs_dir is not None
            return make_stamp_dir(self.options.runs_dir) / "report.json"
        run_dir = self.cells_dir.parent
        path = run_dir / "report.json"
        return path if not path.exists() else run_dir / f"report-{unused_stamp_dir(run_dir).name}.json"

    def build_report(self) -> dict[str, Any]:
        """The report document: cells sorted by id, their seed aggregate, machine and commit."""
        from mebench.run import artifacts
        from mebench.support import runinfo

        cells = [self.records[k] for k in sorted(self.records)]
        rows = [{**r, "dataset": ((c.get("config") or {}).get("dataset") or {}).get("name", "")}
                for c in cells if c.get("status") == "passed" for r in c.get("metrics_rows", [])]
        devices = sorted({c["device"] for c in cells if c.get("device")})
        statuses = [c.get("status") for c in cells]
        return {
            "mebench_report_version": 1,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "benchmark_configs": [str(p) for p in self.options.config_paths],
            "benchmarks": [_read_yaml(p) for p in self.options.config_paths],
            "options": {"budgets": self.options.budgets, "seeds": self.options.seeds, "gpus": self.options.gpus,
                        "resume": self.options.resume, "keep_stale": self.options.keep_stale,
                        "overwrite": self.options.overwrite, "threads": self.options.threads,
                        "workers": _worker_count(self.config),
                        "args": list(self.config.invocation_params.args)},
            "machine": {**runinfo.machine_info(devices[0] if devices else "cpu"), "cell_devices": devices},
            "versions": runinfo.library_versions(), "git": runinfo.git_commit(),
            "timings": {"session_s": time.time() - self.started,
                        "cells_s": sum((c.get("timings") or {}).get("cell_s", 0.0) for c in cells if not c.get("resumed"))},
            "counts": {**{s: statuses.count(s) for s in sorted(set(statuses))},
                       "resumed": sum(bool(c.get("resumed")) for c in cells),
                       "kept_stale": sum(bool((c.get("resume") or {}).get("kept_stale")) for c in cells)},
            "kept_stale": [{"id": c["id"], "reason": c["resume"].get("reason")} for c in cells
                           if (c.get("resume") or {}).get("kept_stale")],
            "cells": cells,
            "aggregate": artifacts.aggregate_rows(rows),
        }

    def summary_lines(self) -> list[str]:
        """A compact table: mean ± std over seeds of each cell group at every checkpoint."""
        if self.report is None:
            return list(self.messages)
        counts = ", ".join(f"{n} {s}" for s, n in self.report["counts"].items())
        lines = [f"{len(self.report['cells'])} cells ({counts}); report: {self.report_path}"]
        lines += results_table(self.report["aggregate"])
        lines += [f"{c['status']}: {c['id']}: {c.get('error') or '; '.join(c.get('problems') or [])}"
                  for c in self.report["cells"] if c.get("status") not in ("passed", "skipped")]
        return lines + self.messages


def results_table(aggregate: Sequence[dict[str, Any]]) -> list[str]:
    """Rows of the terminal summary, one per condition, track and budget checkpoint; a column per metric
    (``mebench.metrics.METRICS``: mean ± std for the higher-is-better ones, the mean for the others)."""
    from mebench.metrics import METRICS

    groups: dict[tuple, dict[str, Any]] = {}
    for r in aggregate:
        key = (r["attack"], r["data_mode"], r["output_mode"], r["track"], r["checkpoint_B"])
        groups.setdefault(key, {"B": r["checkpoint_B"]})[r["metric"]] = r
    widths = {m.name: 15 if m.higher_is_better else 8 for m in METRICS}
    head = f"{'attack':<24} {'data_mode':<10} {'output':<10} {'trk':<3} {'B':>8} " + " ".join(
        f"{m.name:>{widths[m.name]}}" for m in METRICS) + f" {'n':>2}"
    lines = [head] if groups else []
    for (attack, dm, om, track, _), g in sorted(groups.items()):
        n = max((m["n_seeds"] for k, m in g.items() if k != "B"), default=0)
        cells = " ".join(f"{_pm(g.get(m.name), std=m.higher_is_better):>{widths[m.name]}}" for m in METRICS)
        lines.append(f"{attack:<24} {dm:<10} {om:<10} {track:<3} {g['B']:>8} {cells} {n:>2}")
    return lines


def _pm(m: Optional[dict[str, Any]], std: bool = True) -> str:
    if m is None or m.get("mean") is None or not math.isfinite(m["mean"]):
        return "-"
    if not std:
        return f"{m['mean']:.4f}"
    return f"{m['mean']:.4f}" + (f" ± {m['std']:.4f}" if m.get("std") is not None else "")


def _render_report(json_path: Path, out_dir: Path) -> str:
    """``--mebench-report``: mebench.report.write_report on the JSON report, when it is available."""
    try:
        from mebench.report import write_report
    except ImportError as e:
        return f"--mebench-report: mebench.report.write_report is not available ({e}); the JSON report is {json_path}"
    try:
        files = write_report(json_path, out_dir)
    except Exception as e:  # a report that cannot be drawn must not hide the benchmark results
        return f"--mebench-report: could not write the report to {out_dir}: {type(e).__name__}: {e}"
    return f"report files ({len(files)}) in {out_dir}"


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _worker_count(config: pytest.Config) -> int:
    n = getattr(config.option, "numprocesses", None)
    return int(n) if isinstance(n, int) else 0


def _last_line(report: pytest.TestReport) -> str:
    text = report.longreprtext.strip().splitlines()
    return text[-1] if text else report.outcome


def _crashed(report: pytest.TestReport) -> bool:
    """A report pytest-xdist made for an item whose worker died (``when`` is "???"; the longrepr says
    "worker 'gwN' crashed while running ...")."""
    return report.failed and report.when not in ("setup", "call", "teardown") and "crashed" in str(report.longrepr)


def slim_cells(report: dict[str, Any]) -> dict[str, Any]:
    """The report as ``report.json`` stores it: each cell that has a folder points at its files
    (``mebench.report.records.slim``) instead of copying its summary, rows and config."""
    from mebench.report.records import slim

    return {**report, "cells": [slim(c, Path(c["artifacts_dir"])) if c.get("artifacts_dir") else c
                                for c in report.get("cells") or []]}

