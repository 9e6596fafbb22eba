"""Encoder blocks and stacks: attention and MLP sub-layers with residuals, pre- or post-norm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tfam.layers.attention import MultiHeadAttention
from tfam.layers.feedforward import FeedForward
from tfam.layers.norm import make_norm


class DropPath(nn.Module):
    """Stochastic depth: drop a residual branch for whole samples, rescale the kept ones.

    (B, ...) -> (B, ...); identity at eval time or with p = 0.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        return x * x.new_empty(shape).bernoulli_(keep).div_(keep)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def _first_rows(t: Tensor | None, n: int) -> Tensor | None:
    """A mask or bias broadcastable to (B, H, Lq, Lk), cut to the first n queries."""
    return t if t is None or t.ndim < 2 or t.shape[-2] == 1 else t[..., :n, :]


class EncoderBlock(nn.Module):
    """One encoder block.

    pre-norm (ViT):        X1 = X0 + MHSA(LN(X0));   X_out = X1 + MLP(LN(X1))
    post-norm (original):  X1 = LN(X0 + MHSA(X0));   X_out = LN(X1 + MLP(X1))

    Shapes: x (B, L, D) -> (B, L, D); attention weights (B, H, L, L).

    ``queries=n`` computes the output of the first n tokens only, every token still serving as
    a key and a value: (B, L, D) -> (B, n, D), weights (B, H, n, L). Those rows are the same as
    in the full output: each token's row depends on the others only through K and V. A ViT that
    reads [CLS] alone runs its last block this way and skips almost all of that block's work.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        ffn_dim: int | None = None,
        activation: str = "gelu",
        norm: str = "layernorm",
        norm_eps: float = 1e-6,
        norm_first: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        drop_path: float = 0.0,
        attention: str = "sdpa",
        qkv_bias: bool = True,
        fused_qkv: bool = True,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm1 = make_norm(norm, dim, norm_eps)
        self.mhsa = MultiHeadAttention(
            dim, heads, qkv_bias, fused_qkv, attn_dropout, proj_dropout=dropout, attention=attention
        )
        self.norm2 = make_norm(norm, dim, norm_eps)
        self.mlp = FeedForward(dim, ffn_dim, activation, dropout=0.0)
        self.mlp_dropout = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
        queries: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, L, D) -> (B, L, D), or (B, queries, D) with ``queries``; weights or None."""
        h = self.norm1(x) if self.norm_first else x
        if queries is None:
            z, weights = self.mhsa(h, mask=mask, bias=bias, need_weights=need_weights)
        else:
            z, weights = self.mhsa(
                h[:, :queries],
                context=h,
                mask=_first_rows(mask, queries),
                bias=_first_rows(bias, queries),
                need_weights=need_weights,
            )
            x = x[:, :queries]
        if self.norm_first:
            x = x + self.drop_path(z)
            y = self.drop_path(self.mlp_dropout(self.mlp(self.norm2(x))))
            # x is this block's own tensor now: without autograd, add in place.
            x = x.add_(y) if not torch.is_grad_enabled() else x + y
        else:
            x = self.norm1(x + self.drop_path(z))
            x = self.norm2(x + self.drop_path(self.mlp_dropout(self.mlp(x))))
        return x, weights


class Encoder(nn.Module):
    """N encoder blocks, each built (and so initialised) on its own; drop-path rises linearly
    from 0 to ``drop_path`` over depth.

    x (B, L, D) -> (B, L, D), and with ``need_weights`` a list of N weights (B, H, L, L).
    """

    def __init__(self, depth: int, drop_path: float = 0.0, **block_kwargs: object) -> None:
        super().__init__()
        rates = [drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(
            EncoderBlock(drop_path=rate, **block_kwargs)  # type: ignore[arg-type]
            for rate in rates
        )

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
        last_queries: int | None = None,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """``last_queries=n``: the last block computes the first n tokens only, (B, n, D)."""
        all_weights: list[Tensor] | None = [] if need_weights else None
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            queries = last_queries if i == last else None
            x, weights = block(x, mask=mask, bias=bias, need_weights=need_weights, queries=queries)
            if all_weights is not None:
                all_weights.append(weights)
        return x, all_weights
