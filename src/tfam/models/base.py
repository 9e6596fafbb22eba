"""What every family shares: its config, initialisation, saving and loading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from tfam.config import BaseConfig, check_attention
from tfam.layers.attention import MultiHeadAttention

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_CLASSES: dict[str, type[TfamModel]] = {}


class TfamModel(nn.Module):
    """Base of every family: ``model.config``, ``save_pretrained``, ``from_pretrained``."""

    config_class: ClassVar[type[BaseConfig]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "config_class", None) is not None:
            MODEL_CLASSES[cls.config_class.family] = cls

    def __init__(self, config: BaseConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, got {config!r}"
            )
        self.config = config

    def init_weights(self) -> None:
        """Truncated-normal (std = config.init_std) linear and patch weights, zero biases,
        unit norms. Each layer draws its own values from the caller's RNG."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Conv2d):
                nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm | nn.RMSNorm):
                if module.weight is not None:
                    nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def no_weight_decay(self) -> set[str]:
        """Names of parameters that weight decay must leave alone (besides norms and biases)."""
        return set()

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def set_attention(self, attention: str, options: dict[str, Any] | None = None) -> None:
        """Switch every attention layer to another kernel (same weights)."""
        options = check_attention(attention, options)
        for m in self.modules():
            if isinstance(m, MultiHeadAttention):
                m.set_kernel(attention, options)
        self.config.attention = attention
        self.config.attention_options = options

    def adapt_state_dict(
        self, state: dict[str, torch.Tensor], saved: BaseConfig
    ) -> dict[str, torch.Tensor]:
        """Hook for loading weights saved under another config (e.g. another image size)."""
        return state

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        tmp = directory / (WEIGHTS_NAME + ".tmp")
        save_file(state, str(tmp), metadata={"format": "pt", "family": self.config.family})
        tmp.replace(directory / WEIGHTS_NAME)
        (directory / CONFIG_NAME).write_text(self.config.to_json() + "\n")
        return directory


def from_pretrained(
    directory: str | Path, map_location: str = "cpu", **overrides: Any
) -> TfamModel:
    """Load a model written by ``save_pretrained``. Config fields may be overridden
    (e.g. ``image_size=384`` resamples the learned position table, ``attention='math'``)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path = directory / CONFIG_NAME
    weights_path = directory / WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME} "
                "(written by model.save_pretrained or `tfam train`)"
            )
    saved = BaseConfig.from_dict(json.loads(config_path.read_text()))
    config = saved.replace(**overrides) if overrides else saved
    model = MODEL_CLASSES[config.family](config)
    state = model.adapt_state_dict(load_file(str(weights_path), device=map_location), saved)
    model.load_state_dict(state)
    return model.eval()
