"""The complexity lab's picture: time and peak memory against length, log-log, per kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfam.viz.figure import save_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _reference_lines(ax: Axes, lengths: list[int], values: list[float]) -> None:
    """Dashed n and n^2 lines through the geometric middle of the measured values, so a
    kernel's slope reads against them."""
    if not values or len(lengths) < 2:
        return
    n0, n1 = min(lengths), max(lengths)
    mid_n = math.sqrt(n0 * n1)
    mid_v = math.exp(sum(math.log(v) for v in values) / len(values))
    for power, style in ((1, (0, (4, 3))), (2, (0, (1, 2)))):
        ys = [mid_v * (n / mid_n) ** power for n in (n0, n1)]
        ax.plot((n0, n1), ys, color="0.55", linestyle=style, linewidth=1.0,
                label="∝ n" if power == 1 else "∝ n²")  # fmt: skip


def plot_complexity(
    points: Sequence[Any], out: str | Path | None = None, title: str = ""
) -> Figure:
    """Two panels, time (ms) and peak memory (MB) against the length, log-log, one line per
    kernel, with n and n² reference slopes. ``points`` have ``kernel``, ``length``, ``ms``,
    ``peak_mb``, ``ok`` and ``mark`` (tfam.bench's Point); a point that is not ok (timeout,
    oom, error, skipped) is an x at the top of both panels, labelled with its mark."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6))
    axes = fig.subplots(1, 2)
    kernels = list(dict.fromkeys(p.kernel for p in points))
    colors = {k: f"C{i % 10}" for i, k in enumerate(kernels)}
    lengths = sorted({p.length for p in points})
    for ax, field, label in ((axes[0], "ms", "time per call (ms)"),
                             (axes[1], "peak_mb", "peak memory (MB)")):  # fmt: skip
        measured: list[float] = []
        for kernel in kernels:
            mine = [p for p in points if p.kernel == kernel]
            good = [p for p in mine if p.ok and (getattr(p, field) or 0) > 0]
            if good:
                xs, ys = [p.length for p in good], [getattr(p, field) for p in good]
                ax.plot(xs, ys, marker="o", color=colors[kernel], label=kernel)
                measured += ys
            for p in mine:
                if not p.ok:
                    # x in data coordinates, y at the top of the panel: a point with no number.
                    ax.plot(p.length, 0.96, marker="x", markersize=9, color=colors[kernel],
                            transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip
                    ax.annotate(f"{kernel}: {p.mark}", (p.length, 0.96), xytext=(4, -12),
                                textcoords="offset points", xycoords=ax.get_xaxis_transform(),
                                fontsize=7, color=colors[kernel])  # fmt: skip
        _reference_lines(ax, lengths, measured)
        ax.set_xscale("log")
        if measured:
            ax.set_yscale("log")
        ax.set_xlabel("length n (tokens)")
        ax.set_ylabel(label)
        ax.set_xticks(lengths, [str(n) for n in lengths], rotation=45 if len(lengths) > 6 else 0)
        ax.minorticks_off()
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # nothing measured: no empty legend
            ax.legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)
