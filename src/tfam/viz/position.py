"""What the position embeddings encode: cosine similarity between patch positions.

As in the ViT paper (Dosovitskiy et al. 2021, figure 7): for every patch position (i, j) a small
gh x gw map of the cosine similarity of its embedding to the embeddings of all patches. A model
that learned 2-D structure shows a bright spot at (i, j) fading with distance, often with its
row and column lit up. A fixed table (position='sincos2d') is drawn the same way, for
comparison: any scheme that adds a table to the tokens describes its values itself.

A model over a sequence (GPT) is drawn as one L x L map: the cosine similarity of the table's
row at each position to its row at every other (learned or sinusoidal positions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import POSITION_SCHEMES
from tfam.layers.position import PositionScheme, TokenPositions
from tfam.viz.figure import save_figure

__all__ = [
    "plot_position_similarity",
    "position_similarity",
    "sequence_position_similarity",
]


def _table_schemes() -> str:
    return ", ".join(repr(n) for n, s in POSITION_SCHEMES.items() if s.acts == "tokens")


def _nothing_to_show(scheme: PositionScheme) -> ValueError:
    return ValueError(
        f"position={scheme.name!r}: the model has no position embeddings to show "
        f"({scheme.describe()}); valid for schemes that add a table to the tokens: "
        + _table_schemes()
    )


def _unsupported(model: nn.Module) -> ValueError:
    return ValueError(
        f"{type(model).__name__} has no position table of its own to draw: viz pos draws a "
        "ViT's (over its patch grid, model.patch_embed) or a GPT's (over its sequence, "
        "model.position with a sequence length)"
    )


def _sequence_scheme(model: nn.Module) -> PositionScheme | None:
    """The model's scheme when it is over a sequence (no patch grid), else None."""
    scheme = getattr(model, "position", None)
    if isinstance(scheme, PositionScheme) and scheme.grid is None and scheme.length > 0:
        if getattr(model, "patch_embed", None) is None:
            return scheme
    return None


def sequence_position_similarity(model: nn.Module) -> Tensor:
    """-> (L, L) float32: [i, j] = cos(pos[i], pos[j]) over the model's L = max_positions
    positions, from what its sequence scheme (``model.position``: learned or sinusoidal)
    adds to the tokens; a scheme that adds nothing (RoPE, ALiBi, none) is one ValueError."""
    scheme = _sequence_scheme(model)
    if scheme is None:
        raise _unsupported(model)
    where = TokenPositions(0, scheme.length)
    values = scheme.values(where, getattr(model, "pos_embed", None))
    if values is None:
        raise _nothing_to_show(scheme)
    unit = F.normalize(values.detach().float().cpu(), dim=-1)  # (L, D)
    return unit @ unit.T


def position_similarity(model: nn.Module) -> Tensor:
    """-> (gh, gw, gh, gw) float32: [i, j, k, l] = cos(pos[i, j], pos[k, l]) over patch tokens
    (the prefix ([CLS]) entries are left out). Asks the model's position scheme
    (``model.position``) for what it adds on the model's patch grid; a scheme that adds nothing
    to the tokens has nothing to show."""
    scheme = getattr(model, "position", None)
    grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if not isinstance(scheme, PositionScheme) or grid is None:
        if _sequence_scheme(model) is not None:
            raise ValueError(
                f"{type(model).__name__} has positions over a sequence, not a patch grid: "
                "use sequence_position_similarity (plot_position_similarity draws either)"
            )
        raise _unsupported(model)
    values = scheme.values(tuple(grid), getattr(model, "pos_embed", None))
    if values is None:
        raise _nothing_to_show(scheme)
    if not isinstance(values, Tensor) or values.ndim != 3:
        raise ValueError(
            f"position values have shape {tuple(getattr(values, 'shape', ()))}; expected (1, L, D)"
        )
    pos, prefix = values, scheme.prefix
    gh, gw = model.patch_embed.grid_size
    table = pos.detach().float().cpu()[0, prefix:]  # (N, D)
    if table.shape[0] != gh * gw:
        raise ValueError(
            f"pos_embed has {table.shape[0]} patch rows after {prefix} prefix token(s), "
            f"expected gh*gw = {gh}*{gw}"
        )
    unit = F.normalize(table, dim=-1)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def plot_position_similarity(
    model: nn.Module, out: str | Path | None = None, title: str | None = None
):  # noqa: ANN201
    """Draw :func:`position_similarity` as a grid of small maps, one per patch position, on one
    colour scale (-1..1); a model over a sequence (GPT): :func:`sequence_position_similarity`
    as one L x L map. Saved to ``out`` (PNG) when given. Returns the matplotlib Figure."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    if _sequence_scheme(model) is not None:
        return _plot_sequence(model, out, title)
    sim = position_similarity(model).numpy()
    kind = "Learned" if model.position.learned else f"Fixed {model.position.title}"
    gh, gw = sim.shape[:2]
    # One mosaic image with a one-pixel gap between the small maps: a single imshow keeps
    # 14 x 14 grids (196 maps) as quick to draw as 4 x 4 ones.
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan, dtype=np.float32)
    for i in range(gh):
        for j in range(gw):
            r, c = i * (gh + 1), j * (gw + 1)
            mosaic[r : r + gh, c : c + gw] = sim[i, j]
    cmap = colormaps["viridis"].with_extremes(bad="white")
    side = min(9.0, max(4.0, 0.45 * max(gh, gw) * max(gh, gw) ** 0.5 + 3))
    fig = Figure(figsize=(side + 1.2, side + 0.6), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(mosaic, cmap=cmap, vmin=-1.0, vmax=1.0, interpolation="nearest")
    step = max(1, (max(gh, gw) + 13) // 14)  # at most ~14 tick labels per axis
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(0, gh, step)])
    ax.set_yticklabels([str(i + 1) for i in range(0, gh, step)])
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(0, gw, step)])
    ax.set_xticklabels([str(j + 1) for j in range(0, gw, step)])
    ax.tick_params(length=0)
    for side_name in ("top", "right", "bottom", "left"):
        ax.spines[side_name].set_visible(False)
    ax.set_xlabel("input patch column")
    ax.set_ylabel("input patch row")
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    bar.set_label("cosine similarity")
    fig.suptitle(
        title
        or f"{kind} position embedding similarity ({gh}x{gw} patches)\n"
        "each small map: one patch's similarity to every patch",
        fontsize=11,
    )
    return save_figure(fig, out)


def _plot_sequence(model: nn.Module, out: str | Path | None, title: str | None):  # noqa: ANN202
    """The L x L map of :func:`sequence_position_similarity`."""
    from matplotlib.figure import Figure

    sim = sequence_position_similarity(model).numpy()
    scheme = model.position
    kind = "Learned" if scheme.learned else f"Fixed {scheme.title}"
    fig = Figure(figsize=(6.4, 5.6), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(sim, cmap="viridis", vmin=-1.0, vmax=1.0, interpolation="nearest")
    ax.set_xlabel("position j")
    ax.set_ylabel("position i")
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    bar.set_label("cosine similarity")
    fig.suptitle(
        title
        or f"{kind} position embedding similarity ({sim.shape[0]} positions)\n"
        "row i: position i's similarity to every position",
        fontsize=11,
    )
    return save_figure(fig, out)
