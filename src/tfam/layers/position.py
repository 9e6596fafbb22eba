"""Position encodings. Self-attention alone is permutation-equivariant over tokens; these
give each token its place.

Tables added to the tokens (sinusoidal, 2-D sine-cosine, learned with resampling), a Q/K
transform (RoPE) and a bias provider (ALiBi). A stack wires the last two from
``config.position`` (``"rope"``, ``"alibi"``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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


def sinusoidal_table_halves(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """The sinusoids of :func:`sinusoidal_table` laid out in halves, as Marian (and Hugging
    Face's MarianMT) stores them: every sine first, then every cosine,
    PE(pos, i) = sin(pos / base^(2i/D)) and PE(pos, ceil(D/2) + i) = cos(pos / base^(2i/D)).
    -> (length, D) float32, computed in float64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    angles = pos / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.cat([angles.sin(), angles.cos()[:, : dim // 2]], dim=-1).float()


def sincos_2d_table(grid: tuple[int, int], dim: int, base: float = 10000.0) -> Tensor:
    """Fixed 2-D sine-cosine positions for a patch grid: the first D/2 features encode the
    row with :func:`sinusoidal_table`, the last D/2 the column. -> (gh*gw, D) float32."""
    if dim % 4:
        raise ValueError(f"dim={dim} is invalid for 2-D sine-cosine positions: needs dim % 4 == 0")
    gh, gw = grid
    rows = sinusoidal_table(gh, dim // 2, base)[:, None, :].expand(gh, gw, dim // 2)
    cols = sinusoidal_table(gw, dim // 2, base)[None, :, :].expand(gh, gw, dim // 2)
    return torch.cat([rows, cols], dim=-1).reshape(gh * gw, dim)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate each (x_a, x_b) feature pair of Q and K by the angle
    pos * base^(-2i/Dh), so that q_m . k_n depends on m - n only. A Q/K transform of
    :class:`~tfam.layers.attention.MultiHeadAttention`.

    ``layout`` says which features form a pair: ``"half"`` pairs i with i + Dh/2 (GPT-NeoX,
    LLaMA, Hugging Face's ``rotate_half``); ``"interleaved"`` pairs 2i with 2i+1 (the paper,
    GPT-J). Weights converted from one layout do not work in the other.

    (q (B, H, Lq, Dh), k (B, H, Lk, Dh), q_pos, k_pos) -> rotated (q, k); positions are int64
    (L,) or (B, L). Angles are computed in float64, then cast to the input dtype.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, layout: str = "half") -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} is invalid for RoPE: expected an even width")
        if layout not in ("half", "interleaved"):
            raise ValueError(f"layout={layout!r} is invalid: expected 'half' or 'interleaved'")
        self.head_dim, self.base, self.layout = head_dim, base, layout
        inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def cos_sin(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(L,) or (B, L) -> cos, sin broadcastable to (B, H, L, Dh)."""
        angles = pos.to(torch.float64)[..., None] * self.inv_freq.to(pos.device)  # (..., L, Dh/2)
        if self.layout == "half":
            angles = torch.cat([angles, angles], dim=-1)
        else:
            angles = angles.repeat_interleave(2, dim=-1)
        if angles.ndim == 3:  # (B, L, Dh): one row of positions per sample
            angles = angles[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        cos, sin = self.cos_sin(pos, x.dtype)
        if self.layout == "half":
            a, b = x.chunk(2, dim=-1)
            turned = torch.cat([-b, a], dim=-1)
        else:
            a, b = x[..., 0::2], x[..., 1::2]
            turned = torch.stack([-b, a], dim=-1).flatten(-2)
        return x * cos + turned * sin

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate(q, q_pos), self.rotate(k, k_pos)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}"


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al. 2022): 2^(-8/n), 2^(-16/n), ... for n = heads when
    n is a power of two; otherwise those of the next lower power of two, then every other slope
    of the next higher one. -> (heads,) float64."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** math.floor(math.log2(heads))
    slopes = power_of_two(lower)
    if lower != heads:
        slopes += power_of_two(2 * lower)[0::2][: heads - lower]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(nn.Module):
    """Attention with linear biases: score(i, j) += -slope_h * |i - j|, no position embedding.
    A bias provider: computed once per forward and shared by every block of a stack.

    (q_pos (Lq,), k_pos (Lk,)) -> bias (H, Lq, Lk) float32.
    """

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.register_buffer("slopes", alibi_slopes(heads).float(), persistent=False)

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).abs().float()
        return -self.slopes.to(distance.device)[:, None, None] * distance

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
