"""Reading datasets from a local data root as uint8 tensors (contract §2, §3).

The data root comes from ``dataset.data_root`` / ``--data-root`` or ``MEBENCH_DATA_ROOT``, in
torchvision's on-disk layout; nothing is downloaded unless asked (``dataset.download: true``,
``--download``). A missing dataset is a ``DataMissingError`` naming the folder searched, the files
expected and the fix (``HINTS``). Every reader returns ``(images uint8 [N, C, H, W], labels int64
[N])``. See docs/guide/data.md.
"""
# The data root comes from ``dataset.data_root`` / ``--data-root`` or the
# ``MEBENCH_DATA_ROOT`` environment variable, in torchvision's on-disk layout.
# Nothing is downloaded unless asked (``dataset.download: true``, ``--download``).
# A missing dataset is a ``DataMissingError`` that names the folder searched, the
# files expected and the fix in the words of the command that read it (``HINTS``).
#
# Every reader returns ``(images uint8 [N, C, H, W], labels int64 [N])``; a
# dataset's reader is part of its registration (``mebench.data.profiles``).
#
# Sewer-ML cannot be downloaded; mebench reads it from this layout::
#
#     <data_root>/SewerML/{train,test}/<class_name>/<image>.{png,jpg}
#
# (e.g. classes ``normal`` and ``defect``), resized to 224x224 RGB on load.

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from mebench.data.profiles import PROFILES, Reader, Split
from mebench.errors import DataMissingError

# How to point a command at its data, in that command's words: (data root, download).
HINTS: dict[str, tuple[str, str]] = {
    "run": ("pass --data-root DIR, set dataset.data_root or MEBENCH_DATA_ROOT",
            "pass --download or set dataset.download: true"),
    "victim train": ("pass --data-root DIR or set MEBENCH_DATA_ROOT", "pass --download"),
    "grid": ("set dataset.data_root in the benchmark config or MEBENCH_DATA_ROOT",
             "set dataset.download: true in the benchmark config"),
}


#: ``MEBENCH_OFFLINE=1``: nothing is downloaded, not even into the default data root.
OFFLINE_ENV = "MEBENCH_OFFLINE"


def default_data_root() -> Path:
    """The per-user data folder used when no data root is given: ``<cache>/data`` (``mebench.support.cachedir``:
    ``$MEBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/mebench`` or ``~/.cache/mebench``)."""
    from mebench.support.cachedir import cache_root

    return cache_root() / "data"


def offline() -> bool:
    """Whether downloads are refused (``MEBENCH_OFFLINE=1``)."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def resolve_data_root(configured: Optional[str], command: str = "run") -> Path:
    """The data root: the config/CLI value, else ``$MEBENCH_DATA_ROOT``, else :func:`default_data_root`
    (where a public dataset is fetched on first use; a root that is given is only read).

    ``command`` ("run", "victim train" or "grid") picks the wording of the fix in an error.
    """
    root = configured or os.environ.get("MEBENCH_DATA_ROOT")
    return Path(root).expanduser() if root else default_data_root()


def load_split(name: str, root: Path, train: bool, download: bool = False, command: str = "run",
               say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> Split:
    """Images and labels of one split of dataset ``name`` under ``root``.

    In the default data root a missing public dataset is fetched once, with torchvision's checksums
    (``say`` tells what and where), unless ``MEBENCH_OFFLINE=1``; a fetch that fails leaves nothing
    half-made. ``command`` ("run", "victim train" or "grid") picks the wording of the fix in an error.
    """
    profile = PROFILES.get(name)
    reader = profile.reader
    assert reader is not None, f"dataset {name} was registered without a reader"
    root = Path(root)
    try:
        return reader(root, train, download)
    except (RuntimeError, FileNotFoundError, OSError) as e:
        if isinstance(e, DataMissingError):
            raise
        if download or root != default_data_root() or not profile.downloadable:
            raise DataMissingError(_missing_message(name, root, download, command, e)) from None
    return _fetch_once(name, root, train, say)


def _fetch_once(name: str, root: Path, train: bool, say: Callable[[str], None]) -> Split:
    """Fetch ``name`` into the default data root with torchvision (checksums checked); on any failure
    remove what the attempt created and raise one line naming the folder and the files to put there."""
    profile = PROFILES.get(name)
    files = ", ".join(profile.files or [])
    fill = (f"put {files} under {root} (torchvision layout), or set MEBENCH_DATA_ROOT to a folder holding them")
    if offline():
        raise DataMissingError(f"dataset {name} is not in the default data root {root} and {OFFLINE_ENV}=1 "
                               f"refuses downloads: {fill}")
    existed = root.exists()
    before = set(root.rglob("*")) if existed else set()
    say(f"mebench: fetching {name} into {root} (once; torchvision checks its checksums; "
        f"{OFFLINE_ENV}=1 refuses downloads)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        return PROFILES.get(name).reader(root, train, True)
    except Exception as e:  # noqa: BLE001 - a network, checksum or disk failure: clean up, then one line
        if not existed:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for path in sorted(set(root.rglob("*")) - before, key=lambda p: len(p.parts), reverse=True):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        why = " ".join(str(e).split())[:200]
        raise DataMissingError(f"dataset {name} is not in the default data root {root} and could not be fetched "
                               f"({type(e).__name__}: {why}): {fill}") from None


def _missing_message(name: str, root: Path, download: bool, command: str, cause: Exception) -> str:
    profile = PROFILES.get(name)
    files = ", ".join(profile.files or ["(see the dataset's documentation)"])
    where, fetch = HINTS[command]
    if download:
        fix = "the download did not provide it; check the network or put the files there by hand"
    elif profile.downloadable:
        fix = f"{where}, or {fetch} to fetch it"
    else:
        fix = f"{where}; {name} cannot be downloaded, put it there by hand"
    # torchvision's own advice ("You can use download=True") names an argument mebench users never see
    why = " ".join(str(cause).split())
    why = "" if not why or "download=True" in why else f" Cause: {why}"
    return f"dataset {name} not found under data root '{root}': expected {files} (torchvision layout); {fix}.{why}"


def _nchw(images: np.ndarray | torch.Tensor, hwc: bool) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(images))
    if t.dim() == 3:
        t = t.unsqueeze(1)
    elif hwc:
        t = t.permute(0, 3, 1, 2)
    return t.contiguous().to(torch.uint8)


def _labels(y) -> torch.Tensor:
    return torch.as_tensor(np.asarray(y), dtype=torch.int64)


def torchvision_mnist_like(cls_name: str, **kw) -> Reader:
    def read(root: Path, train: bool, download: bool) -> Split:
        import torchvision.datasets as tvd

        ds = getattr(tvd, cls_name)(str(root), train=train, download=download, **kw)
        x = ds.data
        if cls_name == "EMNIST":  # stored transposed relative to MNIST
            x = x.transpose(1, 2)
        return _nchw(x, hwc=False), _labels(ds.targets)

    return read


def read_cifar10(root: Path, train: bool, download: bool) -> Split:
    import torchvision.datasets as tvd

    ds = tvd.CIFAR10(str(root), train=train, download=download)
    return _nchw(ds.data, hwc=True), _labels(ds.targets)


def read_svhn(root: Path, train: bool, download: bool) -> Split:
    import torchvision.datasets as tvd

    ds = tvd.SVHN(str(root), split="train" if train else "test", download=download)
    return _nchw(ds.data, hwc=False), _labels(ds.labels)


def resize_uint8(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Batch-resize uint8 NCHW images with antialiased bilinear interpolation."""
    import torch.nn.functional as F

    if tuple(x.shape[-2:]) == tuple(size):
        return x
    out = [F.interpolate(x[i : i + 4096].float(), size=size, mode="bilinear", antialias=True,
                         align_corners=False) for i in range(0, x.shape[0], 4096)]
    return torch.cat(out).round_().clamp_(0, 255).to(torch.uint8)


def _pil_images_to_tensor(paths_and_labels, size: tuple[int, int]) -> Split:
    from PIL import Image

    xs, ys = [], []
    for path, label in paths_and_labels:  # file decoding is per file by nature
        with Image.open(path) as im:
            xs.append(np.asarray(im.convert("RGB").resize(size[::-1], Image.BILINEAR)))
        ys.append(label)
    if not xs:
        raise FileNotFoundError("no images found")
    return _nchw(np.stack(xs), hwc=True), _labels(ys)


def read_gtsrb(root: Path, train: bool, download: bool) -> Split:
    """GTSRB resized to 32x32 RGB (the only shape it is used in, §3.2)."""
    import torchvision.datasets as tvd

    ds = tvd.GTSRB(str(root), split="train" if train else "test", download=download)
    return _pil_images_to_tensor(ds._samples, (32, 32))


def read_sewerml(root: Path, train: bool, download: bool) -> Split:
    """Sewer-ML from the documented ImageFolder layout (it cannot be downloaded)."""
    import torchvision.datasets as tvd

    folder = root / "SewerML" / ("train" if train else "test")
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {folder} does not exist")
    ds = tvd.ImageFolder(str(folder))
    return _pil_images_to_tensor(ds.samples, (224, 224))
