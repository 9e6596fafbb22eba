"""Normalisation over the last dimension, per token (never over the batch)."""

from __future__ import annotations

from torch import nn

from tfam.config import check_choice


class LayerNorm(nn.LayerNorm):
    """(X - mean) / sqrt(var + eps) * gamma + beta over D, per token. (..., D) -> (..., D)."""


class RMSNorm(nn.RMSNorm):
    """X / sqrt(mean(X^2) + eps) * gamma over D, per token; no centring, no bias. (..., D) -> (..., D)."""


def make_norm(kind: str, dim: int, eps: float = 1e-6) -> nn.Module:
    """The norm named by a config's `norm` field."""
    check_choice("norm", kind, ("layernorm", "rmsnorm"))
    return LayerNorm(dim, eps=eps) if kind == "layernorm" else RMSNorm(dim, eps=eps)
