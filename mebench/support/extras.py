"""Optional extras (``pyproject.toml``): a feature whose package is missing says how to install it.

``onnx`` (onnx, onnxruntime: ``victim.format: onnx``, ``mebench victim export --format onnx``)
and ``ray`` (``pytest benchmarks/ --ray``) are not installed by ``pip install -e .``; a
feature that needs one checks for it before any work (``require``) and fails with one line
naming the package and the install command, never with an import traceback. Torch-free.
See docs/guide/install.md.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

from mebench.errors import MebenchError

#: Top-level package -> the extra of ``mebench`` that installs it.
EXTRAS: dict[str, str] = {"onnx": "onnx", "onnxruntime": "onnx", "ray": "ray"}


class MissingExtraError(MebenchError, ImportError):
    """A feature needs a package of an optional extra that is not installed."""


#: Each extra's requirements, as ``pyproject.toml`` lists them (a contract test keeps the two equal).
EXTRA_REQUIREMENTS: dict[str, tuple[str, ...]] = {"onnx": ("onnxruntime>=1.16", "onnx>=1.15"), "ray": ("ray>=2.9",)}


def install_command(extra: str) -> str:
    """The shell command that installs an extra's packages.

    It names the packages, not ``mebench[extra]``: the distribution is installed from its repository
    (``pip install -e ".[extra]"`` there does the same), and the name ``mebench`` on a package index is
    not ours. Double quotes: ``>=`` is a redirection in every shell."""
    return "pip install " + " ".join(f'"{r}"' for r in EXTRA_REQUIREMENTS[extra])


def missing_message(package: str, feature: str) -> str:
    """'FEATURE needs PACKAGE, which is not installed: pip install "REQ" ... (the [EXTRA] extra)'."""
    extra = EXTRAS[package]
    return f"{feature} needs {package}, which is not installed: {install_command(extra)} (the [{extra}] extra)"


def is_installed(package: str) -> bool:
    """Whether ``import package`` can succeed (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed installation counts as missing
        return False


def require(package: str, feature: str) -> None:
    """Raise ``MissingExtraError`` (one line, with the install command) when ``package`` is missing."""
    if not is_installed(package):
        raise MissingExtraError(missing_message(package, feature))


def extra_of(error: ImportError) -> Optional[str]:
    """The missing package of an ``ImportError`` when it belongs to an extra, else ``None``."""
    name = (getattr(error, "name", None) or "").partition(".")[0]
    return name if name in EXTRAS else None
