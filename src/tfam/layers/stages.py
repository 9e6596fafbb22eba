"""Hierarchical stacks: stages of blocks whose width, heads and windows differ, with a
down-sampling step between stages (Swin, Liu et al. 2021).

    tokens (B, Hg*Wg, D1) on the grid (Hg, Wg)
      -> stage 1: depth_1 x EncoderBlock(D1, H1) [attention within Ws x Ws windows]
      -> down-sample (patch merging: 2 x 2 neighbours -> one token, D1 -> D2)
      -> stage 2: depth_2 x EncoderBlock(D2, H2) ...
      -> (B, Hg'*Wg', D_last) on the last stage's grid

Each stage's blocks are built from ``config.replace(dim=..., heads=..., ffn_dim=...)`` of the
one config, so every other setting (norm, activation, kernel, dropout) is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import BaseConfig, check_bool, check_positive_int, config_error
from tfam.layers.block import EncoderBlock
from tfam.layers.norm import make_norm
from tfam.layers.windows import WindowPartition


@dataclass(frozen=True)
class StageSpec:
    """One stage: ``depth`` blocks of width ``dim`` with ``heads`` heads; ``window`` None for
    global attention, else attention within ``window`` x ``window`` windows, every second block
    shifted by window // 2 when ``shift`` (Swin). ``ffn_dim`` None: the config's MLP ratio
    (ffn_dim / dim) times this stage's width."""

    dim: int
    heads: int
    depth: int
    window: int | None = None
    shift: bool = False
    ffn_dim: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("dim", self.dim)
        check_positive_int("heads", self.heads)
        check_positive_int("depth", self.depth)
        if self.dim % self.heads:
            raise config_error("heads", self.heads, f"dim={self.dim} must be divisible by heads")
        if self.window is not None:
            check_positive_int("window", self.window)
        check_bool("shift", self.shift)
        if self.shift and self.window is None:
            raise config_error("shift", self.shift, "shifted windows need a window (window=None)")
        if self.ffn_dim is not None:
            check_positive_int("ffn_dim", self.ffn_dim)

    def partition(self, index: int) -> WindowPartition | None:
        """The token partition of the stage's block ``index`` (0-based): shifted on odd ones."""
        if self.window is None:
            return None
        shifted = self.shift and index % 2 == 1
        return WindowPartition(self.window, self.window // 2 if shifted else 0)


class Downsample(Protocol):
    """A step between stages: (x (B, Hg*Wg, D), grid) -> (x (B, Hg'*Wg', D'), grid'), and
    ``output_grid(grid)`` says grid' without running."""

    def __call__(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, tuple[int, int]]: ...

    def output_grid(self, grid: tuple[int, int]) -> tuple[int, int]: ...


class PatchMerging(nn.Module):
    """Swin's down-sampling: each 2 x 2 group of neighbouring tokens is concatenated (4D), then
    normalised and projected to ``out_dim`` (Linear 4D -> D', no bias; Swin: D' = 2D). An odd
    grid is padded with zero tokens at the bottom and right first.

    Built from the config of the stage before (``dim`` D, ``norm``, ``norm_eps``).
    x (B, Hg*Wg, D) on (Hg, Wg) -> (B, ceil(Hg/2)*ceil(Wg/2), D'), grid (ceil(Hg/2), ceil(Wg/2)).
    The 4D features are ordered x[2i, 2j], x[2i+1, 2j], x[2i, 2j+1], x[2i+1, 2j+1] (Swin's).
    """

    def __init__(self, config: BaseConfig, out_dim: int | None = None) -> None:
        super().__init__()
        d = config.dim
        out_dim = 2 * d if out_dim is None else out_dim
        check_positive_int("out_dim", out_dim)
        self.dim, self.out_dim = d, out_dim
        self.norm = make_norm(config.norm, 4 * d, config.norm_eps)
        self.reduction = nn.Linear(4 * d, out_dim, bias=False)

    def extra_repr(self) -> str:
        return f"{self.dim} -> {self.out_dim}"

    @staticmethod
    def output_grid(grid: tuple[int, int]) -> tuple[int, int]:
        return (grid[0] + 1) // 2, (grid[1] + 1) // 2

    def forward(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, tuple[int, int]]:
        b, n, d = x.shape
        hg, wg = grid
        if n != hg * wg:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; expected (B, {hg * wg}, D) for grid={tuple(grid)}"
            )
        x = x.reshape(b, hg, wg, d)
        if hg % 2 or wg % 2:
            x = F.pad(x, (0, 0, 0, wg % 2, 0, hg % 2))
        x = torch.cat(
            [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1
        )
        out = self.output_grid(grid)
        return self.reduction(self.norm(x.reshape(b, out[0] * out[1], 4 * d))), out


class Stage(nn.Module):
    """An optional down-sampling step (stages after the first), then ``spec.depth`` blocks.

    x (B, Hg*Wg, D_prev), grid -> (B, Hg'*Wg', D), grid', per block weights or None."""

    def __init__(
        self, config: BaseConfig, spec: StageSpec, downsample: nn.Module | None, rates: list[float]
    ) -> None:
        super().__init__()
        self.spec = spec
        self.downsample = downsample
        self.blocks = nn.ModuleList()
        for i, rate in enumerate(rates):
            block = EncoderBlock(config, drop_path=rate)  # each built (and initialised) alone
            block.token_partition = spec.partition(i)
            self.blocks.append(block)

    def forward(
        self, x: Tensor, grid: tuple[int, int], need_weights: bool = False
    ) -> tuple[Tensor, tuple[int, int], list[Tensor | None]]:
        if self.downsample is not None:
            x, grid = self.downsample(x, grid)
        weights = []
        for block in self.blocks:
            x, w = block(x, need_weights=need_weights, grid=grid)
            weights.append(w)
        return x, grid, weights


class StageStack(nn.Module):
    """Stages of :class:`~tfam.layers.block.EncoderBlock`\\ s, one :class:`StageSpec` each,
    with ``downsample(config_of_previous_stage, next_dim)`` (default :class:`PatchMerging`)
    at the start of every stage after the first. Drop-path rises linearly from 0 to
    ``config.drop_path`` over all blocks of all stages.

    forward: x (B, Hg*Wg, D_1) on ``grid`` (Hg, Wg) -> (B, Hg'*Wg', D_last), the last grid
    (Hg', Wg'), and with ``need_weights`` one weight tensor per block, in order: (B*nW, H_s,
    Ws*Ws, Ws*Ws) in windowed stages, (B, H_s, N_s, N_s) in global ones.
    """

    def __init__(
        self,
        config: BaseConfig,
        stages: Sequence[StageSpec],
        downsample: Callable[[BaseConfig, int], nn.Module] = PatchMerging,
    ) -> None:
        super().__init__()
        if not stages or not all(isinstance(s, StageSpec) for s in stages):
            raise ValueError(f"stages={stages!r} is invalid: expected one or more StageSpec")
        total = sum(s.depth for s in stages)
        rates = [config.drop_path * i / max(total - 1, 1) for i in range(total)]
        ratio = config.ffn_dim / config.dim
        self.configs = [
            config.replace(
                dim=s.dim, heads=s.heads, depth=s.depth, ffn_dim=s.ffn_dim or int(s.dim * ratio)
            )
            for s in stages
        ]
        self.stages = nn.ModuleList()
        start = 0
        for i, (spec, c) in enumerate(zip(stages, self.configs, strict=True)):
            down = downsample(self.configs[i - 1], spec.dim) if i else None
            self.stages.append(Stage(c, spec, down, rates[start : start + spec.depth]))
            start += spec.depth

    @property
    def specs(self) -> list[StageSpec]:
        return [stage.spec for stage in self.stages]

    @property
    def blocks(self) -> list[EncoderBlock]:
        """Every block, stage after stage (a plain list: the stages hold them)."""
        return [block for stage in self.stages for block in stage.blocks]

    def grids(self, grid: tuple[int, int]) -> list[tuple[int, int]]:
        """The grid each stage's blocks run on, for an input on ``grid``."""
        out = []
        for stage in self.stages:
            if stage.downsample is not None:
                grid = stage.downsample.output_grid(grid)
            out.append(tuple(grid))
        return out

    def forward(
        self, x: Tensor, grid: tuple[int, int], need_weights: bool = False
    ) -> tuple[Tensor, tuple[int, int], list[Any] | None]:
        """x (B, Hg*Wg, D_1), grid (Hg, Wg) -> x (B, N_last, D_last), grid, weights or None."""
        width = self.stages[0].spec.dim
        if x.ndim != 3 or x.shape[-1] != width:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; expected (B, Hg*Wg, {width}): tokens of the "
                "first stage's width"
            )
        all_weights: list[Any] = []
        for stage in self.stages:
            x, grid, weights = stage(x, grid, need_weights)
            all_weights += weights
        return x, grid, (all_weights if need_weights else None)


__all__ = ["Downsample", "PatchMerging", "Stage", "StageSpec", "StageStack"]
