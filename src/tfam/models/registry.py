"""Named presets and ``create_model``: a name is a family plus config values; and the presets
that have pretrained weights (``load_pretrained``), registered by the modules that read them."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tfam.config import check_fields, config_class
from tfam.models.base import MODEL_CLASSES, TfamModel


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    description: str
    values: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {}


def register_preset(name: str, family: str, description: str, **values: Any) -> None:
    if name in PRESETS:
        raise ValueError(f"preset {name!r} is registered twice")
    PRESETS[name] = Preset(name, family, description, values)


def list_models(pattern: str = "*") -> list[str]:
    """Preset names matching a shell-style pattern, sorted."""
    return sorted(n for n in PRESETS if fnmatch.fnmatch(n, pattern))


def _resolve(name: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if name in PRESETS:
        preset = PRESETS[name]
        return preset.family, {**preset.values, **overrides}
    if name in MODEL_CLASSES:
        return name, dict(overrides)
    close = [
        n for n in list(PRESETS) + list(MODEL_CLASSES) if n.split("_")[0] == name.split("_")[0]
    ]
    raise ValueError(
        f"model name {name!r} is unknown: expected a family ({', '.join(sorted(MODEL_CLASSES))}) "
        f"or a preset{' such as ' + ', '.join(close[:6]) if close else ''} (see `tfam list`)"
    )


def create_config(name: str, **overrides: Any):
    family, values = _resolve(name, overrides)
    cls = config_class(family)
    check_fields(cls, values)
    return cls(**values)


def create_model(name: str, **overrides: Any) -> TfamModel:
    """A registered preset (``vit_base_patch16_224``) or a family (``vit``) with config fields
    as keyword overrides: ``create_model('vit', image_size=8, patch_size=2, in_channels=1)``."""
    config = create_config(name, **overrides)
    return MODEL_CLASSES[config.family](config)


def count_parameters(name: str, **overrides: Any) -> int:
    """Parameter count of a preset without allocating its weights (built on the meta device)."""
    with torch.device("meta"):
        return create_model(name, **overrides).num_parameters()


# Preset name -> a function returning the model with its pretrained weights. The readers live
# above models (tfam.interop registers the packaged MiniLM when tfam is imported), so this table
# is filled from there; models never import them.
PRETRAINED: dict[str, Callable[[], TfamModel]] = {}


def register_pretrained(name: str, loader: Callable[[], TfamModel]) -> None:
    """Say that preset ``name`` has pretrained weights, which ``loader()`` returns as a model
    (raising FileNotFoundError, with the command that installs them, when they are absent)."""
    if name not in PRESETS:
        raise ValueError(
            f"name={name!r} is invalid: pretrained weights belong to a registered preset "
            f"({', '.join(sorted(PRESETS))})"
        )
    if name in PRETRAINED:
        raise ValueError(f"pretrained weights for {name!r} are registered twice")
    if not callable(loader):
        raise ValueError(f"loader={loader!r} is invalid: expected a function returning a model")
    PRETRAINED[name] = loader


def has_pretrained(name: str) -> bool:
    """Whether preset ``name`` has registered pretrained weights (installed or not)."""
    return name in PRETRAINED


def list_pretrained() -> list[str]:
    """The presets with registered pretrained weights, sorted."""
    return sorted(PRETRAINED)


def load_pretrained(name: str) -> TfamModel:
    """Preset ``name`` with its pretrained weights, in eval mode. FileNotFoundError (from the
    reader, naming the install command) when the weights are not installed; ValueError for a
    name without registered weights."""
    if name not in PRETRAINED:
        known = ", ".join(list_pretrained()) or "none registered (import tfam registers them)"
        raise ValueError(
            f"name={name!r} is invalid: no pretrained weights are registered for it; presets "
            f"with pretrained weights: {known}"
        )
    model = PRETRAINED[name]()
    if not isinstance(model, TfamModel):
        raise TypeError(
            f"the pretrained loader of {name!r} returned {type(model).__name__}, not a TfamModel"
        )
    return model.eval()
