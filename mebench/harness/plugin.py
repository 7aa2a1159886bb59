"""mebench's pytest plugin (registered through the ``pytest11`` entry point).

Hooks stay short and hand off to :class:`mebench.harness.session.BenchSession`, kept in
``config.stash``. This file adds the options, the markers, the
``pytest_mebench_*`` hooks (``mebench.harness.hookspec``), the result merge and the JSON
report; it changes nothing for test suites that do not run the grid. The grid's
fixtures and cell generation are in ``mebench.harness``, which a benchmarks
folder imports in its ``conftest.py``. See docs/guide/grid.md.
"""

from __future__ import annotations

from typing import Optional

import pytest

from mebench.harness import hookspec
from mebench.harness.cost import LARGE_CPU_HOURS, LARGE_MAX_BUDGET
from mebench.support.options import budget_list, gpu_list, int_list, niceness, positive_int, ray_address
from mebench.harness.session import BenchSession

BENCH_KEY = pytest.StashKey[BenchSession]()
MARKERS = {
    "smoke": "short benchmark cells (small budgets), runs in minutes on a CPU",
    "full": "full-budget benchmark cells (up to 1M queries), GPU recommended",
}


def bench_session(config: pytest.Config) -> BenchSession:
    """The run's BenchSession (for the fixtures in ``mebench.harness``)."""
    return config.stash[BENCH_KEY]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declare the ``pytest_mebench_*`` hooks (see ``mebench.harness.hookspec``)."""
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    """One option group; ``type=`` parsers reject bad values before anything runs."""
    g = parser.getgroup("mebench", "mebench benchmark grid (pytest benchmarks/)")
    g.addoption("--mebench-config", metavar="PATH", default=None,
                help="benchmark config(s), comma-separated (default: every configs/benchmarks/*.yaml "
                     "under the rootdir)")
    g.addoption("--budgets", dest="mebench_budgets", metavar="B1,B2", type=budget_list, default=None,
                help="replace the grid's budget checkpoints, e.g. 1000 or 1000,10000")
    g.addoption("--seeds", dest="mebench_seeds", metavar="S1,S2", type=int_list, default=None,
                help="replace the grid's seeds, e.g. 0 or 0,1")
    g.addoption("--transfer", dest="mebench_transfer", action="store_true",
                help="also measure transferability on every cell (FGSM, PGD and CW L2 crafted on each checkpoint "
                     "substitute, scored on the victim; its reference ensemble is trained once per machine): "
                     "the grid's most expensive measurement, so it runs only when asked for")
    g.addoption("--gpus", dest="mebench_gpus", metavar="LIST", nargs="?", const="all", type=gpu_list, default=None,
                help="run cells on CUDA: xdist worker gwN uses GPU N mod count; '--gpus 0,2' restricts the set")
    g.addoption("--ray", dest="mebench_ray", metavar="ADDRESS", default=None, type=ray_address,
                help="run each selected cell as a Ray task (the [ray] extra: pip install -e '.[ray]'): auto (a running cluster), "
                     "local (start one here), ray://host:port or host:port; not with -n")
    g.addoption("--ray-nice", dest="mebench_ray_nice", metavar="N", type=niceness, default=None,
                help="niceness of the process that runs a cell in a Ray task (default 0, normal priority; Ray's "
                     "own workers run at 15): e.g. 10 to leave the node's other jobs their share; needs --ray")
    g.addoption("--seeds-together", dest="mebench_seeds_together", choices=("auto", "on", "off"), default="auto",
                help="run the seed cells of one condition as one group in one process, Track A trained as one "
                     "stacked model (under -n: --dist loadgroup); auto: where the device was measured to gain "
                     "(mebench.training.spec.SEEDS_TOGETHER_DEFAULT, the device being cuda with --gpus, else cpu)")
    g.addoption("--mebench-threads", metavar="N", type=positive_int, default=None,
                help="torch CPU threads in every process that runs cells (results depend on it; default: "
                     "`mebench run`'s policy, shared among the -n workers; 1 a Ray task; with --resume, the resumed cells' count)")
    g.addoption("--mebench-allow-large", action="store_true",
                help=f"run a selection with a budget above {LARGE_MAX_BUDGET:,} or an estimated cost above "
                     f"{LARGE_CPU_HOURS:g} CPU-hours without --budgets (the full contract grid takes days on a CPU)")
    g.addoption("--resume", dest="mebench_resume", action="store_true",
                help="keep cells whose files are whole and whose plan, code identity and threads match; "
                     "run the others again, one line each saying why (docs/guide/resume.md)")
    g.addoption("--keep-stale", dest="mebench_keep_stale", action="store_true",
                help="with --resume: also keep whole cells whose plan, code or threads differ (marked in "
                     "summary.json and the JSON report)")
    g.addoption("--overwrite", dest="mebench_overwrite", action="store_true",
                help="run the selected cells again in a --mebench-cells folder that already holds cells")
    g.addoption("--mebench-cells", metavar="DIR", default=None,
                help="per-cell artifacts and result.json (default: runs/pytest/<UTC stamp>/cells under the "
                     "rootdir, a new folder per run; with --resume: the latest such folder)")
    g.addoption("--mebench-json", metavar="PATH", default=None,
                help="JSON report path (default: report.json beside the cells folder, runs/pytest/<UTC stamp>/)")
    g.addoption("--mebench-progress", metavar="SECONDS", type=float, default=30.0,
                help="a progress line per running cell at most every SECONDS, also under -n (0: none; default 30)")
    g.addoption("--mebench-report", metavar="DIR", default=None,
                help="also render curves/leaderboard from the JSON report into DIR (mebench.report)")


def pytest_configure(config: pytest.Config) -> None:
    """Markers, the BenchSession, the controller's result listener and its GPU check."""
    for name, text in MARKERS.items():
        if not any(line.split(":")[0].strip() == name for line in config.getini("markers")):
            config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[BENCH_KEY] = bench = BenchSession(config)
    _check_ray(config)
    _group_seeds(config, bench.options.seeds_together)
    if not bench.is_worker:
        config.pluginmanager.register(_ResultListener(bench), "mebench-results")
        bench.gpu_warning = bench.check_gpus()  # said once, at the start (pytest_sessionstart)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """pytest-xdist controller: every worker writes into this run's cells folder."""
    node.workerinput.update(bench_session(node.config).worker_input())  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tag cell items for the result channel; ``--resume`` skips complete cells; ``--seeds-together``
    puts the seed cells of one condition in one xdist group."""
    bench = bench_session(config)
    bench.tag_items(items)
    if bench.options.seeds_together:
        from mebench.harness.session import cell_of

        for item in items:
            cell = cell_of(item)
            if cell is not None:
                item.add_marker(pytest.mark.xdist_group(cell.condition))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: say at the start, not only in the final summary, that --gpus found no GPU;
    with ``--resume``, remove the query caches a killed run left in the cells folder."""
    bench = bench_session(session.config)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if bench.gpu_warning and tr is not None:
        tr.write_line(f"mebench: warning: {bench.gpu_warning}", yellow=True)
    before = len(bench.messages)
    if bench.sweep_stale_caches() and tr is not None:
        for line in bench.messages[before:]:
            tr.write_line(f"mebench: {line}")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """After ``-k``/``-m``: print the selected cells' cost; refuse a large grid unless asked for;
    refuse, in one line, a selection whose datasets are not in the data root."""
    bench_session(session.config).check_cost(session.items)
    from mebench.harness.grid import GridError
    from mebench.harness.grid_inputs import check_datasets
    from mebench.harness.session import cell_of

    try:
        check_datasets([c for c in map(cell_of, session.items) if c is not None])
    except GridError as e:
        raise pytest.UsageError(f"mebench grid: {e}") from None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """pytest-xdist controller (which collects nothing itself): print the estimate for the cells the
    first worker collected, with the number of workers; the workers enforce the large-run guard."""
    bench_session(node.config).show_cost_of_ids(ids)  # type: ignore[attr-defined]


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """After collection: the grid's source and what it left out (§6.1, pool sizes)."""
    return bench_session(config).collection_lines()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Optional[bool]:
    """``--ray``: cells run as Ray tasks (``mebench.harness.ray_executor``); other tests run here."""
    if not session.config.getoption("mebench_ray", None) or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error{'s' if session.testsfailed > 1 else ''} "
                                  "during collection")
    from mebench.harness.ray_executor import RayLoop

    RayLoop(session, bench_session(session.config)).run()
    return True


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Controller: write the JSON report and the seed aggregate."""
    bench_session(session.config).finish()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Controller, after the workers are gone: remove the query caches a killed worker left."""
    bench = config.stash.get(BENCH_KEY, None)
    if bench is not None:
        bench.remove_own_caches()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """A compact results table (mean ± std over seeds) and the report's path."""
    lines = bench_session(config).summary_lines()
    if lines:
        terminalreporter.write_sep("=", "mebench results")
        for line in lines:
            terminalreporter.write_line(line)


def loadgroup_works() -> bool:
    """Whether pytest-xdist's ``--dist loadgroup`` groups here: its workers append the group to each
    item's ``_nodeid``, which pytest 9.2 no longer reads (a node id is built from ``_id``), so with
    pytest-xdist up to 3.8.0 every cell lands on any worker."""
    from _pytest import nodes
    import xdist

    fixed = tuple(int(p) for p in xdist.__version__.split(".")[:3] if p.isdigit()) > (3, 8, 0)
    return fixed or "_nodeid" in getattr(nodes.Node, "__slots__", ())


def _group_seeds(config: pytest.Config, on: bool) -> None:
    """``--seeds-together``: not with ``--ray`` (a task runs one cell); under ``-n`` pytest-xdist must keep a
    group's cells on one worker (loadgroup)."""
    opt = config.option
    if not on:
        return
    if hasattr(config, "workerinput"):  # a worker parses the command line itself: its items get the suffix
        opt.loadgroup = True            # by which the controller's loadgroup scheduler groups them
        return
    if getattr(opt, "mebench_ray", None):
        raise pytest.UsageError("--seeds-together groups cells in one pytest process: not with --ray")
    if not getattr(opt, "numprocesses", None):
        return
    if not loadgroup_works():
        import xdist

        raise pytest.UsageError(f"--seeds-together under -n needs pytest-xdist's --dist loadgroup, which pytest-xdist "
                                f"{xdist.__version__} cannot apply with pytest {pytest.__version__} (it renames node ids "
                                "that pytest 9.2 no longer reads): run without -n, or install pytest<9.2")
    dist = getattr(opt, "dist", "no")
    if dist in ("no", "load"):
        opt.dist = "loadgroup"
    elif dist != "loadgroup":
        raise pytest.UsageError(f"--seeds-together runs the seed cells of a condition in one process: it needs "
                                f"--dist loadgroup (the default it sets), not --dist {dist}")


def _check_ray(config: pytest.Config) -> None:
    """``--ray`` needs Ray and replaces xdist's loop, so it cannot be combined with ``-n``."""
    if not config.getoption("mebench_ray", None):
        if config.getoption("mebench_ray_nice", None) is not None:
            raise pytest.UsageError(f"--ray-nice {config.getoption('mebench_ray_nice')}: sets the priority of Ray "
                                    "tasks; it needs --ray")
        return
    if getattr(config.option, "numprocesses", None):
        raise pytest.UsageError("--ray runs every cell as a Ray task; it cannot be combined with -n (xdist)")
    from mebench.support.extras import is_installed, missing_message

    if not is_installed("ray"):
        raise pytest.UsageError(missing_message("ray", "--ray"))


class _ResultListener:
    """Controller side of the merge: every test report (local or from an xdist worker) passes here."""

    def __init__(self, bench: BenchSession) -> None:
        self.bench = bench

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.bench.add_report(report)

