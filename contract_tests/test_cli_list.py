"""The ``mebench`` command's discovery verbs: ``--version`` and ``list`` (contract §6.1: capabilities recorded)."""

from __future__ import annotations

import pytest

from mebench import __version__
from mebench.support.identity import code_identity
from mebench.attacks import ATTACKS
from mebench.cli import main
from mebench.data.profiles import PROFILES


# `--version` prints the code identity (version + source digest) results are stored and matched by.
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"mebench {code_identity()}"
    assert code_identity().startswith(f"{__version__}+src.") and __version__ == "1.1.0"


def test_list_attacks_names_every_attack_with_paper_and_modes(capsys: pytest.CaptureFixture[str]) -> None:
    # contract 6.1: each attack's allowed data and output modes are shown with its paper
    assert main(["list", "attacks"]) == 0
    out = capsys.readouterr().out
    for name in ATTACKS.names():
        cls = ATTACKS.get(name)
        line = next(line for line in out.splitlines() if line.split() and line.split()[0] == name)
        assert cls.paper in line and all(m in line for m in cls.data_modes)


def test_list_datasets_marks_victim_datasets(capsys: pytest.CaptureFixture[str]) -> None:
    # contract 2.1: the victim dataset profiles
    assert main(["list", "datasets"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    for name in PROFILES.names():
        assert ("victim dataset" in lines[name]) == PROFILES.get(name).victim_dataset


def test_list_rejects_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["list", "gadgets"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_list_defenses_names_each_with_its_paper(capsys: pytest.CaptureFixture[str]) -> None:
    # contract 1.2: every defense is listed with its paper, parameters and output modes
    from mebench.defenses import DEFENSES

    assert main(["list", "defenses"]) == 0
    out = capsys.readouterr().out
    for name in DEFENSES.names():
        line = next(line for line in out.splitlines() if line.split() and line.split()[0] == name)
        assert DEFENSES.get(name).paper in line


@pytest.mark.parametrize("command", [["run"], ["victim", "train"], ["list"], ["report"]])
def test_every_cli_option_has_help_text(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # issue: complete --help texts: every argument of every command says what it is
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    lines = text.split("arguments:", 1)[1].splitlines()
    for i, line in enumerate(lines):
        words = line.split()
        if line.startswith("  ") and not line.startswith("   ") and words and len(words) == 1 + (
                words[0].startswith("-") and len(words) > 1 and words[1].isupper()):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            assert nxt.startswith(" " * 10), f"{' '.join(command)}: {line.strip()} has no help text"


# issue 35: the probes a config can name under measure.<probe>, with their parameters
def test_list_probes_names_each_with_its_params(capsys: pytest.CaptureFixture[str]) -> None:
    from mebench.probes import PROBES

    assert main(["list", "probes"]) == 0
    out = capsys.readouterr().out
    for name in PROBES.names():
        assert f"  {name} " in out
    assert "init_variance" in out and "when named (measure.init_variance)" in out and "inits=5" in out
    assert "transfer" in out and "references=3" in out
