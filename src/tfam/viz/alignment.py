"""Where an encoder–decoder looks while it writes: the cross-attention alignment.

For every target token the decoder's cross-attention holds a distribution over the source tokens
(each head of each decoder block: (H, Lt, Ls), rows summing to 1 over the real source tokens).
Drawn as a target × source matrix with the tokens as tick labels — the alignment figures of
Bahdanau et al. 2015 and Vaswani et al. 2017 — it shows which source words each output word was
read from: a diagonal for a copy task, an anti-diagonal for reversal, a mostly monotone band
with local swaps for translation.

    weights = cross_attention(model, src_ids, tgt_ids, layer=-1)     # (H, Lt, Ls)
    plot_alignment(weights, src_tokens, tgt_tokens, "align.png")     # one panel per head + mean
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from tfam.viz.figure import save_figure

__all__ = ["cross_attention", "plot_alignment"]


def cross_attention(model: nn.Module, src_ids: Tensor, tgt_ids: Tensor, layer: int = -1) -> Tensor:
    """Cross-attention weights of decoder block ``layer`` (0-based, negative from the end).

    src_ids (Ls,) or (1, Ls), tgt_ids (Lt,) or (1, Lt): the decoder's input (``<bos>`` y1 ...);
    row t is where the decoder looked to predict the token after tgt_ids[t]. The model must
    take ``model(src, tgt, return_attention=True)`` and return ``(logits, weights)`` with a
    ``"cross"`` group (:class:`~tfam.models.AttentionWeights`, one (B, H, Lt, Ls) map per
    decoder block). -> (H, Lt, Ls) float32 on the CPU.
    """
    src = src_ids[None] if src_ids.ndim == 1 else src_ids
    tgt = tgt_ids[None] if tgt_ids.ndim == 1 else tgt_ids
    if src.shape[0] != 1 or tgt.shape[0] != 1:
        raise ValueError(
            f"src_ids {tuple(src_ids.shape)} and tgt_ids {tuple(tgt_ids.shape)}: expected one "
            "sequence each, (L,) or (1, L)"
        )
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            _, attn = model(src, tgt, return_attention=True)
    finally:
        model.train(was_training)
    blocks = attn["cross"] if "cross" in getattr(attn, "groups", ()) else ()
    if not blocks:
        raise ValueError("the model returned no cross-attention: is it an encoder–decoder?")
    depth = len(blocks)
    if not -depth <= layer < depth:
        raise ValueError(
            f"layer={layer} is invalid: the decoder has {depth} blocks; expected 0..{depth - 1} "
            f"or -{depth}..-1"
        )
    return blocks[layer][0].detach().float().cpu()


def _fontsize(count: int) -> float:
    # Tick labels shrink as rows and columns multiply, so long sentences stay legible.
    return max(4.0, min(9.0, 220.0 / max(count, 1)))


def plot_alignment(
    weights: Tensor,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    out: str | Path | None = None,
    *,
    title: str | None = None,
    layer_name: str = "",
    xlabel: str = "source",
    ylabel: str = "target",
):  # noqa: ANN201  (a matplotlib Figure)
    """One alignment panel per head and their mean (bold), target tokens down, source tokens
    across; saved to ``out`` (PNG) when given.

    weights: (H, Lt, Ls) cross-attention (:func:`cross_attention`) or (Lt, Ls) for one map.
    src_tokens: Ls labels; tgt_tokens: Lt labels (the token predicted at each row).
    Returns the matplotlib Figure (drawn with the Agg canvas; pyplot is not used).
    """
    from matplotlib.figure import Figure

    w = weights.detach().float().cpu()
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights has shape {tuple(weights.shape)}; expected (H, Lt, Ls)")
    heads, lt, ls = w.shape
    if len(src_tokens) != ls or len(tgt_tokens) != lt:
        raise ValueError(
            f"weights are {lt} target x {ls} source tokens, but {len(tgt_tokens)} target and "
            f"{len(src_tokens)} source labels were given"
        )
    panels = [(f"head {h + 1}", w[h]) for h in range(heads)]
    if heads > 1:
        panels.append((f"mean of {heads} heads", w.mean(dim=0)))

    n = len(panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    # Each panel grows with the token counts, within limits that keep the PNG reasonable.
    cell_w = min(7.0, max(2.6, 0.22 * ls + 1.2))
    cell_h = min(7.0, max(2.4, 0.22 * lt + 1.0))
    fig = Figure(figsize=(cell_w * cols, cell_h * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_axis_off()
    xs, ys = _fontsize(ls), _fontsize(lt)
    for ax, (name, grid) in zip(axes, panels):
        im = ax.imshow(
            # From 0 to the panel's largest weight: over a long source even a sharp alignment
            # has small weights, which a fixed 0..1 scale would leave dark.
            grid.numpy(),
            cmap="viridis",
            vmin=0.0,
            vmax=max(float(grid.max()), 1e-6),
            aspect="auto",
            interpolation="nearest",
        )
        ax.set_xticks(range(ls), labels=list(src_tokens), rotation=90, fontsize=xs)
        ax.set_yticks(range(lt), labels=list(tgt_tokens), fontsize=ys)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(name, fontweight="bold" if name.startswith("mean") else "normal")
        bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        bar.ax.tick_params(labelsize=7)
    head = title or "Cross-attention alignment (target x source)"
    if layer_name:
        head += f", {layer_name}"
    fig.suptitle(f"{head}  ·  bright = more attention", fontsize=11)
    return save_figure(fig, out)
