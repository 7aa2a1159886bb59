"""``--resume``'s one rule, for grid cells and ``mebench run`` seeds alike (issues 35 and 43).
See docs/guide/resume.md.
"""
# A stored seed folder is kept only when its files are whole (``summary.json`` parses and says
# ``complete``; ``metrics.csv`` has exactly the §16.2 header, whole rows and a Track A row at every
# checkpoint) and it is a result of what would run now: the same plan hash, code identity and
# torch thread count (``mebench.run.plan.stale_reason``). Otherwise it is run again, and the caller
# prints :attr:`Verdict.reason` (one line). ``--keep-stale`` keeps a whole but stale folder
# instead, and :func:`mark_kept_stale` writes ``resume: {kept_stale: true, reason}`` into its
# ``summary.json`` so every reader can tell. Torch-free except for the atomic writer it calls.

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from mebench.run.plan import stale_reason

if TYPE_CHECKING:
    from mebench.run.plan import RunPlan

#: The ``summary.json`` key a ``--keep-stale`` folder carries.
RESUME_KEY = "resume"
#: The ``summary.json`` key naming the seed folder's kept checkpoints with their sha256 (issue 52).
KEPT_FILES = "kept_files"
#: The verdict's reason for a cell or seed that never ran (a first run, not a rerun: nothing is printed).
NO_RESULTS = "it has no results yet"


@dataclass(frozen=True)
class Verdict:
    """What ``--resume`` does with one stored folder: keep it (``keep``) or run it again, and why.

    ``reason`` is ``None`` for a current, whole folder; ``stale`` says the files are whole but
    the plan, code or threads differ (the only case ``--keep-stale`` may keep)."""

    keep: bool
    reason: Optional[str] = None
    stale: bool = False
    summary: Optional[dict[str, Any]] = None


def read_summary(path: Path) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """``summary.json`` as a dict, or ``None`` and why not (missing, empty, invalid)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, "summary.json is missing"
    except OSError as e:
        return None, f"summary.json cannot be read ({e.strerror})"
    try:
        value = json.loads(text)
    except ValueError:
        return None, "summary.json is empty" if not text.strip() else "summary.json is not valid JSON (truncated?)"
    return (value, None) if isinstance(value, dict) else (None, "summary.json does not hold an object")


def metrics_problem(path: Path, checkpoints: Sequence[int], columns: Sequence[str]) -> Optional[str]:
    """Why ``metrics.csv`` is not whole (one line), else ``None``.

    Whole: the exact header, every line ends with a newline and has every column, ``seed`` and
    ``checkpoint_B`` are integers, each metric a number or empty, and a Track A row exists at
    every checkpoint.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return "metrics.csv is missing"
    except OSError as e:
        return f"metrics.csv cannot be read ({e.strerror})"
    if not text.endswith("\n"):
        return "metrics.csv is truncated (its last line is cut)"
    rows = list(csv.reader(text.splitlines()))
    if not rows or tuple(rows[0]) != tuple(columns):
        return "metrics.csv does not have the §16.2 header"
    track_a = set()
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(columns):
            return f"metrics.csv line {n} has {len(row)} of {len(columns)} columns"
        rec = dict(zip(columns, row))
        if not (_is_int(rec["seed"]) and _is_int(rec["checkpoint_B"]) and rec["track"] in ("A", "B")):
            return f"metrics.csv line {n} is damaged"
        if not all(_is_number(rec[c]) for c in _metric_names()):
            return f"metrics.csv line {n} has a value that is not a number"
        if rec["track"] == "A":
            track_a.add(int(rec["checkpoint_B"]))
    missing = sorted(set(checkpoints) - track_a)
    return f"metrics.csv has no Track A row at B={missing[0]} (interrupted run)" if missing else None


def check_folder(directory: Path, plan: "RunPlan", code_identity: str, threads: Optional[int]) -> Verdict:
    """The verdict on one stored seed folder (``summary.json`` + ``metrics.csv``) against ``plan``."""
    from mebench.run.artifacts import METRICS_COLUMNS

    if not directory.is_dir():
        return Verdict(False, NO_RESULTS)
    summary, problem = read_summary(directory / "summary.json")
    if summary is not None and summary.get("status") != "complete":
        problem = f"summary.json says status {summary.get('status')!r} (interrupted or failed)"
    problem = problem or metrics_problem(directory / "metrics.csv", plan.checkpoints, METRICS_COLUMNS)
    problem = problem or kept_files_problem(directory, summary or {})
    if problem:
        return Verdict(False, problem)
    assert summary is not None
    stale = stale_reason(summary, plan, code_identity, threads)
    return Verdict(stale is None, stale, stale=stale is not None, summary=summary)


def decide(verdict: Verdict, keep_stale: bool) -> Verdict:
    """``--keep-stale`` turns a stale (whole) folder into a kept one; everything else is unchanged."""
    if verdict.stale and keep_stale:
        return Verdict(True, verdict.reason, stale=True, summary=verdict.summary)
    return verdict


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def kept_files_problem(directory: Path, summary: dict[str, Any]) -> Optional[str]:
    """Why a checkpoint the seed kept (``summary.json`` ``kept_files``: name -> sha256) is not whole, else
    ``None`` (records written before the digests existed have nothing to check)."""
    kept = summary.get(KEPT_FILES)
    for name, digest in (kept.items() if isinstance(kept, dict) else ()):
        path = directory / str(name)
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != digest:
            return f"{name} differs from the sha256 summary.json recorded (truncated or damaged)"
    return None


def verdict_words(verdict: Verdict) -> str:
    """The one line ``--resume`` prints for a folder: kept, kept although stale, or why it runs again."""
    if verdict.keep:
        return f"kept although stale (--keep-stale): {verdict.reason}" if verdict.stale else \
            "kept (whole, same plan, code identity and threads)"
    return f"runs again: {verdict.reason}"


def mark_kept_stale(directory: Path, summary: dict[str, Any], reason: str) -> dict[str, Any]:
    """Write ``resume: {kept_stale: true, reason}`` into the folder's ``summary.json`` (atomically)."""
    from mebench.run.artifacts import atomic_write_json

    marked = {**summary, RESUME_KEY: {"kept_stale": True, "reason": reason}}
    atomic_write_json(directory / "summary.json", marked)
    return marked


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _is_number(text: str) -> bool:
    if text == "":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def _metric_names() -> tuple[str, ...]:
    from mebench.metricspec import METRIC_NAMES

    return METRIC_NAMES


def resume_seeds(run_dir: Path, plans: dict[int, "RunPlan"], keep_stale: bool, threads: int,
                 tell: Optional[Callable[[str], None]] = None) -> dict[int, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """``mebench run --resume``: the seeds of an earlier run folder that are kept, each as its
    ``summary.json`` and ``metrics.csv`` rows; ``tell`` gets one line per seed (kept, or why it runs again)."""
    from mebench.run.artifacts import read_metrics_csv
    from mebench.support.identity import code_identity

    kept: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for seed, plan in plans.items():
        seed_dir = run_dir / f"seed_{seed}"
        verdict = decide(check_folder(seed_dir, plan, code_identity(), threads), keep_stale)
        if verdict.keep and verdict.summary is not None:
            summary = verdict.summary
            if verdict.stale and verdict.reason:
                summary = mark_kept_stale(seed_dir, summary, verdict.reason)
            kept[seed] = (summary, read_metrics_csv(seed_dir / "metrics.csv"))
        if tell is not None:
            tell(f"seed {seed}: {verdict_words(verdict)}")
    return kept


def recorded_threads(summaries: Sequence[Path]) -> Optional[int]:
    """The torch thread count most of the given ``summary.json`` files ran with (``machine.torch_threads``).

    A resumed run without an explicit thread count takes it: the default policy follows the machine's
    load, and a count that drifted with the load would make every earlier result look stale."""
    counts: dict[int, int] = {}
    for path in summaries:
        summary, _ = read_summary(path)
        threads = ((summary or {}).get("machine") or {}).get("torch_threads")
        if isinstance(threads, int) and threads > 0:
            counts[threads] = counts.get(threads, 0) + 1
    return max(counts, key=lambda t: (counts[t], -t)) if counts else None
