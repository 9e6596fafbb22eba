"""Length extrapolation, scored: a character LM's loss on windows longer than it trained on.

Shared by ``benchmarks/bench_extrapolation.py`` (KJV character GPTs trained with ``tfam train``)
and the ``positions`` study (small GPTs trained in the study): the same windows, the same
score, the same table and plot. Results are ``{scheme: {"nats": {"L": float or "refused:
..."}}}``: a learned table refuses a length past its ``max_positions`` in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["cell", "extrapolation_table", "plot_extrapolation", "score", "score_lengths"]


@torch.no_grad()
def score(model: nn.Module, ids: Tensor, length: int, batch: int) -> float:
    """Mean nats per character over non-overlapping windows of ``length`` characters of
    ``ids`` (each window predicts its characters 2..length+1 from those before, within it)."""
    count = (len(ids) - 1) // length
    if count < 1:
        raise ValueError(f"{len(ids)} ids hold no window of {length + 1}")
    windows = torch.stack([ids[i * length : i * length + length + 1] for i in range(count)])
    total, n = 0.0, 0
    for start in range(0, count, batch):
        chunk = windows[start : start + batch]
        logits = model(chunk[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            chunk[:, 1:].reshape(-1),
            reduction="sum",
        )
        total += float(loss)
        n += chunk[:, 1:].numel()
    return total / n


def score_lengths(
    model: nn.Module, ids: Tensor, lengths: Sequence[int], tokens_per_batch: int = 16384
) -> dict[str, float | str]:
    """:func:`score` at each length (every length over the same ``ids``, so the same text);
    a length the model refuses (a learned table past max_positions) is ``"refused: <line>"``."""
    model.eval()
    out: dict[str, float | str] = {}
    for length in lengths:
        try:
            out[str(length)] = score(model, ids, length, batch=max(1, tokens_per_batch // length))
        except ValueError as err:
            out[str(length)] = f"refused: {str(err).splitlines()[0]}"
    return out


def cell(value: object) -> str:
    """A table cell: 3 decimals, 'refused' or '-'."""
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else str(value)
    return "refused" if isinstance(value, str) and value.startswith("refused") else "-"


def extrapolation_table(results: dict[str, dict[str, Any]], lengths: Sequence[int]) -> str:
    """Markdown: one row per scheme, its nats at each length and the rise from the first
    length to the last."""
    header = "| position | " + " | ".join(f"L={n}" for n in lengths) + " | rise first->last |"
    rows = [header, "|" + "---|" * (len(lengths) + 2)]
    for scheme, row in results.items():
        nats = row["nats"]
        cells = [cell(nats.get(str(n))) for n in lengths]
        first, last = nats.get(str(lengths[0])), nats.get(str(lengths[-1]))
        rise = (
            f"{last - first:+.3f}" if isinstance(first, float) and isinstance(last, float) else "-"
        )
        rows.append(f"| {scheme} | " + " | ".join(cells) + f" | {rise} |")
    return "\n".join(rows)


def plot_extrapolation(
    results: dict[str, dict[str, Any]],
    lengths: Sequence[int],
    png: str | Path,
    train_context: int,
    title: str = "Character GPT on the KJV: train short, test long",
    errors: dict[str, dict[str, float]] | None = None,
) -> Path:
    """Loss against evaluation length (log2 axis), one line per scheme, the training context
    dotted; ``errors`` (scheme -> length -> standard deviation) draws error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for scheme, row in results.items():
        xs = [n for n in lengths if isinstance(row["nats"].get(str(n)), float)]
        ys = [row["nats"][str(n)] for n in xs]
        if xs:
            err = [errors[scheme][str(n)] for n in xs] if errors and scheme in errors else None
            ax.errorbar(xs, ys, yerr=err, marker="o", label=scheme, capsize=3)
    ax.axvline(train_context, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.set_xlabel(f"evaluation length (characters); trained at {train_context}")
    ax.set_ylabel("test loss (nats / character)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
    return Path(png)
