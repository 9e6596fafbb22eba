"""Where the words of a sentence look: the self-attention of a text model (BERT, GPT, the
encoder–decoder's encoder), token by token and word by word.

A text model's self-attention gives, in every block and head, a distribution over the
sentence's tokens for every token (H, L, L), rows = queries. A WordPiece tokenizer cuts words
into pieces ("didn't" -> "didn", "'", "t"); :func:`word_attention` groups them back: the weight
word i gives word j is the mean over i's pieces of the sum over j's pieces, so rows still sum
to 1 (the special tokens [CLS] and [SEP] are units of their own: BERT's heads park much of
their weight there, Clark et al. 2019, "What does BERT look at?").

    blocks = self_attention(model, ids)                     # depth x (H, L, L)
    plot_self_attention(blocks[-1], tokens, "last.png")     # one panel per head + their mean
    plot_token_attention(blocks, tokens, query=9, out="it.png")  # one token, every block/head
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from tfam.viz.alignment import plot_alignment
from tfam.viz.figure import save_figure

__all__ = [
    "future_mass",
    "plot_self_attention",
    "plot_token_attention",
    "self_attention",
    "word_attention",
    "word_units",
]


def self_attention(model: nn.Module, ids: Tensor, group: str | None = None) -> list[Tensor]:
    """The self-attention of every block of ``model`` over one sequence ``ids`` (L,) or (1, L):
    depth x (H, L, L) float32 on the CPU, rows = queries.

    ``model(ids, return_attention=True)`` must give ``(output, AttentionWeights)`` (BERT, GPT);
    ``group`` picks a group other than the main stack (an encoder–decoder's ``"encoder"``,
    called as ``model(ids, ids, ...)``)."""
    x = ids[None] if ids.ndim == 1 else ids
    if x.ndim != 2 or x.shape[0] != 1:
        raise ValueError(f"ids has shape {tuple(ids.shape)}; expected one sequence, (L,) or (1, L)")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            args = (x, x) if getattr(model, "inputs", "") == "token-pairs" else (x,)
            _, weights = model(*args, return_attention=True)
    finally:
        model.train(was_training)
    blocks = weights[group] if group is not None else weights[:]
    if not blocks:
        raise ValueError("the model returned no attention weights")
    return [b[0].detach().float().cpu() for b in blocks]


def word_units(
    tokens: Sequence[str], word_ids: Sequence[int | None]
) -> tuple[list[list[int]], list[str]]:
    """Group token positions into units: each word's pieces (``word_ids[t]``, the index of the
    word token t belongs to) and each special token (``None``) alone. -> (positions of each
    unit in order, its label: the pieces joined, '##' dropped)."""
    if len(tokens) != len(word_ids):
        raise ValueError(f"{len(tokens)} tokens but {len(word_ids)} word ids")
    units: list[list[int]] = []
    labels: list[str] = []
    last: int | None = None
    for t, (tok, w) in enumerate(zip(tokens, word_ids)):
        if w is not None and w == last:
            units[-1].append(t)
            labels[-1] += tok.removeprefix("##")
        else:
            units.append([t])
            labels.append(tok)
        last = w
    return units, labels


def word_attention(weights: Tensor, units: Sequence[Sequence[int]]) -> Tensor:
    """Token attention (..., L, L) -> unit attention (..., U, U): the weight unit i gives unit j
    is the mean over i's tokens of the sum over j's tokens (rows keep summing to 1)."""
    length = weights.shape[-1]
    member = torch.zeros(len(units), length, dtype=weights.dtype)  # (U, L): 1 where t in unit
    for u, positions in enumerate(units):
        member[u, list(positions)] = 1.0
    if not torch.equal(member.sum(0), torch.ones(length, dtype=weights.dtype)):
        raise ValueError("units must cover every token position exactly once")
    mean_rows = member / member.sum(-1, keepdim=True)  # (U, L): average over a unit's queries
    return mean_rows @ weights @ member.T  # (..., U, U)


def future_mass(weights: Tensor) -> float:
    """The largest total weight any query gives to later positions (keys j > i) in (..., L, L):
    0 for a causal model, whatever its training."""
    length = weights.shape[-1]
    later = torch.ones(length, length, dtype=torch.bool).triu(1)
    return float((weights * later).sum(-1).max())


def plot_self_attention(
    weights: Tensor,
    tokens: Sequence[str],
    out: str | Path | None = None,
    *,
    title: str | None = None,
    layer_name: str = "",
):  # noqa: ANN201  (a matplotlib Figure)
    """One query x key panel per head and their mean (H, L, L) -> PNG at ``out``; the
    tokens label both axes (row i: where token i looks)."""
    return plot_alignment(
        weights,
        tokens,
        tokens,
        out,
        title=title or "Self-attention (query x key)",
        layer_name=layer_name,
        xlabel="key (looked at)",
        ylabel="query (looking)",
    )


def plot_token_attention(
    blocks: Sequence[Tensor],
    tokens: Sequence[str],
    query: int,
    out: str | Path | None = None,
    *,
    title: str | None = None,
    mark: Sequence[int] = (),
):  # noqa: ANN201  (a matplotlib Figure)
    """Where token ``query`` looks in every block and head: one panel per block, heads down,
    tokens across (blocks: depth x (H, L, L)); the columns in ``mark`` get their tick labels
    in bold red (the words a reader expects the query to find)."""
    from matplotlib.figure import Figure

    if not blocks:
        raise ValueError("blocks is empty: expected one (H, L, L) map per block")
    length = blocks[0].shape[-1]
    if len(tokens) != length or not 0 <= query < length:
        raise ValueError(
            f"{len(tokens)} tokens and query={query} for maps over {length} tokens: expected "
            f"{length} labels and 0 <= query < {length}"
        )
    rows = torch.stack([b[:, query, :] for b in blocks]).float()  # (depth, H, L)
    depth, heads, _ = rows.shape
    cols = min(depth, 3)
    nrows = math.ceil(depth / cols)
    fig = Figure(
        figsize=(min(6.5, 0.32 * length + 1.8) * cols, (0.25 * heads + 1.6) * nrows + 0.8),
        layout="constrained",
    )
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax in axes[depth:]:
        ax.set_axis_off()
    vmax = max(float(rows.max()), 1e-6)
    im = None
    for b, ax in enumerate(axes[:depth]):
        im = ax.imshow(rows[b].numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto",
                       interpolation="nearest")  # fmt: skip
        ax.set_xticks(range(length), labels=list(tokens), rotation=90, fontsize=7)
        for t in mark:
            label = ax.get_xticklabels()[t]
            label.set_color("red")
            label.set_fontweight("bold")
        ax.set_yticks(range(heads), labels=[str(h + 1) for h in range(heads)], fontsize=6)
        ax.set_ylabel("head", fontsize=8)
        ax.set_title(f"block {b + 1}", fontsize=9)
    assert im is not None
    fig.colorbar(im, ax=list(axes[:depth]), fraction=0.02, pad=0.01)
    fig.suptitle(
        (title or f"Where {tokens[query]!r} looks") + "  ·  bright = more attention", fontsize=11
    )
    return save_figure(fig, out)
