"""Position encodings. Self-attention alone is permutation-equivariant over tokens; these
give each token its place."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def resample_pos_embed(
    pos_embed: Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int],
    num_prefix_tokens: int = 1,
) -> Tensor:
    """Bicubic resampling of a learned 2-D position table to a new patch grid.

    pos_embed (1, prefix + gh*gw, D) -> (1, prefix + new_h*new_w, D); the prefix ([CLS]) rows
    are kept as they are.
    """
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    gh, gw = old_grid
    if grid.shape[1] != gh * gw:
        raise ValueError(
            f"pos_embed has {grid.shape[1]} grid rows; expected old_grid {gh}x{gw} = {gh * gw}"
        )
    d = grid.shape[-1]
    grid = grid.reshape(1, gh, gw, d).permute(0, 3, 1, 2)
    # Interpolate in at least float32 (half precision loses the table); float64 stays float64.
    work = torch.promote_types(grid.dtype, torch.float32)
    grid = F.interpolate(grid.to(work), size=tuple(new_grid), mode="bicubic", align_corners=False)
    grid = grid.to(pos_embed.dtype).permute(0, 2, 3, 1).reshape(1, -1, d)
    return torch.cat([prefix, grid], dim=1)


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/D)), PE(pos, 2i+1) = cos(...). -> (length, D)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(base) / dim))
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)[:, : dim // 2]
    return table.float()


def sincos_2d_table(grid: tuple[int, int], dim: int, base: float = 10000.0) -> Tensor:
    """Fixed 2-D sine-cosine positions for a patch grid: the first D/2 features encode the
    row with :func:`sinusoidal_table`, the last D/2 the column. -> (gh*gw, D) float32."""
    if dim % 4:
        raise ValueError(f"dim={dim} is invalid for 2-D sine-cosine positions: needs dim % 4 == 0")
    gh, gw = grid
    rows = sinusoidal_table(gh, dim // 2, base)[:, None, :].expand(gh, gw, dim // 2)
    cols = sinusoidal_table(gw, dim // 2, base)[None, :, :].expand(gh, gw, dim // 2)
    return torch.cat([rows, cols], dim=-1).reshape(gh * gw, dim)
