"""Measurements as probes (issue 35): the ``PROBES`` registry and the built-in probes.

Built-ins register here, in the order the engine tells them each event: the defense's utility
and the detector's marks, Track B, Track A, then what measures their substitutes (health,
transferability). Third-party probes register through the entry-point group ``mebench.probes``
(see ``docs/extending/probe.md``) and run after the built-ins.
"""

from mebench.probes.base import (MEASUREMENT_COLUMNS, PROBES, NoParams, Probe, ProbeScope, Scored, measurement,
                                 merge_section, register_probe)
from mebench.probes import defense as _defense  # noqa: F401  (first: the detector marks the stream at B)
from mebench.probes import tracks as _tracks  # noqa: F401
from mebench.probes import health as _health  # noqa: F401
from mebench.probes import transfer as _transfer  # noqa: F401
from mebench.probes import init_variance as _init_variance  # noqa: F401

__all__ = ["MEASUREMENT_COLUMNS", "PROBES", "NoParams", "Probe", "ProbeScope", "Scored", "measurement", "merge_section",
           "register_probe"]
from mebench.probes import stream as _stream  # noqa: F401  (measure.stream_utility: the defense on the attacker's stream)
from mebench.probes import verification as _verification  # noqa: F401  (measure.verification: ownership verification, issue 56)
