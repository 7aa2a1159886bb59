"""Time one grid command on a local Ray cluster of N one-CPU nodes and record it (issue 37).

    python studies/ray/timed.py NAME --nodes N -- pytest benchmarks/ --mebench-config GRID -k ... --budgets ...

The cluster is Ray's own ``cluster_utils.Cluster`` on this machine: a head without CPUs and N
worker nodes with one CPU each (as ``ray start --head --num-cpus 0`` plus N ``ray start --address
HEAD --num-cpus 1`` would make), so the grid's cells are spread over N nodes, one at a time per
node. ``--ray ADDRESS`` is appended to the command. While it runs ``/proc/loadavg`` is sampled
every 5 s; ``logs/NAME.json`` records the command, the node count, the wall time, each cell's
duration and worker, and the load (before, mean, after) next to the machine's CPU count: on a
machine that also runs other work the nodes share its CPUs, which skews a 2-vs-1 comparison.
The cells' folders (``--mebench-cells``) are copied to ``cells/NAME/`` without weights.
``summarize.py`` turns the records into the table of docs/guide/ray.md.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from mebench.support.runinfo import cpu_model, isa_overrides

HERE = Path(__file__).resolve().parents[2] / "results" / "ray"  # the set's records (this script lives in studies/)


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run(name: str, nodes: int, command: list[str]) -> dict:
    """Start the cluster, run ``command --ray ADDRESS`` under it, shut it down; the record."""
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix=f"mebench-ray-{name}-"))
    small = {"object_store_memory": 80 * 2**20}
    os.environ.update({"OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"})
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False, **small})
    samples, done = [load()], threading.Event()
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, **small)
        cluster.wait_for_nodes()

        def sample() -> None:
            while not done.wait(5.0):
                samples.append(load())

        threading.Thread(target=sample, daemon=True).start()
        full = [*command, "--ray", cluster.address, "--mebench-cells", str(work / "cells"),
                "--mebench-json", str(work / "report.json")]
        started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.perf_counter()
        rc = subprocess.call(full)
        wall = time.perf_counter() - t0
        done.set()
    finally:
        cluster.shutdown()
    cells = json.loads((work / "report.json").read_text()).get("cells", []) if (work / "report.json").is_file() else []
    shutil.copytree(work / "cells", HERE / "cells" / name, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.ckpt", "*.pt", ".query_cache*"))
    shutil.rmtree(work, ignore_errors=True)
    return {"name": name, "command": " ".join(command), "nodes": nodes, "cpus_per_node": 1, "returncode": rc,
            "started": started, "wall_s": round(wall, 1),
            "cells": [{"id": c.get("id"), "status": c.get("status"), "worker": c.get("worker"),
                       "timings": {k: round(v, 1) for k, v in (c.get("timings") or {}).items()}} for c in cells],
            "load_before": samples[0], "load_mean": round(sum(samples) / len(samples), 2), "load_after": load(),
            "machine_cpus": os.cpu_count(), "cpu_model": cpu_model(), "isa_overrides": isa_overrides()}


def main() -> None:
    split = sys.argv.index("--")
    head = dict(zip(sys.argv[2:split:2], sys.argv[3:split:2]))
    record = run(sys.argv[1], int(head.get("--nodes", 1)), sys.argv[split + 1:])
    (HERE / "logs").mkdir(exist_ok=True)
    (HERE / "logs" / f"{record['name']}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
