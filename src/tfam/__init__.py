"""tfam: the Transformer family in one small, exact, fast PyTorch library."""

from tfam.config import BaseConfig, ViTConfig
from tfam.models import create_model, from_pretrained, list_models

__version__ = "0.1.0"


def explain(model_or_name, **overrides):  # noqa: ANN001, ANN201  (typed in tfam.explain)
    """Step-by-step table of a model: input/output shape, parameters and FLOPs per step."""
    from tfam.explain import explain as _explain

    return _explain(model_or_name, **overrides)


__all__ = [
    "BaseConfig",
    "ViTConfig",
    "__version__",
    "create_model",
    "explain",
    "from_pretrained",
    "list_models",
]
