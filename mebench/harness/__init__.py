"""The pytest harness: how a grid of cells runs under pytest (and its executors).

- ``plugin``: the pytest plugin (``pytest11`` entry point); ``session``: one grid run's state,
  resume decisions and the JSON report; ``hookspec``: the report hooks;
- ``grid``: grid configs -> cells; ``cells``: a cell's record and its contract audit;
- ``cost``: the wall-time estimate and the large-run guard; ``ray_executor``: cells as Ray tasks;
- ``fixtures``: the fixtures a benchmarks folder imports in its ``conftest.py``
  (``from mebench.harness.fixtures import *``).

This module imports nothing, so loading the plugin in any pytest run stays cheap. See docs/guide/grid.md.
"""
