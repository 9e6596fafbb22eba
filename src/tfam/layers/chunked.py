"""The ``chunked`` kernel: exact attention in tiles (the FlashAttention algorithm in PyTorch).

Queries are cut into tiles of ``block_q`` rows and keys into tiles of ``block_k`` columns; each
query tile walks over the key tiles keeping a running row maximum ``m``, a running sum ``l`` of
exp(scores - m) and a running output, rescaled whenever ``m`` grows (online softmax). Only the
logsumexp per row (B, H, Lq) is saved for backward, which recomputes each tile's weights, so
memory is O((Lq + Lk) * Dh + block_q * block_k) per head, forward and backward: no (Lq, Lk)
matrix is ever made (unless the caller passes a full mask or bias, which is then only sliced).

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
    mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend (sliced per tile)
    bias: float, broadcastable to (B, H, Lq, Lk) (ALiBi; sliced per tile, gets its gradient)
    -> out (B, H, Lq, Dh)

The result equals ``math_attention``'s up to rounding (float64: ~1e-15). A row with no
finite score has logsumexp -inf and yields zeros, forward and backward. bfloat16 and float16
inputs are cast to float32 once (Q, K, V: O((Lq + Lk) Dh) more memory), the tiles, sums and
gradients are computed in float32, and the results are rounded to the inputs' dtype at the end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from tfam.layers.kernels import (
    AttentionCost,
    AttentionKernel,
    _check_mask,
    check_int_option,
    full_precision,
)


@dataclasses.dataclass(frozen=True)
class ChunkedOptions:
    """Tile sizes: queries per tile and keys per tile (memory per head ~ block_q * block_k).
    512 x 512 (1 MB of float32 scores per head) keeps the per-tile Python work small against
    the tile's matmuls: on this project's shared CPU (one thread, Dh 64), forward + backward
    took 1.3 s at 64 x 64 and 0.3-0.4 s at 256 x 256 or 512 x 512 for 2,048 tokens, and
    1.2 s at 512 x 512 against 1.4 s at 256 x 256 for 4,096 (torch's sdpa: 0.8 s)."""

    block_q: int = 512
    block_k: int = 512


def _as_4d(t: Tensor | None, shape: tuple[int, int, int, int]) -> Tensor | None:
    """``t`` broadcast to ``shape`` as a view (expand allocates nothing), or None."""
    if t is None:
        return None
    t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
    return t.expand(shape)


def _tile_scores(
    qs: Tensor,
    k_t: Tensor,
    mask: Tensor | None,
    bias: Tensor | None,
    is_causal: bool,
    q0: int,
    k0: int,
    offset: int,
    acc: torch.dtype,
) -> Tensor:
    """Scores of one tile (B, H, bq, bk) in ``acc``: (q * scale) K^T + bias, -inf where masked.
    ``qs`` (already scaled) and ``k_t`` are in ``acc``, so the product is too; ``mask``/``bias``
    are the tile's slices (or None)."""
    s = torch.matmul(qs, k_t.transpose(-2, -1))
    if bias is not None:
        s = s + bias.to(acc)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if is_causal:
        # Bottom-right: query i sees key j <= i + (Lk - Lq).
        i = torch.arange(q0, q0 + qs.shape[-2], device=qs.device)[:, None] + offset
        j = torch.arange(k0, k0 + k_t.shape[-2], device=qs.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    return s


def _causal_skip(is_causal: bool, q1: int, k0: int, offset: int) -> bool:
    """Whether a key tile starting at ``k0`` lies wholly above the diagonal for queries < q1."""
    return is_causal and k0 > (q1 - 1) + offset


def _key_tiles(
    qs: Tensor,
    k: Tensor,
    mask4: Tensor | None,
    bias4: Tensor | None,
    is_causal: bool,
    q0: int,
    q1: int,
    offset: int,
    block_k: int,
    acc: torch.dtype,
) -> Iterator[tuple[int, int, Tensor]]:
    """The key tiles that queries ``q0:q1`` (already scaled: ``qs``) see, with their scores:
    (k0, k1, scores (B, H, q1 - q0, k1 - k0)); tiles wholly above the causal diagonal are
    skipped (``offset`` = Lk - Lq aligns the diagonal bottom-right). Forward and backward
    walk the same tiles."""
    lk = k.shape[-2]
    for k0 in range(0, lk, block_k):
        if _causal_skip(is_causal, q1, k0, offset):
            break
        k1 = min(k0 + block_k, lk)
        yield (
            k0,
            k1,
            _tile_scores(
                qs,
                k[:, :, k0:k1],
                None if mask4 is None else mask4[:, :, q0:q1, k0:k1],
                None if bias4 is None else bias4[:, :, q0:q1, k0:k1],
                is_causal,
                q0,
                k0,
                offset,
                acc,
            ),
        )


class _ChunkedAttention(torch.autograd.Function):
    """Tiled forward saving the logsumexp; backward recomputes each tile's weights."""

    @staticmethod
    def forward(  # noqa: D102
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        mask: Tensor | None,
        is_causal: bool,
        scale: float,
        block_q: int,
        block_k: int,
    ) -> Tensor:
        b, h, lq, dh = q.shape
        lk = k.shape[-2]
        full = (b, h, lq, lk)
        acc = torch.promote_types(q.dtype, torch.float32)
        mask4, bias4 = _as_4d(mask, full), _as_4d(bias, full)
        offset = lk - lq
        # Q, K and V in the accumulation dtype, once (O((Lq + Lk) Dh) memory): a bfloat16 tile
        # product would round every score to 8 bits, which measured 3.8-4.8x sdpa's bfloat16
        # error (benchmarks/bench_precision.py, L = 256 and 1024). Q is scaled first, as math.
        qs_all, k_acc, v_acc = q.to(acc) * scale, k.to(acc), v.to(acc)
        out = torch.zeros(b, h, lq, v.shape[-1], dtype=acc, device=q.device)
        lse = torch.full((b, h, lq), float("-inf"), dtype=acc, device=q.device)
        for q0 in range(0, lq, block_q):
            q1 = min(q0 + block_q, lq)
            qs = qs_all[:, :, q0:q1]
            m = torch.full((b, h, q1 - q0, 1), float("-inf"), dtype=acc, device=q.device)
            l_sum = torch.zeros(b, h, q1 - q0, 1, dtype=acc, device=q.device)
            o = torch.zeros(b, h, q1 - q0, v.shape[-1], dtype=acc, device=q.device)
            for k0, k1, s in _key_tiles(
                qs, k_acc, mask4, bias4, is_causal, q0, q1, offset, block_k, acc
            ):
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                # While a row has seen no finite score its max is -inf: subtract 0 instead, so
                # exp gives 0 for its -inf scores rather than exp(-inf - -inf) = NaN.
                m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
                p = s.sub_(m_safe).exp_()  # in place: the tile's scores are not read again
                alpha = torch.exp(m - m_safe)  # rescales what was summed under the old max
                l_sum = alpha * l_sum + p.sum(dim=-1, keepdim=True)
                o = alpha * o + torch.matmul(p, v_acc[:, :, k0:k1])
                m = m_new
            alive = l_sum > 0
            out[:, :, q0:q1] = torch.where(alive, o / torch.where(alive, l_sum, 1.0), 0.0)
            lse[:, :, q0:q1] = torch.where(alive, m + torch.log(l_sum), float("-inf")).squeeze(-1)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, bias, mask, out, lse)
        ctx.opts = (is_causal, scale, block_q, block_k)
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor | None, ...]:  # noqa: D102
        # A backward called inside autocast would cast the float32 products too.
        with full_precision(dout.device):
            return _ChunkedAttention.tiled_backward(ctx, dout)

    @staticmethod
    def tiled_backward(ctx: Any, dout: Tensor) -> tuple[Tensor | None, ...]:
        """dq, dk, dv (and dbias) tile by tile, from the saved logsumexp."""
        q, k, v, bias, mask, out, lse = ctx.saved_tensors
        is_causal, scale, block_q, block_k = ctx.opts
        b, h, lq, dh = q.shape
        lk = k.shape[-2]
        full = (b, h, lq, lk)
        acc = torch.promote_types(q.dtype, torch.float32)
        mask4, bias4 = _as_4d(mask, full), _as_4d(bias, full)
        offset = lk - lq
        # The forward's scores, recomputed from the same float32 (or float64) operands.
        qs_all, k_acc, v_acc = q.to(acc) * scale, k.to(acc), v.to(acc)
        do = dout.to(acc)
        # D_i = sum_j P_ij dP_ij = dO_i . O_i: the softmax Jacobian's row term, per query.
        delta = (do * out.to(acc)).sum(dim=-1, keepdim=True)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        need_bias = bias is not None and ctx.needs_input_grad[3]
        if need_bias:
            bshape = (1,) * (4 - bias.dim()) + tuple(bias.shape)
            dbias = torch.zeros(bshape, dtype=acc, device=q.device)
            sum_dims = [d for d in range(4) if bshape[d] == 1 and full[d] != 1]
        # Dead rows (lse -inf) have zero weights: subtract 0 there so exp(-inf) stays 0.
        lse_safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).unsqueeze(-1)
        for q0 in range(0, lq, block_q):
            q1 = min(q0 + block_q, lq)
            qs = qs_all[:, :, q0:q1]
            for k0, k1, s in _key_tiles(
                qs, k_acc, mask4, bias4, is_causal, q0, q1, offset, block_k, acc
            ):
                # In place on each tile's fresh buffers (scores, then dP): a tile is read once.
                p = s.sub_(lse_safe[:, :, q0:q1]).exp_()
                d_o = do[:, :, q0:q1]
                dv[:, :, k0:k1] += torch.matmul(p.transpose(-2, -1), d_o)
                dp = torch.matmul(d_o, v_acc[:, :, k0:k1].transpose(-2, -1))
                ds = dp.sub_(delta[:, :, q0:q1]).mul_(p)  # gradient of the scores (and bias)
                dq[:, :, q0:q1] += torch.matmul(ds, k_acc[:, :, k0:k1])
                dk[:, :, k0:k1] += torch.matmul(ds.transpose(-2, -1), qs)
                if need_bias:
                    g = ds.sum(dim=sum_dims, keepdim=True) if sum_dims else ds
                    rq = slice(q0, q1) if bshape[2] != 1 else slice(0, 1)
                    rk = slice(k0, k1) if bshape[3] != 1 else slice(0, 1)
                    dbias[:, :, rq, rk] += g
        dq *= scale  # d(scale Q K^T)/dQ: the scale applied once, not per tile
        dbias_out = dbias.reshape(bias.shape).to(bias.dtype) if need_bias else None
        return (
            dq.to(q.dtype),
            dk.to(k.dtype),
            dv.to(v.dtype),
            dbias_out,
            None,
            None,
            None,
            None,
            None,
        )


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 512,
    block_k: int = 512,
) -> Tensor:
    """Exact softmax(scale Q K^T + bias) V over tiles; out (B, H, Lq, Dh_v). See the module."""
    _check_mask(mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Autocast would cast the float32 tile products back to bfloat16.
    with full_precision(q.device):
        return _ChunkedAttention.apply(q, k, v, bias, mask, is_causal, scale, block_q, block_k)


class ChunkedKernel(AttentionKernel):
    """Exact attention in ``block_q`` x ``block_k`` tiles, memory linear in the length."""

    name = "chunked"
    Options = ChunkedOptions
    exactness = "exact"
    refuses = {
        "need_weights": "the (Lq, Lk) weights are what the tiles avoid making",
        "dropout": "not implemented: dropping weights would need the same mask in backward",
    }

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """The pairs of every tile the forward walks (whole tiles: causal stops at the first
        tile past the diagonal, the rest of a diagonal tile is computed and masked), and one
        block_q x block_k tile of scores held at a time."""
        bq, bk = min(self.options.block_q, lq), min(self.options.block_k, lk)
        pairs = lq * lk
        if is_causal:
            pairs = 0
            for q0 in range(0, lq, bq):
                q1 = min(q0 + bq, lq)
                last = (q1 - 1) + (lk - lq)  # the last key query q1 - 1 sees
                tiles = last // bk + 1 if last >= 0 else 0
                pairs += (q1 - q0) * min(tiles * bk, lk)
        return AttentionCost(flops=4.0 * pairs * head_dim, score_elements=bq * bk)

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name in ("block_q", "block_k"):
            check_int_option(name, value)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        is_causal: bool,
        dropout_p: float,
        scale: float | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        out = chunked_attention(
            q, k, v, mask, bias, is_causal, scale, self.options.block_q, self.options.block_k
        )
        return out, None
