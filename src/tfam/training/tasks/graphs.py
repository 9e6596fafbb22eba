"""Tasks on graphs (tfam's graph Transformer): a label per node, a label per graph, a number
per graph. The source documents' three outputs of self-attention on a graph: "decide whether a
node has some property" (a label per node), "predict a molecule's property, such as how
hydrophilic it is" (one value or label per graph).

Items are :class:`tfam.data.graphs.graph.Graph`; :func:`collate_graphs` pads a batch to its
largest graph: ``{"nodes" (B, N, F), "edge_index" (B, 2, E) padded with -1, "edge_types"
(B, E), "node_mask" (B, N) True = real node, "labels"}``; the model is called as
``model(nodes, edge_index, node_mask, edge_types)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.training.tasks.base import (
    IGNORE_INDEX,
    BaseTask,
    Batch,
    CrossEntropyTask,
    model_config,
    ratio,
)

__all__ = [
    "GraphClassification",
    "GraphRegression",
    "NodeClassification",
    "collate_graphs",
    "graph_output",
]


def collate_graphs(items: Sequence[Any]) -> Batch:
    """Graphs -> the padded batch (without labels): nodes (B, N, F) float32 (zeros past a
    graph's nodes), edge_index (B, 2, E) int64 (-1 past its edges), edge_types (B, E) int64
    (0 past them), node_mask (B, N) bool."""
    b = len(items)
    n = max((g.num_nodes for g in items), default=0)
    e = max((g.num_edges for g in items), default=0)
    f = items[0].nodes.shape[1] if items else 0
    nodes = torch.zeros(b, n, f, dtype=torch.float32)
    edge_index = torch.full((b, 2, e), -1, dtype=torch.int64)
    edge_types = torch.zeros(b, e, dtype=torch.int64)
    node_mask = torch.zeros(b, n, dtype=torch.bool)
    for i, g in enumerate(items):
        nodes[i, : g.num_nodes] = g.nodes
        edge_index[i, :, : g.num_edges] = g.edge_index
        edge_types[i, : g.num_edges] = g.edge_types
        node_mask[i, : g.num_nodes] = True
    return {
        "nodes": nodes,
        "edge_index": edge_index,
        "edge_types": edge_types,
        "node_mask": node_mask,
    }


def graph_output(model: nn.Module, batch: Batch) -> Tensor:
    """The model's output for a padded graph batch, in float32."""
    return model(
        batch["nodes"], batch["edge_index"], batch["node_mask"], batch["edge_types"]
    ).float()


class NodeClassification(CrossEntropyTask):
    """A label per node: ``model(...) -> logits (B, N, C)``; only labelled nodes count (label
    -100 elsewhere: the unlabelled members, padding), so a graph with 4 labelled nodes trains
    on those 4. Metrics ``loss`` and ``acc``, means over labelled nodes."""

    name = "node-classification"
    objective = "classify-nodes"
    primary_metric = "acc"
    higher_is_better = True
    unit = "graphs"

    def collate(self, items: Sequence[Any]) -> Batch:
        batch = collate_graphs(items)
        labels = torch.full(batch["node_mask"].shape, IGNORE_INDEX, dtype=torch.int64)
        for i, g in enumerate(items):
            if g.node_labels is None:
                raise ValueError(
                    f"graph {g.name or i!r} has no node labels: node-classification needs a "
                    "label (or -100) per node"
                )
            labels[i, : g.num_nodes] = g.node_labels
        return {**batch, "labels": labels}

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return graph_output(model, batch)


class GraphClassification(CrossEntropyTask):
    """A label per graph: ``model(...) -> logits (B, C)``; items' ``target`` is the class id.
    Metrics ``loss`` and ``acc``, means over graphs."""

    name = "graph-classification"
    objective = "classify"
    primary_metric = "acc"
    higher_is_better = True
    unit = "graphs"

    def collate(self, items: Sequence[Any]) -> Batch:
        labels = torch.tensor([int(g.target) for g in items], dtype=torch.int64)
        return {**collate_graphs(items), "labels": labels}

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return graph_output(model, batch)


class GraphRegression(BaseTask):
    """One number per graph: ``model(...) -> values (B,)`` in the data's units (the graph
    family's value head scales by ``target_scale`` and shifts by ``target_shift``, the
    training targets' spread and mean).

    Training loss: the squared error of the normalised values, ((y_hat - y) / target_scale)^2,
    summed over graphs (mean over the global batch after ``count``). Metrics: ``loss`` (that
    normalised mean squared error), ``mae`` and ``rmse`` in the data's units, and ``r2`` =
    1 - SSE / SST over the evaluated graphs (kept as sums: Σ|e|, Σe², Σy, Σy², n).
    """

    name = "graph-regression"
    objective = "regress"
    metrics: tuple[str, ...] = ("loss", "mae", "rmse", "r2")
    primary_metric = "mae"
    higher_is_better = False
    unit = "graphs"

    def collate(self, items: Sequence[Any]) -> Batch:
        labels = torch.tensor([float(g.target) for g in items], dtype=torch.float64)
        return {**collate_graphs(items), "labels": labels}

    def count(self, batch: Batch) -> Tensor:
        return torch.tensor(float(batch["labels"].shape[0]), dtype=torch.float64)

    def _scale(self, model: nn.Module) -> float:
        return float(getattr(model_config(model), "target_scale", 1.0) or 1.0)

    def _sums(
        self, values: Tensor, labels: Tensor, scale: float
    ) -> tuple[Tensor, dict[str, Tensor]]:
        y = labels.to(values.dtype)
        loss = ((values - y) / scale).square().sum()
        error = values.detach().double() - labels.double()
        sums = {
            "loss": loss.detach().double(),
            "abs_error": error.abs().sum(),
            "sq_error": error.square().sum(),
            "y_sum": labels.double().sum(),
            "y_sq": labels.double().square().sum(),
            "count": torch.tensor(float(labels.shape[0]), dtype=torch.float64),
        }
        return loss, sums

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        return self._sums(graph_output(model, batch), batch["labels"], self._scale(model))

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        return self._sums(graph_output(model, batch), batch["labels"], self._scale(model))[1]

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        n = sums.get("count", 0.0)
        total = sums.get("y_sq", 0.0) - (sums.get("y_sum", 0.0) ** 2 / n if n else 0.0)
        r2 = 1.0 - sums.get("sq_error", 0.0) / total if n and total > 0 else float("nan")
        mse = ratio(sums, "sq_error")
        return {
            "loss": ratio(sums, "loss"),
            "mae": ratio(sums, "abs_error"),
            "rmse": mse**0.5 if mse == mse else mse,
            "r2": r2,
        }

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """The values (B,) in the data's units."""
        return graph_output(model, batch)
