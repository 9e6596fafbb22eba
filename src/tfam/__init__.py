"""tfam: the Transformer family in one small, exact, fast PyTorch library."""

from tfam.config import BaseConfig, ViTConfig
from tfam.explain import explain  # rebinds tfam.explain to the function, not the module
from tfam.models import create_model, from_pretrained, list_models

__version__ = "0.1.0"


__all__ = [
    "BaseConfig",
    "ViTConfig",
    "__version__",
    "create_model",
    "explain",
    "from_pretrained",
    "list_models",
]
