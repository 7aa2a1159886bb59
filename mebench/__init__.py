"""mebench: a contract-true benchmark for model extraction attacks on image classifiers."""

__version__ = "1.1.0"
