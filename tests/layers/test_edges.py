"""Graph masks and the ``edges`` kernel (what the kernel contract does not check).

The contract (``tests/layers/test_kernel_contract.py``) holds ``edges`` to ``math`` under dense
masks; here: ``graph_mask`` against a brute-force adjacency, :class:`GraphMask` (padding,
self-loops, undirected, types, duplicates, its dense forms), ``edges`` equal to ``math`` on
random batches of graphs given as edge lists (outputs and gradients, a per-edge bias), nodes
with no edge, the one place a GraphMask turns dense for the other kernels, and the O(E) memory.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from tfam.config import BaseConfig
from tfam.layers.attention import MultiHeadAttention
from tfam.layers.edges import EdgesKernel, scatter_softmax
from tfam.layers.kernels import build_kernel, math_attention
from tfam.layers.masks import GraphMask, graph_mask

F64 = torch.float64


def brute_adjacency(
    edges: list[tuple[int, int]], n: int, self_loops: bool, undirected: bool
) -> Tensor:
    """mask[i, j] = True for each listed edge j -> i (source j, target i), by loops."""
    out = torch.zeros(n, n, dtype=torch.bool)
    for src, dst in edges:
        out[dst, src] = True
        if undirected:
            out[src, dst] = True
    if self_loops:
        for i in range(n):
            out[i, i] = True
    return out


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """A batch of 1-3 graphs of 0-6 nodes, each with 0-12 random directed edges (repeats and
    self-loops among them; some nodes isolated)."""
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    if max(sizes) == 0:
        sizes[0] = 1
    edges = []
    for n in sizes:
        pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
        edges.append(draw(st.lists(pair, max_size=12)) if n else [])
    return sizes, edges


def padded_edge_index(edges: list[list[tuple[int, int]]]) -> Tensor:
    """(B, 2, E) [source; target], padded with -1."""
    e = max(1, max(len(x) for x in edges))
    out = torch.full((len(edges), 2, e), -1, dtype=torch.long)
    for b, x in enumerate(edges):
        if x:
            out[b, :, : len(x)] = torch.tensor(x, dtype=torch.long).T
    return out


@settings(max_examples=20, deadline=None)
@given(graphs(), st.booleans(), st.booleans())
def test_graph_mask_is_the_adjacency(batch, self_loops: bool, undirected: bool) -> None:
    sizes, edges = batch
    n = max(sizes)
    got = graph_mask(padded_edge_index(edges), sizes, self_loops=self_loops, undirected=undirected)
    assert got.shape == (len(sizes), 1, n, n) and got.dtype == torch.bool
    for b, (size, x) in enumerate(zip(sizes, edges)):
        want = torch.zeros(n, n, dtype=torch.bool)
        want[:size, :size] = brute_adjacency(x, size, self_loops, undirected)
        assert torch.equal(got[b, 0], want)
    # One graph: (2, E) -> (N, N).
    one = [(0, 1), (1, 2), (2, 2)]
    single = graph_mask(torch.tensor(one).T, 4, self_loops=self_loops, undirected=undirected)
    assert torch.equal(single, brute_adjacency(one, 4, self_loops, undirected))


def test_graph_mask_keeps_edges_as_a_sorted_unique_list_with_types() -> None:
    edge_index = torch.tensor([[[0, 1, 0, 2], [1, 2, 1, 0]], [[1, -1, -1, -1], [0, -1, -1, -1]]])
    types = torch.tensor([[1, 2, 3, 1], [2, -1, -1, -1]])
    gm = GraphMask.from_edge_index(edge_index, [3, 2], edge_types=types, self_loop_type=0)
    # Graph 0: 0->1 (twice: the first type kept), 1->2, 2->0 and 3 self-loops; graph 1: 1->0
    # and 2 self-loops. Sorted by (batch, query = target, key = source).
    assert gm.num_edges == 9 and gm.shape == (2, 1, 3, 3)
    listed = list(zip(gm.batch.tolist(), gm.query.tolist(), gm.key.tolist(), gm.types.tolist()))
    assert listed == [
        (0, 0, 0, 0), (0, 0, 2, 1), (0, 1, 0, 1), (0, 1, 1, 0), (0, 2, 1, 2), (0, 2, 2, 0),
        (1, 0, 0, 0), (1, 0, 1, 2), (1, 1, 1, 0),
    ]  # fmt: skip
    dense = gm.dense()
    assert dense.shape == (2, 1, 3, 3) and int(dense.sum()) == 9
    assert not dense[1, 0, 2].any() and not dense[1, 0, :, 2].any()  # node 2 of graph 1: padding
    # A per-type table becomes a per-edge bias, and dense_bias puts it on the edges, 0 elsewhere.
    table = torch.arange(8.0).view(4, 2)
    biased = gm.with_bias(gm.type_bias(table))
    full = biased.dense_bias(heads=2)
    assert full.shape == (2, 2, 3, 3)
    assert full[0, 1, 2, 1] == table[2, 1] and full[1, 0, 0, 1] == table[2, 0]
    assert (full[~dense.expand(2, 2, 3, 3)] == 0).all()
    assert torch.equal(GraphMask.from_dense(dense).dense(), dense)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: graph_mask(torch.tensor([[0, 3], [1, 0]]), 3), "edge 3 -> 0 in graph 0"),
        (lambda: graph_mask(torch.zeros(3, 2, dtype=torch.long), 3), "expected (2, E)"),
        (lambda: graph_mask(torch.zeros(2, 2), 3), "expected integer ids"),
        (lambda: graph_mask(torch.zeros(2, 2, 1, dtype=torch.long), [1, 2, 3]), "num_nodes"),
        (
            lambda: GraphMask.from_edge_index(
                torch.zeros(2, 1, dtype=torch.long), 2, edge_types=torch.zeros(1)
            ),
            "self_loop_type=None",
        ),
    ],
)
def test_bad_edge_lists_are_one_line(call, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        call()
    assert "\n" not in str(e.value)


@settings(max_examples=20, deadline=None)
@given(
    graphs(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 3]),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_edges_equals_math_on_random_graphs(
    batch, self_loops: bool, undirected: bool, heads: int, dh: int, biased: bool, seed: int
) -> None:
    """A padded batch of random graphs as a GraphMask: ``edges`` (reading the list) equals
    ``math`` under its dense mask, outputs and the gradients of q, k, v and the per-edge bias,
    in float64; nodes with no edge (isolated, padding) give zero rows and zero dq."""
    sizes, edges = batch
    gm = GraphMask.from_edge_index(
        padded_edge_index(edges), sizes, self_loops=self_loops, undirected=undirected
    )
    gen = torch.Generator().manual_seed(seed)
    b, n = len(sizes), gm.num_nodes
    q, k, v = (torch.randn(b, heads, n, dh, generator=gen, dtype=F64) for _ in range(3))
    edge_bias = torch.randn(gm.num_edges, heads, generator=gen, dtype=F64) if biased else None
    leaves = [t.requires_grad_() for t in (q, k, v, edge_bias) if t is not None]
    chunk = 1 + seed % 5  # several chunks, and a last one cut short
    kernel = build_kernel("edges", {"chunk": chunk})
    out, weights = kernel(q, k, v, mask=gm.with_bias(edge_bias), need_weights=True)
    bias = gm.with_bias(edge_bias).dense_bias(heads)
    want, want_w = math_attention(q, k, v, gm.dense(), bias, need_weights=True)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, want_w, rtol=1e-10, atol=1e-12)
    cot = torch.randn(out.shape, generator=gen, dtype=F64)
    got_g = torch.autograd.grad(out, leaves, cot)
    want_g = torch.autograd.grad(want, leaves, cot)
    for g, w in zip(got_g, want_g):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    lonely = ~gm.dense()[:, 0].any(-1)  # (B, N): nodes with no edge
    assert (out.transpose(1, 2)[lonely] == 0).all()
    assert (got_g[0].transpose(1, 2)[lonely] == 0).all()


def test_a_node_with_no_edge_gives_zeros_and_finite_gradients() -> None:
    """Node 2 has no edge at all; node 1's only edge has a -inf bias: both rows are zero,
    forward and backward, never NaN."""
    gm = GraphMask.from_edge_index(torch.tensor([[0, 1, 0], [1, 0, 0]]), 3, self_loops=False)
    bias = torch.zeros(gm.num_edges, 1, dtype=F64)
    bias[(gm.query == 1).nonzero()[0, 0]] = float("-inf")
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=F64, requires_grad=True) for _ in range(3))
    for b in (None, bias):
        out, _ = build_kernel("edges")(q, k, v, mask=gm.with_bias(b), is_causal=False)
        dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
        assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv))
        assert (out[:, :, 2] == 0).all() and (dq[:, :, 2] == 0).all()
        assert (out[:, :, 0] != 0).all()
        if b is not None:
            assert (out[:, :, 1] == 0).all() and (dq[:, :, 1] == 0).all()
    scores = torch.tensor([[float("-inf")], [1.0], [float("-inf")]], requires_grad=True)
    a = scatter_softmax(scores, torch.tensor([0, 1, 0]), 3)
    assert a.tolist() == [[0.0], [1.0], [0.0]]
    (g,) = torch.autograd.grad(a.sum(), scores)
    assert torch.isfinite(g).all()


def test_causal_graph_keeps_the_earlier_sources() -> None:
    gm = GraphMask.from_edge_index(torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]]), 4, undirected=True)
    q, k, v = (torch.randn(2, 2, 4, 3, dtype=F64) for _ in range(3))
    gm2 = GraphMask.from_dense(gm.dense().expand(2, 1, 4, 4))
    out, _ = build_kernel("edges")(q, k, v, mask=gm2, is_causal=True)
    want, _ = math_attention(q, k, v, gm2.dense(), is_causal=True)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", ["math", "sdpa", "chunked", "local", "flex"])
def test_every_other_kernel_gets_the_dense_mask_and_bias(kernel: str) -> None:
    """Through MultiHeadAttention: a GraphMask with a per-edge (type) bias gives every kernel
    the same output as ``edges``, and the bias table the same gradient; a kernel refusing
    per-query masks refuses it in its one line."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(BaseConfig(dim=8, heads=2, attention="edges")).double()
    edge_index = torch.tensor([[[0, 1, 2, -1], [1, 2, 0, -1]], [[0, 1, 1, 3], [1, 0, 3, 1]]])
    types = torch.tensor([[0, 1, 1, -1], [1, 0, 1, 1]])
    gm = GraphMask.from_edge_index(edge_index, [3, 4], edge_types=types, self_loop_type=2)
    table = torch.randn(3, 2, dtype=F64, requires_grad=True)
    x = torch.randn(2, 4, 8, dtype=F64)
    results = []
    for name in ("edges", kernel):
        attn.set_kernel(name)
        out, _ = attn(x, mask=gm.with_bias(gm.type_bias(table)))
        results.append((out, torch.autograd.grad(out.square().sum(), table)[0]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-9, atol=1e-11)
    attn.set_kernel("linear")
    with pytest.raises(ValueError, match="attention='linear' refuses a mask that differs"):
        attn(x, mask=gm)


@pytest.mark.parametrize("n", [1000, 2000])
def test_memory_is_the_edge_scores(largest_tensor, n: int) -> None:
    """A ring with 8 neighbours a node (E = 9 N with self-loops), H = 2: forward and backward
    never make a tensor larger than the E * H scores (q, k, v rows are N * H * Dh, smaller),
    far from N^2; ``edge_cost`` counts E scores a head, and doubling N doubles them."""
    heads, dh, degree = 2, 4, 8
    node = torch.arange(n)
    src = torch.cat([(node + s) % n for s in range(1, degree + 1)])
    gm = GraphMask.from_edge_index(torch.stack([src, node.repeat(degree)]), n)
    e = gm.num_edges
    assert e == (degree + 1) * n
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dh, generator=gen, requires_grad=True) for _ in range(3))
    kernel = build_kernel("edges", {"chunk": 512})
    with largest_tensor() as spy:
        out, _ = kernel(q, k, v, mask=gm)
        out.sum().backward()
    assert spy.largest == e * heads, (spy.largest, e * heads)
    assert EdgesKernel.edge_cost(e, dh).score_elements * heads == spy.largest < n * n / 50
    assert kernel.cost(n, n, dh).score_elements == n * n  # no graph: every pair is an edge
