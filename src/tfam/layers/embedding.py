"""Patch embedding: cut the image into P_h x P_w patches, flatten, project to D."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from tfam.config import as_pair


class PatchEmbed(nn.Module):
    """(B, C, H, W) -> (B, N, D) with N = (H / P_h) * (W / P_w), row-major over the patch grid.

    Projecting each flattened patch (length P_h * P_w * C) with one matrix is the same as a
    convolution whose kernel and stride are the patch size; the convolution is how it runs.

    Built from a vision config's ``image_size``, ``patch_size``, ``in_channels`` and ``dim``.
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        in_channels, dim = config.in_channels, config.dim
        self.image_size = as_pair("image_size", config.image_size)
        self.patch_size = as_pair("patch_size", config.patch_size)
        self.in_channels = in_channels
        self.grid_size = (
            self.image_size[0] // self.patch_size[0],
            self.image_size[1] // self.patch_size[1],
        )
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.patch_dim = self.patch_size[0] * self.patch_size[1] * in_channels
        self.proj = nn.Conv2d(in_channels, dim, kernel_size=self.patch_size, stride=self.patch_size)

    def check_input(self, x: Tensor) -> None:
        if x.ndim != 4:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected images (B, C, H, W)")
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"x has {x.shape[1]} channels (shape {tuple(x.shape)}); this model expects "
                f"in_channels={self.in_channels}"
            )
        h, w = x.shape[-2:]
        ph, pw = self.patch_size
        if h % ph or w % pw:
            raise ValueError(
                f"x has image size {h}x{w}, not divisible by the patch size {ph}x{pw}; "
                "resize or pad the image to a multiple of the patch size"
            )

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        return self.proj(x).flatten(2).transpose(1, 2)
