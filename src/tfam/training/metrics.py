"""Per-epoch metrics: OUT/metrics.csv and TensorBoard when it is installed.

Curves (OUT/curves.png) are drawn by a callback the caller passes to the trainer
(:class:`tfam.training.callbacks.CurvesCallback` with a plotting function), so this package
does not depend on the plotting code.

metrics.csv has one row per epoch. For image classification without a validation split its
columns are :data:`METRIC_COLUMNS`:

    epoch          1-based epoch number
    step           optimiser steps taken so far (whole run)
    train_loss     mean cross-entropy over the epoch's training images (without label smoothing,
                   so it compares with test_loss; on augmented images, as trained)
    train_acc      fraction of the epoch's training images classified right, in [0, 1]
    test_loss      mean cross-entropy on the test split after the epoch
    test_acc       fraction of the test split classified right, in [0, 1]
    lr             learning rate of the last optimiser step of the epoch (first group)
    seconds        wall time spent in the run up to the end of this epoch (training and
                   evaluation, summed over resumes; time while stopped is not counted)
    images_per_s   training throughput of the epoch (images per second of training time)

With a validation split, ``val_loss`` and ``val_acc`` (after each epoch) take the place of the
test columns, and the test split is evaluated once at the end. Another task has its own
metrics in place of loss/acc (``train_<metric>``, ``val_<metric>``) and its own unit in
place of images.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfam.training.checkpoint import atomic_write_bytes

__all__ = [
    "METRIC_COLUMNS",
    "MetricsLogger",
    "read_metrics_csv",
    "write_metrics_csv",
]

METRIC_COLUMNS = (
    "epoch",
    "step",
    "train_loss",
    "train_acc",
    "test_loss",
    "test_acc",
    "lr",
    "seconds",
    "images_per_s",
)
_INT_COLUMNS = {"epoch", "step", "phase"}


def write_metrics_csv(
    rows: Sequence[dict[str, Any]],
    path: str | os.PathLike,
    columns: Sequence[str] = METRIC_COLUMNS,
) -> Path:
    """Write every row (dicts with ``columns``) to ``path``, atomically.

    The whole file is rewritten each time: it is small, and a resumed run then holds exactly
    the rows of the epochs its checkpoint has seen.
    """
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(k, row[k]) for k in columns})
    return atomic_write_bytes(path, text.getvalue().encode())


def _fmt(key: str, value: Any) -> str:
    if key in _INT_COLUMNS:
        return str(int(value))
    return f"{float(value):.6g}"


def read_metrics_csv(path: str | os.PathLike) -> list[dict[str, float | int]]:
    """Rows of a metrics.csv, numbers parsed (epoch and step as int, the rest as float)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("epoch", "step") if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path} is not a tfam metrics.csv: missing columns {missing}")
        return [
            {k: int(v) if k in _INT_COLUMNS else float(v) for k, v in row.items()} for row in reader
        ]


class MetricsLogger:
    """Keeps the epoch rows, rewrites metrics.csv after each epoch, mirrors to TensorBoard.

    TensorBoard logging (OUT/tensorboard) happens only when ``tensorboard`` is importable;
    without it the logger silently skips it.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        rows: Sequence[dict[str, Any]] = (),
        tensorboard: bool = True,
        columns: Sequence[str] = METRIC_COLUMNS,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.columns = tuple(columns)
        self.csv_path = self.out_dir / "metrics.csv"
        self.rows: list[dict[str, Any]] = [dict(r) for r in rows]
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: CSV and PNG only
                SummaryWriter = None  # noqa: N806
            if SummaryWriter is not None:
                self._writer = SummaryWriter(log_dir=str(self.out_dir / "tensorboard"))
        # Written at once (a header alone for a new run): a resumed run drops the rows of
        # epochs its checkpoint has not seen.
        write_metrics_csv(self.rows, self.csv_path, self.columns)

    def log_epoch(self, row: dict[str, Any]) -> None:
        missing = [c for c in self.columns if c not in row]
        if missing:
            raise ValueError(f"metrics row lacks columns {missing}")
        self.rows.append(dict(row))
        write_metrics_csv(self.rows, self.csv_path, self.columns)
        if self._writer is not None:
            step = int(row["epoch"])
            for key in self.columns[2:]:
                group = (
                    "loss" if key.endswith("loss") else "accuracy" if key.endswith("acc") else "run"
                )
                self._writer.add_scalar(f"{group}/{key}", float(row[key]), step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
