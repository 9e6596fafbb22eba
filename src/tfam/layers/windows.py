"""Window attention's token partition (Swin, Liu et al. 2021): tokens on a grid are cut into
non-overlapping Ws x Ws windows and each window attends within itself.

A block with a ``token_partition`` (:class:`~tfam.layers.block.EncoderBlock`) runs its
self-attention on ``partition(tokens, grid)`` and puts the result back with ``merge``; any
object with those two methods is a partition (:class:`TokenPartition`).

:class:`WindowPartition` implements regular and shifted windows:

- the grid is padded at the bottom and right with zero tokens to multiples of Ws (the padding
  takes part in attention, as in Swin, and is cut off again by ``merge``);
- shifted windows roll the padded map by (-shift, -shift) first, so the new windows straddle
  the old windows' borders; a window that the roll wrapped around holds tokens from regions
  that are not neighbours in the image, and a mask keeps those regions apart (Swin's
  attention mask: per axis, the rolled map splits into [0, Hp - Ws), [Hp - Ws, Hp - shift),
  [Hp - shift, Hp), and two tokens may attend to each other when they share both regions);
- ``merge`` reverses it: windows -> map, roll by (+shift, +shift), padding removed;
- a grid no larger than one window along either axis (min(Hg, Wg) <= Ws) is not shifted: there
  is no window border to straddle along that axis (Swin's rule, applied per input).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TokenPartition(Protocol):
    """Regroups tokens on a grid for attention and puts them back.

    ``partition(x (B, N, D), grid (Hg, Wg)) -> (groups (B', L', D), mask or None)``, the mask
    bool (True = may attend) broadcastable to (B', H, L', L'); ``merge(groups, grid)`` is its
    inverse, -> (B, N, D). N = Hg * Wg, tokens row-major over the grid."""

    def partition(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, Tensor | None]: ...

    def merge(self, groups: Tensor, grid: tuple[int, int]) -> Tensor: ...


def _check_grid(x: Tensor, grid: tuple[int, int]) -> tuple[int, int]:
    if (
        not isinstance(grid, tuple | list)
        or len(grid) != 2
        or not all(isinstance(g, int) and g > 0 for g in grid)
    ):
        raise ValueError(f"grid={grid!r} is invalid: expected (height, width), positive ints")
    if x.ndim != 3 or x.shape[1] != grid[0] * grid[1]:
        raise ValueError(
            f"x has shape {tuple(x.shape)}; expected (B, {grid[0] * grid[1]}, D) for "
            f"grid={tuple(grid)} (tokens row-major over the grid)"
        )
    return grid[0], grid[1]


class WindowPartition(nn.Module):
    """Non-overlapping ``window`` x ``window`` windows, cyclically shifted by ``shift`` tokens
    along both axes (0: regular windows; Swin shifts every second block by window // 2), when
    the grid is larger than one window along both axes.

    partition: x (B, Hg*Wg, D) -> windows (B*nW, Ws*Ws, D), windows of one image contiguous,
    row-major over the padded grid (Hp, Wp) = multiples of Ws; mask None without shift,
    else (B*nW, 1, Ws*Ws, Ws*Ws). merge: windows (B*nW, Ws*Ws, D) -> (B, Hg*Wg, D).
    Holds no weights."""

    def __init__(self, window: int, shift: int = 0) -> None:
        super().__init__()
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window={window!r} is invalid: expected a positive int")
        if not isinstance(shift, int) or isinstance(shift, bool) or not 0 <= shift < window:
            raise ValueError(f"shift={shift!r} is invalid: expected an int in [0, {window})")
        self.window, self.shift = window, shift

    def extra_repr(self) -> str:
        return f"window={self.window}, shift={self.shift}"

    def shift_for(self, grid: tuple[int, int]) -> int:
        """The shift used on ``grid``: 0 when min(Hg, Wg) <= window (Swin's rule)."""
        return self.shift if min(grid) > self.window else 0

    def padded_grid(self, grid: tuple[int, int]) -> tuple[int, int]:
        """(Hg, Wg) rounded up to multiples of the window: (Hp, Wp)."""
        ws = self.window
        return -(-grid[0] // ws) * ws, -(-grid[1] // ws) * ws

    def num_windows(self, grid: tuple[int, int]) -> int:
        """nW, the windows per image: (Hp / Ws) * (Wp / Ws)."""
        hp, wp = self.padded_grid(grid)
        return (hp // self.window) * (wp // self.window)

    def _cut(self, x: Tensor, hp: int, wp: int) -> Tensor:
        """(B, Hp, Wp, D) -> (B*nW, Ws*Ws, D)."""
        b, d, ws = x.shape[0], x.shape[-1], self.window
        x = x.reshape(b, hp // ws, ws, wp // ws, ws, d).transpose(2, 3)
        return x.reshape(-1, ws * ws, d)

    def region_mask(
        self, grid: tuple[int, int], device: torch.device | str | None = None
    ) -> Tensor | None:
        """Shifted windows: (nW, Ws*Ws, Ws*Ws), True where both tokens come from the same
        region of the rolled map; None without shift."""
        s = self.shift_for(grid)
        if not s:
            return None
        hp, wp = self.padded_grid(grid)
        ws = self.window

        def regions(n: int) -> Tensor:  # 0, 1, 2 along one axis of the rolled map
            i = torch.arange(n, device=device)
            return (i >= n - ws).long() + (i >= n - s).long()

        label = regions(hp)[:, None] * 3 + regions(wp)[None, :]  # (Hp, Wp)
        label = self._cut(label[None, :, :, None], hp, wp)[..., 0]  # (nW, Ws*Ws)
        return label[:, :, None] == label[:, None, :]

    def partition(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, Tensor | None]:
        """x (B, Hg*Wg, D) -> windows (B*nW, Ws*Ws, D), mask (B*nW, 1, Ws*Ws, Ws*Ws) or None."""
        hg, wg = _check_grid(x, grid)
        hp, wp = self.padded_grid((hg, wg))
        b, _, d = x.shape
        x = x.reshape(b, hg, wg, d)
        if (hp, wp) != (hg, wg):
            x = F.pad(x, (0, 0, 0, wp - wg, 0, hp - hg))  # zeros below and to the right
        shift = self.shift_for((hg, wg))
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        windows = self._cut(x, hp, wp)
        mask = self.region_mask((hg, wg), x.device)
        if mask is not None:  # the same mask for every image: windows are image-major
            mask = mask.repeat(b, 1, 1)[:, None]
        return windows, mask

    def merge(self, windows: Tensor, grid: tuple[int, int]) -> Tensor:
        """windows (B*nW, Ws*Ws, D) -> x (B, Hg*Wg, D): the inverse of :meth:`partition`."""
        hg, wg = grid
        hp, wp = self.padded_grid(grid)
        ws, d = self.window, windows.shape[-1]
        nw = (hp // ws) * (wp // ws)
        if windows.ndim != 3 or windows.shape[1] != ws * ws or windows.shape[0] % nw:
            raise ValueError(
                f"windows has shape {tuple(windows.shape)}; expected (B*{nw}, {ws * ws}, D) "
                f"for grid={tuple(grid)} and window={ws}"
            )
        b = windows.shape[0] // nw
        x = windows.reshape(b, hp // ws, wp // ws, ws, ws, d).transpose(2, 3).reshape(b, hp, wp, d)
        shift = self.shift_for(grid)
        if shift:
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
        if (hp, wp) != (hg, wg):
            x = x[:, :hg, :wg]
        return x.reshape(b, hg * wg, d)


class RelativePositionBias(nn.Module):
    """Swin's relative position bias (Liu et al. 2021, eq. 4: softmax(Q K^T / sqrt(d) + B) V):
    one learned table of (2Ws-1)^2 x H values per layer, read at each pair's offset inside a
    window, B[h, i, j] = table[(dy + Ws-1) * (2Ws-1) + (dx + Ws-1), h] with (dy, dx) the query's
    (row, column) minus the key's. The table layout and the index are Hugging Face's
    (``relative_position_bias_table``, ``relative_position_index``).

    A per-layer bias provider (``MultiHeadAttention.bias_provider``): (q_pos (Lq,), k_pos
    (Lk,)) -> (H, Lq, Lk), positions 0..Ws*Ws-1 row-major inside the window (what a
    partitioned block passes)."""

    def __init__(self, heads: int, window: int) -> None:
        super().__init__()
        self.heads, self.window = heads, window
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))

    def extra_repr(self) -> str:
        return f"heads={self.heads}, window={self.window}"

    def no_weight_decay(self) -> set[str]:
        return {"table"}  # as the Swin paper's code: the table is not decayed

    def index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """(Lq, Lk) rows of the table for query and key positions inside a window."""
        ws = self.window
        dy = (q_pos // ws)[:, None] - (k_pos // ws)[None, :] + ws - 1
        dx = (q_pos % ws)[:, None] - (k_pos % ws)[None, :] + ws - 1
        return dy * (2 * ws - 1) + dx

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.table[self.index(q_pos, k_pos)].permute(2, 0, 1)  # (H, Lq, Lk)


__all__ = ["RelativePositionBias", "TokenPartition", "WindowPartition"]
