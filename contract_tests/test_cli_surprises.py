"""Contract §15.2, §4, §17: the command line never surprises (issue 43, "a command line without surprises").

No option is taken for another by its prefix; a config mistake is answered before torch is
imported; a missing optional extra is named with its install command; a checkpoint refused
by the weights-only loader is not called damaged; a TorchScript victim's failure keeps its
cause; a grid without a data root (or without any victim file) fails when it is collected,
in one line, with nothing created.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from mebench import cli
from mebench.errors import VictimLoadError
from mebench.testing import deep_update

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: A shipped config whose run folder would be created under runs/ if the command got that far.
MNIST_CONFIG = REPO / "configs" / "mnist_lenet5_random_soft.yaml"


def _one_line(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mebench: "), err
    assert "Traceback" not in out + err
    return code, lines[0]


# ------------------------------------------------------------------------- abbreviations
# contract 15.2: `--budget 1000` is an unknown option, never read as --budgets (argparse prefix matching)
@pytest.mark.parametrize("argv, said", [
    (["run", "CONFIG", "--budget", "1000"], "unrecognized arguments: --budget 1000"),
    (["run", "CONFIG", "--seed", "0"], "unrecognized arguments: --seed 0"),
    (["run", "CONFIG", "--thread", "1"], "unrecognized arguments: --thread 1"),
    (["victim", "train", "r.yaml", "--forc"], "unrecognized arguments: --forc"),
    (["victim", "export", "v.pt", "--form", "onnx", "--out", "v.onnx"], "required: --format"),
    (["list", "--vers"], "unrecognized arguments: --vers"),
])
def test_an_abbreviated_option_is_rejected(argv, said, capsys, tmp_path):
    argv = [str(tmp_path / "cfg.yaml") if a == "CONFIG" else a for a in argv]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_every_subparser_refuses_abbreviations():
    # contract 15.2: the rule holds for every (sub)parser, including ones added later
    parser = cli.build_parser()
    seen, todo = [], [parser]
    while todo:
        p = todo.pop()
        seen.append(p)
        for action in p._actions:  # noqa: SLF001  (argparse keeps subparsers there)
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                todo.extend(action.choices.values())
    assert len(seen) >= 7  # mebench, run, victim, train, export, report, list
    assert all(p.allow_abbrev is False for p in seen), [p.prog for p in seen if p.allow_abbrev]


@pytest.mark.parametrize("argv", [["report", "runs", "--ou", "x"], ["docs", "--chec"]])
def test_report_and_docs_refuse_abbreviations(argv, capsys):
    # contract 15.2: `mebench report` and `mebench docs` parse their own arguments; the rule holds there too
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_the_full_option_name_still_works(capsys, tmp_path):
    # the full name is read as before: a bad value for --budgets is a config error, not a usage error
    code, line = _one_line(capsys, ["run", str(MNIST_CONFIG), "--budgets", "0", "--out", str(tmp_path / "runs")])
    assert code == 2 and "'budget.max_budget' = 0" in line


# ------------------------------------------------------------------------ before torch
_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    from mebench.cli import main
    code = main(sys.argv[1:])
    heavy = sorted(m for m in ("torch", "torchvision", "numpy") if m in sys.modules)
    print("HEAVY=" + ",".join(heavy), file=sys.stdout)
    sys.exit(code)
""")


@pytest.mark.parametrize("extra, words", [
    (["--budgets", "0"], "config key 'budget.max_budget' = 0: must be a positive number of images"),
    (["--seeds", "1,1"], "config key 'run.seeds' = [1, 1]: seeds must be distinct"),
    (["--budgets", "3000,2000"], "checkpoints must be strictly increasing"),
    (["--data-root", "/no/such/folder"], "config key 'dataset.data_root' = '/no/such/folder': data folder not found"),
])
def test_a_config_error_is_answered_before_torch_is_imported(tmp_path, extra, words):
    # contract 15.2: fail fast -- the one line comes before torch, torchvision or numpy is imported
    # (asserted on sys.modules, not on a wall clock; the import is what cost 1.9 s)
    victim = tmp_path / "mnist_lenet5.pt"
    victim.write_bytes(b"never read: the rules fail first")
    cfg = yaml.safe_load(MNIST_CONFIG.read_text())
    cfg["victim"]["checkpoint_ref"] = str(victim)
    cfg["run"]["output_dir"] = str(tmp_path / "runs")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, "run", str(tmp_path / "cfg.yaml"), *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"mebench: config error: {proc.stderr.split('config error: ', 1)[1].strip()}"]
    assert words in proc.stderr
    assert "HEAVY=\n" in proc.stdout, proc.stdout  # no heavy module was imported
    assert not (tmp_path / "runs").exists()


def test_a_missing_victim_file_is_answered_before_torch_is_imported(tmp_path):
    # contract 4, 15.2: an untrained victim (the commonest first mistake) is named without importing torch
    cfg = yaml.safe_load(MNIST_CONFIG.read_text())
    cfg["victim"]["checkpoint_ref"] = str(tmp_path / "not_trained.pt")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "mebench", "run", str(tmp_path / "cfg.yaml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")}
    said = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
    assert proc.returncode == 2 and len(said) == 1, proc.stderr[-2000:]
    assert "victim checkpoint not found" in said[0] and "not_trained.pt" in said[0]
    assert "mebench.config.validation" in imported and "torch" not in imported and "numpy" not in imported


# ------------------------------------------------------------------------ missing extras
def test_onnx_export_without_onnx_names_the_extra(synth_victim_path, tmp_path, capsys, monkeypatch):
    # a missing optional extra is one line with its install command, and nothing is written
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` now fails as if it were not installed
    out = tmp_path / "victim.onnx"
    code, line = _one_line(capsys, ["victim", "export", str(synth_victim_path), "--format", "onnx", "--out", str(out)])
    assert code == 1
    assert line == ('mebench: error: MissingExtraError: mebench victim export --format onnx needs onnx, '
                    'which is not installed: pip install "onnxruntime>=1.16" "onnx>=1.15" (the [onnx] extra)')
    assert not out.exists()


def test_an_extra_imported_deep_inside_a_library_is_named(capsys, monkeypatch):
    # the last resort in main(): an ImportError of an extra's package, wherever raised, is one line
    def export(args):
        raise ModuleNotFoundError("No module named 'onnx'", name="onnx")

    monkeypatch.setattr(cli, "cmd_victim_export", export)
    code, line = _one_line(capsys, ["victim", "export", "v.pt", "--format", "onnx", "--out", "v.onnx"])
    assert code == 1 and line.endswith('needs onnx, which is not installed: pip install "onnxruntime>=1.16" "onnx>=1.15" (the [onnx] extra)')


def test_an_import_error_of_another_package_is_not_disguised(monkeypatch):
    def export(args):
        raise ModuleNotFoundError("No module named 'not_an_extra'", name="not_an_extra")

    monkeypatch.setattr(cli, "cmd_victim_export", export)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["victim", "export", "v.pt", "--format", "onnx", "--out", "v.onnx"])


def test_onnx_victim_without_onnxruntime_names_the_extra(make_cfg, monkeypatch):
    from mebench.errors import ConfigError
    from mebench.config.validation import validate

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim={"format": "onnx"}))
    assert str(err.value).endswith('needs onnxruntime, which is not installed: pip install "onnxruntime>=1.16" "onnx>=1.15" (the [onnx] extra)')


# ---------------------------------------------------------------------- victim messages
class _Blocked:
    """Pickles as a call of os.system: torch's weights-only loader blocks the module (posix / nt)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_refused_for_a_blocked_global_is_not_called_damaged(synth_cfg_dict, tmp_path, capsys):
    # contract 4: a pickle that would run code is refused, never executed, and named as what it is
    marker = tmp_path / "payload_ran"
    path = tmp_path / "blocked.pt"
    torch.save({"state_dict": _Blocked(marker)}, path)
    cfg_path = tmp_path / "cfg.yaml"
    cfg = deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": str(path)}})
    cfg_path.write_text(yaml.safe_dump(cfg))
    code, line = _one_line(capsys, ["run", str(cfg_path), "--out", str(tmp_path / "runs_cli")])
    system = f"{os.system.__module__}.system"
    assert code == 2 and "blocked.pt" in line
    assert f"refers to {system}, a global from a module the weights-only loader forbids" in line
    assert "truncated" not in line and "corrupt" not in line and "damaged" not in line
    assert "weights_only=False" not in line
    assert not marker.exists() and not (tmp_path / "runs_cli").exists()


# torch's own words for a refused file (2.14 and 2.15 share them), so the test holds whichever torch runs
_TORCH_215_BLOCKED = (
    "Weights only load failed. In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely "
    "succeed, but it can result in arbitrary code execution. Do it only if you got the file from a trusted "
    "source.\n\n\nTrying to load unsupported GLOBAL posix.system whose module posix is blocked.\n\nCheck the "
    "documentation of torch.load to learn more about types accepted by default with weights_only "
    "https://pytorch.org/docs/stable/generated/torch.load.html.")
_TORCH_215_OTHER = (
    "Weights only load failed. In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely "
    "succeed, but it can result in arbitrary code execution. Do it only if you got the file from a trusted "
    "source.\n\n\nCan only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, "
    "but got <class 'Foo'>\n\nCheck the documentation of torch.load to learn more.")


@pytest.mark.parametrize("text, words", [
    (_TORCH_215_BLOCKED, "refers to posix.system, a global from a module the weights-only loader forbids (posix)"),
    (_TORCH_215_OTHER, "holds something the weights-only loader refuses (Can only build Tensor, Parameter"),
])
def test_weights_only_refusals_are_matched_by_their_wording(tmp_path, monkeypatch, text, words):
    # contract 4: the zip archive is whole; only the loader's refusal is reported
    from mebench.victims import load

    path = tmp_path / "whole.pt"
    torch.save({"w": torch.zeros(1)}, path)  # a valid zip archive: must not be called truncated

    def refuse(*args, **kwargs):
        raise pickle.UnpicklingError(text)

    monkeypatch.setattr(load.torch, "load", refuse)
    with pytest.raises(VictimLoadError) as err:
        load.read_checkpoint(path)
    assert words in err.value.reason and "truncated" not in err.value.reason
    assert "weights_only=False" not in err.value.reason and "\n" not in err.value.reason


class _NeedsSixtyThreeInputs(nn.Module):
    """Expects 63 features; the SYNTH probe batch (1x8x8) flattens to 64."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(63, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def test_a_torchscript_victim_failing_on_the_probe_keeps_its_cause(make_cfg, tmp_path):
    # contract 4, 15.2: the line names the error that ended the TorchScript interpreter, not only its headline
    import warnings

    from mebench.errors import ConfigError
    from mebench.config.validation import validate

    path = tmp_path / "victim.ts"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(_NeedsSixtyThreeInputs()).save(str(path))
    with pytest.raises(ConfigError) as err:
        validate(make_cfg(victim={"format": "torchscript", "checkpoint_ref": str(path)}))
    message = str(err.value)
    assert "fails on input shape [8, 1, 8, 8]: RuntimeError: The following operation failed in the TorchScript" \
        in message
    assert "mat1 and mat2 shapes cannot be multiplied (8x64 and 63x4)" in message and "\n" not in message
    assert "<--- HERE" not in message  # the serialized code between them is left out


def test_a_multi_line_failure_keeps_every_line():
    from mebench.victims.formats import failure_cause

    assert failure_cause(ValueError("first\n\n  second  \nthird")) == "first second third"


# ------------------------------------------------------------------------ grid collection
GRID = """\
name: nodata
register: ["mebench.testing:register_synthetic"]
seeds: [0]
budgets: [100]
run: {device: cpu}
victim: {victim_id: synth_mlp, checkpoint_ref: VICTIM}
dataset: {name: SYNTH}
data_modes:
  surrogate: {surrogate_name: SYNTHSUR}
substitute: {arch: tiny_mlp}
output_modes: [soft_prob]
attacks:
  - name: random
"""


@pytest.fixture
def grid_folder(pytester: pytest.Pytester, synth_victim_path: Path) -> pytest.Pytester:
    (pytester.path / "benchmarks").mkdir()
    for name in ("conftest.py", "test_cells.py"):
        shutil.copy(BENCHMARKS / name, pytester.path / "benchmarks" / name)
    shutil.copy(synth_victim_path, pytester.path / "synth_victim.pt")
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def _collect(folder: pytest.Pytester, victim: str = "synth_victim.pt", *args: str) -> pytest.RunResult:
    """Collect (or run) the grid in this process: a child pytest would import torch again (seconds each)."""
    (folder.path / "grid.yaml").write_text(GRID.replace("VICTIM", victim))
    return folder.runpytest("benchmarks", "--mebench-config", "grid.yaml", "-q", *args)


@pytest.mark.parametrize("root", [None, "/no/such/data/root"])
@pytest.mark.parametrize("collect_only", [True, False])
@pytest.mark.slow
def test_a_grid_without_a_data_root_fails_at_collection_in_one_line(grid_folder, monkeypatch, root, collect_only):
    # contract 15.2: fail fast -- one line when the grid is collected, no cell run, no folder created
    if root is None:
        monkeypatch.delenv("MEBENCH_DATA_ROOT", raising=False)
    else:
        monkeypatch.setenv("MEBENCH_DATA_ROOT", root)
    result = _collect(grid_folder, "synth_victim.pt", *(["--collect-only"] if collect_only else []))
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    # no data root: the default one, which MEBENCH_OFFLINE=1 (the contract tests' setting) keeps from fetching
    expected = ("*mebench grid: *grid.yaml: data root */data (the default data root; MEBENCH_OFFLINE=1 refuses "
                "downloads) is not a folder*" if root is None else
                "*mebench grid: *grid.yaml: data root /no/such/data/root (MEBENCH_DATA_ROOT) is not a folder*")
    result.stdout.fnmatch_lines([expected])
    assert sum(ln.startswith("mebench grid:") for ln in result.outlines) == 1  # (and pytest's summary line)
    assert "Traceback" not in text and " passed" not in text and "test_cell[" not in text
    assert not (grid_folder.path / "runs").exists()


@pytest.mark.slow
def test_a_grid_with_a_data_root_still_collects(grid_folder, monkeypatch, tmp_path):
    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(tmp_path))
    result = _collect(grid_folder, "synth_victim.pt", "--collect-only")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_cell[nodata-random-surrogate-soft_prob-s0]*"])


@pytest.mark.slow
def test_a_grid_whose_only_victim_is_missing_fails_at_collection(grid_folder, monkeypatch, tmp_path):
    # contract 4: nothing to run because the victim is not trained: one line naming it and the fix
    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(tmp_path))
    result = _collect(grid_folder, "not_trained.pt", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*mebench grid: *grid.yaml: no cell to run: victim synth_mlp: checkpoint "
                                 "*not_trained.pt not found (train it with `mebench victim train*"])
    assert not (grid_folder.path / "runs").exists()


def test_ray_option_without_ray_names_the_extra(grid_folder, monkeypatch):
    # a missing optional extra is one line with its install command, before collection
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    (grid_folder.path / "grid.yaml").write_text(GRID.replace("VICTIM", "synth_victim.pt"))
    result = grid_folder.runpytest("benchmarks", "--mebench-config", "grid.yaml", "--ray", "auto", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = [ln for ln in result.errlines if ln.strip()]
    assert said == ['ERROR: --ray needs ray, which is not installed: pip install "ray>=2.9" (the [ray] extra)'], said
    assert not (grid_folder.path / "runs").exists()


REGISTER_WITH_FILES = """\
import dataclasses

from mebench.data.profiles import PROFILES, register_dataset
from mebench.testing import register_synthetic


def register():
    register_synthetic()
    if "SYNTHFILES" not in PROFILES:  # the SYNTHSUR surrogate, with a file it expects in the data root
        register_dataset(dataclasses.replace(PROFILES.get("SYNTHSUR"), name="SYNTHFILES",
                                             files=("synthfiles/train.bin", "synthfiles/<class>/*.png")))
"""


@pytest.mark.parametrize("present", [False, True])
@pytest.mark.slow
def test_a_selected_dataset_missing_from_the_data_root_fails_at_collection(grid_folder, monkeypatch, tmp_path,
                                                                           present, request):
    # contract 3.2, 15.2: a surrogate absent from the data root is one line before any cell runs
    from mebench.data.profiles import PROFILES

    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(tmp_path))
    request.addfinalizer(lambda: PROFILES.unregister("SYNTHFILES"))  # the grids below run in this process
    if present:
        (tmp_path / "synthfiles").mkdir()
        (tmp_path / "synthfiles" / "train.bin").write_bytes(b"")
    (grid_folder.path / "synthfiles_plugin.py").write_text(REGISTER_WITH_FILES)
    monkeypatch.syspath_prepend(str(grid_folder.path))  # what a child pytest started in the folder would see
    grid = (GRID.replace("VICTIM", "synth_victim.pt").replace("mebench.testing:register_synthetic",
                                                              "synthfiles_plugin:register")
            .replace("surrogate: {surrogate_name: SYNTHSUR}", "surrogate: {surrogate_name: SYNTHFILES}\n  seed: {}"))
    (grid_folder.path / "grid.yaml").write_text(grid)
    result = grid_folder.runpytest("benchmarks", "--mebench-config", "grid.yaml", "--collect-only", "-q")
    if present:
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        return
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    said = [ln for ln in result.errlines if ln.strip()]
    assert said == [f"ERROR: mebench grid: nodata-random-surrogate-soft_prob-s0: dataset SYNTHFILES is not in the "
                    f"data root {tmp_path} (MEBENCH_DATA_ROOT): synthfiles/train.bin not found; set "
                    "dataset.data_root in the benchmark config or MEBENCH_DATA_ROOT to the folder holding it, or "
                    "set dataset.download: true in the benchmark config"], said
    # a selection that does not read it still collects (the check is on the selected cells)
    seed_only = grid_folder.runpytest("benchmarks", "--mebench-config", "grid.yaml", "--collect-only",
                                                 "-q", "-k", "seed")
    assert seed_only.ret == 0, seed_only.stdout.str() + seed_only.stderr.str()
    seed_only.stdout.fnmatch_lines(["*test_cell[nodata-random-seed-soft_prob-s0]*"])
    assert not (grid_folder.path / "runs").exists()


def test_extra_requirements_match_pyproject():
    # the install command a missing extra prints names exactly the packages pyproject.toml's extra installs
    tomllib = pytest.importorskip("tomllib")
    from mebench.support import extras

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    for extra, reqs in extras.EXTRA_REQUIREMENTS.items():
        assert tuple(project["optional-dependencies"][extra]) == reqs, extra
