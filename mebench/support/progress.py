"""Progress lines for long phases: a few lines per phase, never one per step.

A :class:`Ticker` follows one phase (collecting queries, one Track A training)
and hands a line to ``say`` when the phase starts, at most every ``interval``
seconds while it runs, and when it ends. The pytest grid sends the lines to the
terminal (also from xdist workers); ``mebench run`` uses them instead of
progress bars when stderr is not a terminal (CI logs, ``> file``). See docs/guide/runs.md.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

Say = Callable[[str], None]

#: Seconds between two lines of the same phase.
DEFAULT_INTERVAL = 30.0


def duration(seconds: float) -> str:
    """``75.2`` -> ``"1m15s"``; ``8.04`` -> ``"8.0s"``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Ticker:
    """One phase of ``total`` units: ``update(n)`` as work is done, ``close()`` at the end."""

    def __init__(self, say: Optional[Say], phase: str, total: int, unit: str,
                 interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.phase, self.total, self.unit = say, phase, int(total), unit
        self.interval, self.clock = interval, clock
        self.done = 0
        self.started = self.last = clock()
        if say is not None:
            say(f"{phase}: {self.total:,} {unit}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.say is None or self.done >= self.total:
            return
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            eta = f", about {duration(left)} left" if left != float("inf") else ""
            self.say(f"{self.phase}: {self.done:,}/{self.total:,} {self.unit} "
                     f"({100 * self.done / self.total:.0f}%, {duration(now - self.started)}{eta})")

    def close(self, result: str = "") -> None:
        """The phase's last line: how much was done, how long it took, and ``result``."""
        if self.say is None:
            return
        tail = f"; {result}" if result else ""
        self.say(f"{self.phase}: done, {self.done:,} {self.unit} in {duration(self.clock() - self.started)}{tail}")


def interval_of(say: Optional[Say]) -> float:
    """A ``say`` may carry its own ``interval`` (seconds between lines of one phase)."""
    return float(getattr(say, "interval", DEFAULT_INTERVAL))


def stderr_lines(prefix: str = "mebench", interval: float = DEFAULT_INTERVAL) -> Say:
    """``say`` for a command line tool: one flushed line on stderr per call."""

    def say(line: str) -> None:
        sys.stderr.write(f"{prefix}: {line}\n")
        sys.stderr.flush()

    say.interval = interval  # type: ignore[attr-defined]
    return say


def prefixed(say: Optional[Say], prefix: str) -> Optional[Say]:
    """``say`` with ``prefix: `` before every line (and the same interval)."""
    if say is None:
        return None

    def inner(line: str) -> None:
        say(f"{prefix}: {line}")

    inner.interval = interval_of(say)  # type: ignore[attr-defined]
    return inner
