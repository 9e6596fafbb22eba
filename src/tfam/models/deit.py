"""Data-efficient image Transformer (Touvron et al. 2021): a ViT that also learns from a
teacher, through a distillation token. ViT's bricks (:mod:`tfam.models.vit`), plus:

image (B, C, H, W)
  -> patches -> linear projection                           (B, N, D)
  -> prepend [CLS] and the distillation token [DIST]         (B, N+2, D)
  -> + position (a learned table of N+2 rows, as the paper; or any ViT scheme)
  -> depth x ViT blocks -> LN
  -> head on [CLS] (or the mean of patches, ``pool='mean'``)  (B, K)   "class logits"
     head_dist on [DIST]                                      (B, K)   "distillation logits"
  -> prediction: their average (the paper's late fusion, Sec. 5.1; Hugging Face's
     DeiTForImageClassificationWithTeacher); ``forward(x, both=True)`` gives the two apart, for
     the distillation loss (tfam.training.tasks.distillation).

``distilled=False`` is DeiT without the distillation token: ViT's architecture with DeiT's
training recipe (the paper's DeiT-Ti/S/B, timm's ``deit_*_patch16_224``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import check_bool, config_error
from tfam.models.registry import register_preset
from tfam.models.vit import ViT, ViTConfig


@dataclass
class DeiTConfig(ViTConfig):
    """A :class:`ViTConfig` and ``distilled``: a distillation token after [CLS] (position
    table of N + 2 rows) read by a second head, ``head_dist``. The class head reads what
    ``pool`` says ([CLS] or the mean of the patches); the distillation head always reads
    [DIST]."""

    family: ClassVar[str] = "deit"

    distilled: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool("distilled", self.distilled)
        if self.distilled and self.representation_size is not None:
            raise config_error(
                "representation_size",
                self.representation_size,
                "None with distilled=True: DeiT's two heads read the tokens directly",
            )


class DeiT(ViT):
    config_class = DeiTConfig
    title = "DeiT"
    inputs = "image"
    tasks = ("image-classification", "image-distillation")

    @staticmethod
    def count_prefix_tokens(config: ViTConfig) -> int:
        """[CLS] (when ``class_token``) then [DIST] (when ``distilled``)."""
        distilled = bool(getattr(config, "distilled", False))
        return ViT.count_prefix_tokens(config) + distilled

    def build_extra(self, head_in: int) -> None:
        """[DIST] (1, 1, D) and ``head_dist`` (D -> K), when ``distilled``."""
        c = self.config
        self.dist_token = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.distilled else None
        if c.distilled and c.num_classes:
            self.head_dist: nn.Module = nn.Linear(head_in, c.num_classes)
        else:
            self.head_dist = nn.Identity()

    def init_weights(self) -> None:
        super().init_weights()
        if getattr(self, "dist_token", None) is not None:
            std = self.config.init_std
            nn.init.trunc_normal_(self.dist_token, std=std, a=-2 * std, b=2 * std)

    def no_weight_decay(self) -> set[str]:
        return super().no_weight_decay() | {"dist_token"}

    def prefix_tokens(self) -> Tensor | None:
        """[CLS] and [DIST], (1, prefix, D), in Hugging Face's order; None without either."""
        tokens = [t for t in (self.cls_token, self.dist_token) if t is not None]
        return torch.cat(tokens, dim=1) if tokens else None

    @property
    def dist_index(self) -> int:
        """Where [DIST] sits: after [CLS]."""
        return 1 if self.cls_token is not None else 0

    def head_rows(self) -> int | None:
        """The leading tokens the heads read: [CLS] and [DIST] (None with mean pooling)."""
        return self.num_prefix_tokens if self.config.pool == "cls" else None

    def forward_head(
        self, tokens: Tensor, pre_logits: bool = False, both: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """tokens (B, L, D) -> logits (B, K): the average of the class head's and the
        distillation head's logits (the class head's alone with ``distilled=False``).

        ``both=True``: the pair (class logits (B, K), distillation logits (B, K)), for the
        distillation loss. ``pre_logits=True``: the features the heads read, (B, D) (their
        average with both tokens, as timm)."""
        if not self.config.distilled:
            if both:
                raise ValueError(
                    "both=True is invalid for a DeiT with distilled=False: it has no "
                    "distillation token nor head_dist"
                )
            return super().forward_head(tokens, pre_logits=pre_logits)
        cls_features = super().forward_head(tokens, pre_logits=True)  # [CLS] or mean pool
        dist_features = tokens[:, self.dist_index]
        if pre_logits:
            return (cls_features + dist_features) / 2
        x, x_dist = self.head(cls_features), self.head_dist(dist_features)
        if both:
            return x, x_dist
        return (x + x_dist) / 2  # the paper's late fusion of the two heads


def _deit(name: str, description: str, **values: Any) -> None:
    register_preset(name, "deit", description, **values)


_SIZES = {
    "tiny": dict(dim=192, depth=12, heads=3),
    "small": dict(dim=384, depth=12, heads=6),
    "base": dict(dim=768, depth=12, heads=12),
}
_SHORT = {"tiny": "Ti", "small": "S", "base": "B"}
for _size, _values in _SIZES.items():
    _deit(
        f"deit_{_size}_patch16_224",
        f"DeiT-{_SHORT[_size]}/16 without the distillation token (ViT's architecture), "
        "224x224, ImageNet-1k head",
        distilled=False,
        **_values,
    )
    _deit(
        f"deit_{_size}_distilled_patch16_224",
        f"DeiT-{_SHORT[_size]}/16 with the distillation token and head, 224x224, ImageNet-1k heads",
        distilled=True,
        **_values,
    )

_deit(
    "deit_fashion_mnist",
    "small DeiT for 28x28 Fashion-MNIST: vit_fashion_mnist (4x4 patches, D=96, 4 blocks, "
    "MLP 2D, sine-cosine positions, mean pool) plus the distillation token and head",
    image_size=28,
    patch_size=4,
    in_channels=1,
    num_classes=10,
    dim=96,
    depth=4,
    heads=4,
    ffn_dim=192,
    pool="mean",
    position="sincos2d",
    attention="auto",
    init_std=0.05,
)
_deit(
    "deit_digits",
    "small DeiT for scikit-learn's 8x8 digits: vit_digits (2x2 patches, D=64, 6 blocks) plus "
    "the distillation token and head",
    image_size=8,
    patch_size=2,
    in_channels=1,
    num_classes=10,
    dim=64,
    depth=6,
    heads=4,
    init_std=0.1,
    drop_path=0.1,
    attention="auto",
)
