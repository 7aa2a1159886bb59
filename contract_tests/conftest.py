"""Shared fixtures for contract tests: the synthetic SYNTH world (see ``mebench.testing``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mebench.testing import register_synthetic, synthetic_config, synthetic_config_dict, synthetic_victim

register_synthetic()


def _load_hypothesis_profile() -> None:
    """Hypothesis settings for these tests, from ``MEBENCH_HYPOTHESIS_PROFILE`` (``ci``, the default, or ``dev``)."""
    from hypothesis import settings

    settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
    settings.register_profile("dev", max_examples=15, deadline=None)
    settings.load_profile(os.environ.get("MEBENCH_HYPOTHESIS_PROFILE", "ci"))


_load_hypothesis_profile()


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    """The machine-wide cache (``mebench.support.cachedir``: transfer reference models, the default data root)
    lives in a folder of this test session, so tests neither read nor fill the user's cache; and
    ``MEBENCH_OFFLINE=1``: no test downloads anything (the fetch path is tested with a fake fetcher)."""
    old = {k: os.environ.get(k) for k in ("MEBENCH_CACHE_DIR", "MEBENCH_OFFLINE")}
    os.environ["MEBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("mebench-cache"))
    os.environ["MEBENCH_OFFLINE"] = "1"
    yield
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: a multi-threaded pool only adds latency (10x on a busy 2-core machine), so
    every contract-test module runs with one torch thread (a test that sets its own count, e.g.
    through ``--threads``, restores it). Thread-count reproducibility is tested at one thread.
    """
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def synth_victim_path(tmp_path_factory) -> Path:
    """A tiny trained victim checkpoint on SYNTH, shared by the session."""
    return synthetic_victim(tmp_path_factory.mktemp("victim") / "synth_victim.pt")


@pytest.fixture
def synth_cfg_dict(tmp_path, synth_victim_path) -> dict:
    """A valid config dict for SYNTH (Random, surrogate, soft_prob, budgets 200/500)."""
    return synthetic_config_dict(tmp_path, synth_victim_path)


@pytest.fixture
def make_cfg(tmp_path, synth_victim_path):
    """``make_cfg(attack={...}, budget={...})`` -> a parsed RunConfig with nested overrides."""
    from mebench.config import parse_config
    from mebench.testing import deep_update

    def make(**overrides):
        return parse_config(deep_update(synthetic_config_dict(tmp_path, synth_victim_path), overrides))

    return make


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real-data root from MEBENCH_DATA_ROOT; skips when MNIST is not there."""
    root = os.environ.get("MEBENCH_DATA_ROOT")
    if not root or not (Path(root) / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file():
        pytest.skip("real MNIST not found: set MEBENCH_DATA_ROOT to a folder with MNIST/raw/ (torchvision layout)")
    return Path(root)


@pytest.fixture(scope="session")
def example_site(tmp_path_factory):
    """``examples/mebench_example`` installed (offline, no dependencies, no build isolation) into a
    folder of its own, never into the test environment; tests put it on ``PYTHONPATH``."""
    import shutil
    import subprocess
    import sys

    package = Path(__file__).resolve().parents[1] / "examples" / "mebench_example"
    target = tmp_path_factory.mktemp("site")
    src = tmp_path_factory.mktemp("src") / "mebench_example"
    # setuptools writes build/ and *.egg-info next to the sources: build from a copy, keep examples/ clean
    shutil.copytree(package, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--target", str(target), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


@pytest.fixture
def fake_mnist(monkeypatch):
    """torchvision's MNIST replaced by 96 seeded images per split (10 prototypes, one per class), so a
    victim recipe trains in seconds without the data root."""
    import torch
    import torchvision.datasets as tvd

    class FakeMNIST:
        def __init__(self, root, train, download):
            g = torch.Generator().manual_seed(int(train))
            self.targets = torch.randint(0, 10, (96,), generator=g)
            self.data = (torch.rand(10, 28, 28, generator=g)[self.targets] * 255).to(torch.uint8)

    monkeypatch.setattr(tvd, "MNIST", FakeMNIST)
