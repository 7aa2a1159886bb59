"""Leaf helpers with no knowledge of attacks or runs: serialisation, seeding, threads, progress, names,
cache folders, code identity. See docs/architecture.md."""
