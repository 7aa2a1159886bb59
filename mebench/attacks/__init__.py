"""Attack plugins. Built-ins are imported here so they register with ``ATTACKS``."""

from mebench.attacks.base import ATTACKS, Attack, AttackContext, register_attack
from mebench.attacks import activethief as _activethief  # noqa: F401  (registers "activethief")
from mebench.attacks import dfme as _dfme  # noqa: F401  (registers "dfme")
from mebench.attacks import disguide as _disguide  # noqa: F401  (registers "disguide")
from mebench.attacks import dual_students as _dual_students  # noqa: F401  (registers "dual_students")
from mebench.attacks import jbda as _jbda  # noqa: F401  (registers "jbda")
from mebench.attacks import copycat as _copycat  # noqa: F401  (registers "copycat")
from mebench.attacks import knockoff as _knockoff  # noqa: F401  (registers "knockoff")
from mebench.attacks import maze as _maze  # noqa: F401  (registers "maze")
from mebench.attacks import dfms as _dfms  # noqa: F401  (registers "dfms", "dfms_hl")
from mebench.attacks import dissector as _dissector  # noqa: F401  (registers "dissector")
from mebench.attacks import controls as _controls  # noqa: F401  (registers "untrained_generator", "smooth_noise")
from mebench.attacks import ideal as _ideal  # noqa: F401  (registers "ideal")
from mebench.attacks import qedg as _qedg  # noqa: F401  (registers "qedg")
from mebench.attacks import random as _random  # noqa: F401  (registers "random")
from mebench.attacks import swiftthief as _swiftthief  # noqa: F401  (registers "swiftthief")

__all__ = ["ATTACKS", "Attack", "AttackContext", "register_attack"]
from mebench.attacks import adaptive as _adaptive  # noqa: F401  (registers the adaptive strategies)
from mebench.attacks import recover as _recover  # noqa: F401  (registers the "recover" strategy)
