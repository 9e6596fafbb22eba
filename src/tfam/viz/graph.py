"""Learned attention drawn on a graph's edges (the club, a molecule): a networkx layout, each
edge's width and opacity by the attention it carries.

An edge j -> i carries w[i, j] (what node i's query gives node j's key), averaged over the
heads (or one head); an undirected edge is drawn once with the mean of its two directions.
A self-loop's weight (a node attending to itself) sizes the node's ring.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.viz.figure import save_figure

__all__ = ["edge_attention", "plot_graph_attention"]


def edge_attention(weights: Tensor, edge_index: Tensor, prefix: int = 0) -> tuple[dict, Tensor]:
    """weights (N', N') of one graph (heads averaged), edge_index (2, E) of its own nodes ->
    ({(a, b) with a < b: mean of w[b, a] and w[a, b] over the directions present}, the
    self-attention w[i, i] per node (N,)). ``prefix``: virtual nodes before the graph's
    (their rows and columns are left out)."""
    w = weights[prefix:, prefix:]
    pairs: dict[tuple[int, int], list[float]] = {}
    for j, i in edge_index.t().tolist():  # j -> i: i attends to j
        if i == j:
            continue
        key = (min(i, j), max(i, j))
        pairs.setdefault(key, []).append(float(w[i, j]))
    return {k: sum(v) / len(v) for k, v in pairs.items()}, torch.diagonal(w).clone()


def _layout(graph: Any, seed: int = 0) -> tuple[Any, dict[int, Any]]:
    try:
        import networkx as nx
    except ImportError:
        raise ImportError(
            "drawing a graph needs the networkx package, which is not installed: "
            "pip install networkx"
        ) from None
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from((int(a), int(b)) for a, b in graph.edge_index.t().tolist() if a != b)
    # Kamada-Kawai keeps bond lengths even (molecules read as drawn); fixed, no seed needed.
    pos = nx.kamada_kawai_layout(g) if g.number_of_edges() else nx.circular_layout(g)
    return g, pos


def plot_graph_attention(
    graph: Any,
    maps: Sequence[Tensor],
    titles: Sequence[str],
    *,
    prefix: int = 0,
    node_labels: dict[int, str] | None = None,
    node_colors: Sequence[Any] | None = None,
    suptitle: str = "",
    out: str | Path | None = None,
) -> Any:
    """One panel per map: ``maps`` are (N', N') attention weights of ``graph`` (a
    :class:`~tfam.data.graphs.graph.Graph`), e.g. each block's heads averaged and their mean;
    edges drawn with width and opacity by their weight (scaled to the largest edge weight of
    each panel), nodes ringed by their self-attention. Written to ``out`` (PNG) when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g, pos = _layout(graph)
    cols = min(len(maps), 3)
    rows = -(-len(maps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.4 * rows), squeeze=False)
    colors = list(node_colors) if node_colors is not None else ["#9ecae1"] * graph.num_nodes
    for ax, w, title in zip(axes.flat, maps, titles, strict=False):
        edges, loops = edge_attention(w.float().cpu(), graph.edge_index, prefix)
        top = max(edges.values(), default=1.0) or 1.0
        for (a, b), value in edges.items():
            (xa, ya), (xb, yb) = pos[a], pos[b]
            share = value / top
            ax.plot([xa, xb], [ya, yb], color="#b2182b", lw=0.5 + 5.5 * share,
                    alpha=0.15 + 0.85 * share, zorder=1, solid_capstyle="round")  # fmt: skip
        xs = [pos[i][0] for i in range(graph.num_nodes)]
        ys = [pos[i][1] for i in range(graph.num_nodes)]
        rings = [40 + 260 * float(v) for v in loops]
        ax.scatter(xs, ys, s=rings, c=colors, edgecolors="#333333", linewidths=0.8, zorder=2)
        for i in range(graph.num_nodes):
            label = node_labels.get(i, str(i)) if node_labels is not None else str(i)
            ax.annotate(label, pos[i], ha="center", va="center", fontsize=7, zorder=3)
        ax.set_title(title, fontsize=9)
        ax.set_axis_off()
        ax.set_aspect("equal")
    for ax in list(axes.flat)[len(maps) :]:
        ax.set_axis_off()
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)
