"""Contract §4, §15.2, §17.2: every mistake a researcher makes in the first hour is one line, never a traceback.

Broken configs, broken or foreign checkpoints and broken recipes go through
``mebench.cli.main`` exactly as typed at a shell: exit status 1 or 2, one line on
stderr starting with ``mebench:``, no traceback, no run folder.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mebench import cli
from mebench.run.artifacts import atomic_save_torch
from mebench.models.registry import MODELS, Normalized
from mebench.testing import deep_update, synthetic_config_dict
from mebench.support.threads import MAX_DEFAULT_THREADS, default_threads
from mebench.victims.load import FORMAT

FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _one_line_failure(capsys, argv: list[str]) -> tuple[int, str]:
    """Run the CLI; assert the one-line contract; return (status, the line)."""
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code in (1, 2), (code, err)
    assert len(lines) == 1 and lines[0].startswith("mebench: "), err
    assert "Traceback" not in out + err and "weights_only=False" not in err
    return code, lines[0]


@pytest.fixture
def keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def foreign_files(tmp_path_factory, synth_victim_path) -> dict[str, Path]:
    """Files a victim checkpoint_ref may wrongly point at, built once."""
    d = tmp_path_factory.mktemp("foreign")
    real = torch.load(synth_victim_path, weights_only=True)
    data = Path(synth_victim_path).read_bytes()
    mlp = MODELS.get("tiny_mlp")(1, 4, (8, 8))
    files = {
        "bare": real["state_dict"],
        "final_substitute.ckpt": Normalized(mlp, (0.5,), (0.25,)).state_dict(),  # what `mebench run` writes
        "lenet_bare": MODELS.get("lenet5")(1, 4, (8, 8)).state_dict(),
        "module": mlp,
        "training_dict": {"epoch": 3, "state_dict": real["state_dict"]},
    }
    paths = {}
    for name, obj in files.items():
        paths[name] = d / (name if name.endswith(".ckpt") else f"{name}.pt")
        atomic_save_torch(obj, paths[name])
    paths["truncated"] = d / "truncated.pt"
    paths["truncated"].write_bytes(data[: len(data) // 2])
    paths["empty"] = d / "empty.pt"
    paths["empty"].write_bytes(b"")
    return paths


def _run_argv(tmp_path: Path, cfg: dict) -> list[str]:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["run", str(path), "--out", str(tmp_path / "runs_cli"), "--no-progress"]


# (file, victim overrides, exit status, words the line must hold)
CHECKPOINT_CASES = {
    "truncated": ("truncated", {}, ["truncated.pt", "not a mebench victim checkpoint or is damaged"]),
    "empty": ("empty", {}, ["empty.pt", "is empty"]),
    "pickled_module": ("module", {}, ["module.pt", "pickled Python object", "state_dict()"]),
    "substitute": ("final_substitute.ckpt", {}, ["final_substitute.ckpt", "substitute's weights", "not a victim"]),
    "bare_without_arch": ("bare", {}, ["'victim.arch'", "bare state_dict", "fit: tiny_mlp"]),
    "bare_wrong_arch": ("lenet_bare", {"arch": "tiny_mlp"}, ["'victim.arch' = 'tiny_mlp'", "they fit lenet5"]),
    "training_dict": ("training_dict", {}, ["training_dict.pt", "'state_dict' entry"]),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_CASES))
def test_broken_or_foreign_checkpoint_is_one_line_naming_the_file(case, foreign_files, synth_cfg_dict, tmp_path,
                                                                   capsys):
    # contract 4, 15.2: a checkpoint that is no victim fails at validation, in one line naming it
    name, victim, words = CHECKPOINT_CASES[case]
    cfg = deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": str(foreign_files[name]), **victim}})
    code, line = _one_line_failure(capsys, _run_argv(tmp_path, cfg))
    assert code == 2 and line.startswith("mebench: config error:")
    assert all(w in line for w in words), line
    assert not (tmp_path / "runs_cli").exists()


def test_arch_that_contradicts_a_mebench_checkpoint_names_both(synth_cfg_dict, tmp_path, capsys):
    # contract 4: victim.arch must match the arch recorded in the checkpoint
    cfg = deep_update(synth_cfg_dict, {"victim": {"arch": "lenet5"}})
    _, line = _one_line_failure(capsys, _run_argv(tmp_path, cfg))
    assert "'victim.arch' = 'lenet5'" in line and "holds a 'tiny_mlp' victim" in line


def test_victim_for_another_dataset_is_named(synth_cfg_dict, synth_victim_path, tmp_path, capsys):
    # contract 2.1, 4: a victim trained for other shapes is rejected before any work
    obj = torch.load(synth_victim_path, weights_only=True)
    path = tmp_path / "ten_classes.pt"
    atomic_save_torch({**obj, "num_classes": 10}, path)
    cfg = deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": str(path)}})
    _, line = _one_line_failure(capsys, _run_argv(tmp_path, cfg))
    assert "1x8x8 images and 10 classes" in line and "1x8x8 images and 4 classes" in line


def test_damaged_checkpoint_loaded_directly_is_a_victim_load_error(make_cfg, foreign_files):
    # contract 4: load_victim_module raises mebench errors, not torch's (which advises weights_only=False)
    from mebench.errors import VictimLoadError
    from mebench.victims.load import load_victim_module

    cfg = make_cfg(victim={"checkpoint_ref": str(foreign_files["truncated"])})
    with pytest.raises(VictimLoadError, match="truncated.pt' is not a mebench victim checkpoint or is damaged") as e:
        load_victim_module(cfg.victim, 4)
    assert "weights_only=False" not in str(e.value) and "\n" not in str(e.value)


# ----------------------------------------------------------------------------- fuzz: configs
_TEMPLATE = synthetic_config_dict(Path("."), Path("victim.pt"))
_REQUIRED = [("run", "name"), ("victim", "victim_id"), ("victim", "checkpoint_ref"), ("dataset", "name"),
             ("dataset", "data_mode"), ("substitute", "arch"), ("attack", "name"), ("attack", "output_mode"),
             ("budget", "max_budget"), ("budget", "checkpoints")]


def _leaves(d: dict, prefix: tuple = ()) -> list[tuple[tuple, object]]:
    out = []
    for k, v in d.items():
        out += _leaves(v, prefix + (k,)) if isinstance(v, dict) and v else [(prefix + (k,), v)]
    return out


def _nested(path: tuple, value: object) -> dict:
    for key in reversed(path):
        value = {key: value}
    return value  # type: ignore[return-value]


def _not_a_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_LISTS = st.lists(st.one_of(_TEXT, st.none()), min_size=1, max_size=3)
_MAPS = st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), st.integers(), min_size=1, max_size=2)
_WRONG = {  # values that break the type of a leaf of each kind (never a value the schema converts)
    str: st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), _LISTS, _MAPS),
    bool: st.one_of(st.integers(), _TEXT, _LISTS, _MAPS),
    int: st.one_of(_TEXT, st.booleans(), st.floats().filter(lambda f: not (math.isfinite(f) and f.is_integer())),
                   _LISTS, _MAPS),
    float: st.one_of(_TEXT.filter(_not_a_number), st.booleans(), _LISTS, _MAPS),
    list: st.one_of(_TEXT, st.integers(), _MAPS, st.lists(st.text("abc", min_size=1, max_size=3), min_size=1)),
}


def _wrong_leaf(item: tuple[tuple, object]) -> st.SearchStrategy:
    path, value = item
    return _WRONG[type(value)].map(lambda v: _nested(path, v))


_BROKEN_CONFIGS = st.one_of(
    st.sampled_from(_leaves(_TEMPLATE)).flatmap(_wrong_leaf),                        # wrong key types
    st.sampled_from(_REQUIRED).map(lambda p: _nested(p, None)),                          # a required key deleted
    st.tuples(st.sampled_from(sorted(_TEMPLATE)), st.text("qz_", min_size=1, max_size=4))
    .map(lambda t: {t[0]: {f"zz{t[1]}": 1}}),                                           # an unknown key
    st.tuples(st.sampled_from(sorted(_TEMPLATE)), st.one_of(_TEXT, st.integers(), _LISTS))
    .map(lambda t: {t[0]: t[1]}),                                                        # a section of the wrong type
)


@FUZZ
@given(mutation=_BROKEN_CONFIGS)
def test_any_broken_config_is_one_line_without_traceback(mutation, synth_cfg_dict, tmp_path, capsys):
    # contract 15.2, 17.2: wrong key types, missing and unknown keys: exit 2, one line, no run folder
    code, _ = _one_line_failure(capsys, _run_argv(tmp_path, deep_update(synth_cfg_dict, mutation)))
    assert code == 2
    assert not (tmp_path / "runs_cli").exists()


@FUZZ
@given(text=st.one_of(_TEXT.map(str.encode), st.binary(max_size=64), st.text(max_size=40).map(str.encode)))
def test_any_config_file_that_is_not_a_config_is_one_line(text, tmp_path, capsys):
    # contract 15.1: a file that is not YAML, not UTF-8 or not a mapping of sections is one config error
    path = tmp_path / "garbage.yaml"
    path.write_bytes(text)
    code, line = _one_line_failure(capsys, ["run", str(path), "--out", str(tmp_path / "runs_cli"), "--no-progress"])
    assert code == 2 and line.startswith("mebench: config error:")


# ------------------------------------------------------------------------- fuzz: checkpoints
def _format_field_broken(real: dict) -> st.SearchStrategy:
    wrong = {"format": st.text(max_size=8).filter(lambda t: t != FORMAT), "arch": st.sampled_from(["lenet5", "nope"]),
             "num_classes": st.integers(1, 9).filter(lambda n: n != 4), "channels": st.sampled_from([3, "1"]),
             "input_size": st.sampled_from([[28, 28], [8], "8x8"]), "state_dict": st.sampled_from([{}, [], 0])}
    return st.sampled_from(sorted(wrong)).flatmap(lambda k: wrong[k].map(lambda v: ("save", {**real, k: v})))


def _checkpoint_payloads(real: dict, data: bytes) -> st.SearchStrategy:
    tensors = st.dictionaries(st.text("abc.", min_size=1, max_size=5),
                              st.lists(st.integers(1, 3), max_size=2).map(lambda s: torch.zeros(s)), min_size=1)
    objects = st.recursive(st.one_of(st.integers(), _TEXT, st.none()),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=6)
    return st.one_of(
        st.binary(max_size=512).map(lambda b: ("bytes", b)),                                   # random bytes
        st.binary(max_size=64).map(lambda b: ("bytes", b"PK\x03\x04" + b)),                    # a broken archive
        st.integers(0, len(data) - 1).map(lambda n: ("bytes", data[:n])),                      # truncated victim
        tensors.map(lambda sd: ("save", sd)),                                                  # bare state_dicts
        objects.map(lambda o: ("save", o)),                                                    # other objects
        _format_field_broken(real),                                                            # a damaged field
    )


@FUZZ
@given(data=st.data(), arch=st.sampled_from([None, "tiny_mlp", "lenet5"]))
@pytest.mark.slow
def test_any_broken_checkpoint_is_one_line_without_traceback(data, arch, synth_cfg_dict, synth_victim_path,
                                                             tmp_path, capsys):
    # contract 4, 17.2: random bytes, truncations, bare or foreign state dicts, damaged fields: one line
    real = torch.load(synth_victim_path, weights_only=True)
    kind, payload = data.draw(_checkpoint_payloads(real, Path(synth_victim_path).read_bytes()))
    path = tmp_path / "victim.pt"
    path.unlink(missing_ok=True)
    if kind == "bytes":
        path.write_bytes(payload)
    else:
        torch.save(payload, path)
    cfg = deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": str(path), "arch": arch}})
    _one_line_failure(capsys, _run_argv(tmp_path, cfg))
    assert not (tmp_path / "runs_cli").exists()


# ----------------------------------------------------------------------------- victim train
RECIPE = {"name": "synth_v", "dataset": "SYNTH", "arch": "tiny_mlp", "epochs": 1.0, "batch_size": 64,
          "optimizer": {"name": "adam", "lr": 0.003, "momentum": 0.0, "weight_decay": 0.0},
          "augment": "none", "seed": 0, "min_test_accuracy": 0.0, "device": "cpu"}


def _recipe(tmp_path: Path, recipe: dict) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@FUZZ
@given(mutation=st.sampled_from(_leaves(RECIPE)).flatmap(_wrong_leaf))
def test_any_broken_recipe_is_one_line(mutation, tmp_path, capsys):
    # contract 4: a victim recipe with a wrong key type is one config error; nothing is trained
    out = tmp_path / "exists.pt"
    out.write_bytes(b"")  # even a recipe that slipped through would stop at the existing output, not train
    path = _recipe(tmp_path, deep_update(RECIPE, mutation))
    code, line = _one_line_failure(capsys, ["victim", "train", str(path), "--out", str(out), "--no-progress"])
    assert code == 2 and line.startswith("mebench: config error:")


def test_victim_train_on_cuda_without_a_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    # contract 15.2: the device must exist, checked before any data is read
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["victim", "train", str(_recipe(tmp_path, RECIPE)), "--out", str(tmp_path / "v.pt"), "--device", "cuda"]
    code, line = _one_line_failure(capsys, argv)
    assert code == 2 and "'--device' = 'cuda'" in line and "CUDA is not available" in line
    assert not (tmp_path / "v.pt").exists()


def test_victim_train_never_overwrites_without_force(tmp_path, capsys, synth_victim_path, monkeypatch,
                                                         keep_torch_threads):
    # contract 4: a trained victim is never replaced by accident; --force replaces it and its PATH.json
    from mebench.victims import recipes

    out = tmp_path / "v.pt"
    out.write_bytes(Path(synth_victim_path).read_bytes())
    before = out.read_bytes()
    trained = []
    monkeypatch.setattr(recipes, "train_victim", lambda *a, **k: trained.append(a) or {"test_accuracy": 0.9})
    argv = ["victim", "train", str(_recipe(tmp_path, RECIPE)), "--out", str(out), "--no-progress"]
    capsys.readouterr()
    assert cli.main(argv) == 0  # issue 54: "already trained" is an answer, not an error (the quick start reruns)
    said = capsys.readouterr().out
    assert "already trained" in said and str(out) in said and "--force" in said
    assert out.read_bytes() == before and not trained
    assert cli.main(argv + ["--force", "--threads", "1"]) == 0 and len(trained) == 1


def test_victim_train_download_reaches_the_reader_and_errors_suggest_its_flags(tmp_path, capsys, monkeypatch,
                                                                               keep_torch_threads):
    # contract 2: `victim train --download` passes download=True to the reader; the fix is named in its flags
    from mebench.victims import recipes

    seen = []
    real = recipes.load_split
    monkeypatch.setattr(recipes, "load_split", lambda *a, **k: seen.append(k["download"]) or real(*a, **k))
    out = tmp_path / "v.pt"
    argv = ["victim", "train", str(_recipe(tmp_path, RECIPE)), "--out", str(out), "--no-progress",
            "--data-root", str(tmp_path), "--threads", "1"]
    assert cli.main(argv + ["--download"]) == 0 and seen == [True, True] and out.is_file()
    mnist = tmp_path / "mnist.yaml"
    mnist.write_text(yaml.safe_dump({**RECIPE, "dataset": "MNIST", "arch": "lenet5"}))
    (tmp_path / "empty").mkdir()
    argv = ["victim", "train", str(mnist), "--out", str(tmp_path / "m.pt"), "--data-root", str(tmp_path / "empty"),
            "--threads", "1", "--no-progress"]
    code, line = _one_line_failure(capsys, argv)
    assert code == 1 and "dataset MNIST not found" in line and "--download" in line and "--data-root" in line
    assert "dataset.download" not in line and "dataset.data_root" not in line


def test_run_download_sets_dataset_download(synth_cfg_dict, tmp_path, monkeypatch, capsys, keep_torch_threads):
    # contract 2, 15.1: `mebench run --download` is `dataset.download: true`
    from mebench.run import engine

    seen = []
    monkeypatch.setattr(engine, "run", lambda cfg, progress, say=None, **_: seen.append(cfg) or SimpleNamespace(
        directory=tmp_path, aggregate=[]))
    argv = _run_argv(tmp_path, synth_cfg_dict) + ["--threads", "1"]
    assert cli.main(argv) == 0 and cli.main(argv + ["--download"]) == 0
    assert [c.dataset.download for c in seen] == [False, True]


# ------------------------------------------------------------------------------------ threads
def test_default_threads_policy():
    # contract 17.3: a default that never oversubscribes; OMP_NUM_THREADS wins when set
    assert default_threads(cpus=16, busy=0.0, environ={}) == MAX_DEFAULT_THREADS
    assert default_threads(cpus=4, busy=0.2, environ={}) == 4
    assert default_threads(cpus=4, busy=2.6, environ={}) == 1
    assert default_threads(cpus=2, busy=2.0, environ={}) == 1  # a 2-core machine running two benchmarks
    assert default_threads(cpus=2, busy=7.0, environ={}) == 1
    assert default_threads(cpus=16, busy=0.0, environ={"OMP_NUM_THREADS": "3"}) == 3
    assert default_threads(cpus=16, busy=0.0, environ={"OMP_NUM_THREADS": "x"}) == MAX_DEFAULT_THREADS
    assert 1 <= default_threads(environ={}) <= MAX_DEFAULT_THREADS  # reads the real machine


@pytest.mark.parametrize("flag", [None, "2"])
def test_run_prints_and_uses_the_thread_count(flag, synth_cfg_dict, tmp_path, monkeypatch, capsys, keep_torch_threads):
    # contract 16, 17.3: the first line names the torch thread count the run uses (summary.json records it)
    from mebench.run import engine
    from mebench.support import threads

    monkeypatch.setattr(threads, "default_threads", lambda: 3)
    used = []
    monkeypatch.setattr(engine, "run", lambda cfg, progress, say=None, **_: used.append(torch.get_num_threads()) or SimpleNamespace(
        directory=tmp_path, aggregate=[]))
    argv = _run_argv(tmp_path, synth_cfg_dict) + (["--threads", flag] if flag else [])
    assert cli.main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    want = int(flag) if flag else 3
    assert used == [want] and f"{want} torch threads" in first and ("default" in first) == (flag is None)


def test_summary_records_the_thread_count(make_cfg, keep_torch_threads):
    # contract 16: summary.json records machine.torch_threads
    import json

    from mebench.run import engine

    torch.set_num_threads(1)
    cfg = make_cfg(budget={"max_budget": 200, "checkpoints": [200]})
    res = engine.run(cfg, progress=False)
    summary = json.loads((res.directory / "seed_0" / "summary.json").read_text())
    assert summary["machine"]["torch_threads"] == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="affinity is Linux-only")
def test_usable_cpus_respects_affinity(monkeypatch):
    # contract 17.3: the default counts only the CPUs this process may run on
    from mebench.support import threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(threads, "_cgroup_cpu_quota", lambda: None)
    assert threads.usable_cpus() == 3
    monkeypatch.setattr(threads, "_cgroup_cpu_quota", lambda: 2)
    assert threads.usable_cpus() == 2


# issue 52: `mebench run` has the grid's cost guard: a run estimated far beyond the machine is refused in
# one line before any work (nothing written); --allow-large runs it anyway.
def test_a_run_far_beyond_the_machine_is_refused_in_one_line(synth_cfg_dict, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "RUN_LIMIT_HOURS", 1e-9)
    argv = _run_argv(tmp_path, synth_cfg_dict)
    code, line = _one_line_failure(capsys, argv)
    assert code == 1 and "RunTooLarge" in line and "--allow-large" in line and "estimated at ~" in line
    out_dir = tmp_path / "runs_cli"
    assert not out_dir.exists()
    assert cli.main([*argv, "--allow-large"]) == 0 and any(out_dir.rglob("summary.json"))


# issue 54: an interrupted run says how to continue it.
def test_an_interrupted_run_says_how_to_resume(synth_cfg_dict, tmp_path, capsys, monkeypatch):
    from mebench.run import engine

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "run", interrupted)
    argv = _run_argv(tmp_path, synth_cfg_dict)
    capsys.readouterr()
    assert cli.main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("mebench: interrupted") and f"mebench run {argv[1]} --resume" in err


# issue 52: a name that becomes a path stays inside its folder: a run named ".." and a recipe named
# "../x" are refused in one line before anything is written.
@pytest.mark.parametrize("name", ["..", ".", "../x", "a/b"])
def test_a_run_name_that_leaves_its_folder_is_refused(name, synth_cfg_dict, tmp_path, capsys):
    code, line = _one_line_failure(capsys, _run_argv(tmp_path, deep_update(synth_cfg_dict, {"run": {"name": name}})))
    assert code == 2 and "'run.name'" in line
    assert not (tmp_path / "runs_cli").exists()


@pytest.mark.parametrize("name", ["../x", "..", "x/../../y"])
def test_a_recipe_name_that_leaves_victims_is_refused(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, line = _one_line_failure(capsys, ["victim", "train", str(_recipe(tmp_path, {**RECIPE, "name": name})),
                                            "--no-progress"])
    assert code == 2 and "config key 'name'" in line
    assert list(tmp_path.rglob("*.pt")) == []


# issue 52: a victim whose weights are not finite is refused at load, naming the tensor.
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_victim_with_non_finite_weights_is_refused(bad, synth_cfg_dict, synth_victim_path, tmp_path, capsys):
    obj = torch.load(synth_victim_path, weights_only=True)
    name = next(k for k, v in obj["state_dict"].items() if v.is_floating_point())
    obj["state_dict"][name] = obj["state_dict"][name].clone().fill_(bad)
    path = tmp_path / "nan_victim.pt"
    torch.save(obj, path)
    code, line = _one_line_failure(capsys, _run_argv(tmp_path, deep_update(synth_cfg_dict,
                                                                           {"victim": {"checkpoint_ref": str(path)}})))
    assert "NaN or infinite" in line and name in line and "nan_victim.pt" in line


# issue 54: a run whose reference victim (victims/<id>.pt with a recipe configs/victims/<id>.yaml) is not
# trained trains it first, saying so; a victim file of the user's own is never trained over.
def test_a_missing_reference_victim_is_trained_from_its_recipe_first(tmp_path, monkeypatch, capsys, synth_cfg_dict):
    import argparse

    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs" / "victims").mkdir(parents=True)
    (tmp_path / "configs" / "victims" / "synth_v.yaml").write_text(yaml.safe_dump(RECIPE))
    calls = []
    monkeypatch.setattr(cli, "_train_one", lambda args, recipe, out: calls.append((recipe.name, str(out))) or 0)
    args = argparse.Namespace(threads=1, no_progress=True, data_root=None, download=False)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(deep_update(synth_cfg_dict, {"victim": {"victim_id": "synth_v",
                                                                           "checkpoint_ref": "victims/synth_v.pt"}})))
    cli._train_reference_victim(path, {}, args)
    assert [(name, Path(out).resolve()) for name, out in calls] == [("synth_v", (tmp_path / "victims/synth_v.pt").resolve())]
    assert "training it from configs/victims/synth_v.yaml first" in capsys.readouterr().out
    path.write_text(yaml.safe_dump(deep_update(synth_cfg_dict, {"victim": {"victim_id": "synth_v",
                                                                           "checkpoint_ref": str(tmp_path / "mine.pt")}})))
    cli._train_reference_victim(path, {}, args)
    assert len(calls) == 1


# issue 54: an identical rerun of `mebench run` says that --resume would reuse the finished run.
def test_an_identical_rerun_names_the_finished_run(synth_cfg_dict, tmp_path, capsys):
    argv = _run_argv(tmp_path, synth_cfg_dict)
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "an identical run finished in" in out and "`--resume` would reuse it" in out


# issue 54: quickstart is the README's first command; outside a checkout it says where to run it.
def test_quickstart_outside_a_checkout_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, line = _one_line_failure(capsys, ["quickstart"])
    assert code == 2 and "root folder of the mebench checkout" in line
