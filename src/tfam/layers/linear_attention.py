"""Kernelised attention: softmax's exp(q . k) replaced by a feature product phi(q) . phi(k).

    out_i = phi(q_i)^T S / phi(q_i)^T z,   S = sum_j phi(k_j) v_j^T (M, Dv),  z = sum_j phi(k_j) (M,)

(Katharopoulos et al. 2020, eq. 4-6.) Keys enter only through S and z, so attention costs
O(L * M * Dv) instead of O(L^2 * Dh), and causal decoding keeps S and z as its cache (O(1) per
token) instead of keys and values (:class:`RunningSums`). Causal attention uses prefix sums
(eq. 8-10), computed in chunks of ``chunk`` positions: within a chunk the masked (C, C)
products, across chunks the sums of the chunks before (:func:`kernelized_attention`), so the
memory is O(L * (M + C) + L / C * M * Dv), never the (L, M, Dv) prefix sums per position.

This module holds the shared machinery and the ``linear`` kernel (phi(x) = elu(x) + 1);
``layers/performer.py`` is the same with FAVOR+'s random features.

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)   features: (B, H, L, M)
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tfam.layers.kernels import AttentionCost, AttentionKernel, _check_mask, check_int_option

State = tuple[Tensor, Tensor]  # (S (B, H, M, Dv), z (B, H, M))


def phi(x: Tensor) -> Tensor:
    """Feature map elu(x) + 1: positive, so the normaliser never vanishes."""
    return F.elu(x) + 1.0


class RunningSums:
    """The decoding cache of a kernelised attention layer: S = sum_j phi(k_j) v_j^T
    (B, H, M, Dv) and z = sum_j phi(k_j) (B, H, M) over the ``length`` keys seen (at most
    ``max_len``, as a :class:`~tfam.layers.cache.KVCache`). O(1) in the length: the keys and
    values themselves are not kept."""

    static = False

    def __init__(self, max_len: int) -> None:
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
            raise ValueError(f"max_len={max_len!r} is invalid: expected an int >= 1")
        self.max_len = max_len
        self.length = 0
        self.state: State | None = None

    def check_room(self, n: int) -> None:
        if self.length + n > self.max_len:
            raise ValueError(
                f"the running-sums cache holds max_len={self.max_len} positions; {self.length} "
                f"are filled and {n} more were given (make the cache longer or generate fewer "
                "tokens)"
            )

    def store(self, state: State, n: int) -> None:
        """The sums after ``n`` more keys."""
        self.state, self.length = state, self.length + n

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: follow each surviving beam's parent)."""
        if self.state is not None:
            s, z = self.state
            self.state = (s.index_select(0, index), z.index_select(0, index))


def key_weights(mask: Tensor | None, n: int) -> Tensor | None:
    """A key-padding mask broadcastable to (B, H, 1, Lk) -> 0/1 weights (B|1, H|1, n, 1) of its
    last ``n`` keys (the new ones when earlier keys are already summed in a cache), or None."""
    if mask is None:
        return None
    _check_mask(mask)
    m4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    return m4[..., 0, -n:].unsqueeze(-1)


class _PrefixSums(torch.autograd.Function):
    """Running sums along axis 2 from ``start``: before_i = start + sum_{j<i} x_j and the total
    start + sum_j x_j. x (B, H, n, ...), start (B, H, ...).

    A loop over the n chunks, each step one contiguous add: ``torch.cumsum`` along a middle
    axis walks each of the M x Dv columns with a stride of M x Dv, which at 1024 chunks of
    (256, 64) took most of the performer's time; and a shifted cumsum would copy once more.
    Each before_i sums exactly the earlier chunks, so no later key rounds into it."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, start: Tensor) -> tuple[Tensor, Tensor]:  # noqa: D102
        ctx.shape, ctx.start_shape = x.shape, start.shape
        before = torch.empty_like(x)
        run = start.clone()
        for i in range(x.shape[2]):
            before[:, :, i] = run
            run += x[:, :, i]
        return before, run

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g_before: Tensor | None, g_total: Tensor | None) -> tuple:  # noqa: D102
        # d before_j / d x_i = I for j > i, d total / d x_i = I: grad x_i = g_total +
        # sum_{j>i} g_before_j, walked from the end; what is left is start's gradient.
        ref = g_before if g_before is not None else g_total
        assert ref is not None
        n = ctx.shape[2]
        grad_x = ref.new_empty(ctx.shape)
        run = g_total.clone() if g_total is not None else ref.new_zeros(ctx.start_shape)
        for i in reversed(range(n)):
            grad_x[:, :, i] = run
            if g_before is not None:
                run += g_before[:, :, i]
        return grad_x, run


def _causal_chunks(fq: Tensor, fk: Tensor, v: Tensor, state: State, chunk: int) -> tuple:
    """Aligned causal prefix sums: query i sees key j <= i (plus ``state``, keys before all).
    fq, fk (B, H, L, M), v (B, H, L, Dv) -> num (B, H, L, Dv), den (B, H, L), state after."""
    b, h, n, m = fq.shape
    e = v.shape[-1]
    c = max(1, min(chunk, n))
    pad = (-n) % c
    if pad:  # zero features: padded keys add nothing, padded queries are dropped
        fq, fk, v = (F.pad(t, (0, 0, 0, pad)) for t in (fq, fk, v))
    nc = (n + pad) // c
    fq_c = fq.reshape(b, h, nc, c, m)
    fk_c = fk.reshape(b, h, nc, c, m)
    v_c = v.reshape(b, h, nc, c, e)
    # Within a chunk: A_ij = phi(q_i) . phi(k_j) for j <= i (eq. 9 written blockwise); the
    # entries above the diagonal are set to exactly 0, so a later key never reaches query i.
    a = torch.matmul(fq_c, fk_c.transpose(-1, -2))
    above = torch.ones(c, c, dtype=torch.bool, device=fq.device).triu(1)
    a = a.masked_fill(above, 0.0)
    num = torch.matmul(a, v_c)
    den = a.sum(-1)
    # Across chunks: S and z of the chunks before (eq. 10's prefix sums, one per chunk).
    kv = torch.matmul(fk_c.transpose(-1, -2), v_c)  # (B, H, nc, M, Dv)
    ks = fk_c.sum(-2)  # (B, H, nc, M)
    s0, z0 = state
    kv_before, s_after = _PrefixSums.apply(kv, s0.expand(b, h, m, e))
    ks_before, z_after = _PrefixSums.apply(ks, z0.expand(b, h, m))
    num = num + torch.matmul(fq_c, kv_before)
    den = den + torch.matmul(fq_c, ks_before.unsqueeze(-1)).squeeze(-1)
    after = (s_after, z_after)
    return num.reshape(b, h, nc * c, e)[:, :, :n], den.reshape(b, h, nc * c)[:, :, :n], after


def kernelized_attention(
    fq: Tensor,
    fk: Tensor,
    v: Tensor,
    weights: Tensor | None = None,
    is_causal: bool = False,
    state: State | None = None,
    chunk: int = 64,
) -> tuple[Tensor, State]:
    """phi(Q) (phi(K)^T V) normalised by phi(Q) phi(K)^T 1, from the feature maps.

    fq: (B, H, Lq, M) query features; fk: (B, H, Lk, M) key features (non-negative); v:
    (B, H, Lk, Dv); ``weights``: 0/1 (B|1, H|1, Lk, 1) from :func:`key_weights` (a masked key
    adds nothing to S or z); ``state``: (S, z) of earlier keys, which every query sees (a
    cache). Causal is bottom-right aligned over the earlier and the new keys: query i sees the
    new keys j <= i + Lk - Lq. -> (out (B, H, Lq, Dv), (S, z) over the earlier and new keys).
    A query with no visible key (den = 0) gives zeros, forward and backward.
    """
    b, h, lq, m = fq.shape
    lk, e = fk.shape[2], v.shape[-1]
    if weights is not None:
        fk = fk * weights
    cached = state is not None
    if state is None:
        state = (fq.new_zeros(b, h, m, e), fq.new_zeros(b, h, m))
    if not is_causal:
        s = state[0] + torch.matmul(fk.transpose(-1, -2), v)  # eq. 5: S = sum_j phi(k_j) v_j^T
        z = state[1] + fk.sum(2)
        num = torch.matmul(fq, s)
        den = torch.matmul(fq, z.unsqueeze(-1)).squeeze(-1)
        after = (s, z)
    else:
        skip = lq - lk  # queries before the first new key (bottom-right alignment)
        if skip > 0 and cached:
            raise ValueError(
                f"causal attention with a cache over {lq} queries and {lk} new keys: the first "
                f"{skip} queries would see only a prefix of the cached keys, which the running "
                "sums no longer hold"
            )
        if skip < 0:  # keys before the first query's position: every query sees them
            s0 = state[0] + torch.matmul(fk[:, :, :-lq].transpose(-1, -2), v[:, :, :-lq])
            state = (s0, state[1] + fk[:, :, :-lq].sum(2))
            fk, v = fk[:, :, -lq:], v[:, :, -lq:]
        tail = fq[:, :, max(skip, 0) :]
        num, den, after = _causal_chunks(tail, fk, v, state, chunk)
        if skip > 0:  # those queries see no key
            num = F.pad(num, (0, 0, skip, 0))
            den = F.pad(den, (skip, 0))
    alive = den > 0
    safe = torch.where(alive, den, torch.ones_like(den))
    out = torch.where(alive.unsqueeze(-1), num / safe.unsqueeze(-1), torch.zeros_like(num))
    return out, after


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    chunk: int = 64,
) -> Tensor:
    """Linear attention in the parallel form.

    q: (B, H, Lq, D); k: (B, H, Lk, D); v: (B, H, Lk, Dv); key_padding: bool (B, 1, 1, Lk),
    True = may attend. ``scale`` multiplies q before phi (default 1/sqrt(D)). Causal is
    bottom-right aligned: query i sees keys j <= i + Lk - Lq. Returns (B, H, Lq, Dv); a query with
    no visible key gives zeros.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dtype = torch.promote_types(q.dtype, torch.float32)  # sums in float32 at least
    fq, fk = phi(q.to(dtype) * scale), phi(k.to(dtype))
    w = key_weights(key_padding, k.shape[-2])
    out, _ = kernelized_attention(fq, fk, v.to(dtype), w, is_causal, None, chunk)
    return out.to(q.dtype)


def linear_step(
    q: Tensor, k: Tensor, v: Tensor, state: State | None, scale: float | None = None
) -> tuple[Tensor, State]:
    """One causal decoding step in O(1): q, k (B, H, 1, D), v (B, H, 1, Dv).

    state = (S (B, H, D, Dv), z (B, H, D)) or None at the start; returns (out (B, H, 1, Dv), state).
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dtype = torch.promote_types(q.dtype, torch.float32)
    fq = phi(q.to(dtype) * scale)[:, :, 0]
    fk = phi(k.to(dtype))[:, :, 0]
    vv = v.to(dtype)[:, :, 0]
    if state is None:
        s = torch.zeros(*fk.shape, vv.shape[-1], dtype=dtype, device=q.device)
        z = torch.zeros_like(fk)
    else:
        s, z = state
    s = s + fk.unsqueeze(-1) * vv.unsqueeze(-2)
    z = z + fk
    out = torch.einsum("bhd,bhde->bhe", fq, s) / torch.einsum("bhd,bhd->bh", fq, z).unsqueeze(-1)
    return out.unsqueeze(2).to(q.dtype), (s, z)


class KernelizedKernel(AttentionKernel, register=False):
    """Base of the kernels that attend through feature maps (:func:`kernelized_attention`):
    a subclass gives :meth:`feature_maps` and ``Options`` with a ``chunk`` field. Its cache is
    :class:`RunningSums` (S and z), so it overrides :meth:`forward` and :meth:`new_cache`.

    With a cache, a key mask covers every key so far (B, 1, 1, Lk_cached + n), as the stack
    passes it; only its last n columns are read: the earlier keys are already summed, under
    the mask they had then."""

    exactness = "approximate"
    refuses = {
        "mask": "keys enter only through their sums S and z, shared by every query",
        "bias": "a bias on the scores has no place in phi(q) . phi(k)",
        "need_weights": "the (Lq, Lk) weights are what the feature maps avoid making",
        "dropout": "not implemented: there are no weights to drop",
    }

    @abstractmethod
    def feature_maps(self, q: Tensor, k: Tensor, scale: float | None) -> tuple[Tensor, Tensor]:
        """q (B, H, Lq, Dh), k (B, H, Lk, Dh) in the accumulation dtype -> phi(q) (B, H, Lq, M),
        phi(k) (B, H, Lk, M), non-negative."""

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "chunk":
            check_int_option(name, value)

    def new_cache(self, max_len: int) -> RunningSums:
        """S and z: the sums, not the keys and values (O(1) per decoding step)."""
        return RunningSums(max_len)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        is_causal: bool = False,
        cache: Any = None,
        dropout_p: float = 0.0,
        scale: float | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        self.check_call(q, k, mask, bias, is_causal, cache, dropout_p, need_weights)
        n = k.shape[-2]
        if cache is not None:
            cache.check_room(n)
        acc = torch.promote_types(q.dtype, torch.float32)  # sums in float32 at least
        fq, fk = self.feature_maps(q.to(acc), k.to(acc), scale)
        state = None if cache is None else cache.state
        out, after = kernelized_attention(
            fq, fk, v.to(acc), key_weights(mask, n), is_causal, state, self.options.chunk
        )
        if cache is not None:
            cache.store(after, n)
        return out.to(q.dtype), None

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        return self.forward(q, k, v, mask, bias, is_causal, None, dropout_p, scale, need_weights)

    def feature_count(self, head_dim: int) -> int:
        """M, the width of phi's output."""
        return head_dim

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """S = phi(K)^T V and phi(Q) S: 4 M Dh flops per position pair of (query, key) rows,
        not per (query, key) pair; causal adds the (C, C) products within each chunk. Held at
        once: the features (Lq + Lk) x M and, causal, the chunks' scores Lq x C."""
        m, c = self.feature_count(head_dim), self.options.chunk
        flops = 2.0 * (lk + lq) * m * head_dim + 2.0 * (lk + lq) * m
        held = (lq + lk) * m
        if is_causal:
            flops += 2.0 * lq * min(c, lq) * (m + head_dim)
            held += lq * min(c, lq)
        return AttentionCost(flops=flops, score_elements=held)


@dataclasses.dataclass(frozen=True)
class LinearOptions:
    # Positions per chunk of the causal prefix sums (memory L * chunk for the chunks' scores).
    chunk: int = 64


class LinearKernel(KernelizedKernel):
    """Linear attention (Katharopoulos et al. 2020): phi(x) = elu(x) + 1, q scaled by
    1/sqrt(Dh) first. A different function from softmax (no random features converge to it):
    ``error_bound`` is the largest |out - math| measured, not a rate."""

    name = "linear"
    Options = LinearOptions
    # Measured (python benchmarks/bench_linear.py --bound): the largest |out - math| over the
    # draws of each of the kernel contract's calls (standard-normal q, k, v, float64, Dh = 4,
    # up to 6 keys) was 3.25 (3000 draws) and 3.57 (1000 draws); the mean is 0.18. Little is
    # promised: both outputs are convex combinations of the same v, so |out - math| <=
    # max_j v_j - min_j v_j whatever the weights; the bound reflects v's spread over a few keys
    # more than the kernel. 4.5 leaves a margin.
    error_bound = 4.5

    def feature_maps(self, q: Tensor, k: Tensor, scale: float | None) -> tuple[Tensor, Tensor]:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        return phi(q * scale), phi(k)


__all__ = [
    "KernelizedKernel",
    "LinearKernel",
    "RunningSums",
    "kernelized_attention",
    "key_weights",
    "linear_attention",
    "linear_step",
    "phi",
]
