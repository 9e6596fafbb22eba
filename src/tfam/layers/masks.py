"""Boolean attention masks, True = may attend, broadcastable to (B, H, Lq, Lk).

Combine masks with ``&``; :func:`combine` does it and keeps None meaning "every key".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def causal_mask(lq: int, lk: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """(Lq, Lk): query i may see key j <= i + (Lk - Lq).

    Bottom-right aligned: with a KV cache the Lq new queries are the last Lq positions of the
    Lk keys, so the last query sees every key. With Lq > Lk the first Lq - Lk rows are empty.
    """
    lk = lq if lk is None else lk
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    return j <= i + (lk - lq)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Key padding: (B, Lk) with True (or 1) = real token -> (B, 1, 1, Lk) bool."""
    if attention_mask.ndim != 2:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}; expected (B, L) with "
            "True or 1 = real token"
        )
    return attention_mask.bool()[:, None, None, :]


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """The mean over each row's real positions: x (B, L, D), mask (B, L) True/1 = real or None
    (all real) -> (B, D). A row without a real position gives zeros, not NaN."""
    if mask is None:
        return x.mean(dim=1)
    weights = mask.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def pad_token_mask(ids: Tensor, pad_token_id: int | None) -> Tensor | None:
    """(B, L) token ids -> (B, 1, 1, L) key mask hiding ``pad_token_id``; None if no padding."""
    if pad_token_id is None:
        return None
    keep = ids != pad_token_id
    return None if bool(keep.all()) else keep[:, None, None, :]


def window_mask(
    lq: int,
    lk: int | None = None,
    window: int = 1,
    causal: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """(Lq, Lk) local attention: query i sees keys within ``window`` positions of its own
    (|i' - j| <= window, i' = i + Lk - Lq, bottom-right aligned like :func:`causal_mask`);
    with ``causal`` only the ``window`` keys before it and itself."""
    lk = lq if lk is None else lk
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window={window!r} is invalid: expected an int >= 0")
    i = torch.arange(lq, device=device)[:, None] + (lk - lq)
    j = torch.arange(lk, device=device)[None, :]
    near = (i - j).abs() <= window
    return near & (j <= i) if causal else near


def combine(*masks: Tensor | None) -> Tensor | None:
    """AND of the given masks (broadcasting); None entries mean "every key"."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


# ----------------------------------------------------------------------------- graph masks
#
# Direction: an edge (j -> i), listed as edge_index[:, e] = [j, i] ([source; target], as PyTorch
# Geometric lists them), lets the target i (a query) attend to the source j (a key): the target
# gathers from its sources, as a node gathers its messages. An undirected graph lists both
# directions (or pass ``undirected=True``). A node with no edge (not even a self-loop) attends to
# nothing: its attention output is zero.


def _node_counts(num_nodes: int | Sequence[int] | Tensor, batch: int) -> Tensor:
    """(B,) long: the number of real nodes of each graph (an int is every graph's)."""
    counts = torch.as_tensor(num_nodes, dtype=torch.long).flatten().cpu()
    if counts.numel() == 1:
        counts = counts.expand(batch)
    if counts.numel() != batch or bool((counts < 0).any()):
        raise ValueError(
            f"num_nodes={num_nodes!r} is invalid: expected an int >= 0 or one count per graph "
            f"({batch})"
        )
    return counts


class GraphMask:
    """A batch of graphs' attention pattern kept as an edge list, O(E) memory.

    Edge e lets query ``query[e]`` of graph ``batch[e]`` attend to key ``key[e]`` (both node
    indices < ``num_nodes``, the padded node count N); ``types[e]`` is its type id (a bond's
    order; None without types). Edges are unique and sorted by (batch, query, key).
    ``bias`` (E, H) or (E, 1) float, optional: an additive score per edge and head (an edge-type
    bias ``table[types]``), kept with the edges it belongs to so it stays O(E).

    The ``edges`` kernel reads the list (scores only along edges, O(E)); every other kernel is
    handed :meth:`dense` (B, 1, N, N) bool, and :meth:`dense_bias`, by
    ``AttentionKernel.__call__``, the one place a GraphMask turns dense.
    """

    def __init__(
        self,
        batch: Tensor,
        query: Tensor,
        key: Tensor,
        num_nodes: int,
        batch_size: int,
        types: Tensor | None = None,
        bias: Tensor | None = None,
    ) -> None:
        n, e = int(num_nodes), batch.numel()
        if not all(t.dim() == 1 and t.numel() == e for t in (batch, query, key)):
            raise ValueError(
                "GraphMask's batch, query and key must be 1-D of one length E; got shapes "
                f"{tuple(batch.shape)}, {tuple(query.shape)}, {tuple(key.shape)}"
            )
        if types is not None and tuple(types.shape) != (e,):
            raise ValueError(f"types has shape {tuple(types.shape)}; expected ({e},), one per edge")
        if bias is not None and (bias.dim() != 2 or bias.shape[0] != e):
            raise ValueError(
                f"bias has shape {tuple(bias.shape)}; expected (E={e}, H) or (E, 1): one score "
                "per edge and head"
            )
        if e and (
            int(batch.min()) < 0
            or int(batch.max()) >= batch_size
            or int(torch.minimum(query.min(), key.min())) < 0
            or int(torch.maximum(query.max(), key.max())) >= n
        ):
            raise ValueError(
                f"GraphMask edges out of range: batch index in [0, {batch_size}) and node "
                f"indices in [0, {n}) expected"
            )
        self.batch, self.query, self.key = batch.long(), query.long(), key.long()
        self.types = None if types is None else types.long()
        self.bias = bias
        self.num_nodes, self.batch_size = n, int(batch_size)

    @classmethod
    def from_edge_index(
        cls,
        edge_index: Tensor,
        num_nodes: int | Sequence[int] | Tensor,
        *,
        self_loops: bool = True,
        undirected: bool = False,
        edge_types: Tensor | None = None,
        self_loop_type: int | None = None,
    ) -> GraphMask:
        """From ``edge_index`` (2, E) long [source; target] (one graph) or (B, 2, E) padded with
        -1 (a batch; a column with a -1 is no edge). ``num_nodes``: N, or one count per graph
        (a padded node has no edge, not even a self-loop, so it attends to nothing); the dense
        size is the largest. ``self_loops`` adds i -> i for every real node; ``undirected``
        adds every edge's reverse. ``edge_types`` (E,) or (B, E) ids go with the edges (a
        reverse keeps its edge's type; self-loops get ``self_loop_type``). Duplicate edges are
        kept once (the first one's type)."""
        if edge_index.dim() == 2:
            edge_index = edge_index[None]
            edge_types = None if edge_types is None else edge_types.reshape(1, -1)
        if edge_index.dim() != 3 or edge_index.shape[1] != 2:
            raise ValueError(
                f"edge_index has shape {tuple(edge_index.shape)}; expected (2, E) or (B, 2, E) "
                "long [source; target]"
            )
        if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
            raise ValueError(f"edge_index has dtype {edge_index.dtype}; expected integer ids")
        b, _, e = edge_index.shape
        if edge_types is not None and tuple(edge_types.shape) != (b, e):
            raise ValueError(
                f"edge_types has shape {tuple(edge_types.shape)}; expected one id per edge "
                f"{(e,) if b == 1 else (b, e)}"
            )
        if edge_types is not None and self_loops and self_loop_type is None:
            raise ValueError(
                "self_loop_type=None is invalid with edge_types and self_loops=True: give the "
                "type id of the added self-loops"
            )
        counts = _node_counts(num_nodes, b).to(edge_index.device)
        n = int(counts.max()) if b else 0
        device = edge_index.device
        source, target = edge_index[:, 0].long(), edge_index[:, 1].long()
        graph = torch.arange(b, device=device)[:, None].expand(b, e)
        real = (source >= 0) & (target >= 0)
        limit = counts[:, None].expand(b, e)
        bad = real & ((source >= limit) | (target >= limit))
        if bool(bad.any()):
            g, col = (int(x) for x in bad.nonzero()[0])
            raise ValueError(
                f"edge_index has edge {int(source[g, col])} -> {int(target[g, col])} in graph {g}, "
                f"which has {int(counts[g])} nodes (ids 0..{int(counts[g]) - 1}; -1 = padding)"
            )
        parts_b, parts_q, parts_k = [graph[real]], [target[real]], [source[real]]
        parts_t = [] if edge_types is None else [edge_types.long()[real]]
        if undirected:
            parts_b.append(graph[real])
            parts_q.append(source[real])  # the reverse: the source attends to the target
            parts_k.append(target[real])
            if edge_types is not None:
                parts_t.append(edge_types.long()[real])
        if self_loops:
            node = torch.arange(n, device=device)[None, :].expand(b, n)
            has = node < counts[:, None]
            loop_b = torch.arange(b, device=device)[:, None].expand(b, n)[has]
            parts_b.append(loop_b)
            parts_q.append(node[has])
            parts_k.append(node[has])
            if edge_types is not None:
                parts_t.append(torch.full_like(loop_b, int(self_loop_type)))  # type: ignore[arg-type]
        bi, qi, ki = torch.cat(parts_b), torch.cat(parts_q), torch.cat(parts_k)
        ti = torch.cat(parts_t) if parts_t else None
        return cls._unique(bi, qi, ki, ti, n, b)

    @classmethod
    def from_dense(cls, mask: Tensor) -> GraphMask:
        """From a bool adjacency (N, N), (B, N, N) or (B, 1, N, N): mask[b, i, j] True = i may
        attend to j."""
        if mask.dtype != torch.bool:
            raise ValueError(f"mask has dtype {mask.dtype}; expected torch.bool")
        if mask.dim() == 4 and mask.shape[1] == 1:
            mask = mask[:, 0]
        if mask.dim() == 2:
            mask = mask[None]
        if mask.dim() != 3 or mask.shape[-1] != mask.shape[-2]:
            raise ValueError(
                f"mask has shape {tuple(mask.shape)}; expected (N, N), (B, N, N) or (B, 1, N, N)"
            )
        b, q, k = mask.nonzero(as_tuple=True)  # row-major: sorted by (batch, query, key)
        return cls(b, q, k, mask.shape[-1], mask.shape[0])

    @classmethod
    def _unique(
        cls, b: Tensor, q: Tensor, k: Tensor, t: Tensor | None, n: int, batch: int
    ) -> GraphMask:
        """Each (batch, query, key) once (the first occurrence), sorted."""
        lin = (b * n + q) * n + k
        order = torch.argsort(lin, stable=True)
        lin = lin[order]
        first = torch.ones_like(lin, dtype=torch.bool)
        first[1:] = lin[1:] != lin[:-1]
        keep = order[first]
        return cls(b[keep], q[keep], k[keep], n, batch, None if t is None else t[keep])

    @property
    def num_edges(self) -> int:
        return self.batch.numel()

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The dense mask's shape (B, 1, N, N)."""
        return (self.batch_size, 1, self.num_nodes, self.num_nodes)

    @property
    def device(self) -> torch.device:
        return self.batch.device

    def to(self, device: torch.device | str) -> GraphMask:
        """The same edges on ``device`` (the bias keeps its dtype)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return GraphMask(
            move(self.batch), move(self.query), move(self.key), self.num_nodes,
            self.batch_size, move(self.types), move(self.bias),
        )  # fmt: skip

    def with_bias(self, bias: Tensor | None) -> GraphMask:
        """The same edges with an additive score per edge: ``bias`` (E, H), (E, 1) or (E,)."""
        if bias is not None and bias.dim() == 1:
            bias = bias[:, None]
        return GraphMask(
            self.batch, self.query, self.key, self.num_nodes, self.batch_size, self.types, bias
        )

    def type_bias(self, table: Tensor) -> Tensor:
        """(E, H): each edge's row of ``table`` (T, H), a learned bias per edge type and head
        (O(E): nothing (N, N) is made)."""
        if self.types is None:
            raise ValueError("this GraphMask has no edge types: build it with edge_types=...")
        return table[self.types]

    def dense(self) -> Tensor:
        """bool (B, 1, N, N): True where query i may attend to key j."""
        out = torch.zeros(
            self.batch_size, self.num_nodes, self.num_nodes, dtype=torch.bool, device=self.device
        )
        out[self.batch, self.query, self.key] = True
        return out[:, None]

    def dense_bias(self, heads: int, dtype: torch.dtype | None = None) -> Tensor | None:
        """The per-edge bias as float (B, H, N, N), 0 off the edges (masked there anyway);
        None without a bias."""
        if self.bias is None:
            return None
        b, n = self.batch_size, self.num_nodes
        dtype = self.bias.dtype if dtype is None else dtype
        out = self.bias.new_zeros((b, n, n, heads), dtype=dtype)
        out = out.index_put(
            (self.batch, self.query, self.key), self.bias.to(dtype).expand(-1, heads)
        )
        return out.permute(0, 3, 1, 2)

    def dense_call(self, bias: Tensor | None, heads: int) -> tuple[Tensor, Tensor | None]:
        """What a kernel that reads no edges is given instead: (:meth:`dense` (B, 1, N, N),
        the caller's ``bias`` plus :meth:`dense_bias`, or either alone, or None)."""
        own = self.dense_bias(heads, None if bias is None else bias.dtype)
        if own is not None and bias is not None:
            own = bias + own
        return self.dense(), (bias if own is None else own)

    def __repr__(self) -> str:
        typed = ", typed" if self.types is not None else ""
        biased = f", bias {tuple(self.bias.shape)}" if self.bias is not None else ""
        return (
            f"GraphMask(B={self.batch_size}, N={self.num_nodes}, E={self.num_edges}{typed}{biased})"
        )


def graph_mask(
    edge_index: Tensor,
    num_nodes: int | Sequence[int] | Tensor,
    *,
    self_loops: bool = True,
    undirected: bool = False,
) -> Tensor:
    """bool (N, N) from ``edge_index`` (2, E) [source; target], or (B, 1, N, N) from (B, 2, E)
    padded with -1: True where target i may attend to source j (mask[i, j]). ``self_loops``
    lets every real node attend to itself; ``undirected`` adds each edge's reverse (or list
    both directions). :class:`GraphMask` keeps the same pattern as an edge list (O(E))."""
    gm = GraphMask.from_edge_index(
        edge_index, num_nodes, self_loops=self_loops, undirected=undirected
    )
    dense = gm.dense()
    return dense[0, 0] if edge_index.dim() == 2 else dense


__all__ = [
    "GraphMask",
    "causal_mask",
    "combine",
    "graph_mask",
    "masked_mean",
    "pad_token_mask",
    "padding_mask",
    "window_mask",
]
