"""Optional extras (``pyproject.toml``): a feature whose package is missing says how to install it.

``onnx`` (onnx, onnxruntime: ``victim.format: onnx``, ``mebench victim export --format onnx``)
and ``ray`` (``pytest benchmarks/ --ray``) are not installed by ``pip install mebench``; a
feature that needs one checks for it before any work (``require``) and fails with one line
naming the package and the install command, never with an import traceback. Torch-free.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

from mebench.errors import MebenchError

#: Top-level package -> the extra of ``mebench`` that installs it.
EXTRAS: dict[str, str] = {"onnx": "onnx", "onnxruntime": "onnx", "ray": "ray"}


class MissingExtraError(MebenchError, ImportError):
    """A feature needs a package of an optional extra that is not installed."""


def install_command(extra: str) -> str:
    """The shell command that installs an extra (double quotes: the brackets are glob characters in zsh)."""
    return f'pip install "mebench[{extra}]"'


def missing_message(package: str, feature: str) -> str:
    """'FEATURE needs PACKAGE, which is not installed: pip install "mebench[EXTRA]"'."""
    return f"{feature} needs {package}, which is not installed: {install_command(EXTRAS[package])}"


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
