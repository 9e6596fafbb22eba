"""tfam: the Transformer family in one small, exact, fast PyTorch library.

Importing tfam registers every family (its config, model class and presets) and every brick
that a config names (attention kernels).
"""

from tfam.config import BaseConfig
from tfam.explain import explain  # rebinds tfam.explain to the function, not the module
from tfam.models import create_model, from_pretrained, list_models
from tfam.models.vit import ViTConfig

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
