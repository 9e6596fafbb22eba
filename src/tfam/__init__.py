"""tfam: the Transformer family in one small, exact, fast PyTorch library.

Importing tfam registers every family (its config, model class and presets), every brick
that a config names (attention kernels) and the presets' pretrained weights (the packaged
MiniLM for ``minilm_l6``: ``tfam.load_pretrained("minilm_l6")``), then loads the plug-ins
of the ``tfam.plugins`` entry-point group (:mod:`tfam.plugins`).
"""

from tfam import interop as _interop  # noqa: F401  (registers pretrained weights)
from tfam.config import BaseConfig
from tfam.data import catalog as _data_catalog
from tfam.explain import explain  # rebinds tfam.explain to the function, not the module
from tfam.models import (
    create_model,
    from_pretrained,
    has_pretrained,
    list_models,
    list_pretrained,
    load_pretrained,
)
from tfam.models.vit import ViTConfig

__version__ = "0.1.0"


def _family_tasks(family: str) -> tuple[str, ...]:
    from tfam.models import MODEL_CLASSES

    if family not in MODEL_CLASSES:
        raise ValueError(
            f"family={family!r} is invalid: expected one of {', '.join(MODEL_CLASSES)}"
        )
    return tuple(MODEL_CLASSES[family].tasks)


# tfam.data.from_files(path, family="gpt") learns a family's tasks here (data imports no models).
_data_catalog.set_family_tasks(_family_tasks)

# Last: a plug-in may import anything above (tfam.plugins imports nothing of tfam).
from tfam.plugins import load_plugins  # noqa: E402

load_plugins()


__all__ = [
    "BaseConfig",
    "ViTConfig",
    "__version__",
    "create_model",
    "explain",
    "from_pretrained",
    "has_pretrained",
    "list_models",
    "list_pretrained",
    "load_pretrained",
]
