"""Attention kernels behind one signature.

    kernel(q, k, v, mask=None, bias=None, dropout_p=0.0, scale=None, need_weights=False)
        q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
        mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend
        bias: float, broadcastable to (B, H, Lq, Lk), added to the scores (ALiBi, relative)
        -> (out (B, H, Lq, Dh), weights (B, H, Lq, Lk) or None)

A query row with no allowed key yields zeros, never NaN, on every kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

Kernel = Callable[..., tuple[Tensor, Tensor | None]]
KERNELS: dict[str, Kernel] = {}


def register_kernel(name: str) -> Callable[[Kernel], Kernel]:
    def add(fn: Kernel) -> Kernel:
        KERNELS[name] = fn
        return fn

    return add


def get_kernel(name: str) -> Kernel:
    if name not in KERNELS:
        raise ValueError(f"attention={name!r} is invalid: expected one of {sorted(KERNELS)}")
    return KERNELS[name]


def _check_mask(mask: Tensor | None) -> None:
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(
            f"mask has dtype {mask.dtype}; expected torch.bool with True = may attend "
            "(pass additive float terms as `bias`)"
        )


@register_kernel("math")
def math_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(Dh) + bias) V, written out; returns the weights too."""
    _check_mask(mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Softmax in at least float32 (bf16 scores lose the small weights); float64 stays float64.
    acc = torch.promote_types(q.dtype, torch.float32)
    scores = torch.matmul(q, k.transpose(-2, -1)).to(acc) * scale
    if bias is not None:
        scores = scores + bias.to(acc)
    if mask is not None:
        # A finite fill keeps fully masked rows NaN-free in forward and backward;
        # those rows are then zeroed explicitly.
        scores = scores.masked_fill(~mask, torch.finfo(acc).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)
    weights = weights.to(q.dtype)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return torch.matmul(attn, v), (weights if need_weights else None)


@register_kernel("sdpa")
def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch's fused scaled_dot_product_attention; falls back to `math` when weights are asked for."""
    if need_weights:
        return math_attention(q, k, v, mask, bias, dropout_p, scale, need_weights=True)
    _check_mask(mask)
    attn_mask: Tensor | None = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, torch.finfo(q.dtype).min)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
    )
    if mask is not None:
        # torch's kernels differ on rows with no allowed key (NaN or uniform); ours are zero.
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out, None
