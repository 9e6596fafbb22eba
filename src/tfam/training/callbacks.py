"""Callbacks: code the trainer calls on rank 0 at the end of each epoch and of the run.

A callback is any object with one or both of these methods (a missing one is skipped):

    on_epoch_end(trainer, row)      row: the epoch's metrics, as written to metrics.csv
    on_finish(trainer, result)      result: the TrainResult; model files are written already

:class:`CurvesCallback` draws OUT/curves.png from metrics.csv with a plotting function the
caller passes in (the command line passes ``tfam.viz.plot_curves``), so the trainer itself
does not depend on the plotting code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Callback", "CurvesCallback"]


class Callback(Protocol):
    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None: ...

    def on_finish(self, trainer: Any, result: Any) -> None: ...


class CurvesCallback:
    """Writes ``OUT/curves.png`` at the end of a run with ``plot(metrics_csv, out_png,
    title=...)``; nothing when the run has no out_dir or finished no epoch. ``title``:
    default ``run_args["title"]`` of the trainer."""

    def __init__(
        self,
        plot: Callable[..., Any],
        filename: str = "curves.png",
        title: str | None = None,
    ) -> None:
        self.plot = plot
        self.filename = filename
        self.title = title

    def on_finish(self, trainer: Any, result: Any) -> Path | None:
        if trainer.out_dir is None or not trainer.history:
            return None
        out = Path(trainer.out_dir) / self.filename
        title = self.title if self.title is not None else trainer.run_args.get("title", "")
        self.plot(Path(trainer.out_dir) / "metrics.csv", out, title=title or None)
        return out
