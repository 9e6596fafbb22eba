"""Convolutional bricks: the residual network of He et al. (2016), "Deep Residual Learning for
Image Recognition", as torchvision and Hugging Face's ``ResNetModel`` build it.

image (B, C, H, W)
  -> stem: 7x7 stride-2 conv + BN + ReLU + 3x3 stride-2 max-pool (ImageNet, /4), or
     3x3 stride-1 conv + BN + ReLU (small images, /1)                  (B, C0, H', W')
  -> stages: each a run of residual blocks; the first block of a stage may halve the grid
     (stride 2) and change the width, its shortcut then a 1x1 conv + BN
       basic:      y = ReLU(x' + BN(conv3x3(ReLU(BN(conv3x3(x))))))
       bottleneck: y = ReLU(x' + BN(conv1x1(ReLU(BN(conv3x3(ReLU(BN(conv1x1(x)))))))))
                   (1x1 reduces to width/4, 3x3 carries the stride, 1x1 expands x4)
  -> feature map (B, C_last, H'', W'')

Module and parameter names are those of Hugging Face's ``ResNetModel``
(transformers/models/resnet/modeling_resnet.py: ``embedder.embedder.convolution``,
``encoder.stages.i.layers.j.layer.k.normalization``, ``...shortcut.convolution``), so the
converter is a name map. Convolutions have no bias (BatchNorm follows each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from torch import Tensor, nn

from tfam.config import check_choice, config_error
from tfam.layers.block import DropPath

__all__ = [
    "CONV_ACTIVATIONS",
    "LAYER_TYPES",
    "STEMS",
    "BasicLayer",
    "BottleNeckLayer",
    "ConvBackbone",
    "ConvEncoder",
    "ConvLayer",
    "ConvSpec",
    "ConvStage",
    "ConvStem",
    "ShortCut",
    "conv_activation",
    "init_conv_weights",
    "stem_stride",
]

# Stems: "resnet" is the ImageNet stem (HF's ResNetEmbeddings), "small" keeps the resolution
# of small images (28x28, 8x8), as CIFAR ResNets do.
STEMS = ("resnet", "small")
LAYER_TYPES = ("basic", "bottleneck")
CONV_ACTIVATIONS = ("relu", "gelu", "silu")


def conv_activation(name: str | None) -> nn.Module:
    """The activation module a conv layer applies after BatchNorm (None: none)."""
    if name is None:
        return nn.Identity()
    check_choice("activation", name, CONV_ACTIVATIONS)
    return {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}[name]()


def stem_stride(stem: str) -> int:
    """How much a stem shrinks each side of the image: 4 ("resnet": conv s2 + pool s2), 1."""
    check_choice("stem", stem, STEMS)
    return 4 if stem == "resnet" else 1


class ConvLayer(nn.Module):
    """conv (k x k, stride s, padding k // 2, no bias) -> BatchNorm -> activation.

    (B, C_in, H, W) -> (B, C_out, ceil(H / s), ceil(W / s)). HF's ``ResNetConvLayer``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        activation: str | None = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.convolution = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=kernel_size // 2,
            bias=False,
        )
        self.normalization = nn.BatchNorm2d(out_channels, eps=eps)
        self.activation = conv_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.normalization(self.convolution(x)))


class ShortCut(nn.Module):
    """The projection shortcut x' = BN(conv1x1_stride(x)), used where a block changes the width
    or the grid (He et al.'s option B). (B, C_in, H, W) -> (B, C_out, H / s, W / s)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 2, eps: float = 1e-5):
        super().__init__()
        self.convolution = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
        self.normalization = nn.BatchNorm2d(out_channels, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.normalization(self.convolution(x))


class _Residual(nn.Module):
    """y = act(x' + drop_path(F(x))): F is ``self.layer``, x' the shortcut (identity unless the
    shape changes)."""

    layer: nn.Sequential

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int,
        activation: str,
        eps: float,
        drop_path: float,
    ) -> None:
        super().__init__()
        needs_projection = in_channels != out_channels or stride != 1
        self.shortcut = (
            ShortCut(in_channels, out_channels, stride, eps) if needs_projection else nn.Identity()
        )
        self.drop_path = DropPath(drop_path)
        self.activation = conv_activation(activation)

    @property
    def last_norm(self) -> nn.BatchNorm2d:
        """The BatchNorm ending the residual branch (zero-initialised by
        ``zero_init_residual``: each block then starts as the identity)."""
        return self.layer[-1].normalization

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, C_out, H / s, W / s)."""
        return self.activation(self.shortcut(x) + self.drop_path(self.layer(x)))


class BasicLayer(_Residual):
    """Two 3x3 convs, the first with the stride (ResNet-18/34). HF's ``ResNetBasicLayer``."""

    expansion = 1

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int = 1,
        activation: str = "relu",
        eps: float = 1e-5,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(in_channels, out_channels, stride, activation, eps, drop_path)
        self.layer = nn.Sequential(
            ConvLayer(in_channels, out_channels, 3, stride, activation, eps),
            ConvLayer(out_channels, out_channels, 3, 1, None, eps),
        )


class BottleNeckLayer(_Residual):
    """1x1 reduce to out/4, 3x3, 1x1 expand to out (ResNet-50/101/152). The stride sits on the
    3x3 (torchvision's "ResNet v1.5", HF's default ``downsample_in_bottleneck=False``) or on the
    first 1x1 (the paper's v1). HF's ``ResNetBottleNeckLayer``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int = 1,
        activation: str = "relu",
        eps: float = 1e-5,
        drop_path: float = 0.0,
        reduction: int = 4,
        downsample_in_bottleneck: bool = False,
    ) -> None:
        super().__init__(in_channels, out_channels, stride, activation, eps, drop_path)
        mid = out_channels // reduction
        s1, s3 = (stride, 1) if downsample_in_bottleneck else (1, stride)
        self.layer = nn.Sequential(
            ConvLayer(in_channels, mid, 1, s1, activation, eps),
            ConvLayer(mid, mid, 3, s3, activation, eps),
            ConvLayer(mid, out_channels, 1, 1, None, eps),
        )


class ConvStem(nn.Module):
    """The stem (HF's ``ResNetEmbeddings``): "resnet": 7x7 stride-2 conv + BN + act, then a 3x3
    stride-2 max-pool, (B, C, H, W) -> (B, C0, H/4, W/4); "small": 3x3 stride-1 conv + BN + act,
    no pool, (B, C, H, W) -> (B, C0, H, W)."""

    def __init__(
        self,
        in_channels: int,
        embedding_size: int,
        stem: str = "resnet",
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_choice("stem", stem, STEMS)
        self.kind = stem
        if stem == "resnet":
            self.embedder = ConvLayer(in_channels, embedding_size, 7, 2, activation, eps)
            self.pooler: nn.Module = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.embedder = ConvLayer(in_channels, embedding_size, 3, 1, activation, eps)
            self.pooler = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.pooler(self.embedder(x))

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The (h, w) of the stem's map for an image of ``size`` (H, W): each stride-2 step
        (conv with padding k // 2, pool with padding 1) gives ceil(side / 2)."""
        h, w = size
        for _ in range({"resnet": 2, "small": 0}[self.kind]):
            h, w = -(-h // 2), -(-w // 2)
        return h, w


class ConvStage(nn.Module):
    """``depth`` residual blocks; the first takes the stride and the width change.
    HF's ``ResNetStage`` (``layers``)."""

    def __init__(self, blocks: Sequence[nn.Module], stride: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(*blocks)
        self.stride = stride  # the first block's

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class ConvEncoder(nn.Module):
    """The stages (HF's ``ResNetEncoder``): stage i has ``depths[i]`` blocks of output width
    ``hidden_sizes[i]`` (a bottleneck's expanded width); stage 0 keeps the grid unless
    ``downsample_in_first_stage``, every later stage halves it.

    (B, embedding_size, H, W) -> (B, hidden_sizes[-1], H / 2^(n-1), W / 2^(n-1)) for n stages.
    ``drop_path`` rises linearly from 0 to its value over all blocks (stochastic depth).
    """

    def __init__(
        self,
        embedding_size: int,
        hidden_sizes: Sequence[int],
        depths: Sequence[int],
        layer_type: str = "basic",
        activation: str = "relu",
        eps: float = 1e-5,
        drop_path: float = 0.0,
        downsample_in_first_stage: bool = False,
        downsample_in_bottleneck: bool = False,
    ) -> None:
        super().__init__()
        check_choice("layer_type", layer_type, LAYER_TYPES)
        if len(hidden_sizes) != len(depths) or not depths:
            raise config_error(
                "depths", list(depths), f"one depth per stage width ({len(hidden_sizes)})"
            )
        total = sum(depths)
        # In Python, not torch.linspace: a model built on the meta device has no values.
        rates = [drop_path * i / (total - 1) if total > 1 else 0.0 for i in range(total)]
        stages, i, c_in = [], 0, embedding_size
        for s, (width, depth) in enumerate(zip(hidden_sizes, depths, strict=True)):
            stride = 2 if (s > 0 or downsample_in_first_stage) else 1
            blocks = []
            for j in range(depth):
                c, st = (c_in, stride) if j == 0 else (width, 1)
                if layer_type == "basic":
                    blocks.append(BasicLayer(c, width, st, activation, eps, rates[i]))
                else:
                    blocks.append(
                        BottleNeckLayer(
                            c, width, st, activation, eps, rates[i],
                            downsample_in_bottleneck=downsample_in_bottleneck,
                        )
                    )  # fmt: skip
                i += 1
            stages.append(ConvStage(blocks, stride))
            c_in = width
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> Tensor:
        for stage in self.stages:
            x = stage(x)
        return x

    def grids(self, size: tuple[int, int]) -> list[tuple[int, int]]:
        """The (h, w) after each stage for an input map of ``size``: a stride-2 stage gives
        ceil(side / 2) (3x3 conv with padding 1, 1x1 shortcut without)."""
        h, w = size
        out = []
        for stage in self.stages:
            if stage.stride == 2:
                h, w = -(-h // 2), -(-w // 2)
            out.append((h, w))
        return out


def init_conv_weights(module: nn.Module, zero_init_residual: bool = False) -> None:
    """He (kaiming) normal init, fan-out, for every conv (torchvision's and HF's); BatchNorm
    gain 1, shift 0, fresh running statistics; with ``zero_init_residual`` the last BN of each
    residual branch starts at gain 0 (Goyal et al. 2017), so each block starts as the
    identity."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
            m.reset_running_stats()
    if zero_init_residual:
        for m in module.modules():
            if isinstance(m, _Residual):
                nn.init.zeros_(m.last_norm.weight)


@dataclass(frozen=True)
class ConvSpec:
    """A convolutional backbone (stem + stages) described by data: what a ViT's ``stem`` field
    holds for the hybrid model (a JSON object of these fields; missing ones take these
    defaults: the ViT paper's ResNet-50 stages 1-3, whose 14 x 14 map at 224 x 224 gives the
    patches). Widths, depths and kinds as :class:`ConvEncoder`'s."""

    stem: str = "resnet"
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024)
    depths: tuple[int, ...] = (3, 4, 9)
    layer_type: str = "bottleneck"
    activation: str = "relu"
    eps: float = 1e-5
    downsample_in_first_stage: bool = False
    downsample_in_bottleneck: bool = False

    @classmethod
    def from_dict(cls, values: Any, field_name: str = "stem") -> ConvSpec:
        """A checked spec from a dict; a wrong key or value is one ValueError naming
        ``<field_name>.<key>``."""
        if isinstance(values, ConvSpec):
            return values
        if not isinstance(values, dict):
            raise config_error(field_name, values, "expected a dict of conv stem fields or None")
        names = [f.name for f in fields(cls)]
        for key in values:
            if key not in names:
                raise config_error(f"{field_name}.{key}", values[key], f"fields: {names}")
        v = dict(values)
        for key in ("hidden_sizes", "depths"):
            if key in v:
                seq = v[key]
                ok = (
                    isinstance(seq, list | tuple)
                    and seq
                    and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in seq)
                )
                if not ok:
                    raise config_error(f"{field_name}.{key}", seq, "a list of positive ints")
                v[key] = tuple(seq)
        spec = cls(**v)
        for key, choices in (
            ("stem", STEMS),
            ("layer_type", LAYER_TYPES),
            ("activation", CONV_ACTIVATIONS),
        ):
            check_choice(f"{field_name}.{key}", getattr(spec, key), choices)
        if not isinstance(spec.embedding_size, int) or spec.embedding_size <= 0:
            raise config_error(
                f"{field_name}.embedding_size", spec.embedding_size, "a positive int"
            )
        if len(spec.depths) != len(spec.hidden_sizes):
            raise config_error(
                f"{field_name}.depths", list(spec.depths), "one depth per stage width"
            )
        if spec.layer_type == "bottleneck" and any(w % 4 for w in spec.hidden_sizes):
            raise config_error(
                f"{field_name}.hidden_sizes", list(spec.hidden_sizes), "multiples of 4 (bottleneck)"
            )
        return spec

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lists, not tuples), every field."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self)}  # fmt: skip

    @property
    def out_channels(self) -> int:
        return self.hidden_sizes[-1]

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The (h, w) of the backbone's map for an image of ``size``: ceil(side / 2) for every
        stride-2 step (the stem's, every stage's after the first, the first's when asked)."""
        steps = (2 if self.stem == "resnet" else 0) + len(self.hidden_sizes) - 1
        steps += int(self.downsample_in_first_stage)
        h, w = size
        for _ in range(steps):
            h, w = -(-h // 2), -(-w // 2)
        return h, w

    def build(self, in_channels: int, drop_path: float = 0.0) -> ConvBackbone:
        return ConvBackbone(self, in_channels, drop_path)


class ConvBackbone(nn.Module):
    """Stem then stages, from a :class:`ConvSpec`: (B, C, H, W) -> (B, C_out, h, w), the map
    a hybrid ViT cuts into patches. Names as the CNN's (``embedder``, ``encoder``)."""

    def __init__(self, spec: ConvSpec, in_channels: int, drop_path: float = 0.0) -> None:
        super().__init__()
        self.spec = spec
        self.embedder = ConvStem(
            in_channels, spec.embedding_size, spec.stem, spec.activation, spec.eps
        )
        self.encoder = ConvEncoder(
            spec.embedding_size,
            spec.hidden_sizes,
            spec.depths,
            spec.layer_type,
            spec.activation,
            spec.eps,
            drop_path,
            spec.downsample_in_first_stage,
            spec.downsample_in_bottleneck,
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(self.embedder(x))
