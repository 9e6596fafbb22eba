"""Normalisation of the (B, L, D) tokens: per token over D (LayerNorm, RMSNorm: the
Transformer's), over the batch per feature (BatchNorm: what ``000_*`` contrasts it with), or
none.

``norm='batchnorm'`` (:class:`TokenBatchNorm`) normalises each of the D features over every
token of the batch, B * L values, in training; at evaluation it uses the running statistics
gathered in training. Its output for one token therefore depends on the other tokens of the
batch, the padded ones included (a padding mask does not reach a norm), and on whether the
model is in training mode; in a causal model the statistics of a training batch include the
later tokens. The ``ln-vs-bn`` study measures what that costs.
"""

from __future__ import annotations

from torch import Tensor, nn

from tfam.config import NORMS, check_choice

__all__ = ["LayerNorm", "RMSNorm", "TokenBatchNorm", "make_norm"]


class LayerNorm(nn.LayerNorm):
    """(X - mean) / sqrt(var + eps) * gamma + beta over D, per token. (..., D) -> (..., D)."""


class RMSNorm(nn.RMSNorm):
    """X / sqrt(mean(X^2) + eps) * gamma over D, per token; no centring, no bias. (..., D) -> (..., D)."""


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over tokens (Ioffe & Szegedy 2015, eq. in Alg. 1):
    y = (x - mu_B) / sqrt(sigma_B^2 + eps) * gamma + beta, per feature d, with mu_B and
    sigma_B^2 (biased) over all the tokens of all the batch's sequences in training, the
    running averages (momentum 0.1, unbiased variance) at evaluation. (..., D) -> (..., D)."""

    def forward(self, x: Tensor) -> Tensor:
        # BatchNorm1d normalises (N, C): every leading axis (B, L, ...) is one batch of tokens.
        return super().forward(x.reshape(-1, x.shape[-1])).reshape(x.shape)


def make_norm(kind: str, dim: int, eps: float = 1e-6) -> nn.Module:
    """The norm named by a config's ``norm`` field: "layernorm", "rmsnorm", "batchnorm" (over
    the batch's tokens, see :class:`TokenBatchNorm`) or "none" (the identity)."""
    check_choice("norm", kind, NORMS)
    if kind == "layernorm":
        return LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    if kind == "batchnorm":
        return TokenBatchNorm(dim, eps=eps)
    return nn.Identity()
