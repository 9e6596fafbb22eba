"""The ``edges`` kernel: attention computed only along a graph's edges, O(E).

Self-attention on a graph (the source documents: a node is a vector; scores only between nodes
joined by an edge) is ``math`` under the graph's mask, but a dense (N, N) score matrix costs
O(N^2) however sparse the graph. Here each edge e = (b, i, j) (query i, the edge's target, may
attend to key j, its source; :class:`~tfam.layers.masks.GraphMask`) gets one score per head

    s_e = q_i . k_j / sqrt(Dh)  (+ the edge's bias)                      (scores on edges)
    a_e = exp(s_e - m_i) / sum_{e' -> i} exp(s_e' - m_i),  m_i = max_{e' -> i} s_e'
                                                                    (softmax over i's edges)
    out_i = sum_{e -> i} a_e v_j                                   (the weighted sum of values)

with the max and the sums taken per query by ``scatter_reduce(amax)`` and ``index_add_`` (a
scatter softmax), in at least float32: O(E * Dh) time and O(E * H) memory, forward and backward.
The two products (scores on the edges; the weighted sum) are autograd Functions that gather the
edges' q, k, v rows in chunks of ``chunk`` edges and keep only the indices for their backward,
so no (E, H, Dh) tensor is held. A query with no edge gets zeros, and zero gradients.

The edges come from the mask:

- a :class:`~tfam.layers.masks.GraphMask` (the kernel declares ``reads_edges``, so it receives
  the list itself; every other kernel gets its dense form): its edges, with its per-edge bias;
- any dense bool mask (or none: every pair): its nonzero entries, so the kernel equals ``math``
  on every call the contract makes (``exact``). A mask differing per head gives each head its
  own edges. This path forms the dense mask's nonzero entries, O(B * Lq * Lk) to find them.

Causal ANDs j <= i + Lk - Lq (bottom-right) on each edge; a float bias (B, H, Lq, Lk) is gathered
per edge; weights, when asked, are scattered back to dense (B, H, Lq, Lk).

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
    mask: a GraphMask (N = Lq = Lk), or bool broadcastable to (B, H, Lq, Lk), True = may attend
    bias: float broadcastable to (B, H, Lq, Lk)
    -> out (B, H, Lq, Dh), weights (B, H, Lq, Lk) or None
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tfam.layers.kernels import (
    AttentionCost,
    AttentionKernel,
    _check_mask,
    causal_pairs,
    check_int_option,
    full_precision,
    math_attention,
)
from tfam.layers.masks import GraphMask, causal_mask


@dataclasses.dataclass(frozen=True)
class EdgesOptions:
    """``chunk``: edges whose q, k, v rows are gathered at once (a (chunk, H, Dh) temporary),
    forward and backward; it bounds the working memory, not the result."""

    chunk: int = 8192


class _EdgeScores(torch.autograd.Function):
    """s_e = q[rq_e] . k[rk_e] per head: q (Nq, H, Dh), k (Nk, H, Dh), rq, rk (E,) -> (E, H).
    Saves q, k (autograd holds them anyway) and the indices: no (E, H, Dh) tensor is kept."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, rq: Tensor, rk: Tensor, chunk: int) -> Tensor:  # noqa: D102
        s = q.new_empty((rq.numel(), q.shape[1]))
        for c in range(0, rq.numel(), chunk):
            sl = slice(c, c + chunk)
            s[sl] = (q[rq[sl]] * k[rk[sl]]).sum(-1)
        ctx.save_for_backward(q, k, rq, rk)
        ctx.chunk = chunk
        return s

    @staticmethod
    def backward(ctx: Any, ds: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:  # noqa: D102
        q, k, rq, rk = ctx.saved_tensors
        dq = torch.zeros_like(q) if ctx.needs_input_grad[0] else None
        dk = torch.zeros_like(k) if ctx.needs_input_grad[1] else None
        for c in range(0, rq.numel(), ctx.chunk):
            sl = slice(c, c + ctx.chunk)
            g = ds[sl, :, None]
            if dq is not None:  # dL/dq_i = sum_{e -> i} ds_e k_j
                dq.index_add_(0, rq[sl], g * k[rk[sl]])
            if dk is not None:  # dL/dk_j = sum_{e from j} ds_e q_i
                dk.index_add_(0, rk[sl], g * q[rq[sl]])
        return dq, dk, None, None, None


class _EdgeSum(torch.autograd.Function):
    """out_i = sum_{e -> i} a_e v[rk_e]: a (E, H), v (Nk, H, Dh) -> (nq, H, Dh)."""

    @staticmethod
    def forward(  # noqa: D102
        ctx: Any, a: Tensor, v: Tensor, rq: Tensor, rk: Tensor, nq: int, chunk: int
    ) -> Tensor:
        out = v.new_zeros((nq, *v.shape[1:]))
        for c in range(0, rq.numel(), chunk):
            sl = slice(c, c + chunk)
            out.index_add_(0, rq[sl], a[sl, :, None] * v[rk[sl]])
        ctx.save_for_backward(a, v, rq, rk)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(  # noqa: D102
        ctx: Any, dout: Tensor
    ) -> tuple[Tensor | None, Tensor | None, None, None, None, None]:
        a, v, rq, rk = ctx.saved_tensors
        da = torch.empty_like(a) if ctx.needs_input_grad[0] else None
        dv = torch.zeros_like(v) if ctx.needs_input_grad[1] else None
        for c in range(0, rq.numel(), ctx.chunk):
            sl = slice(c, c + ctx.chunk)
            g = dout[rq[sl]]
            if da is not None:  # dL/da_e = dout_i . v_j
                da[sl] = (g * v[rk[sl]]).sum(-1)
            if dv is not None:  # dL/dv_j = sum_{e from j} a_e dout_i
                dv.index_add_(0, rk[sl], a[sl, :, None] * g)
        return da, dv, None, None, None, None


def scatter_softmax(scores: Tensor, group: Tensor, groups: int) -> Tensor:
    """softmax of ``scores`` (E, H) within each group (``group`` (E,) in [0, groups)): a_e =
    exp(s_e - m_g) / sum_{e' in g} exp(s_e' - m_g), m_g the group's max (its gradient cancels,
    so it is taken without one). A group with no finite score has weights 0, forward and
    backward (no NaN)."""
    index = group[:, None].expand_as(scores)
    with torch.no_grad():
        top = scores.new_full((groups, scores.shape[1]), float("-inf"))
        top = top.scatter_reduce(0, index, scores, reduce="amax", include_self=True)
        # All -inf (no edge with a finite score): any finite shift gives exp(-inf) = 0.
        top = top.masked_fill(~torch.isfinite(top), 0.0)
    p = torch.exp(scores - top[group])
    total = scores.new_zeros((groups, scores.shape[1])).index_add(0, group, p)
    # A group whose scores are all -inf sums to 0; its p are 0, so any divisor keeps them 0.
    total = torch.where(total > 0, total, torch.ones_like(total))
    return p / total[group]


@dataclasses.dataclass(frozen=True)
class _Edges:
    """A call's edges in the kernel's layout. ``heads``: 1 when each head has its own edges
    (the heads are folded into the batch), H when every head shares them. ``g`` (E,) the
    batch index (b, or b * H + h folded), ``i``, ``j`` (E,) query and key; ``bias`` (E, H') or
    None."""

    g: Tensor
    i: Tensor
    j: Tensor
    heads: int
    bias: Tensor | None


def _gather_bias(bias: Tensor, shape: tuple[int, int, int, int], e: _Edges) -> Tensor:
    """A dense bias broadcastable to (B, H, Lq, Lk) at the edges: (E, H) or (E, 1)."""
    full = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape)).expand(shape)
    if e.heads == 1 and shape[1] > 1:  # heads folded: g = b * H + h
        return full[e.g // shape[1], e.g % shape[1], e.i, e.j][:, None]
    return full[e.g, :, e.i, e.j]


def call_edges(
    mask: Tensor | GraphMask | None,
    bias: Tensor | None,
    is_causal: bool,
    shape: tuple[int, int, int, int],
    device: torch.device,
) -> _Edges:
    """The edges a call attends along (see the module's docstring), with their bias.
    ``shape`` = (B, H, Lq, Lk)."""
    b, h, lq, lk = shape
    if isinstance(mask, GraphMask):
        if mask.num_nodes != lq or mask.num_nodes != lk or mask.batch_size != b:
            raise ValueError(
                f"the GraphMask is for {mask.batch_size} graphs of {mask.num_nodes} nodes, but "
                f"attention has B={b}, Lq={lq}, Lk={lk}: give it the padded node count"
            )
        g, i, j, eb = mask.batch, mask.query, mask.key, mask.bias
        if is_causal:
            keep = j <= i + (lk - lq)
            g, i, j = g[keep], i[keep], j[keep]
            eb = None if eb is None else eb[keep]
        edges = _Edges(g, i, j, h, None if eb is None else eb.expand(-1, h))
    else:
        _check_mask(mask)
        m = torch.ones(1, 1, lq, lk, dtype=torch.bool, device=device) if mask is None else mask
        m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))
        if is_causal:
            m = m & causal_mask(lq, lk, device=device)
        if m.shape[1] > 1 and h > 1:  # a mask per head: each head's own edges
            g, i, j = m.expand(b, h, lq, lk).reshape(b * h, lq, lk).nonzero(as_tuple=True)
            edges = _Edges(g, i, j, 1, None)
        else:
            g, i, j = m.expand(b, 1, lq, lk)[:, 0].nonzero(as_tuple=True)
            edges = _Edges(g, i, j, h, None)
    if bias is not None:
        dense = _gather_bias(bias, shape, edges)
        eb = dense if edges.bias is None else edges.bias + dense
        edges = dataclasses.replace(edges, bias=eb)
    return edges


def edge_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | GraphMask | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    is_causal: bool = False,
    chunk: int = 8192,
) -> tuple[Tensor, Tensor | None]:
    """Softmax attention along the edges only (the module's docstring): q (B, H, Lq, Dh),
    k, v (B, H, Lk, Dh) -> (out (B, H, Lq, Dh), weights (B, H, Lq, Lk) or None)."""
    b, h, lq, dh = q.shape
    lk = k.shape[-2]
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    e = call_edges(mask, bias, is_causal, (b, h, lq, lk), q.device)
    hh, groups = e.heads, b * (h // e.heads)  # heads per row, batch rows (folded)
    acc = torch.promote_types(q.dtype, torch.float32)

    def rows(t: Tensor) -> Tensor:
        """(B, H, L, Dh) -> (groups * L, H', Dh): one row per (batch, position)."""
        n = t.shape[-2]
        return t.reshape(groups, hh, n, dh).transpose(1, 2).reshape(groups * n, hh, dh)

    rq, rk = e.g * lq + e.i, e.g * lk + e.j  # edge -> query row, key row
    with full_precision(q.device):
        # Q scaled first (float16 products of large activations overflow before a later scale).
        s = _EdgeScores.apply(rows(q.to(acc)) * scale, rows(k.to(acc)), rq, rk, chunk)
        if e.bias is not None:
            s = s + e.bias.to(acc)
        weights = scatter_softmax(s, rq, groups * lq)  # (E, H')
        attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        out = _EdgeSum.apply(attn, rows(v.to(acc)), rq, rk, groups * lq, chunk)
    out = out.reshape(groups, lq, hh, dh).transpose(1, 2).reshape(b, h, lq, dh).to(v.dtype)
    if not need_weights:
        return out, None
    dense = weights.new_zeros((groups, lq, lk, hh)).index_put((e.g, e.i, e.j), weights)
    return out, dense.permute(0, 3, 1, 2).reshape(b, h, lq, lk).to(v.dtype)


class EdgesKernel(AttentionKernel):
    """Softmax attention along a graph's edges only (:func:`edge_attention`): O(E) scores, a
    scatter softmax per query; reads a :class:`~tfam.layers.masks.GraphMask`'s edge list
    (``reads_edges``), or a dense mask's nonzero entries, so it equals ``math`` on every call.
    Option ``chunk``: edges gathered at once."""

    name = "edges"
    exactness = "exact"  # refuses nothing: a dense mask (or none) is a graph too
    reads_edges = True
    Options = EdgesOptions

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "chunk":
            check_int_option(name, value)

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """Without a graph, every (causal) pair is an edge: the scores of those pairs only.
        With a graph, :meth:`edge_cost` of its edge count."""
        return self.edge_cost(causal_pairs(lq, lk) if is_causal else lq * lk, head_dim)

    @staticmethod
    def edge_cost(num_edges: int, head_dim: int) -> AttentionCost:
        """E edges of one head: 2 Dh FLOPs for each score and 2 Dh for its share of the sum;
        E scores (and weights) held."""
        return AttentionCost(flops=4.0 * num_edges * head_dim, score_elements=num_edges)

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        if q.device.type == "meta":  # explain's trace: shapes only (nonzero cannot run there)
            if isinstance(mask, GraphMask):
                mask, bias = mask.dense_call(bias, q.shape[1])
            return math_attention(q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal)
        return edge_attention(
            q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal, self.options.chunk
        )


__all__ = ["EdgesKernel", "call_edges", "edge_attention", "scatter_softmax"]
