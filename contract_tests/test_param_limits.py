"""Every numeric parameter of every registered plugin is finite and within its declared bound (issue 52;
contract §15.2: a config mistake fails before work starts, naming key, value and rule).

Driven by the registries, so a new attack, defense, probe, adaptive strategy or verifier is fuzzed the day it
is registered: each numeric field gets NaN, +inf, -inf, a value beyond its bound, a wrong type, 0
and -1, through ``build_params`` (the one door every plugin's ``Params`` pass) and the plugin's own
``check_params``; the result is either a valid ``Params`` or one ``ConfigError`` line naming the key.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from mebench.attacks import ATTACKS
from mebench.attacks.adaptive import ADAPTIVE
from mebench.config import build_params
from mebench.config.limits import upper_bound
from mebench.defenses import DEFENSES
from mebench.errors import ConfigError
from mebench.probes import PROBES
from mebench.verification import VERIFIERS

REGISTRIES = {"attack.params": ATTACKS, "defense.params": DEFENSES, "measure": PROBES, "attack.adaptive": ADAPTIVE,
              "verify": VERIFIERS}


def _numeric_fields():
    for prefix, registry in REGISTRIES.items():
        for name in registry.names():
            cls = registry.get(name)
            params = getattr(cls, "Params", None)
            if params is None or not dataclasses.is_dataclass(params):
                continue
            full = f"{prefix}.{name}" if prefix in ("measure", "verify") else prefix
            for f in dataclasses.fields(params):
                default = getattr(params(), f.name)
                if isinstance(default, (int, float)) and not isinstance(default, bool):
                    yield pytest.param(prefix, name, full, f.name, default, id=f"{name}.{f.name}")


FIELDS = list(_numeric_fields())


def _check(prefix: str, cls, params) -> None:
    """The plugin's own rules, where their signature is the registry's."""
    if prefix == "attack.params":
        cls.check_params(params, 1000, (1000,))
    elif prefix == "defense.params":
        cls.check_params(params, "soft_prob")
    elif prefix == "verify":
        cls.check_params(params)


# issue 52: NaN, infinities and values beyond the declared bound are refused in one line naming the key.
@pytest.mark.parametrize("prefix,name,full,field,default", FIELDS)
def test_every_numeric_field_refuses_nan_inf_and_absurd_values(prefix, name, full, field, default):
    registry = REGISTRIES[prefix]
    bound = upper_bound(field, default)
    huge = bound * 10 + 1 if isinstance(default, int) else 1e30
    for bad in (math.nan, math.inf, -math.inf, huge, -huge, "x", [1]):
        with pytest.raises(ConfigError) as err:
            build_params(registry.get(name).Params, {field: bad}, full)
        assert err.value.key == f"{full}.{field}", (bad, str(err.value))
        assert "\n" not in str(err.value)


# issue 52: 0 and -1 give a valid Params or one ConfigError from the plugin's rules, never a traceback.
@pytest.mark.parametrize("prefix,name,full,field,default", FIELDS)
def test_zero_and_minus_one_are_accepted_or_refused_in_one_line(prefix, name, full, field, default):
    cls = REGISTRIES[prefix].get(name)
    for value in (0, -1):
        try:
            _check(prefix, cls, build_params(cls.Params, {field: value}, full))
        except ConfigError as e:
            assert "\n" not in str(e)


# issue 52: every default lies inside its bound, and the table bounds every field it names.
@pytest.mark.parametrize("prefix,name,full,field,default", FIELDS)
def test_defaults_lie_inside_their_bounds(prefix, name, full, field, default):
    assert math.isfinite(default) and abs(default) <= upper_bound(field, default)


def test_the_fuzz_covers_every_registry():
    assert {p for p, *_ in (f.values for f in FIELDS)} == set(REGISTRIES)
    assert len(FIELDS) > 200


# issue 52: the run config's own doors use the same check (attack, defense, probe, adaptive strategy).
@pytest.mark.parametrize("section,key", [
    ({"attack": {"name": "disguide", "params": {"batch_size": 10**12}}, "dataset": {"data_mode": "data_free", "surrogate_name": None}},
     "attack.params.batch_size"),
    ({"attack": {"name": "random", "params": {"batch_size": 64}}, "defense": {"name": "gaussian_noise", "params": {"sigma": float("inf")}}},
     "defense.params.sigma"),
    ({"measure": {"transfer": {"methods": ["fgsm"], "images": 10**12}}}, "measure.transfer.images"),
    ({"attack": {"name": "random", "params": {"batch_size": 64}, "adaptive": {"strategy": "smoothing", "sigma": float("nan")}}},
     "attack.adaptive.sigma"),
])
def test_the_run_config_doors_refuse_before_work(section, key, make_cfg):
    from mebench.config.validation import validate

    with pytest.raises(ConfigError) as err:
        validate(make_cfg(**section))
    assert err.value.key == key and "\n" not in str(err.value)
