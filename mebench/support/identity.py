"""The code identity of a result: which mebench source produced it (torch-free).

A stored cell is reused only when the code that would run now is the code that ran then, so the
identity must change whenever any source file of the package changes and must not change for
anything else. It is the package version plus a SHA-256 over the package's Python sources (paths
relative to the package, sorted, each path and its bytes hashed), not the git commit: a commit says
nothing about an uncommitted edit (a dirty flag only says *that* something changed, not what), it is
absent in a wheel or sdist install, and it changes on edits to docs, configs or tests that cannot
change a number. The git commit and dirty flag are still recorded beside it (``runinfo.git_commit``)
so a reader can find the source in history. See docs/guide/resume.md.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import mebench

#: The package folder whose sources the identity covers.
PACKAGE_DIR = Path(mebench.__file__).resolve().parent


def source_digest(package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (hex) over every ``*.py`` below ``package_dir``: relative path and content, sorted by path.

    Hidden names (an editor's ``.#cli.py`` lock link, ``.foo.py`` scratch) and anything that is not a
    regular file are not source: they neither break the hash nor change it."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py"), key=lambda p: p.relative_to(package_dir).as_posix()):
        rel = path.relative_to(package_dir).parts
        if "__pycache__" in rel or any(part.startswith(".") for part in rel):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        digest.update(path.relative_to(package_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def format_identity(version: str, digest: str) -> str:
    """``<version>+src.<first 12 hex digits>``: short enough for a table caption, unique enough in practice."""
    return f"{version}+src.{digest[:12]}"


@lru_cache(maxsize=1)
def code_identity() -> str:
    """The identity of the mebench source running in this process (computed once; ~10 ms)."""
    return format_identity(mebench.__version__, source_digest())
