"""The config layer, torch-free: what a user writes and what a run will do.

- ``builder``: YAML -> typed dataclasses, one error per mistake (key, value, rule);
- ``schema``: the run config's types, ``parse_config`` / ``load_config`` and their overrides
  (re-exported here, so ``from mebench.config import RunConfig`` is the spelling to use);
- ``validation``: the rules between keys and against the registries, before any work starts;
- ``plan``: ``resolve(cfg, seed) -> RunPlan``, every default filled in, hashed with the code identity.

Nothing in this package imports torch (``contract_tests/test_layers.py`` checks it), so a config
mistake is answered before the heavy imports of a run. See docs/guide/configs.md.
"""

from mebench.config.schema import *  # noqa: F401,F403  (the public types and loaders)
