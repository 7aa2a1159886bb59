"""Small rules `--resume` stands on: which folder is the latest, whose thread count a resumed run
takes, and which leftover query caches it may remove (issues 35, 40 and 43)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from mebench.support.naming import QUERY_CACHE_OWNER, cache_owner_alive, cache_owner_dead, latest_stamp_dir
from mebench.run.resume import recorded_threads


def test_latest_folder_orders_clash_suffixes_as_numbers(tmp_path: Path) -> None:
    for name in ("20260101T000000Z", "20260101T000000Z-2", "20260101T000000Z-10", "20251231T235959Z-99"):
        (tmp_path / name / "cells").mkdir(parents=True)
    assert latest_stamp_dir(tmp_path).name == "20260101T000000Z-10"  # a string sort gives "-2"
    assert latest_stamp_dir(tmp_path, "*/cells") == tmp_path / "20260101T000000Z-10" / "cells"
    assert latest_stamp_dir(tmp_path / "none") is None


def test_a_resumed_run_takes_the_thread_count_most_seeds_ran_with(tmp_path: Path) -> None:
    paths = []
    for i, threads in enumerate([2, 2, 1, None]):
        p = tmp_path / f"seed_{i}" / "summary.json"
        p.parent.mkdir()
        p.write_text(json.dumps({"machine": {"torch_threads": threads}}))
        paths.append(p)
    (tmp_path / "seed_9").mkdir()
    (tmp_path / "seed_9" / "summary.json").write_text("{trunc")  # a damaged file counts for nothing
    assert recorded_threads(paths + [tmp_path / "seed_9" / "summary.json"]) == 2
    assert recorded_threads([paths[2]]) == 1
    assert recorded_threads([paths[3]]) is None


def _cache(tmp_path: Path, name: str, mark: str) -> Path:
    cache = tmp_path / name / ".query_cache"
    cache.mkdir(parents=True)
    (cache / QUERY_CACHE_OWNER).write_text(mark)
    return cache


# contract 11.2: a run never removes a live run's temporary cache
def test_only_a_live_owner_of_this_host_counts_as_alive(tmp_path: Path) -> None:
    host = socket.gethostname()
    live = _cache(tmp_path, "live", f"tok {os.getpid()} {host}")
    dead_pid = 2 ** 22 + 12345  # above Linux's pid_max default: no such process
    dead = _cache(tmp_path, "dead", f"tok {dead_pid} {host}")
    other_host = _cache(tmp_path, "other", f"tok {os.getpid()} not-{host}")
    old_mark = _cache(tmp_path, "old", "tok")
    assert cache_owner_alive(live) and not cache_owner_dead(live)
    assert cache_owner_dead(dead) and not cache_owner_alive(dead)
    assert not cache_owner_alive(other_host) and not cache_owner_dead(other_host)  # unknown
    assert not cache_owner_alive(old_mark) and not cache_owner_dead(old_mark)
