"""Contract §2, §3, §5: dataset profiles, pools, readers and substitute architectures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mebench.run import engine
from mebench.data.augment import grow_pool
from mebench.data.datasets import load_split
from mebench.data.profiles import PROFILES, DatasetProfile, get_profile, register_dataset
from mebench.errors import DataMissingError
from mebench.models.registry import build_model
from mebench.run.plan import resolve, site


@pytest.mark.parametrize("name, shape, classes", [("MNIST", (1, 28, 28), 10), ("CIFAR10", (3, 32, 32), 10),
                                                  ("SewerML", (3, 224, 224), 2), ("FashionMNIST", (1, 28, 28), 10)])
def test_victim_profiles(name, shape, classes):
    # contract 2.1: the three victim dataset profiles
    p = get_profile(name)
    assert p.input_shape == shape and p.num_classes == classes and p.victim_dataset
    assert len(p.mean) == len(p.std) == shape[0]
    assert p.track_a_batch_size == 128 and p.steps_coeff_c == 0.2


def test_surrogates_match_their_victim_shape():
    # contract 3.2: surrogates naturally match the victim profile
    assert get_profile("MNIST").surrogates == ("FashionMNIST", "EMNIST", "KMNIST")
    assert get_profile("CIFAR10").surrogates == ("SVHN", "GTSRB")
    assert get_profile("FashionMNIST").surrogates[0] == "MNIST"
    for v in ("MNIST", "CIFAR10", "FashionMNIST"):
        for s in get_profile(v).surrogates:
            assert get_profile(s).input_shape == get_profile(v).input_shape


# every registered architecture builds for each profile shape: test_registries.py (driven by MODELS)


def test_resnet18_imagenet_stem_for_224():
    # contract 2.1, 5: Sewer-ML 224x224 uses the ImageNet stem
    m = build_model("resnet18", 3, 2, (224, 224), (0.5,) * 3, (0.25,) * 3).eval()
    assert m.net.conv1.kernel_size == (7, 7)
    with torch.no_grad():
        assert m(torch.rand(1, 3, 224, 224)).shape == (1, 2)


def test_missing_dataset_names_the_folder_and_files(tmp_path):
    # contract 2: a missing dataset is a clear error naming the files expected and the folder searched
    with pytest.raises(DataMissingError) as e:
        load_split("CIFAR10", tmp_path, train=False)
    msg = str(e.value)
    assert str(tmp_path) in msg and "cifar-10-batches-py" in msg and "MEBENCH_DATA_ROOT" in msg


def test_cifar_code_path_on_synthetic_tensors(tmp_path, monkeypatch):
    # contract 2, 3.2: CIFAR-10 victim with an SVHN pool, end to end on synthetic 3x32x32 data
    import torchvision.datasets as tvd

    class FakeCIFAR:
        def __init__(self, root, train, download):
            g = torch.Generator().manual_seed(int(train))
            self.data = (torch.rand(64, 32, 32, 3, generator=g) * 255).to(torch.uint8).numpy()  # HWC like torchvision
            self.targets = torch.randint(0, 10, (64,), generator=g).tolist()

    monkeypatch.setattr(tvd, "CIFAR10", FakeCIFAR)
    x, y = load_split("CIFAR10", tmp_path, train=True)
    assert x.shape == (64, 3, 32, 32) and x.dtype == torch.uint8 and y.shape == (64,)


def test_seed_pool_comes_from_the_train_split_and_every_image_is_new(make_cfg):
    # contract 3.1: 100 seed images from the victim *train* split; the pool grows by augmentation
    cfg = make_cfg(dataset={"data_mode": "seed", "surrogate_name": None, "seed_size": 20, "seed_pool_size": 400})
    prep = engine.prepare(resolve(cfg), site(cfg))
    pool = engine.build_pool(resolve(cfg, 0), prep)
    train, _ = load_split("SYNTH", cfg.dataset.data_root, True)
    test, _ = load_split("SYNTH", cfg.dataset.data_root, False)
    assert len(pool) == 400
    seeds = pool.images[:20].flatten(1)
    in_train = (seeds[:, None, :] == train.flatten(1)[None]).all(-1).any(1)
    in_test = (seeds[:, None, :] == test.flatten(1)[None]).all(-1).any(1)
    assert in_train.all() and not in_test.any()
    assert torch.unique(pool.images.flatten(1), dim=0).shape[0] == 400
    again = engine.build_pool(resolve(cfg, 0), prep)
    assert torch.equal(pool.images, again.images)
    assert not torch.equal(pool.images, engine.build_pool(resolve(cfg, 1), prep).images)


def test_grow_pool_is_vectorized_and_seeded():
    # contract 3.1, 10: augmentation is seeded by the run seed
    seeds = (torch.rand(10, 3, 32, 32) * 255).to(torch.uint8)
    a = grow_pool(seeds, 50, torch.Generator().manual_seed(0))
    b = grow_pool(seeds, 50, torch.Generator().manual_seed(0))
    assert a.shape == (50, 3, 32, 32) and torch.equal(a, b) and torch.equal(a[:10], seeds)


def test_seed_mode_run_end_to_end(make_cfg):
    # contract 3: Random in seed mode queries new images only
    res = engine.run(make_cfg(dataset={"data_mode": "seed", "surrogate_name": None, "seed_size": 20}), progress=False)
    assert res.seeds[0].summary["queries_used"] == 500


def test_real_mnist_and_fashion_mnist_load(data_root):
    # contract 2, 3.2: real MNIST (victim) and FashionMNIST (surrogate) from the data root
    x, y = load_split("MNIST", data_root, train=False)
    assert x.shape == (10000, 1, 28, 28) and x.dtype == torch.uint8 and int(y.max()) == 9
    fx, _ = load_split("FashionMNIST", data_root, train=True)
    assert fx.shape == (60000, 1, 28, 28)
    assert PROFILES.get("MNIST").reader is not None and PROFILES.get("FashionMNIST").reader is not None


def test_a_dataset_is_registered_once_with_its_reader_and_a_surrogate_declares_whom_it_serves():
    # contract 2, 3.2: one registration per dataset; a plugin surrogate needs no edit of the victim's profile
    with pytest.raises(ValueError, match="needs a reader"):
        register_dataset(DatasetProfile("NOREADER", 1, (28, 28), 10, (0.5,), (0.5,), 10, 10))
    assert "NOREADER" not in PROFILES
    with pytest.raises(ValueError, match="victim's shape"):
        register_dataset(DatasetProfile("BIGSUR", 3, (32, 32), 10, (0.5,) * 3, (0.5,) * 3, 10, 10,
                                        serves=("MNIST",), reader=lambda root, train, download: None))
    plugin = DatasetProfile("PLUGSUR", 1, (28, 28), 10, (0.5,), (0.5,), 10, 10, serves=("MNIST",),
                            reader=lambda root, train, download: (torch.zeros(10, 1, 28, 28, dtype=torch.uint8),
                                                                  torch.zeros(10, dtype=torch.int64)))
    register_dataset(plugin)
    try:
        assert get_profile("MNIST").surrogates[-1] == "PLUGSUR"
        x, _ = load_split("PLUGSUR", Path("."), train=True)
        assert x.shape == (10, 1, 28, 28)
    finally:
        PROFILES.unregister("PLUGSUR")
    assert "PLUGSUR" not in get_profile("MNIST").surrogates


def test_grid_data_errors_speak_of_the_benchmark_config(tmp_path, monkeypatch):
    # issue: the grid has no --data-root option, so its errors name the benchmark config instead
    from mebench.data.datasets import default_data_root, resolve_data_root

    monkeypatch.delenv("MEBENCH_DATA_ROOT", raising=False)
    assert resolve_data_root(None, "grid") == default_data_root()  # issue 54: no root given is the default one
    with pytest.raises(DataMissingError, match="dataset.download: true in the benchmark config") as e:
        load_split("MNIST", tmp_path, train=False, command="grid")
    assert "--data-root" not in str(e.value) and "--download" not in str(e.value)
