"""Linear (kernelised) attention, Katharopoulos et al. 2020: phi(x) = elu(x) + 1.

First slice of issue 22 point 2: the parallel forms (non-causal, causal by prefix sums) and the
recurrent decoding step as functions. Not yet registered as an ``AttentionKernel``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def phi(x: Tensor) -> Tensor:
    """Feature map elu(x) + 1: positive, so the normaliser never vanishes."""
    return F.elu(x) + 1.0


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Linear attention in the parallel form.

    q: (B, H, Lq, D); k: (B, H, Lk, D); v: (B, H, Lk, Dv); key_padding: bool (B, 1, 1, Lk),
    True = may attend. ``scale`` multiplies q before phi (default 1/sqrt(D)). Causal is
    bottom-right aligned: query i sees keys j <= i + Lk - Lq. Returns (B, H, Lq, Dv); a query with
    no visible key gives zeros.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dtype = torch.promote_types(q.dtype, torch.float32)  # sums in float32 at least
    fq = phi(q.to(dtype) * scale)
    fk = phi(k.to(dtype))
    vv = v.to(dtype)
    if key_padding is not None:
        # masked keys contribute nothing to S or z
        fk = fk * key_padding.reshape(key_padding.shape[0], 1, -1, 1).to(dtype)
    if not is_causal:
        s = torch.einsum("bhjd,bhje->bhde", fk, vv)
        z = fk.sum(dim=2)
        num = torch.einsum("bhid,bhde->bhie", fq, s)
        den = torch.einsum("bhid,bhd->bhi", fq, z)
    else:
        lq, lk = q.shape[2], k.shape[2]
        # prefix sums over keys; query i reads the prefix ending at key i + lk - lq
        s = torch.cumsum(torch.einsum("bhjd,bhje->bhjde", fk, vv), dim=2)
        z = torch.cumsum(fk, dim=2)
        idx = torch.arange(lq, device=q.device) + (lk - lq)
        valid = idx >= 0
        idx = idx.clamp(min=0)
        s_i = s[:, :, idx] * valid.reshape(1, 1, -1, 1, 1).to(dtype)
        z_i = z[:, :, idx] * valid.reshape(1, 1, -1, 1).to(dtype)
        num = torch.einsum("bhid,bhide->bhie", fq, s_i)
        den = torch.einsum("bhid,bhid->bhi", fq, z_i)
    # den is 0 exactly when no key is visible: give zeros there, not NaN
    safe = torch.where(den > 0, den, torch.ones_like(den))
    out = torch.where((den > 0).unsqueeze(-1), num / safe.unsqueeze(-1), torch.zeros_like(num))
    return out.to(q.dtype)


def linear_step(
    q: Tensor, k: Tensor, v: Tensor, state: tuple[Tensor, Tensor] | None, scale: float | None = None
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
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
