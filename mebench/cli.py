"""The ``mebench`` command: ``run``, ``victim train|export``, ``report``, ``docs`` and ``list``.

Config mistakes exit with status 2 and one line ``mebench: config error: ...``
before any data is read or any run folder is created; other failures exit 1
with one line naming the error (the seed's ``summary.json`` records it too).
Without ``--threads`` the torch thread count comes from ``default_threads``.

No option may be abbreviated (``--budget`` is not ``--budgets``; ``StrictParser``), and this
module imports no torch: a config mistake is answered before any heavy module is loaded.
See docs/guide/runs.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

from mebench.errors import ConfigDeprecationWarning, ConfigError, MebenchError, interrupt_on_sigterm
from mebench.support.options import int_list
from mebench.support.progress import stderr_lines

#: Seconds between two progress lines of one phase when stderr is not a terminal.
LOG_INTERVAL_S = 60.0
#: `mebench run` refuses a run estimated beyond this many hours of wall time unless --allow-large (issue 52).
RUN_LIMIT_HOURS = 48


class StrictParser(argparse.ArgumentParser):
    """An argparse parser that takes no abbreviated long option, nor do its subparsers.

    With argparse's default prefix matching ``mebench run CONFIG --budget 1000`` was silently
    read as ``--budgets`` (and the config's seeds turned a quick check into a 3-seed run).
    ``add_subparsers`` builds every subparser with ``type(parent)``, so one class covers all.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


class _VersionAction(argparse.Action):
    """``mebench --version``: print ``mebench <code identity>`` and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the code identity (version + source digest) and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from mebench.support.identity import code_identity

        print(f"mebench {code_identity()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = StrictParser(prog="mebench", description="Model extraction benchmark (contract v1.0)")
    # The code identity (version + source digest), the key results are stored and matched by;
    # hashed only when asked for, not on every command.
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a config: collect queries, score Track A/B at every checkpoint")
    r.add_argument("config", type=Path, help="run config (YAML), e.g. configs/mnist_lenet5_random_soft.yaml")
    r.add_argument("--seeds", type=int_list, help="override run.seeds, e.g. 0,1,2")
    r.add_argument("--budgets", type=int_list, help="override the checkpoints (max budget = largest)")
    r.add_argument("--device", help="override run.device: cpu, cuda or cuda:N")
    r.add_argument("--data-root", help="dataset folder (default: $MEBENCH_DATA_ROOT)")
    r.add_argument("--download", action="store_true", help="let torchvision download missing datasets into "
                   "the data root (sets dataset.download)")
    r.add_argument("--out", help="output folder (default: run.output_dir, 'runs')")
    r.add_argument("--threads", type=int, help="torch CPU threads (results on the CPU depend on it; "
                   "recorded in summary.json; default: free CPUs, at most 8, or $OMP_NUM_THREADS)")
    r.add_argument("--transfer", action="store_true",
                   help="also measure transferability (FGSM, PGD and CW L2 crafted on every checkpoint substitute, "
                        "scored on the victim; transfer.csv), as measure.transfer.methods: [fgsm, pgd, cw]")
    r.add_argument("--no-progress", action="store_true",
                   help="no progress output (default: bars on a terminal, a line per phase and minute in a log)")
    r.add_argument("--allow-large", action="store_true",
                   help=f"run even when the estimate on this machine is beyond {RUN_LIMIT_HOURS} hours of wall time "
                        "(refused by default: a mistyped size ends in one line instead of days of work)")
    # Two options, not one with an optional value: `--resume CONFIG` must never read CONFIG as the run folder.
    r.add_argument("--resume", action="store_true",
                   help="continue the latest run folder of this config: keep each seed whose files are "
                        "whole and whose plan, code identity and threads match, run the others again")
    r.add_argument("--resume-from", type=Path, metavar="RUN_DIR",
                   help="as --resume, continuing RUN_DIR (runs/<name>/<stamp>/) instead of the latest run folder")
    r.add_argument("--keep-stale", action="store_true",
                   help="with --resume: also keep whole seeds whose plan, code or threads differ (marked in summary.json)")
    r.add_argument("--seeds-together", choices=("auto", "on", "off"), default="auto",
                   help="run the seeds in turn and train their Track A substitutes as one stacked model "
                        "(auto: on only where measured faster, see docs/guide/performance.md)")
    v = sub.add_parser("victim", help="reference victims")
    vsub = v.add_subparsers(dest="victim_command", required=True)
    t = vsub.add_parser("train", help="train a victim from a recipe in configs/victims/")
    t.add_argument("recipe", type=Path, nargs="?", help="victim recipe (YAML), e.g. configs/victims/mnist_lenet5.yaml")
    t.add_argument("--all", action="store_true", help="train every recipe in configs/victims/ (with --zoo: its "
                   "members), skipping checkpoints that exist unless --force")
    t.add_argument("--zoo", help="with --all: only the recipes of this victim zoo (the recipes' `zoo` key)")
    t.add_argument("--out", type=Path, help="checkpoint path (default victims/<recipe name>.pt)")
    t.add_argument("--data-root", help="dataset folder (default: $MEBENCH_DATA_ROOT)")
    t.add_argument("--download", action="store_true", help="let torchvision download the dataset into the data root")
    t.add_argument("--force", action="store_true", help="overwrite an existing checkpoint at the output path")
    t.add_argument("--device", help="override the recipe's device")
    t.add_argument("--threads", type=int, help="torch CPU threads (the victim's weights depend on it; "
                   "recorded in PATH.json under machine.torch_threads; default: free CPUs, at most 8, "
                   "or $OMP_NUM_THREADS)")
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    e = vsub.add_parser("export", help="write a victim checkpoint as TorchScript or ONNX (victim.format)")
    e.add_argument("checkpoint", type=Path, help="a mebench victim checkpoint, e.g. victims/mnist_lenet5.pt")
    e.add_argument("--format", required=True, choices=("torchscript", "onnx"), help="the file format to write")
    e.add_argument("--out", type=Path, required=True, help="output file, e.g. victims/mnist_lenet5.ts")
    # Its arguments (and --help) belong to mebench.report.cli, which main() hands them to unparsed.
    sub.add_parser("report", add_help=False,
                   help="curves, leaderboard and comparisons from runs or JSON reports (mebench report --help)")
    sub.add_parser("docs", add_help=False,  # its arguments belong to mebench.docs (mebench docs --help)
                   help="regenerate the result tables of README.md and docs/ from results/ (--check: CI)")
    q = sub.add_parser("quickstart", help="the README's first result: data, victim, Random on MNIST at 1k and 10k "
                                          "queries (seed 0), its table and report; run again, it reuses them")
    q.add_argument("--data-root", help="dataset folder (default: $MEBENCH_DATA_ROOT, else a per-user folder "
                                       "where MNIST and FashionMNIST are fetched once)")
    q.add_argument("--threads", type=int, help="torch CPU threads (default: free CPUs, at most 8)")
    q.add_argument("--no-progress", action="store_true", help="no progress bars")
    rc = sub.add_parser("records", help="copy finished seed-runs (a run's seed folders or a grid's cells) into a "
                                         "result set: records only, no weights or caches, whole groups of seeds")
    rc.add_argument("sources", nargs="+", type=Path, help="run output or --mebench-cells folders")
    rc.add_argument("--into", type=Path, required=True, help="the result set, e.g. results/<set>")
    rc.add_argument("--min-seeds", type=int, default=3,
                    help="copy a run or cell only with at least this many finished seeds of it (default 3)")
    ls = sub.add_parser("list", help="registered attacks, adaptive strategies and defenses (paper, modes), measurement probes, verification methods, datasets, models; victims")
    ls.add_argument("kind", nargs="?", choices=LIST_KINDS, help="what to list (default: everything)")
    return p


def _set_threads(threads: "int | None") -> str:
    """Pin torch's CPU threads: ``--threads`` or ``default_threads()``; returns words for the first line.

    CPU results are bit-identical only for the same count (recorded as machine.torch_threads).
    """
    import torch

    from mebench.support.threads import default_threads

    if threads is not None and threads < 1:
        raise ConfigError("--threads", threads, "must be >= 1")
    count = default_threads() if threads is None else threads
    torch.set_num_threads(count)
    source = "--threads" if threads else "default; --threads N pins it"
    return f"{count} torch thread{'s' if count > 1 else ''} ({source})"


def cmd_run(args: argparse.Namespace) -> int:
    from mebench.config.validation import load_config

    overrides = {"seeds": args.seeds, "budgets": args.budgets, "device": args.device, "data_root": args.data_root,
                 "output_dir": args.out, "download": args.download or None,
                 "transfer": ["fgsm", "pgd", "cw"] if args.transfer else None}
    _train_reference_victim(args.config, overrides, args)
    with warnings.catch_warnings():  # a deprecated key was named once, by the parse above
        warnings.simplefilter("ignore", ConfigDeprecationWarning)
        cfg = load_config(args.config, overrides=overrides)
    resume = _resume_dir(args, cfg)
    if resume is not None and args.threads is None:  # keep the resumed seeds' count (the policy follows the load)
        from mebench.run.resume import recorded_threads

        args.threads = recorded_threads(sorted(resume.glob("seed_*/summary.json")))
    from mebench.run import engine  # torch: only once the config is known to be good

    threads = _set_threads(args.threads)
    if not args.allow_large:
        _refuse_if_far_beyond_the_machine(cfg)
    if resume is None:
        _say_if_already_done(cfg)
    print(f"run {cfg.run.name}: seeds {list(cfg.run.seeds)}, device {cfg.run.device}, {threads}", flush=True)
    bars = not args.no_progress and sys.stderr.isatty()  # in a log: a few lines per phase instead of bars
    say = None if args.no_progress or bars else stderr_lines(f"run {cfg.run.name}", interval=LOG_INTERVAL_S)
    together = {"auto": None, "on": True, "off": False}[args.seeds_together]
    result = engine.run(cfg, progress=bars, say=say, resume=resume, keep_stale=args.keep_stale,
                        tell=lambda line: print(f"--resume: {line}" if resume else line, flush=True),
                        seeds_together=together)
    print(f"results: {result.directory}")
    for r in result.aggregate:
        if r["metric"] in ("agreement", "acc_gt"):
            std = f" ± {r['std']:.4f}" if r["std"] is not None else ""
            print(f"  B={r['checkpoint_B']:>8} track {r['track']} {r['metric']:<9} {r['mean']:.4f}{std} (n={r['n_seeds']})")
    args.result_directory = result.directory
    return 0


#: ``mebench quickstart``: the README's first result.
QUICKSTART_CONFIG = Path("configs") / "mnist_lenet5_random_soft.yaml"
QUICKSTART_NEXT = (
    "next: more seeds   mebench run configs/mnist_lenet5_random_soft.yaml --seeds 0,1,2 --budgets 1000,10000",
    "      the grid     pytest benchmarks/ --mebench-config configs/benchmarks/quickstart/mnist.yaml --budgets 1000,10000",
    "      on a GPU     pytest benchmarks/ -n 4 --gpus --budgets 1000",
    "      the tests    pytest")


def cmd_quickstart(args: argparse.Namespace) -> int:
    """The README's first result on a fresh machine: data (fetched into the default data root unless
    one is given), the reference victim (trained from its recipe if missing), Random on MNIST at 1k
    and 10k queries, seed 0; run again, it reuses what it made (``--resume``)."""
    from mebench.run.artifacts import latest_run_dir
    from mebench.config.validation import load_config
    from mebench.report.writer import write_report

    if not QUICKSTART_CONFIG.is_file():
        raise ConfigError("quickstart", str(QUICKSTART_CONFIG),
                          "not found: run `mebench quickstart` in the root folder of the mebench checkout")
    cfg = load_config(QUICKSTART_CONFIG, check_files=False)
    again = latest_run_dir(cfg.run.output_dir, cfg.run.name) is not None
    argv = ["run", str(QUICKSTART_CONFIG), "--seeds", "0", "--budgets", "1000,10000", *(["--resume"] if again else []),
            *(["--data-root", args.data_root] if args.data_root else []),
            *(["--threads", str(args.threads)] if args.threads else []), *(["--no-progress"] if args.no_progress else [])]
    run_args = build_parser().parse_args(argv)
    print(f"quickstart: mebench {' '.join(argv)}", flush=True)
    status = cmd_run(run_args)
    report = run_args.result_directory / "report"
    files = write_report(run_args.result_directory, report, figures=False)
    shown = next((f for f in files.values() if Path(f).name == "leaderboard.md"), report)
    print(f"report: {shown} (and the rest of {report})")
    print("\n".join(QUICKSTART_NEXT))
    return status


def _build_words(checkpoint: Path) -> str:
    """`` (test accuracy 0.9914, torch 2.14.1, sha256 b67d4a2ddcc3)`` from a victim's ``.json``, if any."""
    try:
        meta = json.loads(checkpoint.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return ""
    acc, torch_version = meta.get("test_accuracy"), (meta.get("versions") or {}).get("torch")
    words = [f"test accuracy {acc:.4f}" if isinstance(acc, float) else "",
             f"torch {torch_version}" if torch_version else "torch version not recorded",
             f"sha256 {str(meta.get('sha256', ''))[:12]}"]
    return f" ({', '.join(w for w in words if w)})"


def _train_reference_victim(config: Path, overrides: dict, args: argparse.Namespace) -> None:
    """A run whose victim is a reference victim (``victims/<id>.pt`` with a recipe
    ``configs/victims/<id>.yaml``) that is not trained yet trains it first, saying so in one line.
    Torch-free until there is one to train: a config mistake is still answered before torch loads."""
    from mebench.config import apply_overrides, parse_config, read_yaml_file, resolve_paths
    from mebench.config.validation import STATIC_RULES, load_config

    raw = read_yaml_file(Path(config), "config file not found")
    cfg = apply_overrides(resolve_paths(parse_config(raw), Path(config).parent), **overrides)  # says deprecations
    for rule in STATIC_RULES:  # a config mistake first, before any training
        rule(cfg)
    v = cfg.victim
    ref, recipe = Path(str(v.checkpoint_ref)), Path("configs") / "victims" / f"{v.victim_id}.yaml"
    if ref.exists() or not recipe.is_file() or ref.resolve() != (Path("victims") / f"{v.victim_id}.pt").resolve():
        return  # trained, no recipe, or a victim file of the user's own (validation names a missing one)
    from mebench.victims.recipes import load_recipe
    from mebench.victims.registry import reads_file

    if not reads_file(v.format):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigDeprecationWarning)
        load_config(config, overrides=overrides, check_files=False)  # every rule but the files', then train
    print(f"victim {v.victim_id}: not trained yet: training it from {recipe} first (once; -> {ref})", flush=True)
    train = argparse.Namespace(device=None, threads=args.threads, force=False, no_progress=args.no_progress,
                               data_root=args.data_root or cfg.dataset.data_root, download=args.download)
    if _train_one(train, load_recipe(recipe), ref) != 0:
        print(f"mebench: warning: victim {v.victim_id} is below its recipe's target accuracy", file=sys.stderr)


def _say_if_already_done(cfg: Any) -> None:
    """An identical earlier run (every seed whole, same plan, code identity and threads) is named, with
    the flag that would reuse it; this run goes on into a new folder."""
    import torch

    from mebench.run.artifacts import latest_run_dir
    from mebench.run.plan import resolve
    from mebench.support.identity import code_identity
    from mebench.run.resume import check_folder

    last = latest_run_dir(cfg.run.output_dir, cfg.run.name)
    if last is None:
        return
    code, threads = code_identity(), torch.get_num_threads()
    if all(check_folder(last / f"seed_{s}", resolve(cfg, s), code, threads).keep for s in cfg.run.seeds):
        print(f"run {cfg.run.name}: an identical run finished in {last}; `--resume` would reuse it "
              "(running again into a new folder)", flush=True)


def _refuse_if_far_beyond_the_machine(cfg: Any) -> None:
    """The grid's cost estimate (``mebench.harness.cost``, calibrated on this machine) for the run's
    seeds; beyond ``RUN_LIMIT_HOURS`` of wall time the run is refused in one line."""
    import torch

    from mebench.run.plan import resolve
    from mebench.errors import RunTooLarge
    from mebench.harness.cost import estimate, human

    cost = estimate([resolve(cfg, seed) for seed in cfg.run.seeds], threads=torch.get_num_threads(),
                    device="cuda" if str(cfg.run.device).startswith("cuda") else "cpu")
    if cost.wall_seconds > RUN_LIMIT_HOURS * 3600:
        top = ", ".join(f"{p} {human(v)}" for p, v in sorted(cost.phases.items(), key=lambda kv: -kv[1])[:3])
        raise RunTooLarge(f"run {cfg.run.name} is estimated at ~{human(cost.wall_seconds)} of wall time on this "
                          f"machine ({top}), beyond {RUN_LIMIT_HOURS} h: check its sizes (a parameter, --budgets, "
                          "--seeds), or pass --allow-large to run it anyway")


def _resume_dir(args: argparse.Namespace, cfg: Any) -> Optional[Path]:
    """The run folder a resumed run continues: ``--resume-from RUN_DIR``, or (``--resume``) the latest
    of ``<output_dir>/<run name>/``."""
    if args.keep_stale and not (args.resume or args.resume_from):
        raise ConfigError("--keep-stale", True, "keeps stale seeds of a resumed run: use it with --resume")
    if args.resume_from is not None:
        if not args.resume_from.is_dir():
            raise ConfigError("--resume-from", str(args.resume_from), "is not a run folder (runs/<name>/<stamp>/)")
        return args.resume_from
    if not args.resume:
        return None
    from mebench.run.artifacts import latest_run_dir

    found = latest_run_dir(cfg.run.output_dir, cfg.run.name)
    if found is None:
        print(f"--resume: no earlier run of {cfg.run.name} under {cfg.run.output_dir}: starting a new one", flush=True)
    return found


def cmd_victim_train(args: argparse.Namespace) -> int:
    """``mebench victim train RECIPE`` or ``--all [--zoo NAME]`` (one recipe after another)."""
    from mebench.victims.recipes import RECIPES_DIR, load_recipe, zoo_recipes

    if args.all == (args.recipe is not None):
        raise ConfigError("recipe", str(args.recipe) if args.recipe else None,
                          "give one recipe file, or --all (with --zoo NAME for one zoo), not both")
    if args.zoo and not args.all:
        raise ConfigError("--zoo", args.zoo, "selects recipes for --all")
    if not args.all:
        return _train_one(args, load_recipe(args.recipe), args.out)
    if args.out:
        raise ConfigError("--out", str(args.out), "--all writes victims/<recipe name>.pt for every recipe")
    recipes = zoo_recipes(RECIPES_DIR, args.zoo)
    t0, status = time.perf_counter(), 0
    for path, recipe in recipes:
        out = Path("victims") / f"{recipe.name}.pt"
        if out.exists() and not args.force:
            print(f"victim {recipe.name}: {out} exists, skipped (--force retrains it)")
            continue
        status = max(status, _train_one(args, recipe, out))
    print(f"{len(recipes)} recipe(s) from {RECIPES_DIR}" + (f" (zoo {args.zoo})" if args.zoo else "")
          + f": done in {(time.perf_counter() - t0) / 60:.1f} min")
    return status


def _train_one(args: argparse.Namespace, recipe: Any, out: Optional[Path]) -> int:
    import dataclasses

    from mebench.config.validation import check_device
    from mebench.victims.recipes import train_victim

    if args.device:
        recipe = dataclasses.replace(recipe, device=args.device)
    check_device("--device" if args.device else "device", recipe.device)
    out = out or Path("victims") / f"{recipe.name}.pt"
    if out.is_dir():
        raise ConfigError("--out", str(out), "is a folder: give the checkpoint's file path, e.g. victims/NAME.pt")
    if out.exists() and not args.force:
        print(f"victim {recipe.name}: already trained: {out}{_build_words(out)} (--force retrains it)")
        return 0
    threads = _set_threads(args.threads)
    t0 = time.perf_counter()
    print(f"victim {recipe.name}: training on {recipe.device}, {threads}", flush=True)
    meta = train_victim(recipe, out, data_root=args.data_root, progress=not args.no_progress,
                        download=args.download)
    print(f"victim {recipe.name}: test_accuracy {meta['test_accuracy']:.4f} -> {out} "
          f"(+ {out.with_suffix('.json')}) in {(time.perf_counter() - t0) / 60:.1f} min")
    if meta["test_accuracy"] < recipe.min_test_accuracy:
        print(f"mebench: warning: test accuracy below the recipe's target {recipe.min_test_accuracy}", file=sys.stderr)
        return 1
    return 0


def cmd_victim_export(args: argparse.Namespace) -> int:
    from mebench.support.extras import require

    if not args.checkpoint.is_file():
        raise ConfigError("checkpoint", str(args.checkpoint), "not found (train one with `mebench victim train RECIPE`)")
    if args.format == "onnx":  # torch.onnx.export imports onnx only once it has traced the model
        require("onnx", "mebench victim export --format onnx")
    from mebench.victims.formats import export_victim

    out = export_victim(args.checkpoint, args.format, args.out)
    print(f"victim {args.checkpoint} -> {out} ({args.format}; takes normalized input, returns logits)")
    return 0


def cmd_report(argv: Sequence[str]) -> int:
    """``mebench report ...``: every argument goes to ``mebench.report.cli`` (its own --help and options)."""
    from mebench.report.cli import report_main

    return int(report_main(list(argv)) or 0)


LIST_KINDS = ("attacks", "adaptive", "defenses", "probes", "verifiers", "datasets", "models", "victims")


def cmd_list(args: argparse.Namespace) -> int:
    """Print the registered plugins (attacks and defenses with their paper, datasets, models) or the victims."""
    from mebench.attacks import ATTACKS
    from mebench.data.profiles import PROFILES
    from mebench.models import MODELS

    kinds = [args.kind] if args.kind else list(LIST_KINDS)
    for kind in kinds:
        print(f"{kind}:")
        if kind == "attacks":
            for name in ATTACKS.names():
                d = ATTACKS.get(name).describe()
                control = f"; null control of {', '.join(d['null_control_for'])}" if d["null_control_for"] else ""
                print(f"  {name:<20} {d['paper']} [data: {', '.join(d['data_modes'])}; "
                      f"output: {', '.join(d['output_modes'])}{control}]")
        elif kind == "adaptive":
            from mebench.attacks.adaptive import ADAPTIVE

            for name in ADAPTIVE.names():
                cls = ADAPTIVE.get(name)
                params = ", ".join(f"{k}={v}" for k, v in vars(cls.Params()).items()) or "-"
                print(f"  {name:<20} {cls.paper} [attack.adaptive params: {params}; output: "
                      f"{', '.join(sorted(cls.output_modes))}]")
        elif kind == "defenses":
            from mebench.defenses import DEFENSES

            for name in DEFENSES.names():
                cls = DEFENSES.get(name)
                params = ", ".join(f"{k}={v}" for k, v in vars(cls.Params()).items()) or "-"
                print(f"  {name:<20} {cls.paper} [params: {params}; output: {', '.join(sorted(cls.output_modes))}]")
        elif kind == "probes":
            from mebench.probes import PROBES

            for name in PROBES.names():
                cls = PROBES.get(name)
                shown = {f.name for f in dataclasses.fields(cls.Params) if not f.metadata.get("internal")}
                params = ", ".join(f"{k}={v}" for k, v in vars(cls.Params()).items() if k in shown) or "-"
                when = "built in" if cls.runs_by_default else f"when named (measure.{name})"
                print(f"  {name:<20} {when} [params: {params}; metrics: {', '.join(cls.metrics) or '-'}]")
        elif kind == "verifiers":
            from mebench.verification import VERIFIERS

            for name in VERIFIERS.names():
                cls = VERIFIERS.get(name)
                params = ", ".join(f"{k}={v}" for k, v in vars(cls.Params()).items()) or "-"
                needs = f"; behind defense '{cls.needs_defense}'" if cls.needs_defense else ""
                print(f"  {name:<20} {cls.paper} [measure.verification.{name} params: {params}; suspect answers: {cls.suspect_output}{needs}]")
        elif kind == "datasets":
            for name in PROFILES.names():
                p = PROFILES.get(name)
                role = f"victim dataset, surrogates: {', '.join(p.surrogates) or '-'}" if p.victim_dataset else "pool only"
                print(f"  {name:<20} {p.channels}x{p.input_size[0]}x{p.input_size[1]}, {p.num_classes} classes ({role})")
        elif kind == "models":
            print("  " + ", ".join(MODELS.names()))
        else:
            recipes = sorted(Path("configs/victims").glob("*.yaml"))
            for r in recipes:
                pt = Path("victims") / f"{r.stem}.pt"
                print(f"  {r.stem:<24} {r}  ({'trained: ' + str(pt) if pt.is_file() else 'not trained'})")
            if not recipes:
                print("  (no recipes under configs/victims/ in this folder)")
    return 0


def cmd_records(args: argparse.Namespace) -> int:
    """Copy the finished seed-runs below each source into a result set (mebench.report.publish)."""
    from mebench.report.load import NoResultsError
    from mebench.report.publish import copy_records
    from mebench.support.naming import plural

    if args.min_seeds < 1:
        raise ConfigError("--min-seeds", args.min_seeds, "must be at least 1")
    try:
        done = copy_records(args.sources, args.into, args.min_seeds)
    except NoResultsError as e:
        print(f"mebench: error: {e}", file=sys.stderr)
        return 1
    for line in done.skipped:
        print(f"left out {line}")
    print(f"copied {len(done.copied)} {plural(len(done.copied), 'seed-run')} into {args.into}"
          f"{f'; left out {len(done.skipped)}' if done.skipped else ''}")
    return 0 if done.copied else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    import warnings

    warnings.simplefilter("default", ConfigDeprecationWarning)  # Python hides DeprecationWarnings outside __main__
    _one_line_deprecations()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv[:1] if argv[:1] in (["report"], ["docs"]) else argv)
    interrupt_on_sigterm()
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "quickstart":
            return cmd_quickstart(args)
        if args.command == "victim":
            return cmd_victim_export(args) if args.victim_command == "export" else cmd_victim_train(args)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "records":
            return cmd_records(args)
        if args.command == "docs":
            from mebench.docs import main as docs_main

            return docs_main(argv[1:])
        return cmd_report(argv[1:])
    except ConfigError as e:
        print(f"mebench: config error: {_one_line(e)}", file=sys.stderr)
        return 2
    except MebenchError as e:
        print(f"mebench: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1
    except ImportError as e:  # a package of an optional extra, imported deep inside a library
        from mebench.support.extras import extra_of, missing_message

        package = extra_of(e)
        if package is None:
            raise
        print(f"mebench: error: {missing_message(package, f'mebench {argv[0]}')}", file=sys.stderr)
        return 1
    except OSError as e:  # the file system refused (permissions, disk full): not a mebench bug
        print(f"mebench: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        again = (f"; `mebench run {args.config} --resume` continues it (finished seeds are kept)"
                 if args.command == "run" else "; run it again to continue" if args.command == "quickstart" else "")
        print(f"mebench: interrupted; temporary caches were removed{again}", file=sys.stderr)
        return 130


def _one_line_deprecations() -> None:
    """A deprecated config key is one line, ``mebench: deprecated: ...``, not Python's warning with its
    file, line and source (issue 52); every other warning is shown as Python shows it."""
    shown = warnings.showwarning
    if getattr(shown, "mebench_one_line", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        if issubclass(category, ConfigDeprecationWarning):
            print(f"mebench: deprecated: {' '.join(str(message).split())}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    show.mebench_one_line = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def _one_line(error: BaseException) -> str:
    """The error's message on one line, whatever the message that an inner library wrote."""
    return " ".join(str(error).split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
