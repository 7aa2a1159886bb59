"""The machine-wide cache folder: where it is, and how an entry is named by its key."""
from pathlib import Path

from mebench.support.cachedir import cache_root, entry_path, index_complete, key_digest, write_index


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


def test_an_index_is_complete_only_while_every_file_it_lists_is_there(monkeypatch, tmp_path):
    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path))
    key = {"dataset": "mnist", "k": 2}
    files = [tmp_path / "m" / "a.pt", tmp_path / "m" / "b.pt"]
    assert not index_complete("some-index", key)  # never written
    for f in files:
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(b"x")
    path = write_index("some-index", key, files)
    assert path == entry_path("some-index", key, ".json") and index_complete("some-index", key)
    assert not index_complete("some-index", {"dataset": "mnist", "k": 3})  # another plan's key
    files[1].unlink()
    assert not index_complete("some-index", key)  # a listed file went away
    write_index("some-index", key, [])
    assert not index_complete("some-index", key)  # an empty list proves nothing
    path.write_text("{not json")
    assert not index_complete("some-index", key)  # a damaged index reads as absent
