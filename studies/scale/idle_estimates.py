"""Write ``results/scale/idle_estimates.json``: each scale cell's estimate for an idle machine (load 0).

    python studies/scale/idle_estimates.py

For every timing record ``summarize.RECORDS`` names (``results/cost/logs/<record>.json``, written by
``studies/cost/timed.py`` when the cell ran), the command it timed is estimated again with
``mebench.harness.cost`` at load 0, from this machine's cached calibration (the line says which), so
the scale page can set the measured wall time beside what the cell would take alone on the machine.
Run it on the machine the cells ran on, after they ran; the file names that machine.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def idle_estimates(logs: Path, records: dict[str, str], estimate) -> dict[str, dict]:
    """record -> {estimate_s, phases, calibration, command} for each timing record present in ``logs``."""
    out = {}
    for record in records.values():
        f = logs / f"{record}.json"
        if not f.is_file():
            continue
        command = json.loads(f.read_text())["command"]
        cost = estimate(command.split(), load=0.0)
        out[record] = {"command": command, "estimate_s": round(cost.wall_seconds, 1),
                       "phases": {k: round(v, 1) for k, v in cost.phases.items()}, "calibration": cost.line()}
    return out


def main() -> int:
    from mebench.support.runinfo import cpu_model, isa_overrides

    summarize = _module("scale_summarize", ROOT / "studies" / "scale" / "summarize.py")
    timed = _module("cost_timed", ROOT / "studies" / "cost" / "timed.py")
    estimates = idle_estimates(ROOT / "results" / "cost" / "logs", summarize.RECORDS, timed.run_estimate)
    if not estimates:
        print("no timing record under results/cost/logs names a scale cell", file=sys.stderr)
        return 1
    doc = {"note": "mebench.harness.cost estimates at load 0 (an idle machine) of each timed command, from this "
                   "machine's cached calibration; computed after the runs (studies/scale/idle_estimates.py)",
           "computed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "isa_overrides": isa_overrides()},
           "estimates": estimates}
    target = summarize.HERE / "idle_estimates.json"
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, target)  # whole or not at all
    print(f"wrote {target} ({len(estimates)} estimates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
