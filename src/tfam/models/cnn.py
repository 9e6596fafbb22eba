"""Residual convolutional network (He et al. 2016), the family's non-attention baseline:

image (B, C, H, W)
  -> stem: 7x7/2 conv + BN + ReLU + 3x3/2 max-pool ("resnet"), or 3x3/1 conv + BN + ReLU
     ("small", for 28x28 and 8x8 images)                         (B, C0, H', W')
  -> stages of residual blocks (basic: two 3x3; bottleneck: 1x1, 3x3, 1x1 x4), each stage
     after the first halving the grid                             (B, D, h, w)
  -> global average pool                                          (B, D)
  -> linear head                                                  (B, num_classes)

Built from the bricks of :mod:`tfam.layers.conv`, whose names are Hugging Face's
``ResNetModel``'s. ``dim`` (D) is the last stage's width and ``depth`` the number of blocks:
both follow from ``hidden_sizes`` and ``depths``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import (
    BaseConfig,
    as_pair,
    check_bool,
    check_choice,
    check_positive_int,
    config_error,
)
from tfam.layers.conv import (
    CONV_ACTIVATIONS,
    LAYER_TYPES,
    STEMS,
    ConvEncoder,
    ConvStem,
    init_conv_weights,
)
from tfam.models.base import TfamModel
from tfam.models.registry import register_preset


def _int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise config_error(name, value, "expected a non-empty list of positive ints")
    for v in value:
        check_positive_int(name, v)
    return tuple(value)


@dataclass
class CNNConfig(BaseConfig):
    """A ResNet: stem, stages of residual blocks, global average pool, head.

    ``hidden_sizes[i]`` is stage i's output width (a bottleneck stage's expanded width, as in
    Hugging Face's ``ResNetConfig``), ``depths[i]`` its number of blocks. ``dim`` and ``depth``
    are derived (the last width, the number of blocks); giving other values is an error.
    ``norm_eps`` is BatchNorm's epsilon; ``dropout`` acts on the pooled features before the
    head; ``drop_path`` is stochastic depth over the blocks (rising linearly to its value).
    The attention fields of :class:`BaseConfig` are unused (a CNN does not attend).
    """

    family: ClassVar[str] = "cnn"
    positions: ClassVar[tuple[str, ...] | None] = ("none",)

    dim: int | None = None  # type: ignore[assignment]  # derived: hidden_sizes[-1]
    depth: int | None = None  # type: ignore[assignment]  # derived: sum(depths)
    heads: int = 1
    activation: str = "relu"
    norm_eps: float = 1e-5
    position: str = "none"

    image_size: Any = 224  # int or (height, width)
    in_channels: int = 3
    num_classes: int = 1000  # 0 -> no head, forward returns pooled features
    stem: str = "resnet"
    embedding_size: int = 64
    hidden_sizes: Any = (64, 128, 256, 512)
    depths: Any = (2, 2, 2, 2)
    layer_type: str = "basic"
    downsample_in_first_stage: bool = False
    downsample_in_bottleneck: bool = False
    zero_init_residual: bool = False

    def __post_init__(self) -> None:
        self.hidden_sizes = _int_tuple("hidden_sizes", self.hidden_sizes)
        self.depths = _int_tuple("depths", self.depths)
        if len(self.depths) != len(self.hidden_sizes):
            raise config_error(
                "depths",
                list(self.depths),
                f"one depth per stage: hidden_sizes has {len(self.hidden_sizes)} stages",
            )
        for name, derived in (
            ("dim", self.hidden_sizes[-1]),
            ("depth", sum(self.depths)),
        ):
            given = getattr(self, name)
            if given is None:
                setattr(self, name, derived)
            elif given != derived:
                source = "hidden_sizes[-1]" if name == "dim" else "sum(depths)"
                raise config_error(
                    name,
                    given,
                    f"a CNN's {name} is {source} = {derived}; change "
                    f"{'hidden_sizes' if name == 'dim' else 'depths'} instead",
                )
        check_choice("activation", self.activation, CONV_ACTIVATIONS)
        super().__post_init__()
        self.image_size = as_pair("image_size", self.image_size)
        check_positive_int("in_channels", self.in_channels)
        check_positive_int("num_classes", self.num_classes, allow_zero=True)
        check_choice("stem", self.stem, STEMS)
        check_positive_int("embedding_size", self.embedding_size)
        check_choice("layer_type", self.layer_type, LAYER_TYPES)
        if self.layer_type == "bottleneck":
            for w in self.hidden_sizes:
                if w % 4:
                    raise config_error(
                        "hidden_sizes",
                        list(self.hidden_sizes),
                        "a bottleneck stage's width is 4x its inner width: multiples of 4",
                    )
        for name in ("downsample_in_first_stage", "downsample_in_bottleneck", "zero_init_residual"):
            check_bool(name, getattr(self, name))

    def replace(self, **changes: Any) -> BaseConfig:
        """As :meth:`BaseConfig.replace`; new ``hidden_sizes`` / ``depths`` re-derive ``dim`` /
        ``depth`` unless those are given too."""
        if "hidden_sizes" in changes and "dim" not in changes:
            changes["dim"] = None
        if "depths" in changes and "depth" not in changes:
            changes["depth"] = None
        return super().replace(**changes)


class CNN(TfamModel):
    """A ResNet classifier; see the module docstring. ``forward_features`` gives the pooled
    (B, D) features, ``forward_feature_map`` the last stage's (B, D, h, w)."""

    config_class = CNNConfig
    title = "ResNet"
    inputs = "image"
    tasks = ("image-classification",)
    attends = False

    def __init__(self, config: CNNConfig) -> None:
        super().__init__(config)
        c = config
        self.embedder = ConvStem(c.in_channels, c.embedding_size, c.stem, c.activation, c.norm_eps)
        self.encoder = ConvEncoder(
            c.embedding_size,
            c.hidden_sizes,
            c.depths,
            c.layer_type,
            c.activation,
            c.norm_eps,
            c.drop_path,
            c.downsample_in_first_stage,
            c.downsample_in_bottleneck,
        )
        self.pooler = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(c.dropout)
        self.head = nn.Linear(c.dim, c.num_classes) if c.num_classes else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Kaiming-normal (fan-out) convs, BatchNorm gain 1 and shift 0 (the last BN of each
        block at gain 0 with ``zero_init_residual``), and torch's default Linear init for the
        head (torchvision's and Hugging Face's)."""
        init_conv_weights(self, self.config.zero_init_residual)
        if isinstance(self.head, nn.Linear):
            self.head.reset_parameters()

    def set_attention(
        self, attention: str, options: dict[str, Any] | None = None, discard: bool = False
    ) -> None:
        raise ValueError(
            f"attention={attention!r} is invalid for {self.title}: a CNN has no attention layers"
        )

    def forward_feature_map(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> the last stage's map (B, D, h, w)."""
        return self.encoder(self.embedder(x))

    @classmethod
    def small_overrides(cls, config: BaseConfig, depth: int = 2) -> dict[str, Any]:
        """As many stages, of one block each (``depth`` = 1 still keeps every stage, so the
        stem and every shape change stay), widths 8, 16, 32, ..."""
        assert isinstance(config, CNNConfig)
        n = len(config.hidden_sizes)
        return {
            "embedding_size": 8,
            "hidden_sizes": tuple(8 * 2**i for i in range(n)),
            "depths": (1,) * n,
        }

    def forward_features(self, x: Tensor, return_attention: bool = False) -> Tensor:
        """(B, C, H, W) -> globally average-pooled features (B, D)."""
        if return_attention:
            raise ValueError(
                f"return_attention=True is invalid for {self.title}: a CNN has no attention"
            )
        return self.pooler(self.forward_feature_map(x)).flatten(1)

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """(B, D) -> logits (B, num_classes)."""
        features = self.dropout(features)
        return features if pre_logits else self.head(features)

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random images (B, C, H, W) at the configured size."""
        c = self.config
        return (torch.randn(batch_size, c.in_channels, *c.image_size),)


def _cnn(name: str, description: str, **values: Any) -> None:
    register_preset(name, "cnn", description, **values)


_cnn("resnet18", "ResNet-18, 224x224, ImageNet-1k head (torchvision: 11,689,512 parameters)")
_cnn(
    "resnet34",
    "ResNet-34, 224x224, ImageNet-1k head (torchvision: 21,797,672 parameters)",
    depths=(3, 4, 6, 3),
)
_cnn(
    "resnet50",
    "ResNet-50 (v1.5: stride on the 3x3), 224x224, ImageNet-1k head (torchvision: 25,557,032)",
    hidden_sizes=(256, 512, 1024, 2048),
    depths=(3, 4, 6, 3),
    layer_type="bottleneck",
)
_cnn(
    "resnet_fashion_mnist",
    "small ResNet for 28x28 Fashion-MNIST: 3x3 stem (no pool), basic blocks, stages "
    "24/48/96/192 at 28/14/7/4 px with 1/1/2/1 blocks",
    image_size=28,
    in_channels=1,
    num_classes=10,
    stem="small",
    # Widths that double as the grid halves keep each block's cost about equal; this one
    # (0.86 M parameters) steps as fast as the 0.31 M calibration ResNet (32/64/128, one block
    # each): 292-307 vs 317 ms a step of 128 images, 2 threads, fastest of 7 on a loaded
    # 2-core CPU. Its extra blocks sit where the grid is small.
    embedding_size=24,
    hidden_sizes=(24, 48, 96, 192),
    depths=(1, 1, 2, 1),
)
_cnn(
    "resnet_digits",
    "small ResNet for scikit-learn's 8x8 digits: 3x3 stem (no pool), basic blocks, stages "
    "16/32/64 at 8/4/2 px",
    image_size=8,
    in_channels=1,
    num_classes=10,
    stem="small",
    embedding_size=16,
    hidden_sizes=(16, 32, 64),
    depths=(1, 1, 1),
)
