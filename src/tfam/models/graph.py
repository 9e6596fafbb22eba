"""A graph Transformer, as the source documents describe self-attention on a graph: a node is
a vector, and attention is computed only between nodes joined by an edge.

node features (B, N, F) (one-hot atoms, one-hot identities, the user's columns)
  -> linear embedding                                    (B, N, D)
  -> [+ virtual node]: one learned D-vector joined to every node in both directions
     (readout "cls": the graph's [CLS])                  (B, 1 + N, D)
  -> [+ position]: none by default: a graph's nodes have no order ("sinusoidal" adds the
     sinusoids of each node's index, e.g. an atom's place in its SMILES)
  -> N x [ X1 = X0 + MHSA(LN(X0), graph mask, edge-type bias); X_out = X1 + MLP(LN(X1)) ]
     graph mask: node i attends to node j only where the edge j -> i exists, and to itself
     (``graph_mask=False``: to every real node, the comparison without the graph);
     edge-type bias (``edge_bias``): a learned scalar per head and edge type (a bond's order;
     self-loops and virtual edges have types of their own), added to the score of that edge:
     s_ij = q_i . k_j / sqrt(Dh) + b[type(j -> i), h]
  -> LN -> head, chosen by ``config.head``:
       "node":  Linear, a label per node                 (B, N, num_labels)
       "graph": readout -> Linear, a label per graph     (B, num_labels)
       "value": readout -> Linear -> * target_scale + target_shift, one number per graph (B,)
       "none":  the node states                          (B, N, D)
     readout (``config.readout``): "mean" or "sum" of the real nodes' states, or "cls", the
     virtual node's.

Inputs: ``nodes`` (B, N, F) float, ``edge_index`` (B, 2, E) int64 [source; target] padded
with -1 (or (2, E) for one graph), ``node_mask`` (B, N) bool True = real node (default: all),
``edge_types`` (B, E) (or (E,)) int64 in [0, edge_types) (default: type 0). The edges are
handed to attention as a :class:`~tfam.layers.masks.GraphMask` (an edge list, O(E), read by
the ``edges`` kernel; every other kernel gets its dense (B, 1, N, N) form).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import (
    ATTENTION_KERNELS,
    BaseConfig,
    check_bool,
    check_choice,
    check_positive_int,
    config_error,
)
from tfam.layers import TransformerStack, make_norm
from tfam.layers.masks import GraphMask
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset

HEADS = ("none", "node", "graph", "value")
READOUTS = ("mean", "sum", "cls")


def _default_attention() -> str:
    """``edges`` (scores only along edges, O(E)) when registered, else ``math``."""
    return "edges" if "edges" in ATTENTION_KERNELS else "math"


@dataclass
class GraphConfig(BaseConfig):
    """The graph Transformer: node features -> linear embedding -> pre-norm encoder under the
    graph mask -> a head per node or per graph (see the module docstring).

    ``in_features`` F; ``num_labels`` the classes of a "node" or "graph" head (a "value"
    head predicts one number whatever it says); ``edge_types`` T (the data's edge types, ids 0..T-1; self-loops get
    id T and virtual-node edges T + 1 in the bias table); ``edge_bias``: the learned per-head
    scalar per edge type; ``graph_mask``: attention only along edges (False: over every real
    node); ``readout`` for a graph head; ``target_shift``/``target_scale``: a value head's
    output is ``y * scale + shift`` (the training targets' mean and standard deviation, so the
    model answers in the data's units); ``max_nodes``: the sinusoid table's rows (longer
    graphs compute theirs).
    """

    family: ClassVar[str] = "graph"
    # Nodes have no order: no position by default; the sinusoids of the node index on request.
    positions: ClassVar[tuple[str, ...] | None] = ("none", "sinusoidal")

    dim: int = 64
    depth: int = 4
    heads: int = 4
    ffn_dim: int | None = None
    norm_first: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    position: str = "none"
    attention: str = field(default_factory=_default_attention)
    in_features: int = 16
    edge_types: int = 1
    edge_bias: bool = True
    graph_mask: bool = True
    head: str = "node"
    num_labels: int = 2
    readout: str = "mean"
    target_shift: float = 0.0
    target_scale: float = 1.0
    max_nodes: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("in_features", self.in_features)
        check_positive_int("edge_types", self.edge_types)
        check_bool("edge_bias", self.edge_bias)
        check_bool("graph_mask", self.graph_mask)
        check_choice("head", self.head, HEADS)
        check_positive_int("num_labels", self.num_labels)
        check_choice("readout", self.readout, READOUTS)
        check_positive_int("max_nodes", self.max_nodes)
        if not self.target_scale > 0:
            raise config_error("target_scale", self.target_scale, "expected a number > 0")

    @property
    def prefix(self) -> int:
        """Virtual nodes before the graph's own (1 with readout "cls")."""
        return 1 if self.readout == "cls" else 0

    @property
    def type_rows(self) -> int:
        """Rows of the edge-type bias table: the data's T types, self-loops, virtual edges."""
        return self.edge_types + 2


class GraphTransformer(TfamModel):
    """``model(nodes, edge_index, node_mask=None, edge_types=None)`` -> the head's output
    (:meth:`forward_head`) over :meth:`forward_features`."""

    config_class = GraphConfig
    title = "graph Transformer"
    inputs = "graph"
    tasks = ("node-classification", "graph-classification", "graph-regression")
    head_tasks = {
        "node": "node-classification",
        "graph": "graph-classification",
        "value": "graph-regression",
    }

    def __init__(self, config: GraphConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = nn.Linear(c.in_features, c.dim)
        self.virtual = nn.Parameter(torch.zeros(1, 1, c.dim)) if c.prefix else None
        self.position = build_position(c, length=c.max_nodes + c.prefix)
        self.drop = nn.Dropout(c.dropout)
        # One table for every block (as a stack's ALiBi bias): b[type, head].
        self.edge_bias = nn.Parameter(torch.zeros(c.type_rows, c.heads)) if c.edge_bias else None
        self.encoder = TransformerStack(c)
        self.norm = make_norm(c.norm, c.dim, c.norm_eps) if c.norm_first else nn.Identity()
        width = 1 if c.head == "value" else c.num_labels
        self.head = nn.Linear(c.dim, width) if c.head != "none" else None
        self.init_weights()

    def init_weights(self) -> None:
        super().init_weights()
        std = self.config.init_std
        if self.virtual is not None:
            nn.init.trunc_normal_(self.virtual, std=std, a=-2 * std, b=2 * std)
        if self.edge_bias is not None:
            nn.init.zeros_(self.edge_bias)  # no preference between edge types at the start

    def no_weight_decay(self) -> set[str]:
        return {n for n in ("virtual", "edge_bias") if getattr(self, n) is not None}

    @property
    def feature_dim(self) -> int:
        return self.config.dim

    # -- inputs --------------------------------------------------------------------------------
    def check_inputs(
        self,
        nodes: Tensor,
        edge_index: Tensor,
        node_mask: Tensor | None,
        edge_types: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The inputs batched: nodes (B, N, F), edge_index (B, 2, E), node_mask (B, N) bool,
        edge_types (B, E) int64; one line for a wrong shape or type."""
        c = self.config
        if nodes.ndim == 2:
            nodes = nodes[None]
        if nodes.ndim != 3 or nodes.shape[-1] != c.in_features or not nodes.is_floating_point():
            raise ValueError(
                f"nodes has shape {tuple(nodes.shape)} and dtype {nodes.dtype}; expected float "
                f"node features (B, N, F={c.in_features})"
            )
        b, n = nodes.shape[:2]
        if edge_index.ndim == 2:
            edge_index = edge_index[None].expand(b, -1, -1)
        if edge_index.ndim != 3 or edge_index.shape[:2] != (b, 2) or edge_index.is_floating_point():
            raise ValueError(
                f"edge_index has shape {tuple(edge_index.shape)}; expected int64 (B={b}, 2, E) "
                "[source; target], padded with -1"
            )
        if node_mask is None:
            node_mask = torch.ones(b, n, dtype=torch.bool, device=nodes.device)
        if tuple(node_mask.shape) != (b, n):
            raise ValueError(
                f"node_mask has shape {tuple(node_mask.shape)}; expected (B, N) = {(b, n)}, "
                "True = real node"
            )
        e = edge_index.shape[-1]
        if edge_types is None:
            edge_types = torch.zeros(b, e, dtype=torch.int64, device=nodes.device)
        if edge_types.ndim == 1:
            edge_types = edge_types[None].expand(b, -1)
        if tuple(edge_types.shape) != (b, e):
            raise ValueError(
                f"edge_types has shape {tuple(edge_types.shape)}; expected (B, E) = {(b, e)}"
            )
        return nodes, edge_index, node_mask.bool(), edge_types

    def graph_mask(self, edge_index: Tensor, node_mask: Tensor, edge_types: Tensor) -> GraphMask:
        """The batch's attention pattern as an edge list, in the layout attention sees (the
        virtual node first, when there is one): each edge j -> i lets i attend to j; every
        real node attends to itself (type T); the virtual node and every real node attend to
        each other (type T + 1). Types outside [0, T) are one error line. A padded node attends
        only to itself."""
        c, p = self.config, self.config.prefix
        b, n = node_mask.shape
        real = edge_index >= 0
        pair = real.all(dim=1)  # (B, E): a column with a -1 is padding
        if edge_types.numel() and bool(
            ((edge_types < 0) | (edge_types >= c.edge_types))[pair].any()
        ):
            raise ValueError(
                f"edge_types holds ids outside [0, edge_types={c.edge_types}) on real edges"
            )
        index = torch.where(pair[:, None, :], edge_index + p, torch.full_like(edge_index, -1))
        types = torch.where(pair, edge_types, torch.zeros_like(edge_types))
        if p:
            # Virtual edges: node 0 <-> every real node, both directions.
            nodes = torch.arange(p, n + p, device=edge_index.device)[None].expand(b, n)
            nodes = torch.where(node_mask, nodes, torch.full_like(nodes, -1))
            hub = torch.where(node_mask, torch.zeros_like(nodes), torch.full_like(nodes, -1))
            index = torch.cat(
                [index, torch.stack([nodes, hub], 1), torch.stack([hub, nodes], 1)], dim=2
            )
            virtual = torch.full((b, 2 * n), c.edge_types + 1, device=types.device)
            types = torch.cat([types, virtual.to(types.dtype)], dim=1)
        # Padded nodes keep a self-loop: their rows stay distributions, and no edge joins them
        # to a real node, so they change nothing.
        counts = torch.full((b,), n + p, dtype=torch.int64, device=node_mask.device)
        return GraphMask.from_edge_index(
            index,
            counts,
            self_loops=True,
            edge_types=types,
            self_loop_type=c.edge_types,
        )

    def _attention_inputs(
        self, edge_index: Tensor, node_mask: Tensor, edge_types: Tensor, length: int
    ) -> tuple[Any, Tensor | None]:
        """(mask, bias) for the stack: the GraphMask (with its per-edge bias) under the graph
        mask; without it, a key mask over the real nodes and the edge bias as a dense float
        (B, H, L, L) (0 off the edges). On the meta device (explain) a dense all-True mask and
        bias of the right shapes: an edge list's length depends on values meta has not."""
        c = self.config
        b = node_mask.shape[0]
        if node_mask.device.type == "meta":
            mask = torch.ones(b, 1, length, length, dtype=torch.bool, device="meta")
            bias = None
            if self.edge_bias is not None:
                bias = self.edge_bias[:1].reshape(1, c.heads, 1, 1).expand(b, -1, length, length)
            return mask, bias
        gm = self.graph_mask(edge_index, node_mask, edge_types)
        if self.edge_bias is not None:
            gm = gm.with_bias(gm.type_bias(self.edge_bias))
        if c.graph_mask:
            return gm, None
        real = torch.cat(
            [torch.ones(b, c.prefix, dtype=torch.bool, device=node_mask.device), node_mask], 1
        )
        return real[:, None, None, :], gm.dense_bias(c.heads)

    # -- forward -------------------------------------------------------------------------------
    def forward_features(
        self,
        nodes: Tensor,
        edge_index: Tensor,
        node_mask: Tensor | None = None,
        edge_types: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """nodes (B, N, F), edge_index (B, 2, E) (or (2, E)), node_mask (B, N), edge_types
        (B, E) -> what the head reads: the node states (B, N, D) after the final LN for heads
        "node" and "none", the graph's readout (B, D) for "graph" and "value"
        [, :class:`AttentionWeights`: "encoder", depth x (B, H, N', N'), N' = N (+ 1 with the
        virtual node, which is row and column 0)]."""
        nodes, edge_index, node_mask, edge_types = self.check_inputs(
            nodes, edge_index, node_mask, edge_types
        )
        x = self.embed(nodes)
        if self.virtual is not None:
            x = torch.cat([self.virtual.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        length = x.shape[1]
        x = self.position.add(x, TokenPositions(0, length), None)
        x = self.drop(x)
        # A GraphMask goes to the kernel as it is: ``edges`` reads its edge list, every other
        # kernel is handed its dense form (AttentionKernel.__call__).
        mask, bias = self._attention_inputs(edge_index, node_mask, edge_types, length)
        x, weights = self.encoder(x, mask=mask, bias=bias, need_weights=return_attention)
        x = self.norm(x)
        features = self.readout(x, node_mask)
        if return_attention:
            return features, AttentionWeights("encoder", encoder=weights or [])
        return features

    def readout(self, x: Tensor, node_mask: Tensor) -> Tensor:
        """Final states (B, N', D) -> what the head reads: the graph's nodes (B, N, D) with
        padded rows zeroed for "node"/"none"; for a graph head the mean or sum of the real
        nodes, or the virtual node, (B, D)."""
        c = self.config
        own = x[:, c.prefix :]
        keep = node_mask.to(x.dtype).unsqueeze(-1)
        if c.head in ("node", "none"):
            return own * keep
        if c.readout == "cls":
            return x[:, 0]
        total = (own * keep).sum(dim=1)
        if c.readout == "sum":
            return total
        return total / keep.sum(dim=1).clamp(min=1.0)  # an empty graph gives zeros, not NaN

    def forward_head(self, features: Tensor) -> Tensor:
        """Node states (B, N, D) -> logits (B, N, num_labels) ("node"); a readout (B, D) ->
        logits (B, num_labels) ("graph") or values (B,) in the data's units ("value");
        "none" gives the features back."""
        c = self.config
        if self.head is None:
            return features
        out = self.head(features)
        if c.head == "value":
            # The head learns the normalised target; the model answers in the data's units.
            return out.squeeze(-1) * c.target_scale + c.target_shift
        return out

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random one-hot-ish nodes (B, N <= 6, F), a padded ring of typed edges per graph
        (the last graph has fewer nodes: padding), its node mask and edge types."""
        c = self.config
        n = 6
        nodes = torch.rand(batch_size, n, c.in_features)
        mask = torch.ones(batch_size, n, dtype=torch.bool)
        mask[-1, n - 2 :] = False
        edges = torch.full((batch_size, 2, 2 * n), -1, dtype=torch.int64)
        types = torch.zeros(batch_size, 2 * n, dtype=torch.int64)
        for g in range(batch_size):
            m = int(mask[g].sum())
            ring = torch.arange(m)
            src = torch.cat([ring, (ring + 1) % m])
            dst = torch.cat([(ring + 1) % m, ring])
            edges[g, 0, : 2 * m], edges[g, 1, : 2 * m] = src, dst
            types[g, : 2 * m] = torch.arange(2 * m) % c.edge_types
        return nodes, edges, mask, types


def _graph(name: str, description: str, **values: Any) -> None:
    register_preset(name, "graph", description, **values)


_graph(
    "graph_karate",
    "graph Transformer for Zachary's karate club: 34 one-hot members, D=32, 2 blocks, H=2, "
    "a faction per node under the graph mask",
    in_features=34,
    edge_types=1,
    dim=32,
    depth=2,
    heads=2,
    head="node",
    num_labels=2,
    dropout=0.1,
)
_graph(
    "graph_nci_tpsa",
    "graph Transformer for NCI polar surface areas: 31 one-hot atom features, 4 bond types "
    "with an edge-type bias, D=64, 4 blocks, H=4, sum readout (TPSA adds up per atom), one "
    "value in Å²",
    in_features=31,
    edge_types=4,
    dim=64,
    depth=4,
    heads=4,
    head="value",
    num_labels=1,
    readout="sum",
)
