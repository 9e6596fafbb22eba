"""The speed–accuracy–memory scatter of the long-sequence lab (``tfam.bench.long_sequences``):
one panel per task, one point per kernel, x = training steps/s, y = test accuracy, marker area
proportional to peak memory (LRA's Figure 3 in kind: Tay et al. 2020).

    fig = plot_tradeoff(summarize(rows), out="long_sequences.png")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfam.viz.figure import save_figure

__all__ = ["plot_tradeoff"]

_MARKERS = {"exact": "o", "pattern": "s", "approximate": "^"}


def plot_tradeoff(
    summary: Sequence[dict[str, Any]], out: str | Path | None = None, title: str = ""
) -> Any:
    """``summary``: rows with task, kernel, exactness, accuracy (0-1), accuracy_sd,
    steps_per_s, peak_mb and status (rows whose status is not "ok" are left out). Marker
    shape: exact (circle), pattern (square), approximate (triangle); area: peak MB scaled so
    the largest of a panel is 900 pt² (at least 20). Returns the figure (written to ``out``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [s for s in summary if s.get("status") == "ok"]
    tasks = list(dict.fromkeys(s["task"] for s in ok)) or ["(no rows)"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        rows = [s for s in ok if s["task"] == task]
        top = max([s["peak_mb"] for s in rows if s["peak_mb"] == s["peak_mb"]] + [1e-9])
        for s in rows:
            mb = s["peak_mb"] if s["peak_mb"] == s["peak_mb"] else 0.0  # NaN: smallest
            area = max(20.0, 900.0 * mb / top)
            ax.scatter(s["steps_per_s"], 100 * s["accuracy"], s=area, alpha=0.55,
                       marker=_MARKERS.get(s.get("exactness", ""), "o"))  # fmt: skip
            if s.get("accuracy_sd"):
                ax.errorbar(s["steps_per_s"], 100 * s["accuracy"], yerr=100 * s["accuracy_sd"],
                            fmt="none", ecolor="grey", lw=0.8)  # fmt: skip
            ax.annotate(f"{s['kernel']} ({mb:.0f} MB)", (s["steps_per_s"], 100 * s["accuracy"]),
                        fontsize=7, xytext=(4, 4), textcoords="offset points")  # fmt: skip
        length = rows[0]["length"] if rows else ""
        ax.set_title(f"{task} (L = {length})")
        ax.set_xlabel("training steps / s")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "speed, accuracy and peak memory (marker area) per kernel")
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return fig
