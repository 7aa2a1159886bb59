"""The code identity that keys stored results changes with the package source and only with it."""

from __future__ import annotations

import shutil
from pathlib import Path

from mebench.support import identity


def _copy_package(tmp_path: Path) -> Path:
    dest = tmp_path / "mebench"
    shutil.copytree(identity.PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_identity_names_version_and_source_digest() -> None:
    # contract §16 (provenance): every result records the code that produced it
    ident = identity.code_identity()
    version, _, tail = ident.partition("+src.")
    assert version == identity.mebench.__version__
    assert tail == identity.source_digest()[:12]


def test_identity_changes_with_any_source_file_and_not_with_other_files(tmp_path: Path) -> None:
    pkg = _copy_package(tmp_path)
    before = identity.source_digest(pkg)
    (pkg / "README.txt").write_text("docs do not change a number")
    assert identity.source_digest(pkg) == before
    target = pkg / "attacks" / "base.py"
    target.write_text(target.read_text() + "\n# an edit\n")
    assert identity.source_digest(pkg) != before


def test_identity_depends_on_file_paths_not_only_contents(tmp_path: Path) -> None:
    pkg = _copy_package(tmp_path)
    before = identity.source_digest(pkg)
    (pkg / "attacks" / "base.py").rename(pkg / "attacks" / "base2.py")
    assert identity.source_digest(pkg) != before


def test_hidden_files_and_dangling_links_neither_break_nor_change_the_identity(tmp_path: Path) -> None:
    pkg = _copy_package(tmp_path)
    before = identity.source_digest(pkg)
    (pkg / ".#cli.py").symlink_to(tmp_path / "no-such-file")  # an editor's lock link
    (pkg / "attacks" / ".scratch.py").write_text("x = 1\n")
    assert identity.source_digest(pkg) == before


# contract §16 / issue 58: a record names the CPU model and the instruction set torch's kernels use,
# which tell two machines with the same torch apart (a victim's build moved Random @1k by 0.1).
def test_machine_info_names_cpu_model_and_capability() -> None:
    import torch

    from mebench.support.runinfo import machine_info

    info = machine_info("cpu")
    assert isinstance(info["cpu_model"], str)
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and info["cpu_capability"]
    assert info["device"] == "cpu" and "gpu" not in info


# contract §10 / §16: the variables that cap the instruction set of torch's, oneDNN's and MKL's kernels
# change a result's bytes (one AVX-512 machine trained another MNIST victim build than an AVX2 one,
# and its own AVX2 build once all three were set), so a record names those that were set.
def test_machine_info_names_the_instruction_set_variables_that_were_set(monkeypatch) -> None:
    from mebench.support.runinfo import ISA_VARIABLES, machine_info

    for name in ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert machine_info("cpu")["isa_overrides"] == {}
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "")  # set but empty: no cap
    assert machine_info("cpu")["isa_overrides"] == {"DNNL_MAX_CPU_ISA": "AVX2"}
