"""Swin's windows over an image: the regular and the shifted partition of a stage, and the
attention inside one window of one block.

A model whose blocks carry a ``token_partition`` (:class:`~tfam.layers.windows.WindowPartition`)
and returns its weights per window (``attention_layout == "windows"``: (B * nW, H, Ws^2, Ws^2)
per block) is drawn; the windows' tokens are found by partitioning the token ids themselves,
so what is drawn is what the model computes (roll, padding and all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from tfam.viz.attention import _display_pixels, _show_image
from tfam.viz.figure import save_figure

__all__ = ["WindowMaps", "plot_windows", "window_maps", "window_tokens"]


def window_tokens(partition: nn.Module, grid: tuple[int, int]) -> Tensor:
    """(nW, Ws*Ws) int64: the token (row-major index on ``grid``) at each place of each
    window of ``partition``, -1 for padding; rolled as the partition rolls."""
    n = grid[0] * grid[1]
    ids = torch.arange(1, n + 1, dtype=torch.float64).view(1, n, 1)
    windows, _ = partition.partition(ids, grid)
    return windows[..., 0].round().long() - 1


@dataclass
class WindowMaps:
    """One stage's windows and one window's attention, for one image.

    stage, block: 1-based; grid: the stage's token grid; cell: pixels per token (h, w);
    regular, shifted: (gh, gw) window id of each token in the regular and the shifted
    partition (shifted is None when the stage does not shift: one window spans the grid);
    window: the shown window's index in the block's partition; tokens: (Ws*Ws,) its tokens
    (-1: padding); weights: (H, Ws*Ws, Ws*Ws) its attention in the block; probs: (K,)."""

    stage: int
    block: int
    grid: tuple[int, int]
    cell: tuple[float, float]
    regular: Tensor
    shifted: Tensor | None
    window: int
    tokens: Tensor
    weights: Tensor
    probs: Tensor


def _ids_on_grid(partition: nn.Module, grid: tuple[int, int]) -> Tensor:
    """(gh, gw): the window each token falls in."""
    tokens = window_tokens(partition, grid)
    out = torch.full((grid[0] * grid[1],), -1, dtype=torch.long)
    for w, row in enumerate(tokens):
        real = row[row >= 0]
        out[real] = w
    return out.view(grid)


def window_maps(
    model: nn.Module, image: Tensor, stage: int = 1, block: int = 1, window: int | None = None
) -> WindowMaps:
    """Run ``model(x, return_attention=True)`` on one image (C, H, W) and cut out stage
    ``stage``'s partitions and the attention of window ``window`` (default: the one holding the
    grid's centre) of that stage's block ``block`` (1-based)."""
    if getattr(type(model), "attention_layout", "tokens") != "windows":
        raise ValueError(
            f"{type(model).__name__} does not attend in windows: `tfam viz windows` draws a "
            "windowed model (Swin); use `tfam viz attention` for this one"
        )
    x = image.unsqueeze(0) if image.ndim == 3 else image
    stages = model.encoder.stages
    if not isinstance(stage, int) or not 1 <= stage <= len(stages):
        raise ValueError(f"stage={stage!r} is invalid: the model has stages 1..{len(stages)}")
    blocks = stages[stage - 1].blocks
    if not isinstance(block, int) or not 1 <= block <= len(blocks):
        raise ValueError(f"block={block!r} is invalid: stage {stage} has blocks 1..{len(blocks)}")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            param = next(model.parameters())
            logits, weights = model(x.to(param.device), return_attention=True)
    finally:
        model.train(was_training)
    grid0 = model.grid(x)
    grid = tuple(model.encoder.grids(grid0)[stage - 1])
    part = blocks[block - 1].token_partition
    spec = stages[stage - 1].spec
    plain = type(part)(part.window, 0)
    regular = _ids_on_grid(plain, grid)
    shifting = type(part)(part.window, part.window // 2 if spec.shift else 0)
    shifted = _ids_on_grid(shifting, grid) if shifting.shift_for(grid) else None
    tokens = window_tokens(part, grid)
    index = sum(len(s.blocks) for s in stages[: stage - 1]) + block - 1
    w = weights[index].float().cpu()  # (nW, H, L, L) for one image
    if window is None:
        centre = (grid[0] // 2) * grid[1] + grid[1] // 2
        window = int((tokens == centre).any(dim=1).nonzero()[0])
    if not isinstance(window, int) or not 0 <= window < tokens.shape[0]:
        raise ValueError(
            f"window={window!r} is invalid: block {stage}.{block} has windows "
            f"0..{tokens.shape[0] - 1}"
        )
    scale = 2 ** (stage - 1)
    patch = model.config.patch_size
    return WindowMaps(
        stage=stage,
        block=block,
        grid=grid,
        cell=(patch[0] * scale, patch[1] * scale),
        regular=regular,
        shifted=shifted,
        window=window,
        tokens=tokens[window],
        weights=w[window],
        probs=logits.float().softmax(dim=-1)[0].cpu(),
    )


def _paint(ids: Tensor, cell: tuple[float, float], size: tuple[int, int]) -> np.ndarray:
    """(gh, gw) window ids -> (H, W) float image of ids per pixel (NaN outside the grid)."""
    h, w = size
    rows = np.minimum((np.arange(h) // cell[0]).astype(int), ids.shape[0] - 1)
    cols = np.minimum((np.arange(w) // cell[1]).astype(int), ids.shape[1] - 1)
    return ids.numpy()[rows][:, cols].astype(np.float32)


def _window_lines(ax, ids: Tensor, cell: tuple[float, float], size: tuple[int, int]) -> None:  # noqa: ANN001
    """Draw the borders between windows: a segment between every two neighbouring tokens of
    different windows (pixel coordinates, clipped to the image)."""
    h, w = size
    g = ids.numpy()
    segments = []
    for r in range(g.shape[0]):
        for c in range(g.shape[1]):
            y0, y1 = r * cell[0] - 0.5, min((r + 1) * cell[0], h) - 0.5
            x0, x1 = c * cell[1] - 0.5, min((c + 1) * cell[1], w) - 0.5
            if c + 1 < g.shape[1] and g[r, c] != g[r, c + 1] and x1 < w - 0.5:
                segments.append(((x1, x1), (y0, y1)))
            if r + 1 < g.shape[0] and g[r, c] != g[r + 1, c] and y1 < h - 0.5:
                segments.append(((x0, x1), (y1, y1)))
    for xs, ys in segments:
        ax.plot(xs, ys, color="white", linewidth=1.5)
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)


def plot_windows(
    model: nn.Module,
    image_tensor: Tensor,
    out: str | Path | None = None,
    *,
    pixels: np.ndarray | None = None,
    stage: int = 1,
    block: int = 1,
    window: int | None = None,
    head: int | None = None,
    classes: list[str] | None = None,
    label: int | None = None,
):  # noqa: ANN201  (a matplotlib Figure)
    """Panels: the image; its regular windows; its shifted windows (tokens of one colour share
    a window: a window the roll wrapped around the edges is split, and its pieces attend only
    within themselves); the attention of the window's centre token over the window, laid over
    the image; the window's Ws^2 x Ws^2 attention matrix. ``head`` (0-based) picks one head,
    None averages them. Saved to ``out`` (PNG) when given."""
    from matplotlib.figure import Figure

    maps = window_maps(model, image_tensor, stage=stage, block=block, window=window)
    img = image_tensor[0] if image_tensor.ndim == 4 else image_tensor
    size = (img.shape[-2], img.shape[-1])
    if pixels is None:
        pixels = _display_pixels(img)
    pixels = np.asarray(pixels, dtype=np.float32)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    heads = maps.weights.shape[0]
    if head is not None and not (isinstance(head, int) and 0 <= head < heads):
        raise ValueError(f"head={head!r} is invalid: block {stage}.{block} has heads 1..{heads}")
    matrix = maps.weights.mean(dim=0) if head is None else maps.weights[head]  # (L, L)
    which = "mean over heads" if head is None else f"head {head + 1}"
    ws = math.isqrt(matrix.shape[-1])
    real = maps.tokens >= 0
    place = (ws // 2) * ws + ws // 2  # the window's centre place
    query = place if real[place] else int(real.nonzero()[0])

    fig = Figure(figsize=(14.5, 3.6), layout="constrained")
    axes = fig.subplots(1, 5)
    _show_image(axes[0], pixels)
    axes[0].set_title("input")
    for ax, ids, title in (
        (axes[1], maps.regular, f"regular windows ({ws}x{ws} tokens)"),
        (axes[2], maps.shifted, f"shifted windows (by {ws // 2})"),
    ):
        _show_image(ax, pixels)
        if ids is None:
            ax.set_title("no shift: one window spans the grid", fontsize=9)
            continue
        painted = _paint(ids, maps.cell, size)
        ax.imshow(painted, cmap="tab20", alpha=0.45, interpolation="nearest")
        _window_lines(ax, ids, maps.cell, size)
        ax.set_title(title, fontsize=10)
    # The centre token's attention over its window, on the image.
    heat = torch.full((maps.grid[0] * maps.grid[1],), float("nan"))
    heat[maps.tokens[real]] = matrix[query][real]
    _show_image(axes[3], pixels)
    im = axes[3].imshow(
        _paint(heat.view(maps.grid), maps.cell, size), cmap="inferno", alpha=0.7,
        interpolation="nearest",
    )  # fmt: skip
    row, col = divmod(int(maps.tokens[query]), maps.grid[1])
    axes[3].scatter([(col + 0.5) * maps.cell[1] - 0.5], [(row + 0.5) * maps.cell[0] - 0.5],
                    marker="x", color="cyan", s=40)  # fmt: skip
    axes[3].set_title(f"window {maps.window}: × attends ({which})", fontsize=10)
    fig.colorbar(im, ax=axes[3], fraction=0.046, pad=0.03)
    im = axes[4].imshow(matrix.numpy(), cmap="inferno", interpolation="nearest")
    axes[4].set_title(f"window {maps.window}: {ws * ws} x {ws * ws} weights", fontsize=10)
    axes[4].set_xlabel("key (place in the window)")
    axes[4].set_ylabel("query")
    fig.colorbar(im, ax=axes[4], fraction=0.046, pad=0.03)

    names = list(classes) if classes is not None else [str(i) for i in range(len(maps.probs))]
    top = int(maps.probs.argmax())
    verdict = f"predicted {names[top]} ({100 * float(maps.probs[top]):.1f}%)"
    if label is not None:
        verdict += f", true {names[label]}"
    fig.suptitle(
        f"Stage {maps.stage} ({maps.grid[0]}x{maps.grid[1]} tokens), block {maps.stage}."
        f"{maps.block}: windows and the attention inside one  ·  {verdict}",
        fontsize=11,
    )
    return save_figure(fig, out)
