"""Confusion matrix as a picture: rows are true classes, columns predicted classes.

Colour is the fraction of each true class (rows sum to 1), on a square-root scale so that a few
mistakes stay visible next to a bright diagonal; every cell is labelled with its count.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tfam.viz.figure import save_figure

__all__ = ["plot_confusion"]


def plot_confusion(
    matrix: torch.Tensor | np.ndarray | Sequence[Sequence[int]],
    classes: Sequence[str],
    out: str | Path | None = None,
    title: str | None = None,
):  # noqa: ANN201  (a matplotlib Figure)
    """Draw a (K, K) count matrix (rows = true class) with class names on both axes; saved to
    ``out`` (PNG) when given. Returns the matplotlib Figure (Agg canvas; pyplot is not used)."""
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    counts = np.asarray(torch.as_tensor(matrix).cpu(), dtype=np.int64)
    k = len(classes)
    if counts.ndim != 2 or counts.shape != (k, k):
        raise ValueError(f"matrix has shape {counts.shape}; expected ({k}, {k}) for {k} classes")
    if (counts < 0).any():
        raise ValueError("matrix holds negative counts; expected a confusion matrix of counts")
    totals = counts.sum(axis=1, keepdims=True)
    frac = counts / np.maximum(totals, 1)
    side = min(14.0, 2.5 + 0.55 * k)
    fig = Figure(figsize=(side + 1.3, side), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(frac, cmap="Blues", norm=PowerNorm(0.5, vmin=0.0, vmax=1.0))
    if k <= 30:
        size = 9 if k <= 12 else 7
        for t in range(k):
            for p in range(k):
                if counts[t, p] or t == p:
                    dark = frac[t, p] > 0.45
                    ax.text(
                        p,
                        t,
                        str(counts[t, p]),
                        ha="center",
                        va="center",
                        fontsize=size,
                        color="white" if dark else "black",
                    )
    names = [str(c) for c in classes]
    long = max(len(n) for n in names) > 3
    ax.set_xticks(range(k))
    ax.set_xticklabels(names, rotation=45 if long else 0, ha="right" if long else "center")
    ax.set_yticks(range(k))
    ax.set_yticklabels([f"{n} ({int(c)})" for n, c in zip(names, totals[:, 0])])
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class (number of examples)")
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    bar.set_label("fraction of the true class")
    total, correct = int(counts.sum()), int(np.trace(counts))
    acc = f"accuracy {100 * correct / total:.2f}% ({correct}/{total})" if total else "no examples"
    fig.suptitle(f"{title}\n{acc}" if title else f"Confusion matrix, {acc}", fontsize=11)
    return save_figure(fig, out)
