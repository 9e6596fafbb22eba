"""Vision Transformer (Dosovitskiy et al. 2021), as the source documents describe it:

image (B, C, H, W)
  -> patches: N = (H / P_h) * (W / P_w), each flattened to P_h * P_w * C
  -> linear projection to D                              (B, N, D)
  -> prepend [CLS]                                       (B, N+1, D)
  -> + position: any scheme over a patch grid (tfam.layers.position): a learned table
     (B, N+1, D), fixed 2-D sine-cosine on the patches, or none; or "rope", 2-D axial
     RoPE in every self-attention (half of each head's features rotated by the patch's row,
     half by its column; [CLS] not rotated)
  -> depth x [ X1 = X0 + MHSA(LN(X0));  X_out = X1 + MLP(LN(X1)) ]
  -> LN -> [CLS] token (or mean of patches) -> head      (B, num_classes)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import (
    POOLS,
    BaseConfig,
    as_pair,
    check_bool,
    check_choice,
    check_positive_int,
    config_error,
    divisors,
)
from tfam.layers import PatchEmbed, TransformerStack, make_norm, resample_pos_embed
from tfam.layers.conv import ConvSpec, init_conv_weights
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset


@dataclass
class ViTConfig(BaseConfig):
    """Vision Transformer: patches -> linear projection -> [CLS] + position -> N blocks -> head.

    ``patch_dim`` (P_h * P_w * C, the flattened patch) follows from ``patch_size`` and
    ``in_channels``; the embedding width ``dim`` (D) is set independently.
    """

    family: ClassVar[str] = "vit"
    # Every scheme that can index a patch grid: a "learned" table, fixed "sincos2d", 2-D
    # axial "rope", "none".
    position_domains: ClassVar[tuple[str, ...]] = ("grid", "any")

    image_size: Any = 224  # int or (height, width)
    patch_size: Any = 16  # int or (height, width)
    in_channels: int = 3
    num_classes: int = 1000  # 0 -> no head, forward returns pooled features
    pool: str = "cls"
    class_token: bool = True
    pos_init_std: float = 0.02
    representation_size: int | None = None  # optional pre-logits Linear + tanh (ViT paper)
    final_norm: bool | None = None  # None -> True with pre-norm blocks, False with post-norm
    norm_eps: float = 1e-6
    # The hybrid model (ViT paper, section 3.1): None, or a conv backbone (a dict of
    # tfam.layers.conv.ConvSpec fields) whose feature map is cut into patch_size patches
    # (1 x 1 in the paper) instead of the image.
    stem: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.image_size = as_pair("image_size", self.image_size)
        self.patch_size = as_pair("patch_size", self.patch_size)
        if self.stem is not None:
            self.stem = ConvSpec.from_dict(self.stem).to_dict()
        cut = "feature map" if self.stem is not None else "image"
        for axis, (img, p) in enumerate(zip(self.map_size, self.patch_size, strict=True)):
            if img % p:
                which = ("height", "width")[axis]
                valid = divisors(img)
                raise config_error(
                    "patch_size",
                    self.patch_size if self.patch_size[0] != self.patch_size[1] else p,
                    f"the {cut} {which} {img} is not divisible by the patch {which} {p}; "
                    f"patch {which}s that divide it: {valid}",
                )
        check_positive_int("in_channels", self.in_channels)
        check_positive_int("num_classes", self.num_classes, allow_zero=True)
        check_choice("pool", self.pool, POOLS)
        check_bool("class_token", self.class_token)
        if self.pool == "cls" and not self.class_token:
            raise config_error(
                "pool", self.pool, "pool='cls' needs class_token=True; use pool='mean'"
            )
        if self.representation_size is not None:
            check_positive_int("representation_size", self.representation_size)
        if self.final_norm is None:
            self.final_norm = bool(self.norm_first)
        check_bool("final_norm", self.final_norm)

    @property
    def conv_spec(self) -> ConvSpec | None:
        """The hybrid's conv backbone, or None."""
        return None if self.stem is None else ConvSpec.from_dict(self.stem)

    @property
    def map_size(self) -> tuple[int, int]:
        """What the patches are cut from: the image, or the hybrid's feature map (h, w)."""
        spec = self.conv_spec
        return self.image_size if spec is None else spec.output_size(self.image_size)

    @property
    def patch_channels(self) -> int:
        """C of a patch: the image's channels, or the hybrid's feature map's."""
        spec = self.conv_spec
        return self.in_channels if spec is None else spec.out_channels

    @property
    def grid_size(self) -> tuple[int, int]:
        h, w = self.map_size
        return (h // self.patch_size[0], w // self.patch_size[1])

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def patch_dim(self) -> int:
        """P_h * P_w * C: the length of one flattened patch (C: the feature map's channels in
        the hybrid)."""
        return self.patch_size[0] * self.patch_size[1] * self.patch_channels


class ViT(TfamModel):
    config_class = ViTConfig
    title = "ViT"
    inputs = "image"
    tasks = ("image-classification",)

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        c = config
        d = c.dim
        spec = c.conv_spec
        # The hybrid: a conv backbone whose map is cut into patches, as an image would be.
        self.backbone = None if spec is None else spec.build(c.in_channels, c.drop_path)
        self.patch_embed = PatchEmbed(
            c
            if spec is None
            else c.replace(image_size=c.map_size, in_channels=spec.out_channels, stem=None)
        )
        self.num_prefix_tokens = self.count_prefix_tokens(c)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if c.class_token else None
        self.position = build_position(
            c, grid=self.patch_embed.grid_size, prefix=self.num_prefix_tokens
        )
        self.pos_embed = self.position.make_table()  # (1, prefix + N, D) when learned
        self.pos_drop = nn.Dropout(c.dropout)
        # The stack knows the grid: a scheme acting in attention (RoPE) indexes (row, column).
        self.encoder = TransformerStack(
            c, grid=self.patch_embed.grid_size, prefix=self.num_prefix_tokens
        )
        self.norm = make_norm(c.norm, d, c.norm_eps) if c.final_norm else nn.Identity()
        if c.representation_size:
            self.pre_logits = nn.Sequential(nn.Linear(d, c.representation_size), nn.Tanh())
            head_in = c.representation_size
        else:
            self.pre_logits = nn.Identity()
            head_in = d
        self.head = nn.Linear(head_in, c.num_classes) if c.num_classes else nn.Identity()
        self.build_extra(head_in)
        self.init_weights()

    @staticmethod
    def count_prefix_tokens(config: ViTConfig) -> int:
        """Learned tokens before the patches: [CLS] when ``class_token`` (a subclass that
        prepends more, DeiT's distillation token, counts them here)."""
        return 1 if config.class_token else 0

    def build_extra(self, head_in: int) -> None:
        """A subclass's own parameters, built before :meth:`init_weights` (``head_in``: the
        width the head reads). ViT has none."""

    def prefix_tokens(self) -> Tensor | None:
        """The learned tokens prepended to the patches, (1, prefix, D), or None."""
        return self.cls_token

    def init_weights(self) -> None:
        super().init_weights()
        if self.backbone is not None:  # He init for the convs, as the CNN's
            init_conv_weights(self.backbone)
        std = self.config.init_std
        if self.cls_token is not None:
            nn.init.trunc_normal_(self.cls_token, std=std, a=-2 * std, b=2 * std)
        if self.pos_embed is not None:
            p = self.config.pos_init_std
            nn.init.trunc_normal_(self.pos_embed, std=p, a=-2 * p, b=2 * p)

    def no_weight_decay(self) -> set[str]:
        return {"cls_token", "pos_embed"}

    @property
    def blocks(self) -> nn.ModuleList:
        return self.encoder.blocks

    def position_embedding(self, grid: tuple[int, int]) -> Tensor | None:
        """What the position scheme adds for a patch grid, (1, prefix + gh*gw, D), or None: a
        learned table bicubically resampled when the grid differs from the one it was trained
        on, a fixed one computed for the grid."""
        return self.position.values(grid, self.pos_embed)

    def grid(self, x: Tensor) -> tuple[int, int]:
        """The patch grid (gh, gw) of images x (B, C, H, W) (of the hybrid's feature map)."""
        h, w = x.shape[-2:]
        if self.backbone is not None:
            h, w = self.backbone.spec.output_size((h, w))
        return (h // self.config.patch_size[0], w // self.config.patch_size[1])

    def token_positions(self, x: Tensor) -> TokenPositions:
        """Where the tokens of images x sit: [CLS] then the patches' (row, column), for the
        schemes acting in attention (2-D RoPE)."""
        return TokenPositions.on_grid(self.grid(x), self.num_prefix_tokens)

    def embed(self, x: Tensor) -> Tensor:
        """Patching, projection, +[CLS], +position. (B, C, H, W) -> (B, prefix + N, D).

        A learned table covers [CLS] too; fixed sine-cosine positions go to the patches only
        (the prefix rows of their table are zeros)."""
        # (B, N, D); the hybrid cuts the backbone's map (B, C_out, h, w) instead of the image.
        tokens = self.patch_embed(x if self.backbone is None else self.backbone(x))
        grid = self.grid(x)
        prefix = self.prefix_tokens()
        if prefix is not None:
            tokens = torch.cat([prefix.expand(tokens.shape[0], -1, -1), tokens], dim=1)
        return self.pos_drop(self.position.add(tokens, grid, self.pos_embed))

    def forward_features(
        self, x: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """(B, C, H, W) -> tokens after the final norm (B, prefix + N, D)
        [, :class:`AttentionWeights`: "encoder", depth x (B, H, prefix + N, prefix + N)]."""
        tokens, weights = self.encoder(
            self.embed(x), need_weights=return_attention, positions=self.token_positions(x)
        )
        tokens = self.norm(tokens)
        if return_attention:
            return tokens, AttentionWeights("encoder", encoder=weights or [])
        return tokens

    def forward_head(self, tokens: Tensor, pre_logits: bool = False) -> Tensor:
        """(B, L, D) -> pooled (B, D) -> logits (B, num_classes)."""
        if self.config.pool == "cls":
            pooled = tokens[:, 0]
        else:
            pooled = tokens[:, self.num_prefix_tokens :].mean(dim=1)
        pooled = self.pre_logits(pooled)
        return pooled if pre_logits else self.head(pooled)

    def head_rows(self) -> int | None:
        """How many leading tokens the head reads ([CLS]: 1), or None when it reads the
        patches too (mean pooling): the last block computes only those rows."""
        return 1 if self.config.pool == "cls" else None

    def forward(
        self, x: Tensor, return_attention: bool = False, **head: Any
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """x (B, C, H, W) -> logits (B, num_classes) [, :class:`AttentionWeights`: "encoder",
        depth x (B, H, L, L)]; ``head``: options of :meth:`forward_head`.

        The same as ``forward_head(forward_features(x))``. With ``pool='cls'`` the head reads
        [CLS] alone, so the last block computes that one row (its keys and values still come
        from every token): about 1/depth less work, same logits up to float rounding. Not while
        dropout is active: the full path draws the same dropout masks as the reference
        implementations, so a seeded run matches theirs.
        """
        c = self.config
        dropout_active = self.training and (c.dropout > 0 or c.attn_dropout > 0)
        # On the meta device (explain's trace, which may not ask for weights from a kernel
        # that never forms them) every row runs: the table describes every block in full.
        full = return_attention or x.device.type == "meta"
        rows = self.head_rows()
        if full or rows is None or c.depth == 0 or dropout_active:
            features = self.forward_features(x, return_attention=return_attention)
            if return_attention:
                hidden, weights = features
                return self.forward_head(hidden, **head), weights
            return self.forward_head(features, **head)
        tokens, _ = self.encoder(
            self.embed(x), last_queries=rows, positions=self.token_positions(x)
        )
        return self.forward_head(self.norm(tokens), **head)

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random images (B, C, H, W) at the configured size."""
        c = self.config
        return (torch.randn(batch_size, c.in_channels, *c.image_size),)

    def adapt_state_dict(self, state: dict[str, Tensor], saved: BaseConfig) -> dict[str, Tensor]:
        """Resample a saved position table to this model's patch grid."""
        pos = state.get("pos_embed")
        if pos is not None and self.pos_embed is not None and pos.shape != self.pos_embed.shape:
            assert isinstance(saved, ViTConfig)
            state = dict(state)
            state["pos_embed"] = resample_pos_embed(
                pos, self.patch_embed.grid_size, saved.grid_size, self.num_prefix_tokens
            )
        return state


def _vit(name: str, description: str, **values: Any) -> None:
    register_preset(name, "vit", description, **values)


_vit("vit_tiny_patch16_224", "ViT-Ti/16, 224x224, ImageNet-1k head", dim=192, depth=12, heads=3)
_vit("vit_small_patch16_224", "ViT-S/16, 224x224, ImageNet-1k head", dim=384, depth=12, heads=6)
_vit("vit_base_patch16_224", "ViT-B/16, 224x224, ImageNet-1k head", dim=768, depth=12, heads=12)
_vit("vit_base_patch32_224", "ViT-B/32, 224x224, ImageNet-1k head", patch_size=32)
_vit("vit_large_patch16_224", "ViT-L/16, 224x224, ImageNet-1k head", dim=1024, depth=24, heads=16)
_vit(
    "vit_digits",
    "small ViT for scikit-learn's 8x8 digits: 2x2 patches (16 tokens + [CLS]), D=64, 6 blocks",
    # At this width the usual 0.02 init learns very slowly (27% vs 94% after 6 epochs, measured).
    image_size=8,
    patch_size=2,
    in_channels=1,
    num_classes=10,
    dim=64,
    depth=6,
    heads=4,
    init_std=0.1,
    drop_path=0.1,
    # Learned positions read by [CLS], 6 blocks: chosen by 5-fold cross-validation on the train
    # split (benchmarks/digits_cv.py; the README has the table), over mean pooling with 2-D
    # sine-cosine positions and over 4 blocks.
    # 'auto': the faster exact kernel by sequence length, never the O(L^2)-memory one for long
    # inputs (a larger image_size).
    attention="auto",
)
_vit(
    "vit_fashion_mnist",
    "small ViT for 28x28 Fashion-MNIST: 4x4 patches (49 tokens), D=96, 4 blocks, MLP 2D, "
    "2-D sine-cosine positions, mean pool",
    image_size=28,
    patch_size=4,
    in_channels=1,
    num_classes=10,
    dim=96,
    depth=4,
    heads=4,
    # An MLP of 2D instead of 4D trains 1.37x faster per image and, with mean pooling, was as
    # accurate per epoch (4-epoch probes: 82.95% vs 82.86%), so more epochs fit the budget.
    ffn_dim=192,
    pool="mean",
    # Fixed 2-D sine-cosine positions learn faster than a learned table here (5-epoch runs:
    # 87.68% vs 86.00% test accuracy).
    position="sincos2d",
    # 'auto': the faster exact kernel by sequence length, never the O(L^2)-memory one for long
    # inputs (a larger image_size).
    attention="auto",
    init_std=0.05,  # best of 0.02 / 0.05 / 0.1 in 400-step probes (69.5 / 70.7 / 67.3%)
)
_vit(
    "vit_hybrid_fashion_mnist",
    "hybrid ViT for 28x28 Fashion-MNIST: a small ResNet (3x3 stem, basic stages 24/48/96) whose "
    "7x7 map gives 49 1x1 patches, then vit_fashion_mnist's encoder (D=96, 4 blocks)",
    image_size=28,
    patch_size=1,
    in_channels=1,
    num_classes=10,
    stem={
        "stem": "small",
        "embedding_size": 24,
        "hidden_sizes": [24, 48, 96],
        "depths": [1, 1, 1],
        "layer_type": "basic",
    },
    dim=96,
    depth=4,
    heads=4,
    ffn_dim=192,
    pool="mean",
    position="sincos2d",
    attention="auto",
    init_std=0.05,
)
