"""Machine, library and commit information recorded with every run (§11, §16)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Mapping, Optional


@lru_cache(maxsize=1)
def git_commit() -> dict[str, Any]:
    """Commit of the mebench checkout (``None`` outside a git checkout) and whether it is dirty."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return {"commit": sha, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


#: The installed packages whose versions can change results; recorded with every run and report
#: (SciPy: PRADA's Shapiro-Wilk test and ModelGuard-W's linear program run on it).
VERSIONED_PACKAGES: tuple[str, ...] = ("mebench", "torch", "torchvision", "numpy", "scipy", "pandas", "matplotlib", "PyYAML")


@lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """Python's and the installed versions of ``VERSIONED_PACKAGES`` (read without importing them)."""
    import mebench

    # mebench's own version is the imported code's (its distribution is "mebench-contract", and a
    # checkout on PYTHONPATH may differ from the installed one).
    versions = {"python": sys.version.split()[0], "mebench": mebench.__version__}
    for name in VERSIONED_PACKAGES[1:]:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return versions


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``; ``""`` when
    neither says): two machines with the same torch can still differ in float kernels."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    except OSError:
        pass
    return platform.processor()


#: Environment variables that cap the instruction set of torch's CPU kernels (ATen), oneDNN's and MKL's.
#: On one AVX-512 machine the MNIST victim recipe gave another build (another sha256) than on an AVX2
#: machine; with all three set to AVX2 it gave the AVX2 machine's bytes, with ATEN_CPU_CAPABILITY alone a
#: third build (docs/guide/victims.md, "The build of a victim").
ISA_VARIABLES: tuple[str, ...] = ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_overrides() -> dict[str, str]:
    """The :data:`ISA_VARIABLES` set in this process's environment (name → value; empty when none)."""
    return {name: os.environ[name] for name in ISA_VARIABLES if os.environ.get(name)}


def overrides_text(values: Optional[Mapping[str, Any]]) -> str:
    """``ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2`` (sorted): :func:`isa_overrides` as records and
    pins name them in a line; ``""`` for none."""
    return " ".join(f"{k}={v}" for k, v in sorted((values or {}).items()))


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels use here (``torch.backends.cpu.get_cpu_capability``; it
    follows ``ATEN_CPU_CAPABILITY``)."""
    import torch  # here, not at import: the torch-free resume rule calls this only while a run starts

    return str(torch.backends.cpu.get_cpu_capability())


def machine_info(device: str) -> dict[str, Any]:
    """Where a result was computed: platform, CPU model and the instruction set torch's CPU kernels use
    (``torch.backends.cpu.get_cpu_capability``) with the variables that capped it (:func:`isa_overrides`),
    threads, device and the GPU's name on CUDA."""
    import torch  # here, not at import: git_commit/library_versions serve the torch-free report

    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "hostname": platform.node(), "cpu_count": os.cpu_count(),
                            "cpu_model": cpu_model(), "cpu_capability": cpu_capability(),
                            "isa_overrides": isa_overrides(),
                            "torch_threads": torch.get_num_threads(), "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (``getrusage``; Linux reports KiB,
    macOS bytes); ``nan`` where the platform has no ``resource`` module."""
    try:
        import resource
    except ImportError:  # Windows
        return float("nan")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20) if sys.platform == "darwin" else peak / 1024, 1)
