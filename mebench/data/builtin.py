"""The datasets mebench knows out of the box, each registered once with its reader.

Victim datasets: MNIST, FashionMNIST, CIFAR10, SewerML. Surrogates declare the
victim datasets they serve (same shape, §3.2): FashionMNIST, EMNIST and KMNIST
serve MNIST; MNIST, KMNIST and EMNIST serve FashionMNIST; SVHN and GTSRB serve
CIFAR10. Files are listed in torchvision's on-disk layout under the data root.
See docs/guide/data.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mebench.data.profiles import DatasetProfile, Reader, Split, register_dataset


def _lazy(reader: str, *factory_args: Any, **factory_kwargs: Any) -> Reader:
    """The reader ``mebench.data.datasets.<reader>`` (with arguments: the reader that factory makes),
    imported on its first call: registering the built-in profiles, which every config check reads,
    then imports neither torch nor torchvision."""

    def read(root: Path, train: bool, download: bool) -> Split:
        from mebench.data import datasets

        target = getattr(datasets, reader)
        return (target(*factory_args, **factory_kwargs) if factory_args else target)(root, train, download)

    return read


read_cifar10, read_gtsrb, read_sewerml, read_svhn = (_lazy(n) for n in ("read_cifar10", "read_gtsrb",
                                                                        "read_sewerml", "read_svhn"))


def torchvision_mnist_like(cls_name: str, **kw: Any) -> Reader:
    return _lazy("torchvision_mnist_like", cls_name, **kw)


_MNIST_NORM = ((0.1307,), (0.3081,))
#: Mean and std of the FashionMNIST train split's pixels in [0, 1].
_FASHIONMNIST_NORM = ((0.2860,), (0.3530,))
_CIFAR_NORM = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
_IMAGENET_NORM = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
#: Transferability on 32x32 / 224x224 RGB: ε = 8/255, 10 PGD steps of 2/255 (CIFAR-10 literature).
_RGB_TRANSFER = {"transfer_eps": 8 / 255, "pgd_steps": 10, "pgd_alpha": 2 / 255,
                 "transfer_eps_curve": (2 / 255, 4 / 255, 8 / 255, 16 / 255), "transfer_headline_eps": 8 / 255}


def _idx_files(folder: str, *stems: str) -> tuple[str, ...]:
    return tuple(f"{folder}/raw/{stem}-images-idx3-ubyte" for stem in stems)


MNIST = register_dataset(DatasetProfile(
    "MNIST", 1, (28, 28), 10, *_MNIST_NORM, train_size=60000, test_size=10000, victim_dataset=True,
    serves=("FashionMNIST",), reader=torchvision_mnist_like("MNIST"),
    files=_idx_files("MNIST", "train", "t10k"), downloadable=True))
CIFAR10 = register_dataset(DatasetProfile(
    "CIFAR10", 3, (32, 32), 10, *_CIFAR_NORM, train_size=50000, test_size=10000, victim_dataset=True,
    reader=read_cifar10, files=("cifar-10-batches-py/data_batch_1 .. data_batch_5", "cifar-10-batches-py/test_batch"),
    downloadable=True, **_RGB_TRANSFER))
SEWERML = register_dataset(DatasetProfile(
    "SewerML", 3, (224, 224), 2, *_IMAGENET_NORM, train_size=0, test_size=0, victim_dataset=True,
    notes="Read from a local folder (see mebench.data.datasets); sizes come from the files.",
    reader=read_sewerml, files=("SewerML/train/<class>/*.png", "SewerML/test/<class>/*.png"), **_RGB_TRANSFER))
FASHIONMNIST = register_dataset(DatasetProfile(
    "FashionMNIST", 1, (28, 28), 10, *_FASHIONMNIST_NORM, train_size=60000, test_size=10000,
    victim_dataset=True, serves=("MNIST",), reader=torchvision_mnist_like("FashionMNIST"),
    files=_idx_files("FashionMNIST", "train", "t10k"), downloadable=True))
# Surrogate-only datasets.
EMNIST = register_dataset(DatasetProfile(
    "EMNIST", 1, (28, 28), 47, *_MNIST_NORM, train_size=112800, test_size=18800, serves=("MNIST", "FashionMNIST"),
    notes="split 'balanced'; images are transposed on load to MNIST orientation",
    reader=torchvision_mnist_like("EMNIST", split="balanced"),
    files=("EMNIST/raw/emnist-balanced-train-images-idx3-ubyte",), downloadable=True))
KMNIST = register_dataset(DatasetProfile(
    "KMNIST", 1, (28, 28), 10, *_MNIST_NORM, train_size=60000, test_size=10000, serves=("MNIST", "FashionMNIST"),
    reader=torchvision_mnist_like("KMNIST"), files=_idx_files("KMNIST", "train", "t10k"), downloadable=True))
SVHN = register_dataset(DatasetProfile(
    "SVHN", 3, (32, 32), 10, *_CIFAR_NORM, train_size=73257, test_size=26032, serves=("CIFAR10",),
    reader=read_svhn, files=("train_32x32.mat", "test_32x32.mat"), downloadable=True))
GTSRB = register_dataset(DatasetProfile(
    "GTSRB", 3, (32, 32), 43, *_CIFAR_NORM, train_size=26640, test_size=12630, serves=("CIFAR10",),
    notes="resized to 32x32 on load", reader=read_gtsrb,
    files=("gtsrb/GTSRB/Training/", "gtsrb/GTSRB/Final_Test/"), downloadable=True))
