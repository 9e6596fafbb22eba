"""Swin Transformer (Liu et al. 2021), hierarchical vision Transformer with shifted windows:

image (B, C, H, W)
  -> patch partition P x P + linear embedding to C (one strided convolution), LN
                                                          (B, N, C) on the grid (H/P, W/P)
  -> [+ absolute position, optional: position='learned' is Hugging Face's
      use_absolute_embeddings]
  -> stage 1: depths[0] x Swin block (width C, heads H)
  -> patch merging (2 x 2 neighbours -> LN -> Linear 4C -> 2C): stage 2, width 2C, 2H heads
  -> ... stage s: width C * 2^(s-1), H * 2^(s-1) heads (the head width C / H stays)
  -> LN -> average over the tokens -> head                (B, num_classes)

A Swin block (eq. 3) is a pre-norm block whose attention runs within Ws x Ws windows:

    z' = W-MSA(LN(z)) + z;   z = MLP(LN(z')) + z'            (even blocks: regular windows)
    z' = SW-MSA(LN(z)) + z;  ...                              (odd blocks: shifted windows)

and every window's attention adds a relative position bias, softmax(Q K^T / sqrt(d) + B) V
(eq. 4), B read from a learned (2Ws-1)^2 x H table per block
(:class:`~tfam.layers.windows.RelativePositionBias`). Shifted windows roll the map by
(-Ws/2, -Ws/2) and mask the pairs the roll brought together
(:class:`~tfam.layers.windows.WindowPartition`).

Where Hugging Face's code decides the numbers (``transformers.models.swin``), tfam does the same:

- the grid is padded with zero tokens to whole windows *after* the block's first LayerNorm
  (layernorm_before), so the padding enters attention as zeros, not as normalised zeros;
- patch merging concatenates the 2 x 2 neighbours in the order (0,0), (1,0), (0,1), (1,1);
- a stage whose grid is no larger than the window along an axis does not shift and uses a
  window the size of that grid side (``window = min(grid)``, Hugging Face's
  ``set_shift_and_window_size``); tfam decides it when the model is built, for
  ``config.image_size`` (as timm does), so the bias table of such a stage is
  (2 min(grid) - 1)^2 x H (Hugging Face keeps the config's table there, and its forward cannot
  add a 49 x 49 bias to 16 x 16 scores: the case it does not run);
- **the shifted-window mask.** Hugging Face adds -100 to the scores of the pairs the roll
  brought together; tfam keeps its convention: a bool mask, those scores -inf, weight exactly
  0. The two differ by the weight -100 leaves: a masked pair whose score exceeds the row's
  largest allowed score by s weighs exp(s - 100) relative to it (< 4e-44 for s <= 0), so the
  outputs agree to float32 rounding unless scores within a window spread over ~80 (far beyond
  any trained model's: the parity tests use random weights and agree to 1e-5). -inf is kept
  because -100 is not a mask, only a large negative constant: it leaks weight once scores
  spread that far, which tfam's conventions rule out (masks are bool, masked scores -inf).

Stochastic depth follows the paper (both residual branches of a block); Hugging Face's
SwinLayer drops only the attention branch, which changes training, not evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import (
    BaseConfig,
    as_pair,
    check_positive_int,
    config_error,
    divisors,
)
from tfam.layers import (
    PatchEmbed,
    PatchMerging,
    RelativePositionBias,
    StageSpec,
    StageStack,
    make_norm,
    resample_pos_embed,
)
from tfam.layers.position import build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset


@dataclass
class SwinConfig(BaseConfig):
    """Swin: patches -> linear embedding -> LN -> stages of window-attention blocks with patch
    merging between them -> LN -> average pool -> head.

    ``dim`` (C) and ``heads`` (H) are the first stage's; stage s (0-based) has width
    C * 2^s and H * 2^s heads, as in every Swin (the head width C / H is the same in all
    stages). ``depths``: blocks per stage. ``depth``: the most blocks any stage has; None (the
    default) is max(depths), a smaller value caps every stage at it (``depth=2`` on Swin-T's
    (2, 2, 6, 2) gives (2, 2, 2, 2)), and ``depths`` is then stored capped. ``window``: Ws
    (7 in the paper); a stage whose grid side is smaller uses that side. ``ffn_dim``: the first
    stage's MLP width (default 4C); every stage keeps the ratio ffn_dim / dim.
    """

    family: ClassVar[str] = "swin"
    # Absolute positions added to the patch tokens (learned = Hugging Face's
    # use_absolute_embeddings, 2-D sine-cosine, generated) or none, Swin's default: the
    # relative bias in every window is its position information. Schemes acting inside
    # attention (RoPE on Q/K, ALiBi/T5 biases) are not served: a window's attention sees only
    # its own 0..Ws^2-1 positions, and Swin's relative table is its bias.
    position_acts: ClassVar[tuple[str, ...]] = ("tokens", "none")
    position_domains: ClassVar[tuple[str, ...]] = ("grid", "any")

    dim: int = 96
    depth: int | None = None  # type: ignore[assignment]  # None -> max(depths)
    heads: int = 3
    depths: Any = (2, 2, 6, 2)
    window: int = 7
    norm_eps: float = 1e-5
    position: str = "none"
    image_size: Any = 224  # int or (height, width)
    patch_size: Any = 4  # int or (height, width)
    in_channels: int = 3
    num_classes: int = 1000  # 0 -> no head, forward returns the pooled features

    def __post_init__(self) -> None:
        depths = self.depths
        if (
            not isinstance(depths, tuple | list)
            or not depths
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in depths)
        ):
            raise config_error("depths", depths, "expected a list of positive ints, per stage")
        if self.depth is None:
            self.depth = max(depths)
        check_positive_int("depth", self.depth)
        self.depths = tuple(min(d, self.depth) for d in depths)
        self.depth = max(self.depths)
        super().__post_init__()
        self.image_size = as_pair("image_size", self.image_size)
        self.patch_size = as_pair("patch_size", self.patch_size)
        for axis, (img, p) in enumerate(zip(self.image_size, self.patch_size, strict=True)):
            if img % p:
                which = ("height", "width")[axis]
                raise config_error(
                    "patch_size",
                    self.patch_size if self.patch_size[0] != self.patch_size[1] else p,
                    f"the image {which} {img} is not divisible by the patch {which} {p}; "
                    f"patch {which}s that divide it: {divisors(img)}",
                )
        check_positive_int("window", self.window)
        check_positive_int("in_channels", self.in_channels)
        check_positive_int("num_classes", self.num_classes, allow_zero=True)
        if not self.norm_first:
            raise config_error("norm_first", self.norm_first, "Swin blocks are pre-norm (True)")

    @property
    def final_norm(self) -> bool:
        """Swin always normalises the last stage's tokens (a LayerNorm before the pool)."""
        return True

    @property
    def grid_size(self) -> tuple[int, int]:
        """The patch grid (H/P, W/P) of the first stage."""
        return (self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1])

    def stage_grids(self) -> list[tuple[int, int]]:
        """Each stage's grid: patch merging halves it, rounding up (an odd side is padded)."""
        grids = [self.grid_size]
        for _ in self.depths[1:]:
            grids.append(PatchMerging.output_grid(grids[-1]))
        return grids

    def stage_specs(self) -> list[StageSpec]:
        """Stage s: width C * 2^s, H * 2^s heads, depths[s] blocks, windows of
        min(Ws, smallest grid side), every second block shifted (unshifted when one window
        spans a grid side: WindowPartition's rule)."""
        return [
            StageSpec(
                self.dim * 2**s,
                self.heads * 2**s,
                depth,
                window=min(self.window, *grid),
                shift=True,
            )
            for s, (depth, grid) in enumerate(zip(self.depths, self.stage_grids(), strict=True))
        ]


class Swin(TfamModel):
    config_class = SwinConfig
    title = "Swin"
    inputs = "image"
    tasks = ("image-classification",)
    # Each block's attention weights are per window: (B * nW, H_s, Ws^2, Ws^2).
    attention_layout = "windows"

    def __init__(self, config: SwinConfig) -> None:
        super().__init__(config)
        c = config
        self.patch_embed = PatchEmbed(c)  # patch partition + linear embedding (a conv)
        self.embed_norm = make_norm(c.norm, c.dim, c.norm_eps)
        self.position = build_position(c, grid=self.patch_embed.grid_size, prefix=0)
        self.pos_embed = self.position.make_table()  # (1, N, C) when learned
        self.pos_drop = nn.Dropout(c.dropout)
        self.encoder = StageStack(c, c.stage_specs())
        for block in self.encoder.blocks:  # one table per block (eq. 4)
            block.mhsa.bias_provider = RelativePositionBias(
                block.mhsa.heads, block.token_partition.window
            )
        width = self.encoder.specs[-1].dim
        self.norm = make_norm(c.norm, width, c.norm_eps)
        self.head = nn.Linear(width, c.num_classes) if c.num_classes else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        super().init_weights()
        std = self.config.init_std
        tables = [b.mhsa.bias_provider.table for b in self.encoder.blocks]
        for p in tables + ([self.pos_embed] if self.pos_embed is not None else []):
            nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}

    @property
    def feature_dim(self) -> int:
        """The width of :meth:`forward_features`' tokens: the last stage's, C * 2^(S-1)."""
        return self.encoder.specs[-1].dim

    @property
    def blocks(self) -> list[nn.Module]:
        return self.encoder.blocks

    def grid(self, x: Tensor) -> tuple[int, int]:
        """The patch grid (gh, gw) of images x (B, C, H, W)."""
        return (x.shape[-2] // self.config.patch_size[0], x.shape[-1] // self.config.patch_size[1])

    def embed(self, x: Tensor) -> Tensor:
        """Patch partition, linear embedding, LN, + position. (B, C, H, W) -> (B, N, C)."""
        tokens = self.embed_norm(self.patch_embed(x))
        return self.pos_drop(self.position.add(tokens, self.grid(x), self.pos_embed))

    def forward_features(
        self, x: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """(B, C, H, W) -> the last stage's tokens after the final LN (B, N_S, C * 2^(S-1))
        [, :class:`AttentionWeights`: "encoder", one map per block, stage after stage,
        (B * nW, H_s, Ws^2, Ws^2): each window's attention, windows of one image contiguous,
        row-major over the (rolled, padded) grid]."""
        tokens, _, weights = self.encoder(
            self.embed(x), self.grid(x), need_weights=return_attention
        )
        tokens = self.norm(tokens)
        if return_attention:
            return tokens, AttentionWeights("encoder", encoder=weights or [])
        return tokens

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, N_S, D_S) -> average over the tokens (B, D_S) -> logits (B, num_classes)."""
        return self.head(tokens.mean(dim=1))

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random images (B, C, H, W) at the configured size."""
        c = self.config
        return (torch.randn(batch_size, c.in_channels, *c.image_size),)

    def adapt_state_dict(self, state: dict[str, Tensor], saved: BaseConfig) -> dict[str, Tensor]:
        """Resample a saved absolute position table to this model's patch grid."""
        pos = state.get("pos_embed")
        if pos is not None and self.pos_embed is not None and pos.shape != self.pos_embed.shape:
            assert isinstance(saved, SwinConfig)
            state = dict(state)
            state["pos_embed"] = resample_pos_embed(
                pos, self.patch_embed.grid_size, saved.grid_size, 0
            )
        return state


def _swin(name: str, description: str, **values: Any) -> None:
    register_preset(name, "swin", description, **values)


# The paper's ImageNet-1k models (Table 1 of Liu et al. 2021; drop path 0.2 / 0.3 / 0.5 as
# trained there); parameter counts equal Hugging Face's SwinForImageClassification.
_swin(
    "swin_tiny_patch4_window7_224",
    "Swin-T, 224x224, patch 4, window 7, C=96, depths 2-2-6-2, ImageNet-1k head",
    dim=96,
    heads=3,
    depths=(2, 2, 6, 2),
    drop_path=0.2,
)
_swin(
    "swin_small_patch4_window7_224",
    "Swin-S, 224x224, patch 4, window 7, C=96, depths 2-2-18-2, ImageNet-1k head",
    dim=96,
    heads=3,
    depths=(2, 2, 18, 2),
    drop_path=0.3,
)
_swin(
    "swin_base_patch4_window7_224",
    "Swin-B, 224x224, patch 4, window 7, C=128, depths 2-2-18-2, ImageNet-1k head",
    dim=128,
    heads=4,
    depths=(2, 2, 18, 2),
    drop_path=0.5,
)
_swin(
    "swin_fashion_mnist",
    "small Swin for 28x28 Fashion-MNIST: 2x2 patches (14x14 grid = 2x2 windows of 7x7), "
    "C=48, 3 heads, depths 2-2 (stage 2: 7x7, one window)",
    image_size=28,
    patch_size=2,
    in_channels=1,
    num_classes=10,
    dim=48,
    heads=3,
    depths=(2, 2),
    window=7,
    # Sized for the time: a training step at batch 128 costs 1.4-2.2x vit_fashion_mnist's
    # (303 k parameters each; 1 thread, measured on the shared 2-core CPU), so an epoch stays
    # within ~2 minutes there. C=64 / 4 heads cost 2-3.3x, depths 2-4 at C=48 ~1.3x.
    # No stochastic depth: with 0.1 the 24-epoch recipe underfitted (training accuracy below
    # validation's to the end) and 0 trained faster (README, Swin row).
    drop_path=0.0,
    # At widths of 48-96 the 0.02 of the ImageNet models leaves the blocks near the identity;
    # 0.1 (about 1/sqrt(C)) and 2-D sine-cosine positions on the patch tokens (as
    # vit_fashion_mnist) learned fastest in 2-epoch probes (README, Swin row).
    init_std=0.1,
    position="sincos2d",
)
_swin(
    "swin_digits",
    "small Swin for scikit-learn's 8x8 digits: 1x1 patches (8x8 grid = 2x2 windows of 4x4), "
    "C=32, 2 heads, depths 2-2 (stage 2: 4x4, one window)",
    image_size=8,
    patch_size=1,
    in_channels=1,
    num_classes=10,
    dim=32,
    heads=2,
    depths=(2, 2),
    window=4,
    drop_path=0.1,
    # As swin_fashion_mnist: with the ImageNet models' 0.02 and no absolute positions the recipe
    # scored 74.4% in 5-fold cross-validation, with these 98.0% (README, digits).
    init_std=0.1,
    position="sincos2d",
)
