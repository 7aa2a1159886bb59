"""Contract §4, §15.1: relative config paths work from any folder; a missing one names where it was looked for.

``victim.checkpoint_ref`` and ``dataset.data_root`` are looked up from the
current folder first, then from the config file's own folder; command-line
paths (``--data-root``) are relative to the current folder only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mebench import cli
from mebench.config.validation import load_config
from mebench.errors import ConfigError
from mebench.testing import deep_update


@pytest.fixture
def beside(tmp_path, synth_cfg_dict, synth_victim_path, monkeypatch):
    """A config in project/ with victim.pt and data/ next to it, relative refs, and the cwd in elsewhere/."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "data").mkdir(parents=True)
    elsewhere.mkdir()
    shutil.copy(synth_victim_path, project / "victim.pt")

    def write(**overrides) -> Path:
        raw = deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": "victim.pt"},
                                           "dataset": {"data_root": "data"}, **overrides})
        path = project / "run.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path

    monkeypatch.chdir(elsewhere)
    return write


def test_relative_paths_resolve_against_the_config_folder(beside, tmp_path):
    # contract 4, 15.1: victim.checkpoint_ref and dataset.data_root found next to the config, run from elsewhere
    cfg = load_config(beside())
    assert Path(cfg.victim.checkpoint_ref) == tmp_path / "project" / "victim.pt"
    assert Path(cfg.dataset.data_root) == tmp_path / "project" / "data"
    assert Path(cfg.victim.checkpoint_ref).is_absolute()


def test_relative_path_found_from_the_current_folder_wins(beside, tmp_path, synth_victim_path):
    # contract 4: the current folder is tried first and the value is kept as written
    shutil.copy(synth_victim_path, tmp_path / "elsewhere" / "victim.pt")
    (tmp_path / "elsewhere" / "data").mkdir()
    cfg = load_config(beside())
    assert cfg.victim.checkpoint_ref == "victim.pt" and cfg.dataset.data_root == "data"


def test_missing_checkpoint_names_both_places_tried(beside, tmp_path):
    # contract 4, 15.2: a missing victim is one config error naming the current folder and the config's folder
    with pytest.raises(ConfigError) as e:
        load_config(beside(victim={"checkpoint_ref": "victims/none.pt"}))
    msg = str(e.value)
    assert e.value.key == "victim.checkpoint_ref" and "\n" not in msg
    assert str(tmp_path / "elsewhere" / "victims" / "none.pt") in msg and "current folder" in msg
    assert str(tmp_path / "project" / "victims" / "none.pt") in msg and "config file's folder" in msg


def test_missing_data_root_names_both_places_unless_download(beside, tmp_path):
    # contract 2, 15.2: dataset.data_root is checked like the checkpoint; with download it may not exist yet
    with pytest.raises(ConfigError) as e:
        load_config(beside(dataset={"data_root": "nodata"}))
    assert e.value.key == "dataset.data_root"
    msg = str(e.value)
    assert str(tmp_path / "elsewhere" / "nodata") in msg and str(tmp_path / "project" / "nodata") in msg
    cfg = load_config(beside(dataset={"data_root": "nodata", "download": True}))
    assert cfg.dataset.data_root == "nodata"  # torchvision creates it from the current folder


def test_command_line_data_root_is_relative_to_the_current_folder_only(beside, tmp_path):
    # contract 15.1: --data-root is not looked up from the config's folder
    with pytest.raises(ConfigError) as e:
        load_config(beside(), overrides={"data_root": "data"})
    assert str(tmp_path / "elsewhere" / "data") in str(e.value) and "config file's folder" not in str(e.value)


def test_absolute_and_home_paths_are_kept(beside, tmp_path, synth_victim_path, monkeypatch):
    # contract 4: an absolute path is used as written; ~ is the user's home
    monkeypatch.setenv("HOME", str(tmp_path / "project"))
    cfg = load_config(beside(victim={"checkpoint_ref": "~/victim.pt"},
                             dataset={"data_root": str(tmp_path / "project" / "data")}))
    assert cfg.victim.checkpoint_ref == str(tmp_path / "project" / "victim.pt")
    assert cfg.dataset.data_root == str(tmp_path / "project" / "data")


def test_cli_run_from_another_folder_uses_the_victim_next_to_the_config(beside, tmp_path, capsys):
    # contract 4, 11.1: the run records the checkpoint it resolved, and its hash
    import torch

    from mebench.victims.load import sha256_file

    out = tmp_path / "elsewhere" / "runs"
    threads = torch.get_num_threads()
    try:
        code = cli.main(["run", str(beside()), "--budgets", "100", "--out", str(out), "--no-progress",
                         "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    [summary] = out.glob("*/*/seed_0/summary.json")
    victim = json.loads(summary.read_text())["victim"]
    assert victim["checkpoint_ref"] == str(tmp_path / "project" / "victim.pt")
    assert victim["checkpoint_sha256"] == sha256_file(tmp_path / "project" / "victim.pt")


def test_cli_missing_victim_is_one_line_naming_both_places(beside, tmp_path, capsys):
    # contract 15.2: through the CLI, exit 2 and one line
    code = cli.main(["run", str(beside(victim={"checkpoint_ref": "gone.pt"})), "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("mebench: config error:")
    assert str(tmp_path / "elsewhere" / "gone.pt") in err[0] and str(tmp_path / "project" / "gone.pt") in err[0]
