"""Training curves from a run's ``metrics.csv`` (one row per epoch, written by the trainer):

    epoch,step,train_loss,train_acc,val_loss,val_acc,lr,seconds,images_per_s

Panels: loss (train and the held-out split), accuracy (train and held-out, in %, best held-out
epoch marked) and the learning rate when the file has it. The held-out split is ``val`` when the
run had a validation split (then the test split is scored once, at the end, not per epoch),
else ``test``. Accuracy columns holding fractions (every value <= 1) are
shown as percentages. Empty cells (a metric not measured that epoch) are skipped.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

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
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise ValueError(f"{path} is empty: expected a header row and one row per epoch")
        columns: dict[str, list[float]] = {name: [] for name in reader.fieldnames}
        rows = 0
        for row in reader:
            rows += 1
            for name in columns:
                columns[name].append(_number(row.get(name)))
    if rows == 0:
        raise ValueError(f"{path} has a header but no rows: no epoch has finished yet")
    return columns


def _series(columns: dict[str, list[float]], x: list[float], name: str) -> tuple[list, list]:
    ys = columns.get(name, [])
    pairs = [(a, b) for a, b in zip(x, ys) if math.isfinite(a) and math.isfinite(b)]
    return [a for a, _ in pairs], [b for _, b in pairs]


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

    ax = axes[0]
    for split in ("train", held):
        xs, ys = _series(columns, x, f"{split}_loss")
        if xs:
            ax.plot(xs, ys, label=split, marker=None if many else "o", ms=3, **styles[split])
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
        xs, ys = _series(columns, x, f"{split}_acc")
        ys = [v * scale for v in ys]
        if xs:
            ax.plot(xs, ys, label=split, marker=None if many else "o", ms=3, **styles[split])
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
        xs, ys = _series(columns, x, "lr")
        ax.plot(xs, ys, color="tab:green")
        ax.set_title("learning rate")
        ax.set_ylabel("lr")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

    for ax in axes:
        ax.set_xlabel(xname)
        ax.grid(True, alpha=0.3)
        if xname == "epoch":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(title or f"Training curves: {Path(metrics_csv).parent.name or metrics_csv}")
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, facecolor="white")
    return fig
