"""Model registry and built-in architectures (imported so they register)."""

from mebench.models.registry import MODELS, Normalized, build_model, register_model
from mebench.models import lenet as _lenet  # noqa: F401
from mebench.models import cifar as _cifar  # noqa: F401
from mebench.models import resnet_small as _resnet_small  # noqa: F401
from mebench.models import wide_resnet as _wide_resnet  # noqa: F401

__all__ = ["MODELS", "Normalized", "build_model", "register_model"]
