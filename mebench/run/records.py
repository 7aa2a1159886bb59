"""What a finished (or checkpointed) seed-run writes beside its rows: ``metrics.csv`` (Track A/B rows,
§16.2), ``measurements.csv`` (every other probe's numbers, long format) and the probes' own files;
the tail of ``summary.json`` the query loop itself measured; and the seed's line in
``<output_dir>/run_metadata.jsonl``. Kept apart from ``mebench.run.engine``, which only runs the loop
and its probe events.
See docs/guide/runs.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mebench.run import artifacts
from mebench.oracle import Oracle
from mebench.probes import MEASUREMENT_COLUMNS, Probe


def write_outputs(seed_dir: Path, rows: list[dict[str, Any]], probes: list[Probe], final: bool) -> None:
    """metrics.csv (Track A/B rows, §16.2), measurements.csv (every other probe's numbers) and the probes' files."""
    artifacts.write_metrics_csv(seed_dir / "metrics.csv", rows)
    measured = [m for p in probes for m in p.measurements()]
    if measured:
        artifacts.write_csv(seed_dir / "measurements.csv", MEASUREMENT_COLUMNS, measured)
    for p in probes:
        p.write(seed_dir, final)


def utc_now() -> str:
    """ISO-8601 UTC time to the second (``completed_at``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def summary_tail(oracle: Oracle, timings: dict[str, float], rows: list[dict[str, Any]],
                 attack: Any = None) -> dict[str, Any]:
    """What the loop itself measured: queries, timings, the attack's own counts (``Attack.run_stats``;
    ``{}`` when the attack was never built) and the metrics rows."""
    collect_s = timings.get("collect") or 0.0
    return {"queries_used": oracle.queries_used, "budget": oracle.budget,
            "timings_s": timings, "queries_per_second": (oracle.queries_used / collect_s) if collect_s else None,
            "attack_stats": attack.run_stats() if attack is not None else {},
            "results": rows}


def record_run_metadata(output_dir: str | Path, seed_dir: Path) -> None:
    """Append the seed-run's line to ``<output_dir>/run_metadata.jsonl`` (safe for concurrent runs)."""
    from mebench.report.metadata import METADATA_FILE, append_metadata, run_metadata_entry

    summary_path = seed_dir / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        append_metadata(Path(output_dir) / METADATA_FILE, run_metadata_entry(summary, seed_dir))


def record_write_failure(path: Path, summary: dict, error: OSError) -> None:
    """Mark the seed failed because its results could not be written: the whole summary if it fits,
    else a one-line record written in place over the ``running`` one (truncating it first frees its
    blocks), so a full disk never leaves a seed that says ``running``; silent if even that fails."""
    why = f"results could not be written: {type(error).__name__}: {error}"
    summary.update(status="failed", error=why)
    try:
        artifacts.atomic_write_json(path, summary)
        return
    except OSError:
        pass
    try:
        path.write_text(json.dumps({"status": "failed", "seed": summary.get("seed"), "error": why}) + "\n")
    except OSError:
        pass
