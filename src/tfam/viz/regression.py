"""A regression's predictions against the truth: one point per example, the y = x line where a
perfect model's points lie, and its MAE, RMSE and R² in the title (`tfam eval` of a graph
regression run: the NCI molecules' polar surface area in Å²)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tfam.viz.figure import save_figure

__all__ = ["plot_regression"]


def plot_regression(
    true: torch.Tensor | np.ndarray | Sequence[float],
    predicted: torch.Tensor | np.ndarray | Sequence[float],
    out: str | Path | None = None,
    title: str | None = None,
    unit: str = "",
):  # noqa: ANN201  (a matplotlib Figure)
    """Scatter ``predicted`` (n,) against ``true`` (n,) with the y = x line over both's range;
    the title gives n, MAE, RMSE (in ``unit``) and R² = 1 − SSE/SST. Saved to ``out`` (PNG)
    when given; returns the matplotlib Figure (Agg canvas; pyplot is not used)."""
    from matplotlib.figure import Figure

    y = np.asarray(torch.as_tensor(true, dtype=torch.float64).cpu()).reshape(-1)
    p = np.asarray(torch.as_tensor(predicted, dtype=torch.float64).cpu()).reshape(-1)
    if y.shape != p.shape or y.size == 0:
        raise ValueError(
            f"true has {y.size} values and predicted {p.size}; expected the same number, >= 1"
        )
    error = p - y
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((error**2).sum()) / sst if sst > 0 else float("nan")
    suffix = f" {unit}" if unit else ""
    stats = (
        f"n = {y.size}, MAE {np.abs(error).mean():.3g}{suffix}, "
        f"RMSE {np.sqrt((error**2).mean()):.3g}{suffix}, R² {r2:.4f}"
    )
    fig = Figure(figsize=(5.6, 5.4), layout="constrained")
    ax = fig.subplots()
    lo, hi = float(min(y.min(), p.min())), float(max(y.max(), p.max()))
    pad = 0.03 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.35", lw=1, label="y = x")
    ax.scatter(y, p, s=9 if y.size > 300 else 18, alpha=0.5 if y.size > 300 else 0.8,
               color="tab:blue", edgecolors="none")  # fmt: skip
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_aspect("equal")
    ax.set_xlabel(f"true{f' ({unit})' if unit else ''}")
    ax.set_ylabel(f"predicted{f' ({unit})' if unit else ''}")
    ax.legend(loc="upper left", frameon=False)
    fig.suptitle(f"{title}\n{stats}" if title else stats, fontsize=10)
    return save_figure(fig, out)
