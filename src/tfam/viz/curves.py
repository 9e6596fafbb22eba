"""Training curves from a run's ``metrics.csv`` (one row per epoch, written by the trainer):

    epoch,step,train_loss,train_acc,val_loss,val_acc,lr,seconds,images_per_s

Panels: loss (train and the held-out split), accuracy (train and held-out, in %, best held-out
epoch marked) and the learning rate when the file has it. The held-out split is ``val`` when the
run had a validation split (then the test split is scored once, at the end, not per epoch),
else ``test``. Accuracy columns holding fractions (every value <= 1) are
shown as percentages. Empty cells (a metric not measured that epoch) are skipped.

A run with refit (``tfam train --refit``) has a ``phase`` column: 1 for the selection run, 2
for the refit, a fresh model trained on train + validation whose epochs continue the
numbering. The refit's curves are drawn dashed, apart from the selection run's (its training
loss starts high again and its learning rate warms up anew), after a dotted line where it
begins.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from tfam.viz.figure import save_figure

__all__ = ["plot_curves", "read_metrics"]


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_metrics(metrics_csv: str | Path) -> dict[str, list[float]]:
    """Columns of a metrics CSV as float lists (NaN for empty or non-numeric cells)."""
    path = Path(metrics_csv)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: `tfam train` writes metrics.csv into the run directory"
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{path} is not a metrics CSV: line {line} is not UTF-8 text (byte "
            f"0x{data[err.start]:02x}); `tfam train` writes metrics.csv"
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if not reader.fieldnames:
            raise ValueError(f"{path} is empty: expected a header row and one row per epoch")
        columns: dict[str, list[float]] = {name: [] for name in reader.fieldnames}
        rows = 0
        for row in reader:
            rows += 1
            for name in columns:
                columns[name].append(_number(row.get(name)))
    except csv.Error as err:
        raise ValueError(
            f"{path} is not a metrics CSV: line {reader.line_num + 1}: {err}; `tfam train` writes "
            "metrics.csv"
        ) from None
    if rows == 0:
        raise ValueError(f"{path} has a header but no rows: no epoch has finished yet")
    return columns


def _series(
    columns: dict[str, list[float]], x: list[float], name: str, phase: int | None = None
) -> tuple[list, list]:
    """The finite (x, y) points of column ``name``; only the rows of ``phase`` when given (rows
    without a phase count as phase 1)."""
    ys = columns.get(name, [])
    phases = columns.get("phase", [])

    def row_phase(i: int) -> int:
        p = phases[i] if i < len(phases) else math.nan
        return int(p) if math.isfinite(p) else 1

    pairs = [
        (a, b)
        for i, (a, b) in enumerate(zip(x, ys))
        if math.isfinite(a) and math.isfinite(b) and (phase is None or row_phase(i) == phase)
    ]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _refit_start(columns: dict[str, list[float]], x: list[float]) -> float | None:
    """The x of the first refit row (phase 2), or None for a run without refit."""
    for a, p in zip(x, columns.get("phase", [])):
        if p == 2 and math.isfinite(a):
            return a
    return None


def plot_curves(metrics_csv: str | Path, out: str | Path | None = None, title: str | None = None):  # noqa: ANN201
    """Loss and accuracy (and learning rate) against epoch; saved to ``out`` (PNG) when given.
    Returns the matplotlib Figure (drawn with the Agg canvas; pyplot is not used)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = read_metrics(metrics_csv)
    xname = "epoch" if "epoch" in columns else ("step" if "step" in columns else None)
    if xname is None:
        raise ValueError(
            f"{metrics_csv} has no 'epoch' or 'step' column; columns: {', '.join(columns)}"
        )
    x = columns[xname]

    def has(name: str) -> bool:
        return any(math.isfinite(v) for v in columns.get(name, []))

    held = "val" if has("val_loss") or has("val_acc") else "test"
    known = ("train_loss", f"{held}_loss", "train_acc", f"{held}_acc")
    if not any(has(k) for k in known):
        raise ValueError(
            f"{metrics_csv} has none of the columns {', '.join(known)} with numbers; "
            f"columns: {', '.join(columns)}"
        )
    has_lr = any(math.isfinite(v) for v in columns.get("lr", []))
    n = 3 if has_lr else 2
    fig = Figure(figsize=(4.6 * n, 4.0), layout="constrained")
    axes = fig.subplots(1, n)
    styles = {"train": dict(color="tab:blue"), held: dict(color="tab:orange")}
    many = len(x) > 40  # markers only while they stay readable

    refit_at = _refit_start(columns, x)

    def draw(ax: Any, name: str, label: str | None, scale: float = 1.0, **style: Any) -> tuple:
        """Column ``name``: the selection run's points (every point, without refit), then the
        refit's, dashed and apart. Returns the selection run's (xs, ys), as drawn."""
        parts = [(_series(columns, x, name, phase=1 if refit_at is not None else None), "-", label)]
        if refit_at is not None:
            parts.append((_series(columns, x, name, phase=2), "--", label and f"{label} (refit)"))
        drawn = []
        for (xs, ys), ls, text in parts:
            ys = [v * scale for v in ys]
            if xs:
                ax.plot(xs, ys, ls=ls, label=text, marker=None if many else "o", ms=3, **style)
            drawn.append((xs, ys))
        return drawn[0]

    ax = axes[0]
    for split in ("train", held):
        draw(ax, f"{split}_loss", split, **styles[split])
    ax.set_title("loss (cross-entropy)")
    ax.set_ylabel("loss")
    losses = [
        v for k in ("train_loss", f"{held}_loss") for v in columns.get(k, []) if math.isfinite(v)
    ]
    if losses and min(losses) > 0 and max(losses) / min(losses) > 10:
        ax.set_yscale("log")  # a wide range: the late, small improvements stay visible
        ax.set_ylabel("loss (log scale)")

    ax = axes[1]
    accs = [v for k in ("train_acc", f"{held}_acc") for v in columns.get(k, []) if math.isfinite(v)]
    scale = 100.0 if accs and max(accs) <= 1.0 else 1.0
    for split in ("train", held):
        xs, ys = draw(ax, f"{split}_acc", split, scale, **styles[split])
        if split == held and ys:
            best = max(range(len(ys)), key=ys.__getitem__)
            ax.plot([xs[best]], [ys[best]], "*", color="tab:red", ms=12, zorder=5)
            ax.annotate(
                f"best {ys[best]:.2f}% ({xname} {xs[best]:g})\nfinal {ys[-1]:.2f}%",
                xy=(xs[best], ys[best]),
                xytext=(0.97, 0.05),
                textcoords="axes fraction",
                ha="right",
                va="bottom",
                fontsize=9,
                bbox=dict(boxstyle="round", fc="white", ec="0.7"),
            )
    ax.set_title("accuracy")
    ax.set_ylabel("accuracy (%)")

    if has_lr:
        ax = axes[2]
        draw(ax, "lr", None, color="tab:green")
        ax.set_title("learning rate")
        ax.set_ylabel("lr")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

    for ax in axes:
        if refit_at is not None:
            ax.axvline(refit_at - 0.5, color="0.4", ls=":", lw=1.2)
            ax.annotate(
                "refit: train + val →",
                xy=(refit_at - 0.5, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -3),
                textcoords="offset points",
                ha="left",
                va="top",
                fontsize=8,
                color="0.3",
            )
        ax.set_xlabel(xname)
        ax.grid(True, alpha=0.3)
        if xname == "epoch":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(title or f"Training curves: {Path(metrics_csv).parent.name or metrics_csv}")
    return save_figure(fig, out)
