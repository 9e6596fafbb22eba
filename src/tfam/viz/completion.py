"""Image completions (iGPT, Chen et al. 2020, fig. 1): each row an original image, the prompt
it was given (its top rows; the rest blanked) and the model's completions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from torch import Tensor

from tfam.viz.figure import save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["completion_grid"]


def completion_grid(
    originals: Tensor,
    completions: Tensor,
    prompt_rows: int,
    out: str | Path | None = None,
    *,
    scale: float = 255.0,
    labels: list[str] | None = None,
    title: str = "",
    names: list[str] | None = None,
) -> Figure:
    """originals uint8 (N, C, H, W), completions uint8 (N, K, C, H, W), the ``prompt_rows``
    rows each completion was given -> a figure of N rows: original | prompt | K completions
    (a line marks where the prompt ends). ``scale``: the images' white (16 for the digits).
    ``names``: the K completion columns' titles (default: sample 1..K).
    Written to ``out`` (PNG) when given (Agg canvas; pyplot is not used)."""
    from matplotlib.figure import Figure

    n, k = completions.shape[:2]
    if names is not None and len(names) != k:
        raise ValueError(f"names has {len(names)} titles; expected one a column ({k})")
    c = originals.shape[1]
    cols = k + 2
    fig = Figure(figsize=(1.1 * cols, 1.1 * n + 0.4), layout="constrained")
    axes = fig.subplots(n, cols, squeeze=False)

    def show(ax, image: Tensor, line: bool = False) -> None:
        array = image.float().div(scale).clamp(0, 1).permute(1, 2, 0).numpy()
        if c == 1:
            ax.imshow(array[..., 0], cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(array)
        if line:
            ax.axhline(prompt_rows - 0.5, color="tab:red", linewidth=0.8)
        ax.set_xticks([])
        ax.set_yticks([])

    for i in range(n):
        prompt = originals[i].clone()
        prompt[:, prompt_rows:] = 0
        show(axes[i][0], originals[i])
        show(axes[i][1], prompt, line=True)
        for j in range(k):
            show(axes[i][2 + j], completions[i, j], line=True)
        if labels is not None:
            axes[i][0].set_ylabel(labels[i], fontsize=7)
    names = names if names is not None else [f"sample {s + 1}" for s in range(k)]
    for j, name in enumerate(["original", "prompt", *names]):
        axes[0][j].set_title(name, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    return save_figure(fig, out)
