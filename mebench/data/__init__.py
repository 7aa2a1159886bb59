"""Datasets (one registration each: profile and reader), attacker pools and the query store."""

from mebench.data import builtin as _builtin  # noqa: F401  (registers the built-in datasets)
