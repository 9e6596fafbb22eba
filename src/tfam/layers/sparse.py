"""Pattern attention kernels: Longformer's sliding window with global tokens, and BigBird's
block-sparse pattern (window, global and random blocks).

Both equal ``math`` under their own sparsity pattern (``pattern_mask``) ANDed with the
caller's mask, and neither forms the (Lq, Lk) scores. The queries are cut into blocks; each
query block gathers the keys its pattern may reach (a band of keys for Longformer, a list of
key blocks for BigBird) followed by the global keys, and one softmax runs over that union,
each key counted once: a global key that already lies in a query's band is masked in the
global part. Global queries see every key; their rows are computed apart, (G, Lk) at a time,
and replace the blocked ones. So per head:

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
    mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend (picked at the gathered keys)
    bias: float, broadcastable to (B, H, Lq, Lk) (picked likewise; gets its gradient)
    scores held: (Lq/c) blocks of (c, S + g) plus (G, Lk), c the query block, S the gathered
    keys per block, g the global keys, G the global queries: O(L) for a fixed pattern.

Autograd does the backward (it keeps the same blocked scores). Queries are placed bottom-right
as causal is: query i is at position i + Lk - Lq.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tfam.config import config_error
from tfam.layers.kernels import (
    AttentionCost,
    AttentionKernel,
    _check_mask,
    full_precision,
    math_attention,
)
from tfam.layers.masks import window_mask


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Which keys each query block gathers, built once per (Lq, Lk, causal, device).

    ``q_idx`` (nQ, c): the query in each slot of each query block, -1 for none;
    ``k_idx`` (nQ, S): the key in each gathered slot, -1 for none (outside the keys or a
    duplicate); ``slot`` (Lq,): where each query sits in the flattened (nQ * c) slots;
    ``band``: a gathered key counts only within ``band`` positions of the query (Longformer)
    or always (None: BigBird's blocks); ``cols`` (g,): global keys every query sees;
    ``rows`` (G,): global queries, which see every key. :func:`_plan` adds the rest."""

    lq: int
    lk: int
    causal: bool
    q_idx: Tensor
    k_idx: Tensor
    slot: Tensor
    band: int | None
    cols: Tensor
    rows: Tensor
    # Filled by _plan: the keys of the union (nQ, S + g) (band or blocks, then the global
    # keys), whether the pattern and causal allow each (nQ, c, S + g) and its negation, and
    # which query slots have none (nQ, c, 1).
    keys: Tensor | None = None
    ok: Tensor | None = None
    forbid: Tensor | None = None
    empty: Tensor | None = None
    has_empty: bool = True

    def held(self) -> int:
        """Score elements the forward holds: the blocks' (c, S + g) and the rows' (G, Lk)."""
        n_q, c = self.q_idx.shape
        return n_q * c * (self.k_idx.shape[1] + self.cols.numel()) + self.rows.numel() * self.lk


def _plan(p: _Plan, device: Any) -> _Plan:
    """``p`` on ``device`` with its union's keys and the pattern's allowed slots: a key in
    the band (or a gathered block), or a global key not already in the band, so the softmax
    counts each key once; causal ANDed."""
    n_q = p.q_idx.shape[0]
    keys = torch.cat([p.k_idx, p.cols.expand(n_q, -1)], dim=1)
    ok = (p.q_idx >= 0)[:, :, None] & (keys >= 0)[:, None, :]
    if p.band is not None or p.causal:
        # Query position - key position (nQ, c, S + g); int32 halves this transient's memory.
        pos = (p.q_idx + (p.lk - p.lq)).int()  # query i sits at i + Lk - Lq (bottom-right)
        dist = pos[:, :, None] - keys.int()[:, None, :]
    if p.band is not None:
        width = p.k_idx.shape[1]
        near = dist.abs() <= p.band  # Longformer: |i' - j| <= w
        ok[:, :, :width] &= near[:, :, :width]
        ok[:, :, width:] &= ~near[:, :, width:]  # global keys in the band: counted there
    if p.causal:
        ok = ok & (dist >= 0)
    moved = {
        f.name: getattr(p, f.name).to(device)
        for f in dataclasses.fields(p)
        if isinstance(getattr(p, f.name), Tensor)
    }
    return dataclasses.replace(
        p,
        **moved,
        keys=keys.clamp(min=0).to(device),
        ok=ok.to(device),
        forbid=(~ok).to(device),
        empty=(~ok.any(-1, keepdim=True)).to(device),
        has_empty=not bool(ok.any(-1).all()),
    )


def _as_4d(t: Tensor) -> Tensor:
    return t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))


def _pick(t: Tensor, qi: Tensor, kj: Tensor) -> Tensor:
    """``t`` (broadcastable to (B, H, Lq, Lk)) at queries ``qi`` and keys ``kj`` (index tensors
    broadcasting to some shape X) -> (B', H', *X), without expanding ``t``: a dimension of
    size 1 stays size 1 (index 0), so a key mask (B, 1, 1, Lk) costs no (Lq, Lk) tensor."""
    t = _as_4d(t)
    if t.shape[2] == 1:
        qi = qi.new_zeros((1,) * qi.dim())
    if t.shape[3] == 1:
        kj = kj.new_zeros((1,) * kj.dim())
    return t[:, :, qi, kj]


def _rows(t: Tensor, rows: Tensor) -> Tensor:
    """``t`` (broadcastable to (B, H, Lq, Lk)) at query rows ``rows`` -> (B', H', G or 1, Lk')."""
    t = _as_4d(t)
    return t if t.shape[2] == 1 else t[:, :, rows]


def sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    plan: _Plan,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(scale Q K^T + bias) V over the keys ``plan`` gathers for each query (see the
    module; causal is the plan's); out (B, H, Lq, Dh_v) and, with ``need_weights``, the dense
    weights (B, H, Lq, Lk)."""
    _check_mask(mask)
    if q.dtype != torch.promote_types(q.dtype, torch.float32):
        # bfloat16/float16 in: products and sums in float32, rounded once at the end
        # (flash-attention's rule, tests/layers/test_precision.py).
        acc = torch.promote_types(q.dtype, torch.float32)
        with full_precision(q.device):
            out, w = sparse_attention(
                q.to(acc), k.to(acc), v.to(acc), plan, mask, bias, dropout_p, scale, need_weights
            )
        return out.to(q.dtype), (None if w is None else w.to(q.dtype))
    b, h, lq, dh = q.shape
    lk = k.shape[-2]
    if (lq, lk) != (plan.lq, plan.lk):
        raise ValueError(f"the plan is for (Lq, Lk) = {(plan.lq, plan.lk)}, got {(lq, lk)}")
    scale = dh**-0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    qi, keys = plan.q_idx.clamp(min=0), plan.keys
    qs = (q * scale)[:, :, qi]  # (B, H, nQ, c, Dh): Q scaled first, as math does
    # Each query block gathers its keys: the band (or blocks), then the global keys.
    scores = torch.matmul(qs, k[:, :, keys].transpose(-2, -1)).to(acc)  # (B, H, nQ, c, S + g)
    if bias is not None:
        scores = scores + _pick(bias, qi[:, :, None], keys[:, None, :]).to(acc)
    if mask is None:
        scores = scores.masked_fill(plan.forbid, float("-inf"))
    else:
        keep = plan.ok & _pick(mask, qi[:, :, None], keys[:, None, :])
        scores = scores.masked_fill(~keep, float("-inf"))
    # One softmax over the union; a row with no finite score is zero (as in math).
    if bias is not None:
        dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    elif mask is not None:
        dead = ~keep.any(dim=-1, keepdim=True)
    else:  # only the pattern: the plan knows (most plans have no empty slot)
        dead = plan.empty if plan.has_empty else None
    if dead is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    weights = weights.to(q.dtype)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(attn, v[:, :, keys])  # (B, H, nQ, c, Dh)
    out = out.flatten(2, 3).index_select(2, plan.slot)  # (B, H, Lq, Dh)
    dense = None
    if need_weights:
        n_q, c = qi.shape
        dense = weights.new_zeros(b, h, n_q, c, lk)
        index = keys[:, None, :].expand(b, h, n_q, c, keys.shape[-1])
        dense = dense.scatter_add(-1, index, weights).flatten(2, 3).index_select(2, plan.slot)
    rows = plan.rows
    if rows.numel():
        # Global queries see every key: (G, Lk) scores, written over their blocked rows.
        row_mask = None if mask is None else _rows(mask, rows)
        if plan.causal:
            causal = torch.arange(lk, device=q.device) <= (rows + lk - lq)[:, None]
            row_mask = causal if row_mask is None else row_mask & causal
        row_bias = None if bias is None else _rows(bias, rows)
        out_g, w_g = math_attention(
            q[:, :, rows], k, v, row_mask, row_bias, dropout_p, scale, need_weights
        )
        out = out.index_copy(2, rows, out_g)
        if dense is not None:
            dense = dense.index_copy(2, rows, w_g)
    return out, dense


class _PatternKernel(AttentionKernel, register=False):
    """A pattern kernel computed by :func:`sparse_attention` from a cached :class:`_Plan`."""

    exactness = "pattern"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._plans: dict[tuple[int, int, bool, str], _Plan] = {}

    def plan(self, lq: int, lk: int, causal: bool, device: Any = None) -> _Plan:
        """The blocked layout for ``lq`` queries over ``lk`` keys (cached per device)."""
        key = (lq, lk, causal, str(torch.device("cpu") if device is None else device))
        if key not in self._plans:
            if len(self._plans) >= 32:
                self._plans.clear()
            self._plans[key] = _plan(self.make_plan(lq, lk, causal), device)
        return self._plans[key]

    @abstractmethod
    def make_plan(self, lq: int, lk: int, causal: bool) -> _Plan:
        """The kernel's layout: its query blocks, gathered keys, global keys and rows."""

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """What the blocks compute: every gathered score (masked ones included), 4 Dh flops
        each (the score and its share of the weighted sum of values)."""
        held = self.plan(lq, lk, is_causal).held()
        return AttentionCost(flops=4.0 * held * head_dim, score_elements=held)

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
        plan = self.plan(q.shape[-2], k.shape[-2], is_causal, q.device)
        return sparse_attention(q, k, v, plan, mask, bias, dropout_p, scale, need_weights)


# Longformer's smallest query block (rows per block); tests lower it to make many blocks.
MIN_QUERY_BLOCK = 32


def _check_int(name: str, value: Any, low: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise config_error(f"attention_options.{name}", value, f"expected an int >= {low} ({what})")


# ------------------------------------------------------------------------------ Longformer


@dataclasses.dataclass(frozen=True)
class LongformerOptions:
    # Keys each side of a query: query i sees key j when |i' - j| <= window (i' its position).
    # 256 each side is the pretrained Longformer's 512-token window.
    window: int = 256
    # Global positions ([CLS] by default): they see every key and every query sees them.
    global_tokens: tuple[int, ...] | list[int] = (0,)


class LongformerKernel(_PatternKernel):
    """Longformer's attention (Beltagy et al. 2020, sec. 3.1): a sliding window of ``window``
    keys each side of every query, plus ``global_tokens`` that attend to every key and are
    attended by every query (positions beyond the length are ignored). With causal, the
    pattern is ANDed with causal. Unlike the paper, global rows use the same Q, K, V
    projections as the window (the kernel is handed one Q, K, V)."""

    name = "longformer"
    Options = LongformerOptions

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "window":
            _check_int(name, value, 0, "keys each side of a query")
        elif name == "global_tokens" and (
            not isinstance(value, list | tuple)
            or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in value)
        ):
            raise config_error(
                "attention_options.global_tokens",
                value,
                "expected a list of token positions (ints >= 0), e.g. [0] for [CLS]",
            )

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().validate_options(options)
        out["global_tokens"] = sorted(set(out["global_tokens"]))  # a JSON list, each once
        return out

    def pattern_mask(self, lq: int, lk: int, device: torch.device | None = None) -> Tensor:
        """(Lq, Lk): |i' - j| <= window, or j global, or i' global (i' = i + Lk - Lq)."""
        band = window_mask(lq, lk, self.options.window, device=device)
        glob = torch.tensor(self.options.global_tokens, dtype=torch.long, device=device)
        pos = torch.arange(lq, device=device) + (lk - lq)
        cols = torch.isin(torch.arange(lk, device=device), glob)
        return band | cols[None, :] | torch.isin(pos, glob)[:, None]

    def make_plan(self, lq: int, lk: int, causal: bool) -> _Plan:
        w, off = self.options.window, lk - lq
        # Query blocks of c rows (c = w: the gathered band is 3w keys for 2w + 1 needed; at
        # least MIN_QUERY_BLOCK so a small window still makes few blocks).
        c = max(1, min(max(w, MIN_QUERY_BLOCK), lq))
        n_q = -(-lq // c)
        # Block n's queries reach keys [n c + off - w, n c + off + c - 1 + w] (only up to
        # n c + off + c - 1 with causal): S keys, shifted inside [0, Lk) at the ends.
        span = min(c + w + (0 if causal else w), lk)
        q_idx = torch.arange(n_q)[:, None] * c + torch.arange(c)
        q_idx = torch.where(q_idx < lq, q_idx, -1)
        start = (torch.arange(n_q) * c + off - w).clamp(0, lk - span)
        glob = self.options.global_tokens
        return _Plan(
            lq=lq,
            lk=lk,
            causal=causal,
            q_idx=q_idx,
            k_idx=start[:, None] + torch.arange(span),
            slot=torch.arange(lq),
            band=w,
            cols=torch.tensor([p for p in glob if p < lk], dtype=torch.long),
            rows=torch.tensor([p - off for p in glob if 0 <= p - off < lq], dtype=torch.long),
        )


# ---------------------------------------------------------------------------- BigBird blocks


@dataclasses.dataclass(frozen=True)
class BlockSparseOptions:
    # Tokens per block (BigBird: 64).
    block: int = 64
    # Key blocks each side of a query's block (BigBird: 3 sliding blocks, so 1 each side).
    window_blocks: int = 1
    # The first g blocks attend to everything and everything attends to them (BigBird-ITC has
    # 2 global blocks, the first and the last; here the first two).
    global_blocks: int = 2
    # Random key blocks per query block (BigBird: 3), drawn once from `seed`.
    random_blocks: int = 3
    seed: int = 0


class BlockSparseKernel(_PatternKernel):
    """BigBird's block-sparse attention (Zaheer et al. 2020, sec. 2 and app. D): the tokens in
    blocks of ``block``; query block qb sees key blocks |qb - kb| <= ``window_blocks``, the
    first ``global_blocks`` key blocks, and ``random_blocks`` key blocks drawn (without
    replacement, outside its window and the global blocks) from a generator seeded with
    ``seed``; the first ``global_blocks`` query blocks see every key. The random draw depends
    on the number of key blocks, ceil(Lk / block), so a KV cache that grows past a block
    boundary redraws it. With causal the pattern is ANDed with causal (random blocks after
    the query's block are then not seen)."""

    name = "block_sparse"
    Options = BlockSparseOptions

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        what = {
            "block": (1, "tokens per block"),
            "window_blocks": (0, "key blocks each side of a query block"),
            "global_blocks": (0, "leading blocks that are global"),
            "random_blocks": (0, "random key blocks per query block"),
            "seed": (0, "the random blocks' seed"),
        }
        if name in what:
            _check_int(name, value, *what[name])

    def random_blocks(self, n_blocks: int) -> Tensor:
        """(n_blocks, r) long: query block qb's random key blocks, -1 where fewer than r are
        left outside its window and the global blocks. Deterministic in (seed, n_blocks)."""
        o = self.options
        r = o.random_blocks
        out = torch.full((n_blocks, r), -1, dtype=torch.long)
        if r == 0:
            return out
        gen = torch.Generator().manual_seed(o.seed)
        kb = torch.arange(n_blocks)
        for start in range(0, n_blocks, 256):  # 256 query blocks at a time bound the memory
            qb = torch.arange(start, min(start + 256, n_blocks))
            candidate = ((kb - qb[:, None]).abs() > o.window_blocks) & (kb >= o.global_blocks)
            # The r candidates with the smallest uniform priority: r draws without replacement.
            priority = torch.rand(len(qb), n_blocks, generator=gen).masked_fill(~candidate, 2.0)
            value, chosen = priority.topk(min(r, n_blocks), dim=-1, largest=False)
            out[start : start + len(qb), : chosen.shape[1]] = torch.where(value < 2.0, chosen, -1)
        return out

    def pattern_mask(self, lq: int, lk: int, device: torch.device | None = None) -> Tensor:
        """(Lq, Lk) from the definition: qb = i' // block, kb = j // block (i' = i + Lk - Lq)."""
        o = self.options
        n_blocks = -(-lk // o.block)
        pos = torch.arange(lq)[:, None] + (lk - lq)
        qb = torch.div(pos, o.block, rounding_mode="floor")
        kb = torch.arange(lk)[None, :] // o.block
        seen = ((qb - kb).abs() <= o.window_blocks) | (kb < o.global_blocks)
        seen = seen | ((qb >= 0) & (qb < o.global_blocks))
        drawn = torch.zeros(n_blocks, n_blocks + 1, dtype=torch.bool)
        rand = self.random_blocks(n_blocks)
        drawn[torch.arange(n_blocks)[:, None], torch.where(rand >= 0, rand, n_blocks)] = True
        seen = seen | ((qb >= 0) & drawn[qb.clamp(min=0), kb])
        return seen.to(device)

    def block_table(self, qb: Tensor, n_blocks: int, causal: bool) -> Tensor:
        """(nQ, m) the key blocks each query block ``qb`` (nQ,) gathers: window, global, random,
        each once, -1 for none (outside the keys, a duplicate, or after qb with causal),
        present ones first and m the most any block has."""
        o = self.options
        window = qb[:, None] + torch.arange(-o.window_blocks, o.window_blocks + 1)
        glob = torch.arange(o.global_blocks).expand(len(qb), -1)
        rand = self.random_blocks(n_blocks)[qb.clamp(0, n_blocks - 1)]
        rand = torch.where((qb >= 0)[:, None], rand, -1)
        table = torch.cat([window, glob, rand], dim=1)
        keep = (table >= 0) & (table < n_blocks)
        if causal:
            keep = keep & (table <= qb[:, None])
        m = table.shape[1]
        earlier = torch.ones(m, m, dtype=torch.bool).tril(-1)  # [a, b]: b comes before a
        dup = ((table[:, :, None] == table[:, None, :]) & keep[:, None, :] & earlier).any(-1)
        keep = keep & ~dup
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices
        table = torch.where(keep, table, -1).gather(1, order)
        width = max(int(keep.sum(1).max()), 1)
        return table[:, :width]

    def make_plan(self, lq: int, lk: int, causal: bool) -> _Plan:
        bs, off = self.options.block, lk - lq
        n_blocks = -(-lk // bs)
        # Query blocks by position: qb_lo is negative when Lq > Lk (positions before key 0).
        qb_lo, qb_hi = off // bs, (lk - 1) // bs
        qb = torch.arange(qb_lo, qb_hi + 1)
        q_idx = qb[:, None] * bs + torch.arange(bs) - off
        present = (q_idx >= 0) & (q_idx < lq)
        # Keep only the slot columns that hold a query (one column when decoding one token).
        used = present.any(0).nonzero().flatten()
        first, last = int(used[0]), int(used[-1])
        q_idx = torch.where(present, q_idx, -1)[:, first : last + 1]
        table = self.block_table(qb, n_blocks, causal)  # (nQ, m)
        keys = table[:, :, None] * bs + torch.arange(bs)  # (nQ, m, block)
        keys = torch.where((table[:, :, None] >= 0) & (keys < lk), keys, -1).flatten(1)
        pos = torch.arange(lq) + off
        slot = (torch.div(pos, bs, rounding_mode="floor") - qb_lo) * (last - first + 1)
        slot = slot + pos % bs - first
        global_pos = torch.arange(min(self.options.global_blocks * bs, lk))
        rows = global_pos - off
        return _Plan(
            lq=lq,
            lk=lk,
            causal=causal,
            q_idx=q_idx,
            k_idx=keys,
            slot=slot,
            band=None,
            cols=torch.zeros(0, dtype=torch.long),
            rows=rows[(rows >= 0) & (rows < lq)],
        )


__all__ = [
    "BlockSparseKernel",
    "BlockSparseOptions",
    "LongformerKernel",
    "LongformerOptions",
    "sparse_attention",
]
