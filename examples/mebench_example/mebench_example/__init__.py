"""Third-party mebench plugins, one module each, found through entry points (``pyproject.toml``).

- ``attack``: ``example_noise``, uniform-noise queries (group ``mebench.attacks``);
- ``defense``: ``example_smoothing``, answers mixed with the uniform distribution
  (group ``mebench.defenses``);
- ``victim_format``: ``example_npz``, an MLP stored as NumPy arrays (group ``mebench.victim_formats``);
- ``probe``: ``example_confidence``, how confident each scored substitute is on the test split
  (group ``mebench.probes``).

Nothing is registered by importing this package: mebench imports each module named by an entry
point on the first lookup in that registry. Each module has one test under ``tests/``.
"""
