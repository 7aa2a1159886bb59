"""The machine-wide cache folder: where it is, and how an entry is named by its key."""
from pathlib import Path

from mebench.support.cachedir import cache_root, entry_path, key_digest


def test_env_names_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("MEBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "mebench"


def test_an_entry_is_named_by_its_key_not_its_order(monkeypatch, tmp_path):
    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path))
    a = entry_path("reference", {"arch": "lenet5", "seed": 1}, ".pt")
    b = entry_path("reference", {"seed": 1, "arch": "lenet5"}, ".pt")
    assert a == b and a.parent == Path(tmp_path) / "reference" and a.suffix == ".pt"
    assert key_digest({"arch": "lenet5", "seed": 2}) != key_digest({"arch": "lenet5", "seed": 1})
