"""The ``local`` kernel: truncated (sliding-window) attention, in 1-D or on a patch grid.

Each query sees only the keys near it, so one layer costs O(L * window) instead of O(L^2):

- 1-D (``grid`` None): query i, at key position i' = i + Lk - Lq (bottom-right aligned, as
  causal), sees key j when |i' - j| <= window * dilation and (i' - j) % dilation == 0: the
  ``window`` keys on each side at steps of ``dilation``, and itself (2 * window + 1 keys). With
  ``dilation`` 1 this is exactly :func:`tfam.layers.masks.window_mask`.
- 2-D (``grid=[gh, gw]``): tokens ``prefix .. prefix + gh*gw - 1`` are the patches of a
  gh x gw grid in raster order (row r = t // gw, column c = t % gw, t = token - prefix); patch
  (r, c) sees patch (r', c') when |r - r'| <= window * dilation, |c - c'| <= window * dilation
  and both differences are multiples of ``dilation``: the (2 window + 1)^2 neighbourhood of a
  convolution's receptive field (the restricted self-attention of the source documents).
- ``prefix`` leading tokens (a [CLS] token; Longformer's global tokens) see every key and are
  seen by every query, in 1-D and 2-D.

Under ``is_causal`` only keys j <= i' remain. :meth:`LocalKernel.pattern_mask` is this pattern as
a bool (Lq, Lk) matrix; the kernel equals ``math`` under it ANDed with the caller's mask.

How it is computed (never a dense (Lq, Lk) matrix, unless the caller passes a dense mask or bias,
which is then only gathered). Positions are split into ``dilation`` residue classes (per axis),
inside which the pattern is a plain band. Each class's queries are cut into blocks of T
consecutive members (T x T tiles on a grid), T ~ window; a block gathers its band of keys (T +
2 window per axis; T + window rows when causal) and the caller's mask and bias at those (query,
key) pairs, and runs softmax over the band only. All blocks run as one batched matmul:
scores (B, H, G, T, S) with G blocks of T queries and S keys, G * T * S ~ 3 * L * window (1-D).
The prefix queries attend to every key as one more block. Gradients flow by autograd through
the gathers. Cost: O(L * window * Dh) flops and O(L * window) scores, forward and backward.

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
    mask: bool broadcastable to (B, H, Lq, Lk), True = may attend; bias: float, same
    -> out (B, H, Lq, Dh), weights (B, H, Lq, Lk) when asked (scattered back: dense)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tfam.config import config_error
from tfam.layers.kernels import AttentionCost, AttentionKernel, _check_mask, full_precision

# Smallest query block (per grid axis: _MIN_TILE): below it the batched matmuls are too small to
# be efficient, and the extra keys a small window's block gathers cost little.
_MIN_BLOCK = 16
_MIN_TILE = 4


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """``window``: keys (patches, per axis) on each side a query sees (int >= 0); the default
    128 makes short sequences dense. ``dilation``: the step between them (int >= 1).
    ``grid``: None (1-D) or [gh, gw], the patch grid after ``prefix`` leading tokens
    (int >= 0) that see and are seen by all."""

    window: int = 128
    dilation: int = 1
    grid: list[int] | None = None
    prefix: int = 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Hashable options the pattern and the block plan read."""

    window: int
    dilation: int
    grid: tuple[int, int] | None
    prefix: int

    def pattern(self, p: Tensor, j: Tensor, causal: bool) -> Tensor:
        """Whether query at key position ``p`` sees key ``j`` (long tensors, broadcasting):
        the module's pattern. Both the kernel's blocks and ``pattern_mask`` use this."""
        reach, d, n = self.window * self.dilation, self.dilation, self.prefix
        if self.grid is None:
            diff = p - j
            near = (diff.abs() <= reach) & (diff % d == 0)
        else:
            gw = self.grid[1]
            t, u = p - n, j - n  # grid cell indices (raster order)
            dr, dc = t // gw - u // gw, t % gw - u % gw
            near = (dr.abs() <= reach) & (dc.abs() <= reach) & (dr % d == 0) & (dc % d == 0)
        if n:
            near = near | ((p >= 0) & (p < n)) | (j < n)
        return near & (j <= p) if causal else near

    def check_lengths(self, lq: int, lk: int) -> None:
        """One ValueError line when a 2-D layout cannot place these tokens on its grid."""
        if self.grid is None:
            return
        gh, gw = self.grid
        if lk > self.prefix + gh * gw or lq > lk:
            raise ValueError(
                f"attention='local' with grid={list(self.grid)}, prefix={self.prefix} places at "
                f"most {self.prefix + gh * gw} tokens, queries the last of the keys: got Lq={lq}, "
                f"Lk={lk}; set attention_options.grid and prefix to the model's token layout"
            )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Blocks of queries and the keys each may see. Per block kind (band blocks, prefix
    block): query indices (G, T) and key indices (G, S), -1 where there is none, and the
    pattern (G, T, S); ``where`` (Lq,) is each query's place in the blocks' flattened rows."""

    blocks: tuple[tuple[Tensor, Tensor, Tensor], ...]
    where: Tensor
    # Per block kind and dtype: the pattern as an additive 0 / -inf term (rows with no allowed
    # key all 0), and a 0 / 1 factor for those rows (None when there are none); made once.
    _additive: dict[tuple[int, torch.dtype], tuple[Tensor, Tensor | None]] = dataclasses.field(
        default_factory=dict
    )

    def additive(self, i: int, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        """Block kind ``i``'s pattern as (0 / -inf (G, T, S), alive (G, T, 1) or None)."""
        if (i, dtype) not in self._additive:
            with torch.inference_mode(False):  # cached: training reuses it (see _plan)
                self._additive[(i, dtype)] = self._make_additive(i, dtype)
        return self._additive[(i, dtype)]

    def _make_additive(self, i: int, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        allowed = self.blocks[i][2]
        dead = ~allowed.any(dim=-1, keepdim=True)
        neg = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        neg = neg.masked_fill(~allowed & ~dead, float("-inf"))
        # On the meta device (explain's trace) nothing can be read: keep the factor.
        meta = allowed.device.type == "meta"
        alive = (~dead).to(dtype) if meta or bool(dead.any()) else None
        return neg, alive


def _band(start: Tensor, count: int, reach_lo: int, reach_hi: int, total: int) -> Tensor:
    """Class indices of the keys a block of ``count`` queries starting at class index
    ``start`` (G,) may see: [start - reach_lo, start + count - 1 + reach_hi], or every class
    index 0..total-1 when that is no longer (short inputs: as dense as ``math``)."""
    span = count + reach_lo + reach_hi
    if span >= total:
        return torch.arange(total).expand(start.shape[0], total)
    return start[:, None] + torch.arange(-reach_lo, count + reach_hi)[None, :]


def _blocks_1d(layout: _Layout, lq: int, lk: int, causal: bool) -> tuple[Tensor, Tensor]:
    """Band blocks of a 1-D layout: query indices (G, T) and key indices (G, S)."""
    w, d, n, off = layout.window, layout.dilation, layout.prefix, lk - lq
    lo, hi = off, off + lq  # key positions of the queries
    nq, nk = -(-lq // d), -(-lk // d)  # most queries / keys in one residue class
    t = max(1, min(max(w, _MIN_BLOCK), nq))
    nb = -(-nq // t)
    qs, ks = [], []
    for rho in range(d):
        p0 = lo + (rho - lo) % d  # first query position of this class
        kbase = p0 % d  # keys of the class: kbase + d * m
        m0 = (p0 - kbase) // d  # class index of that first query
        start = m0 + torch.arange(nb) * t  # (nb,) first class index per block
        qm = start[:, None] + torch.arange(t)[None, :]
        qpos = kbase + d * qm
        qok = (qpos < hi) & ~((qpos >= 0) & (qpos < n))
        km = _band(start, t, w, 0 if causal else w, nk)
        kpos = kbase + d * km
        kok = (kpos >= n) & (kpos < lk)  # prefix keys come once, in their own columns
        qs.append(torch.where(qok, qpos - off, -1))
        ks.append(torch.where(kok, kpos, -1))
    return torch.cat(qs), torch.cat(ks)


def _blocks_2d(layout: _Layout, lq: int, lk: int, causal: bool) -> tuple[Tensor, Tensor]:
    """Tiles of a 2-D layout: query indices (G, Tr * Tc) and key indices (G, Sr * Sc)."""
    w, d, n, off = layout.window, layout.dilation, layout.prefix, lk - lq
    gh, gw = layout.grid
    na, nc = -(-gh // d), -(-gw // d)  # most rows / columns in one residue class
    tr, tc = (max(1, min(max(w, _MIN_TILE), m)) for m in (na, nc))
    ntr, ntc = -(-na // tr), -(-nc // tc)
    row0, col0 = torch.arange(ntr) * tr, torch.arange(ntc) * tc
    qa, qb = row0[:, None] + torch.arange(tr), col0[:, None] + torch.arange(tc)
    # Causal: rows below the tile are later tokens; columns either side of earlier rows are not.
    ka, kb = _band(row0, tr, w, 0 if causal else w, na), _band(col0, tc, w, w, nc)
    qs, ks = [], []
    for rr in range(d):
        for rc in range(d):
            r, c = rr + d * qa, rc + d * qb  # (ntr, tr), (ntc, tc)
            tok = n + r[:, None, :, None] * gw + c[None, :, None, :]
            ok = (r < gh)[:, None, :, None] & (c < gw)[None, :, None, :]
            ok = ok & (tok >= off) & (tok < lk)
            qs.append(torch.where(ok, tok - off, -1).reshape(ntr * ntc, tr * tc))
            r, c = rr + d * ka, rc + d * kb
            tok = n + r[:, None, :, None] * gw + c[None, :, None, :]
            rok, cok = (r >= 0) & (r < gh), (c >= 0) & (c < gw)
            ok = rok[:, None, :, None] & cok[None, :, None, :] & (tok < lk)
            ks.append(torch.where(ok, tok, -1).reshape(ntr * ntc, -1))
    return torch.cat(qs), torch.cat(ks)


@functools.lru_cache(maxsize=8)
def _plan(layout: _Layout, lq: int, lk: int, causal: bool, device: str) -> _Plan:
    """The blocks for these lengths (built on the CPU, cached, moved to ``device``).

    Built outside inference mode: a plan first made during evaluation (under
    ``torch.inference_mode``) is reused by training steps of the same lengths, and inference
    tensors cannot be saved for backward."""
    with torch.inference_mode(False):
        return _build_plan(layout, lq, lk, causal, device)


def _build_plan(layout: _Layout, lq: int, lk: int, causal: bool, device: str) -> _Plan:
    build = _blocks_1d if layout.grid is None else _blocks_2d
    qidx, kidx = build(layout, lq, lk, causal)
    keep = (qidx >= 0).any(dim=1)  # blocks with no query (before a cache's queries) go
    qidx, kidx = qidx[keep], kidx[keep]
    off, n = lk - lq, min(layout.prefix, lk)
    kinds = [(qidx, kidx)]
    if n:
        # Every band block also sees the prefix keys; the prefix queries see every key.
        kinds[0] = (qidx, torch.cat([torch.arange(n).expand(qidx.shape[0], n), kidx], dim=1))
        if max(off, 0) < n:  # some queries are prefix tokens
            pq = torch.arange(max(off, 0), n) - off
            kinds.append((pq[None, :], torch.arange(lk)[None, :]))
    blocks, rows = [], []
    for q, k in kinds:
        allowed = (q >= 0)[:, :, None] & (k >= 0)[:, None, :]
        allowed &= layout.pattern((q + off)[:, :, None], k[:, None, :], causal)
        blocks.append(tuple(x.to(device) for x in (q, k, allowed)))
        rows.append(q.reshape(-1))
    flat = torch.cat(rows)
    where = torch.empty(lq, dtype=torch.long)
    valid = flat >= 0
    where[flat[valid]] = torch.arange(flat.numel())[valid]
    if int(valid.sum()) != lq:  # each query in exactly one block
        raise AssertionError(f"local plan covers {int(valid.sum())} of {lq} queries")
    return _Plan(tuple(blocks), where.to(device))


def _gather_pairs(t: Tensor | None, q: Tensor, k: Tensor) -> Tensor | None:
    """A mask or bias broadcastable to (B, H, Lq, Lk), read at the blocks' (query, key) pairs:
    (B', H', G, T, S) (a broadcast axis stays 1: a key mask is read per key only)."""
    if t is None:
        return None
    t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
    qi = q.clamp(min=0)[:, :, None] if t.shape[2] > 1 else q.new_zeros(q.shape[0], 1, 1)
    kj = k.clamp(min=0)[:, None, :] if t.shape[3] > 1 else k.new_zeros(k.shape[0], 1, 1)
    return t[:, :, qi, kj]


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: _Layout,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(Dh) + bias) V over ``layout``'s pattern only, by blocks (module
    docstring). q (B, H, Lq, Dh), k, v (B, H, Lk, Dh) -> (out (B, H, Lq, Dh), weights
    (B, H, Lq, Lk) or None)."""
    _check_mask(mask)
    if q.dtype != torch.promote_types(q.dtype, torch.float32):
        # bfloat16/float16 in: the band products and sums run in float32 and are rounded once
        # at the end (flash-attention's rule, tests/layers/test_precision.py: in bfloat16 the
        # band product rounded every score and missed 2x sdpa's error).
        acc = torch.promote_types(q.dtype, torch.float32)
        with full_precision(q.device):
            out, w = local_attention(
                q.to(acc), k.to(acc), v.to(acc), layout, mask, bias, is_causal, dropout_p,
                scale, need_weights,
            )  # fmt: skip
        return out.to(q.dtype), (None if w is None else w.to(q.dtype))
    lq, lk = q.shape[-2], k.shape[-2]
    layout.check_lengths(lq, lk)
    plan = _plan(layout, lq, lk, is_causal, str(q.device))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    qs_all = q * scale  # scale Q first, as math does
    b, h = q.shape[:2]
    outs, kept = [], []
    for i, (qidx, kidx, allowed) in enumerate(plan.blocks):
        g, t, n = allowed.shape
        qi, kj = qidx.clamp(min=0), kidx.clamp(min=0)
        # (B*H*G, T, Dh) and (B*H*G, S, Dh): the blocks' queries and their bands of keys.
        qg = qs_all[:, :, qi].reshape(b * h * g, t, q.shape[-1])
        kg, vg = (x[:, :, kj].reshape(b * h * g, n, x.shape[-1]) for x in (k, v))
        # s = Q K^T / sqrt(Dh) (+ bias), on the band only: (B, H, G, T, S)
        s = torch.bmm(qg, kg.transpose(1, 2)).view(b, h, g, t, n).to(acc)
        if mask is None and bias is None:
            # The pattern alone: one addition (no masking pass, nothing in backward).
            neg, alive = plan.additive(i, acc)
            w = torch.softmax(s + neg, dim=-1)
            if alive is not None:  # rows with no key (no query, or before every key): zero
                w = w * alive
        else:
            bg = _gather_pairs(bias, qidx, kidx)
            if bg is not None:
                s = s + bg.to(acc)
            keep = allowed
            m = _gather_pairs(mask, qidx, kidx)
            if m is not None:
                keep = keep & m
            s = s.masked_fill(~keep, float("-inf"))
            # A row with no finite score: a constant row, then zero weights (as math).
            dead = torch.isneginf(s).all(dim=-1, keepdim=True)
            w = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
        w = w.to(q.dtype)
        kept.append(w)
        attn = F.dropout(w, p=dropout_p) if dropout_p > 0 else w
        out = torch.bmm(attn.reshape(b * h * g, t, n), vg)  # (B*H*G, T, Dh)
        outs.append(out.view(b, h, g * t, v.shape[-1]))
    out = (outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)).index_select(2, plan.where)
    if not need_weights:
        return out, None
    dense = q.new_zeros(q.shape[0], q.shape[1], lq, lk)
    if q.device.type == "meta":  # explain's trace: shapes only, nothing to scatter
        return out, dense
    for (qidx, kidx, allowed), w in zip(plan.blocks, kept, strict=True):
        # Each (query, key) pair is in at most one block: scattering back overwrites nothing.
        gi, ti, si = allowed.nonzero(as_tuple=True)
        dense[:, :, qidx[gi, ti], kidx[gi, si]] = w[:, :, gi, ti, si]
    return out, dense


class LocalKernel(AttentionKernel):
    """Sliding-window attention (1-D, dilated, or a 2-D patch neighbourhood with a global
    prefix): ``math`` under its pattern, at O(L * window) cost. See the module docstring."""

    name = "local"
    Options = LocalOptions
    exactness = "pattern"  # refuses nothing: weights are scattered back into (B, H, Lq, Lk)

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        where = f"attention_options.{name}"
        if name == "window" and not (_is_int(value) and value >= 0):
            raise config_error(where, value, "expected an int >= 0 (keys on each side)")
        if name == "dilation" and not (_is_int(value) and value >= 1):
            raise config_error(where, value, "expected an int >= 1 (the step between keys)")
        if name == "prefix" and not (_is_int(value) and value >= 0):
            raise config_error(where, value, "expected an int >= 0 (leading global tokens)")
        if name == "grid" and value is not None:
            ok = isinstance(value, list | tuple) and len(value) == 2
            if not (ok and all(_is_int(x) and x >= 1 for x in value)):
                raise config_error(where, value, "expected None or [rows, columns], ints >= 1")

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().validate_options(options)
        if out["grid"] is not None:
            out["grid"] = list(out["grid"])  # JSON's form, so a round trip compares equal
        return out

    @property
    def layout(self) -> _Layout:
        o = self.options
        return _Layout(o.window, o.dilation, None if o.grid is None else tuple(o.grid), o.prefix)

    def pattern_mask(self, lq: int, lk: int, device: torch.device | None = None) -> Tensor:
        layout = self.layout
        layout.check_lengths(lq, lk)
        p = torch.arange(lq, device=device)[:, None] + (lk - lq)
        return layout.pattern(p, torch.arange(lk, device=device)[None, :], causal=False)

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """The scores the blocks compute, allowed or not (G * T * S summed over the blocks):
        ~3 * L * window in 1-D; all held at once (one batched matmul)."""
        layout = self.layout
        layout.check_lengths(lq, lk)
        plan = _plan(layout, lq, lk, is_causal, "cpu")
        scores = sum(a.numel() for _, _, a in plan.blocks)
        return AttentionCost(flops=4.0 * scores * head_dim, score_elements=scores)

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
        return local_attention(
            q, k, v, self.layout, mask, bias, is_causal, dropout_p, scale, need_weights
        )


__all__ = ["LocalKernel", "LocalOptions", "local_attention"]
