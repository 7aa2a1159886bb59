"""``mebench report PATH [PATH ...] [--out DIR]``: the report of runs folders and/or pytest JSON reports.

Writes curves, the leaderboard (Markdown, HTML, CSV, JSON, LaTeX), pairwise comparisons,
gains over the null controls and the aggregate. Runs that did not complete, and seed folders
that cannot be read whole (truncated or missing files), are left out and listed with a reason;
runs against different victim checkpoints under one victim id, and seeds run with different
thread counts, devices, code, torch builds, CPU models or GPUs, are reported apart; rankings and
comparisons use only rows over the same budget span; a seed-run found twice among the PATHs is
kept once, with a warning.
See docs/guide/reports.md.
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from pathlib import Path
from typing import Sequence

from mebench.report.gains import check_also_against
from mebench.report.load import NoResultsError
from mebench.report.stats import N_BOOTSTRAP
from mebench.report.writer import default_out_dir, write_report


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the report options to ``parser`` (usable as a ``mebench`` sub-command)."""
    parser.add_argument("path", nargs="+", help="runs folders, run/seed folders or pytest JSON reports "
                                                "(several are merged; a seed-run read twice is kept "
                                                "once, with a warning)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output folder (default: PATH/report, or <name>_report/ next "
                             "to a JSON report; the first PATH)")
    parser.add_argument("--n-bootstrap", type=int, default=N_BOOTSTRAP, metavar="N",
                        help=f"bootstrap resamples per pairwise comparison and per gain over "
                             f"a null control, where 5 or more seeds pair (below, the interval is "
                             f"Student t; default {N_BOOTSTRAP})")
    parser.add_argument("--also-against", action="append", default=[], metavar="CONTROL",
                        help="also pair every attack with this null control (an attack name, e.g. "
                             "untrained_generator) whatever the attack's data mode; repeatable. "
                             "By default an attack meets the controls of its own data mode only")
    return parser


def run_report(args: argparse.Namespace) -> int:
    """Run with parsed arguments; prints the written files. Exit code 0 or 2."""
    if args.n_bootstrap < 1:
        print(f"mebench report: --n-bootstrap must be >= 1, got {args.n_bootstrap}",
              file=sys.stderr)
        return 2
    try:
        check_also_against(args.also_against, key="--also-against")
    except ValueError as err:
        print(f"mebench report: {err}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else default_out_dir(args.path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            files = write_report(args.path, out, n_bootstrap=args.n_bootstrap,
                                 also_against=args.also_against)
        except NoResultsError as err:
            print(f"mebench report: {err}", file=sys.stderr)
            return 2
        finally:
            for w in caught:
                print(f"mebench report: warning: {w.message}", file=sys.stderr)
    print(f"wrote {len(files)} files to {out}")
    for key, path in sorted(files.items()):
        print(f"  {key:<40} {path}")
    left_out = _count_rows(files.get("excluded_csv"))
    if left_out:
        print(f"left out {left_out} seed-run(s) that did not complete or cannot be read whole: listed with "
              "their reasons in excluded.csv and at the end of leaderboard.md")
    return 0


def _count_rows(csv_path: Path | None) -> int:
    """Data rows of a CSV file written by the report (0 when absent)."""
    if csv_path is None or not csv_path.exists():
        return 0
    with open(csv_path, newline="", encoding="utf-8") as f:
        return max(sum(1 for _ in csv.reader(f)) - 1, 0)


def report_main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``report_main(["runs", "--out", "runs/report"])`` → exit code."""
    parser = add_report_arguments(argparse.ArgumentParser(
        prog="mebench report", description=__doc__, allow_abbrev=False))
    return run_report(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(report_main())
