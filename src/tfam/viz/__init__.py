"""Pictures of what a model does: attention maps and rollout, position-embedding similarity,
training curves, confusion matrices, a regression's predicted-vs-true scatter, cross-attention alignments of an encoder–decoder.

    from tfam.viz import attention_rollout, plot_attention, plot_position_similarity
    fig = plot_attention(model, image, "attention.png")    # per-head [CLS] maps + rollout
    plot_position_similarity(model, "position.png")         # ViT paper, figure 7
    plot_curves("runs/digits/metrics.csv", "curves.png")
    plot_confusion(result.confusion, result.classes, "confusion.png")
    plot_complexity(points, "attention.png")     # tfam bench attention: time, memory vs n
    plot_alignment(cross_attention(model, src, tgt), src_tokens, tgt_tokens, "align.png")

Figures are built with ``matplotlib.figure.Figure`` and written by the Agg canvas, without pyplot:
nothing here changes the global matplotlib backend or needs a display. Every ``plot_*`` returns
the Figure and, given ``out``, saves it as PNG.
"""

from tfam.viz.alignment import cross_attention, plot_alignment
from tfam.viz.attention import AttentionMaps, attention_maps, attention_rollout, plot_attention
from tfam.viz.completion import completion_grid
from tfam.viz.complexity import plot_complexity
from tfam.viz.confusion import plot_confusion
from tfam.viz.curves import plot_curves, read_metrics
from tfam.viz.graph import edge_attention, plot_graph_attention
from tfam.viz.position import (
    plot_position_similarity,
    position_similarity,
    sequence_position_similarity,
)
from tfam.viz.regression import plot_regression
from tfam.viz.text import (
    plot_self_attention,
    plot_token_attention,
    self_attention,
    word_attention,
)

__all__ = [
    "edge_attention",
    "plot_graph_attention",
    "AttentionMaps",
    "attention_maps",
    "attention_rollout",
    "completion_grid",
    "cross_attention",
    "plot_alignment",
    "plot_attention",
    "plot_complexity",
    "plot_confusion",
    "plot_curves",
    "plot_position_similarity",
    "plot_regression",
    "plot_self_attention",
    "plot_token_attention",
    "self_attention",
    "word_attention",
    "position_similarity",
    "sequence_position_similarity",
    "read_metrics",
]
