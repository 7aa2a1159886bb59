"""Transferability: crafting adversarial examples on a substitute, fidelity where they land, and the
independent reference models. See docs/transferability.md."""
