"""The default data root (issue 54): with no data root given, public datasets are fetched once into a
per-user folder, saying what and where; offline, or when the fetch fails, one line names the folder
and the files to put there, and nothing half-made is left. A data root that is given is only read.
The fetcher here is fake (torchvision's MNIST class replaced): no test touches the network."""

from __future__ import annotations

import pytest
import torch

from mebench.data.datasets import default_data_root, load_split, resolve_data_root
from mebench.errors import DataMissingError


class FakeMNIST:
    """torchvision's MNIST: reads ``root/MNIST/raw/ok``; with ``download`` writes it first (or fails
    half-way when ``FakeMNIST.fail`` is set, leaving a partial file as a broken transfer would)."""

    fail = False
    downloads = 0

    def __init__(self, root, train, download):
        raw = __import__("pathlib").Path(root) / "MNIST" / "raw"
        if download and not (raw / "ok").is_file():
            FakeMNIST.downloads += 1
            raw.mkdir(parents=True, exist_ok=True)
            (raw / "train-images-idx3-ubyte.gz").write_bytes(b"partial")
            if FakeMNIST.fail:
                raise OSError("network is unreachable")
            (raw / "ok").write_text("whole")
        if not (raw / "ok").is_file():
            raise RuntimeError("Dataset not found. You can use download=True to download it")
        self.data = torch.zeros(4, 28, 28, dtype=torch.uint8)
        self.targets = torch.arange(4)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    import torchvision.datasets as tvd

    monkeypatch.setattr(tvd, "MNIST", FakeMNIST)
    monkeypatch.setattr(FakeMNIST, "fail", False)
    monkeypatch.setattr(FakeMNIST, "downloads", 0)
    monkeypatch.setenv("MEBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MEBENCH_DATA_ROOT", raising=False)
    monkeypatch.delenv("MEBENCH_OFFLINE", raising=False)
    return tmp_path


def test_no_data_root_means_the_per_user_folder(fake, monkeypatch):
    assert resolve_data_root(None) == default_data_root() == fake / "cache" / "data"
    monkeypatch.setenv("MEBENCH_DATA_ROOT", str(fake / "mine"))
    assert resolve_data_root(None) == fake / "mine" and resolve_data_root("given") .name == "given"


def test_a_missing_dataset_is_fetched_once_into_the_default_root_saying_so(fake):
    said = []
    x, y = load_split("MNIST", resolve_data_root(None), True, say=said.append)
    assert x.shape == (4, 1, 28, 28) and FakeMNIST.downloads == 1
    assert len(said) == 1 and "fetching MNIST into" in said[0] and str(default_data_root()) in said[0]
    load_split("MNIST", resolve_data_root(None), False, say=said.append)  # the second read: no fetch
    assert FakeMNIST.downloads == 1 and len(said) == 1


def test_a_failed_fetch_leaves_nothing_and_names_the_folder_and_files(fake):
    FakeMNIST.fail = True
    with pytest.raises(DataMissingError) as err:
        load_split("MNIST", resolve_data_root(None), True, say=lambda line: None)
    text = str(err.value)
    assert "\n" not in text and str(default_data_root()) in text and "MNIST/raw/" in text and "could not be fetched" in text
    assert not default_data_root().exists()  # nothing half-made


def test_offline_refuses_the_download_in_one_line(fake, monkeypatch):
    monkeypatch.setenv("MEBENCH_OFFLINE", "1")
    with pytest.raises(DataMissingError) as err:
        load_split("MNIST", resolve_data_root(None), True, say=lambda line: None)
    assert "MEBENCH_OFFLINE=1 refuses downloads" in str(err.value) and FakeMNIST.downloads == 0
    assert not default_data_root().exists()


def test_a_given_data_root_is_only_read(fake):
    given = fake / "given"
    given.mkdir()
    with pytest.raises(DataMissingError, match="not found under data root"):
        load_split("MNIST", given, True, say=lambda line: None)
    assert FakeMNIST.downloads == 0 and list(given.iterdir()) == []
