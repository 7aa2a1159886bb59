"""The design card's command after the quick start (issue 51): the default grid set leaves out configs
whose victims are untrained, transferability is opt-in, and a grid's name cannot hijack ``-k``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mebench.harness.cost import estimate
from mebench.harness.grid import TRANSFER_MEASURE, GridError, load_grid, load_grids

from test_plugin import SYNTH_CONFIG, make_grid_folder

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]


def _grid_files(tmp_path: Path, victim: Path) -> tuple[Path, Path]:
    """A trained SYNTH grid and one whose victim has a recipe but no checkpoint."""
    (tmp_path / "configs" / "benchmarks").mkdir(parents=True)
    (tmp_path / "configs" / "victims").mkdir()
    (tmp_path / "synth_victim.pt").write_bytes(victim.read_bytes())
    trained = tmp_path / "configs" / "benchmarks" / "a.yaml"
    trained.write_text(SYNTH_CONFIG)
    raw = yaml.safe_load(SYNTH_CONFIG)
    raw.update(name="other", victim={"victim_id": "synth_other", "checkpoint_ref": "victims/synth_other.pt"})
    untrained = tmp_path / "configs" / "benchmarks" / "b.yaml"
    untrained.write_text(yaml.safe_dump(raw))
    (tmp_path / "configs" / "victims" / "synth_other.yaml").write_text("name: synth_other\n")
    return trained, untrained


# issue 51 / contract §6.1: the default set (no --mebench-config) leaves an untrained grid out, naming the
# recipe that trains its victim; a named config without a trained victim is one clear error.
def test_default_grid_set_leaves_out_untrained_grids_naming_the_recipe(tmp_path, synth_victim_path):
    trained, untrained = _grid_files(tmp_path, synth_victim_path)
    grids = load_grids([trained, untrained], tmp_path, budgets=[100], leave_out_untrained=True)
    assert [g.spec.name for g in grids.grids] == ["synth-mlp"] and grids.cells
    assert len(grids.left_out) == 1
    assert "b.yaml" in grids.left_out[0] and "mebench victim train configs/victims/synth_other.yaml" in grids.left_out[0]
    assert grids.describe()[0].startswith("mebench grid left out: ")
    with pytest.raises(GridError, match="no cell to run: victim synth_other"):
        load_grids([trained, untrained], tmp_path, budgets=[100])
    with pytest.raises(GridError, match="no grid has a trained victim"):
        load_grids([untrained], tmp_path, budgets=[100], leave_out_untrained=True)


# issue 51: the whole design-card command, collected as a user runs it: one grid left out, one line.
@pytest.mark.slow
def test_bare_grid_command_runs_the_trained_grid_and_names_the_other(pytester, synth_victim_path):
    make_grid_folder(pytester, synth_victim_path, SYNTH_CONFIG, "a.yaml")
    raw = yaml.safe_load(SYNTH_CONFIG)
    raw.update(name="other", victim={"victim_id": "synth_other", "checkpoint_ref": "victims/synth_other.pt"})
    (pytester.path / "configs" / "benchmarks" / "b.yaml").write_text(yaml.safe_dump(raw))
    result = pytester.runpytest("benchmarks", "--budgets", "100", "--collect-only", "-q", "-p", "no:benchmark")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*mebench grid left out: *b.yaml: no cell to run: victim synth_other*"])
    assert "synth-mlp-random-seed-soft_prob-s0" in result.stdout.str()


# issue 51: transferability runs only when asked for (--transfer); no shipped top-level grid measures it.
def test_transfer_is_opt_in(tmp_path, synth_victim_path):
    trained, _ = _grid_files(tmp_path, synth_victim_path)
    plain = load_grid(trained, tmp_path, budgets=[100])
    assert all("transfer" not in (c.cfg.measure or {}) for c in plain.cells)
    asked = load_grid(trained, tmp_path, budgets=[100], transfer=True)
    assert all(c.cfg.measure_params("transfer")["methods"] == TRANSFER_MEASURE["transfer"]["methods"]
               for c in asked.cells)
    for path in sorted((ROOT / "configs" / "benchmarks").glob("*.yaml")):
        assert "transfer" not in (yaml.safe_load(path.read_text()).get("measure") or {}), path.name


# issue 51: on the shipped MNIST grid, one DFME cell at 1k costs what DFME costs: no transfer phases.
def test_shipped_dfme_cell_estimate_has_no_transfer(tmp_path, monkeypatch):
    from mebench.models.registry import MODELS
    from mebench.victims.load import save_victim

    victims = tmp_path / "victims"
    victims.mkdir()  # an untrained LeNet-5 in the victim format: the grid checks the file, not its accuracy
    save_victim(victims / "mnist_lenet5.pt", MODELS.get("lenet5")(1, 10, (28, 28)), "lenet5", 10, 1, (28, 28))
    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(tmp_path))
    for sub in ("configs",):
        (tmp_path / sub).symlink_to(ROOT / sub)
    grid = load_grid(ROOT / "configs" / "benchmarks" / "mnist.yaml", tmp_path, seeds=[0], budgets=[1000])
    cells = [c for c in grid.cells if c.label == "dfme"]
    assert [c.id for c in cells] == ["mnist-lenet5-dfme-data_free-soft_prob-s0"]
    phases = estimate([cells[0].plan], threads=1).phases
    assert not any(k.startswith("transfer") for k, v in phases.items() if v > 0), phases


# issue 51: a grid's name begins every cell id, so it may not contain a token -k selects cells by.
@pytest.mark.parametrize("name,token", [("synthrandom", "random"), ("synth_dfme", "dfme"), ("synths1", "s1"),
                                        ("soft_prob_grid", "soft_prob")])
def test_a_grid_name_that_would_hijack_k_is_refused(tmp_path, synth_victim_path, name, token):
    trained, _ = _grid_files(tmp_path, synth_victim_path)
    raw = yaml.safe_load(SYNTH_CONFIG)
    raw["name"] = name
    trained.write_text(yaml.safe_dump(raw))
    with pytest.raises(GridError, match=f"config key 'name' = '{name}': contains '{token}'") as err:
        load_grid(trained, tmp_path, budgets=[100])
    assert "\n" not in str(err.value)
