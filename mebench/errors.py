"""Exceptions that carry a contract meaning.

Each error is raised where the rule lives, with a message that names what was
wrong, the value seen and the rule that was broken, so a user can fix a config
or a call without reading the source. See docs/architecture.md.
"""

from __future__ import annotations


class MebenchError(Exception):
    """Base class for every error mebench raises on purpose."""


class ConfigError(MebenchError, ValueError):
    """A configuration breaks a rule (contract §15.2 or a schema rule).

    Raised before any data or model is loaded. ``key`` is the dotted config key,
    ``value`` the offending value and ``rule`` the rule in words.
    """

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key = key
        self.value = value
        self.rule = rule
        super().__init__(f"config key '{key}' = {value!r}: {rule}")


class BudgetExhausted(MebenchError):
    """A query would overdraw the image budget (contract §1.1).

    Nothing is returned and nothing is counted: the oracle never answers a
    partial batch.
    """


class OracleInputError(MebenchError, ValueError):
    """A query batch has the wrong shape, dtype or range, or non-finite values.

    The batch is rejected before it reaches the victim and is not counted.
    """


class DataMissingError(MebenchError, FileNotFoundError):
    """A dataset is not in the data root; the message names the files expected."""


class VictimLoadError(MebenchError):
    """A victim checkpoint cannot be read as a mebench victim (contract §4).

    The file is damaged, truncated or holds something else (a pickled module,
    a training dict). ``path`` is the file and ``reason`` says what it holds;
    torch's own advice to retry with ``weights_only=False`` is never repeated.
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"victim checkpoint '{path}' {reason}")


class OutputExistsError(MebenchError, FileExistsError):
    """A command would overwrite a file it only creates (``victim train`` without ``--force``)."""


class DivergenceError(MebenchError, FloatingPointError):
    """Training produced a NaN or infinite loss; the cell stops instead of reporting NaN."""


class ConfigDeprecationWarning(DeprecationWarning):
    """A config spelling that still works for one release, read as its replacement (the message names
    both). The ``mebench`` command shows it; under pytest it is in the warnings summary."""


class SlowVictimWarning(UserWarning):
    """The victim answers fewer images per second than ``victim.throughput_floor``."""


def _sigterm_to_interrupt(signum: int, frame: object) -> None:  # pragma: no cover - signal path
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> bool:
    """Make SIGTERM (``kill``, a scheduler's time limit) end the process as Ctrl-C does.

    Python's default SIGTERM action exits without unwinding, so temporary query caches
    (§11.2) would survive and an xdist controller would leave its workers running; as a
    ``KeyboardInterrupt`` every ``finally`` runs. Installed only from the main thread
    (``signal`` refuses others) and only where no one else has set a handler. Returns
    whether it installed the handler.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return False
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    return True


class RunTooLarge(MebenchError):
    """A run estimated far beyond what this machine finishes (``mebench run``'s cost guard; the grid
    has its own): refused before any work, with how to shorten it or go on anyway."""


class RunFolderBusy(MebenchError):
    """Another mebench process is running in this run folder (a second ``--resume`` of it)."""


class GridError(Exception):
    """A benchmark config cannot be expanded into a grid (``mebench.harness.grid``)."""


class UntrainedVictims(GridError):
    """A benchmark config has no cell to run because none of its victims is trained."""
