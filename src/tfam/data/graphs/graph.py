"""One graph, a dataset of graphs and what a model needs to know about them.

A :class:`Graph` holds node features (N, F) float32, its edges as ``edge_index`` (2, E) int64
[source; target] (an undirected edge is two directed ones) with a type per edge (E,) int64 in
[0, edge_types), and its labels: a class per node (N,) int64 with -100 where a node is
unlabelled (node classification), or one value or class for the whole graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "GRAPH_FILE",
    "UNLABELLED",
    "Graph",
    "GraphDataset",
    "GraphInfo",
    "describe_graphs",
    "holdout_indices",
    "target_stats",
]

GRAPH_FILE = "graph.json"  # what a graph run's inputs are (see GraphDataset.run_files)
UNLABELLED = -100  # a node no loss or metric counts (the tasks' IGNORE_INDEX)


@dataclass
class Graph:
    """nodes (N, F) float32; edge_index (2, E) int64, row 0 the source j, row 1 the target i
    (i attends to j); edge_types (E,) int64; node_labels (N,) int64 (-100: unlabelled) or
    None; target: the graph's value (float) or class (int), or None; name: what it is
    (a SMILES, "karate")."""

    nodes: Tensor
    edge_index: Tensor
    edge_types: Tensor
    node_labels: Tensor | None = None
    target: float | int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        n = self.nodes.shape[0]
        if self.nodes.ndim != 2:
            raise ValueError(f"nodes has shape {tuple(self.nodes.shape)}; expected (N, F)")
        if self.edge_index.ndim != 2 or self.edge_index.shape[0] != 2:
            raise ValueError(
                f"edge_index has shape {tuple(self.edge_index.shape)}; expected (2, E)"
            )
        if self.edge_types.shape != (self.edge_index.shape[1],):
            raise ValueError(
                f"edge_types has shape {tuple(self.edge_types.shape)}; expected "
                f"({self.edge_index.shape[1]},), one type per edge"
            )
        if self.edge_index.numel() and (
            int(self.edge_index.min()) < 0 or int(self.edge_index.max()) >= n
        ):
            raise ValueError(f"edge_index names nodes outside 0..{n - 1}")

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_edges(self) -> int:
        """Directed edges (an undirected bond counts twice)."""
        return int(self.edge_index.shape[1])


class GraphInfo:
    """What a model needs to know about a graph data set, without loading it; ``facts`` (a
    function, called once on first use) gives what needs the data: ``train_size``,
    ``test_size``, and for regression ``target_shift`` / ``target_scale`` (the training
    targets' mean and standard deviation, which the model's output is scaled by).

    ``in_features`` F; ``edge_types``; ``classes`` (empty for regression); ``num_labels``
    (classes, or 1 for one value); ``head`` ("node", "graph" or "value"); ``unit`` of a value
    ("Å²"); ``node_noun``: what a node is, in the data's words ("members" of the club)."""

    def __init__(
        self,
        name: str,
        in_features: int,
        edge_types: int,
        classes: tuple[str, ...],
        head: str,
        description: str,
        facts: Callable[[], dict[str, Any]] | dict[str, Any] | None = None,
        unit: str = "",
        inputs: str = "smiles",
        node_noun: str = "nodes",
    ) -> None:
        self.name = name
        self.in_features = int(in_features)
        self.edge_types = int(edge_types)
        self.classes = tuple(classes)
        self.head = head
        self.description = description
        self.unit = unit
        self.inputs = inputs  # "smiles" (molecules) or "nodes" (one graph's nodes by index)
        self.node_noun = node_noun  # what a node is, in the data's words ("members")
        self._facts_fn = facts
        self._cached: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"GraphInfo({self.name!r}, F={self.in_features}, head={self.head!r})"

    @property
    def num_labels(self) -> int:
        return len(self.classes) if self.classes else 1

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def _facts(self) -> dict[str, Any]:
        if self._cached is None:
            f = self._facts_fn
            self._cached = dict(f() if callable(f) else (f or {}))
        return self._cached

    @property
    def train_size(self) -> int:
        return int(self._facts().get("train_size", 0))

    @property
    def test_size(self) -> int:
        return int(self._facts().get("test_size", 0))

    @property
    def target_shift(self) -> float:
        return float(self._facts().get("target_shift", 0.0))

    @property
    def target_scale(self) -> float:
        return float(self._facts().get("target_scale", 1.0))


class GraphDataset(torch.utils.data.Dataset):
    """A list of :class:`Graph` items with the facts a task and a model read:
    ``in_features``, ``edge_types``, ``classes``, ``num_labels``, ``head``, ``target_shift``,
    ``target_scale``, ``unit`` (of a value: "A^2").

    ``facts``: what a run must keep to load the same split again (karate: the ``seed`` that
    drew its labelled members, and the members), written into graph.json; ``note``: a line
    ``tfam train`` prints before training (which members are labelled), or ""."""

    def __init__(
        self,
        graphs: Sequence[Graph],
        info: GraphInfo,
        split: str = "",
        *,
        facts: dict[str, Any] | None = None,
        note: str = "",
    ) -> None:
        self.graphs = list(graphs)
        self.info = info
        self.split = split
        self.facts = dict(facts or {})
        self.note = note
        self.in_features = info.in_features
        self.edge_types = info.edge_types
        self.classes = info.classes
        self.num_labels = info.num_labels
        self.head = info.head
        self.unit = info.unit

    @property
    def target_shift(self) -> float:
        return self.info.target_shift

    @property
    def target_scale(self) -> float:
        return self.info.target_scale

    @property
    def item_noun(self) -> str:
        """What one item is, for "N train / M test ..." lines: molecules (a SMILES data set)
        or graphs."""
        return "molecules" if self.info.inputs == "smiles" else "graphs"

    def labelled_nodes(self) -> int:
        """How many nodes carry a label in this split (node classification's examples)."""
        return sum(
            int((g.node_labels != UNLABELLED).sum())
            for g in self.graphs
            if g.node_labels is not None
        )

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, i: int) -> Graph:
        return self.graphs[i]

    def run_files(self) -> dict[str, dict[str, Any]]:
        """The JSON file a run trained on these graphs keeps beside its model, graph.json: the
        data set, what its inputs are ("smiles": molecules typed by the user; "nodes": one
        graph, whose nodes are asked by index), the head, classes and unit."""
        return {
            GRAPH_FILE: {
                "data": self.info.name,
                "inputs": self.info.inputs,
                "head": self.head,
                "classes": list(self.classes),
                "unit": self.unit,
                **self.facts,
            }
        }

    def __repr__(self) -> str:
        return f"GraphDataset({self.info.name!r}, {self.split!r}, {len(self)} graphs)"


def holdout_indices(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded random split of range(n): (kept, held out), held out = round(fraction * n),
    each list in increasing order."""
    g = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(n, generator=g).tolist()
    k = round(fraction * n)
    return sorted(order[k:]), sorted(order[:k])


def describe_graphs(graphs: Sequence[Graph]) -> str:
    """'N graphs, M nodes on average' for descriptions."""
    if not graphs:
        return "no graphs"
    mean = sum(g.num_nodes for g in graphs) / len(graphs)
    return f"{len(graphs)} graphs, {mean:.1f} nodes on average"


def target_stats(values: Sequence[float]) -> dict[str, Any]:
    """The mean and standard deviation (>= 1e-6) of regression targets."""
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    std = float(t.std()) if len(t) > 1 else 1.0
    return {"target_shift": float(t.mean()), "target_scale": max(std, 1e-6)}
