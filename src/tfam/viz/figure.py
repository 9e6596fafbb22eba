"""What every plot shares: writing the finished figure."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_figure(fig: Figure, out: str | Path | None) -> Figure:
    """Write ``fig`` as a PNG (110 dpi, white background) to ``out`` when given, making its
    folder; returns ``fig``."""
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, facecolor="white")
    return fig
