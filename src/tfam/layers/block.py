"""Blocks and the one stack class: attention and MLP sub-layers with residuals, pre- or post-norm.

An encoder, a decoder and a decoder-only model are all :class:`TransformerStack`: N blocks,
causal or not, with or without cross-attention.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig
from tfam.layers.attention import MultiHeadAttention
from tfam.layers.cache import StackCache
from tfam.layers.feedforward import FeedForward
from tfam.layers.masks import combine
from tfam.layers.norm import make_norm
from tfam.layers.position import TokenPositions, build_position


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
    """One block of self-attention and MLP, built from a config.

    pre-norm (ViT, GPT):   X1 = X0 + MHSA(LN(X0));   X_out = X1 + MLP(LN(X1))
    post-norm (original):  X1 = LN(X0 + MHSA(X0));   X_out = LN(X1 + MLP(X1))

    With ``is_causal`` the self-attention is masked (a decoder-only model's block).

    Shapes: x (B, L, D) -> (B, L, D); attention weights (B, H, L, L).

    ``queries=n`` computes the output of the first n tokens only, every token still serving as
    a key and a value: (B, L, D) -> (B, n, D), weights (B, H, n, L). Those rows are the same as
    in the full output: each token's row depends on the others only through K and V. A ViT that
    reads [CLS] alone runs its last block this way and skips almost all of that block's work.

    ``token_partition`` (optional, see :class:`~tfam.layers.windows.TokenPartition`; None by
    default) regroups the tokens around self-attention: the attention runs on
    ``partition(x, grid)`` (Swin's windows (B*nW, Ws*Ws, D), with its own mask), its output is
    put back by ``merge``, the MLP and residuals see the tokens as they were. ``forward`` then
    takes ``grid`` (Hg, Wg), mask and bias are in the partition's layout and the weights are
    the partition's, (B*nW, H, Ws*Ws, Ws*Ws) for windows.
    """

    def __init__(self, config: BaseConfig, drop_path: float | None = None) -> None:
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        self.norm1 = make_norm(c.norm, c.dim, c.norm_eps)
        self.mhsa = MultiHeadAttention(c)
        self.norm2 = make_norm(c.norm, c.dim, c.norm_eps)
        self.mlp = FeedForward(c)
        self.mlp_dropout = nn.Dropout(c.dropout)
        self.drop_path = DropPath(c.drop_path if drop_path is None else drop_path)
        self.token_partition: nn.Module | None = None

    def _attend_partitioned(
        self,
        h: Tensor,
        grid: tuple[int, int] | None,
        mask: Tensor | None,
        bias: Tensor | None,
        is_causal: bool,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention within the token partition's groups (windows), merged back."""
        if grid is None:
            raise ValueError(
                "grid=None is invalid: a block with a token_partition needs the token grid "
                "(height, width)"
            )
        part = self.token_partition
        assert part is not None
        groups, own = part.partition(h, grid)
        # A per-layer bias (Swin's table) or Q/K transform sees a window's own positions.
        hooked = self.mhsa.qk_transform is not None or self.mhsa.bias_provider is not None
        z, weights = self.mhsa(
            groups,
            mask=combine(mask, own),
            bias=bias,
            is_causal=is_causal,
            need_weights=need_weights,
            positions=torch.arange(groups.shape[1], device=groups.device) if hooked else None,
        )
        return part.merge(z, grid), weights

    def _attend(
        self,
        x: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        is_causal: bool,
        cache: Any,
        positions: Tensor | None,
        need_weights: bool,
        queries: int | None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The self-attention sub-layer with its residual (and post-norm)."""
        h = self.norm1(x) if self.norm_first else x
        if self.token_partition is not None:
            if queries is not None or cache is not None:
                what = f"queries={queries!r}" if queries is not None else "a cache"
                raise ValueError(
                    f"{what} is invalid with a token_partition: each group attends as a whole "
                    "(no subset of queries, no incremental decoding)"
                )
            z, weights = self._attend_partitioned(h, grid, mask, bias, is_causal, need_weights)
        elif queries is None or self.mhsa.kernel.exactness == "pattern":
            # A pattern kernel aligns its queries bottom-right (the last Lq of Lk positions): the
            # first rows alone would be read as the last ones, so it computes every row.
            z, weights = self.mhsa(
                h,
                mask=mask,
                bias=bias,
                is_causal=is_causal,
                cache=cache,
                positions=positions,
                need_weights=need_weights,
            )
            if queries is not None:
                z, x = z[:, :queries], x[:, :queries]
                weights = None if weights is None else weights[..., :queries, :]
        else:
            z, weights = self.mhsa(
                h[:, :queries],
                context=h,
                mask=_first_rows(mask, queries),
                bias=_first_rows(bias, queries),
                # (L,), (B, L) or a grid's (2, L): the tokens are the last axis.
                positions=None if positions is None else positions[..., :queries],
                key_positions=positions,
                need_weights=need_weights,
            )
            x = x[:, :queries]
        if self.norm_first:
            return x + self.drop_path(z), weights
        return self.norm1(x + self.drop_path(z)), weights

    def _feed_forward(self, x: Tensor) -> Tensor:
        """The MLP sub-layer with its residual (and post-norm)."""
        if self.norm_first:
            y = self.drop_path(self.mlp_dropout(self.mlp(self.norm2(x))))
            # x is this block's own tensor now: without autograd, add in place.
            return x.add_(y) if not torch.is_grad_enabled() else x + y
        return self.norm2(x + self.drop_path(self.mlp_dropout(self.mlp(x))))

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
        queries: int | None = None,
        is_causal: bool = False,
        cache: Any = None,
        positions: Tensor | None = None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, L, D) -> (B, L, D), or (B, queries, D) with ``queries``; weights or None.
        ``cache``: this block's :class:`~tfam.layers.cache.LayerCache` when decoding.
        ``grid`` (Hg, Wg), L = Hg * Wg: read by the ``token_partition`` only."""
        self_cache = None if cache is None else cache.self_attn
        x, weights = self._attend(
            x, mask, bias, is_causal, self_cache, positions, need_weights, queries, grid
        )
        return self._feed_forward(x), weights


class DecoderBlock(EncoderBlock):
    """A decoder block: masked self-attention, cross-attention, MLP (Vaswani et al. 2017).

    pre-norm:   X1 = X0 + MHSA(LN(X0));  X2 = X1 + CrossAttn(LN(X1), M);  X3 = X2 + MLP(LN(X2))
    post-norm:  X1 = LN(X0 + MHSA(X0));  X2 = LN(X1 + CrossAttn(X1, M));  X3 = LN(X2 + MLP(X2))

    Cross-attention takes its queries from the decoder and its keys and values from the encoder
    output M (the "memory").

    Shapes: x (B, Lt, D), memory (B, Ls, D) -> (B, Lt, D); weights (self (B, H, Lt, Lt),
    cross (B, H, Lt, Ls)).
    """

    def __init__(self, config: BaseConfig, drop_path: float | None = None) -> None:
        super().__init__(config, drop_path)
        c = config
        self.norm_cross = make_norm(c.norm, c.dim, c.norm_eps)
        self.cross_attn = MultiHeadAttention(c)

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = True,
        cache: Any = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor | None, Tensor | None] | None]:
        """x (B, Lt, D); memory (B, Ls, D) (may be None once ``cache`` holds the cross keys);
        mask: target self-attention mask, memory_mask: (B, 1, 1, Ls) source padding.
        -> (B, Lt, D), (self weights, cross weights) or None."""
        self_cache = None if cache is None else cache.self_attn
        cross_cache = None if cache is None else cache.cross_attn
        x, self_w = self._attend(
            x, mask, bias, is_causal, self_cache, positions, need_weights, None
        )
        h = self.norm_cross(x) if self.norm_first else x
        z, cross_w = self.cross_attn(
            h, context=memory, mask=memory_mask, cache=cross_cache, need_weights=need_weights
        )
        x = x + self.drop_path(z) if self.norm_first else self.norm_cross(x + self.drop_path(z))
        return self._feed_forward(x), ((self_w, cross_w) if need_weights else None)


class TransformerStack(nn.Module):
    """N blocks built from one config, each built (and so initialised) on its own; drop-path
    rises linearly from 0 to ``config.drop_path`` over depth.

    kind="encoder": self-attention blocks (ViT, BERT, the Transformer's encoder);
    ``causal=True`` masks them (GPT). kind="decoder": :class:`DecoderBlock`\\ s, causal
    self-attention plus cross-attention over ``memory`` (the Transformer's decoder).

    ``bias_provider`` (optional module): ``(q_pos (Lq,), k_pos (Lk,)) -> (H, Lq, Lk)`` additive
    bias, computed once per forward and shared by every block (ALiBi, T5's relative bias).
    The position scheme that ``config.position`` names wires itself: its
    :meth:`~tfam.layers.position.PositionScheme.qk_transform` goes to every self-attention
    (RoPE), its :meth:`~tfam.layers.position.PositionScheme.score_bias` becomes the bias
    provider (ALiBi); schemes added to the tokens give neither (the family adds them).
    A grid family builds its stack with ``grid`` (gh, gw) and ``prefix`` (the tokens before
    the patches) and passes ``positions=TokenPositions.on_grid(grid, prefix)`` per forward, so
    a scheme acting in attention indexes (row, column): RoPE becomes 2-D axial.

    x (B, L, D) -> (B, L, D), and with ``need_weights`` a list of N weights: (B, H, L, L) per
    encoder block, (self, cross) pairs per decoder block.
    """

    def __init__(
        self,
        config: BaseConfig,
        kind: str = "encoder",
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        prefix: int = 0,
    ) -> None:
        super().__init__()
        if kind not in ("encoder", "decoder"):
            raise ValueError(f"kind={kind!r} is invalid: expected 'encoder' or 'decoder'")
        self.kind = kind
        self.causal = causal or kind == "decoder"
        depth = config.depth
        rates = [config.drop_path * i / max(depth - 1, 1) for i in range(depth)]
        block = DecoderBlock if kind == "decoder" else EncoderBlock
        if config.share_layers:
            # ALBERT (Lan et al. 2020): one block applied N times; its drop-path rate is the
            # ramp's mean, the rate the N distinct blocks average.
            one = block(config, drop_path=sum(rates) / max(len(rates), 1))
            self.blocks = nn.ModuleList([one] * depth)
        else:
            self.blocks = nn.ModuleList(block(config, drop_path=rate) for rate in rates)
        # Positions that act inside attention are wired here, once for every family.
        # A grid family (ViT) says its patch grid: RoPE is then 2-D (row, column).
        scheme = build_position(config, grid=grid, prefix=prefix)
        self.bias_provider: nn.Module | None = scheme.score_bias(causal=self.causal)
        for blk in self.blocks:  # self-attention only: cross-attention keys are the source's
            blk.mhsa.qk_transform = scheme.qk_transform()

    def make_cache(self, max_len: int) -> StackCache:
        """An empty cache for incremental decoding of up to ``max_len`` positions; each block's
        self-attention cache is the one its kernel reads (``kernel.new_cache``)."""
        caches = [blk.mhsa.kernel.new_cache(max_len) for blk in self.blocks]
        return StackCache(len(self.blocks), max_len, self.kind == "decoder", caches)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
        last_queries: int | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: StackCache | None = None,
        positions: TokenPositions | None = None,
        layers: int | None = None,
    ) -> tuple[Tensor, list[Any] | None]:
        """x (B, L, D); mask: self-attention mask (True = may attend); memory/memory_mask:
        encoder output and its padding mask (decoder stacks); cache: from :meth:`make_cache`.
        ``last_queries=n`` (encoder stacks): the last block computes the first n tokens only,
        (B, n, D). ``positions``: where x's tokens sit (the family's, computed once per
        forward); by default ``cache.position + arange(L)``. ``layers=n``: run the first n
        blocks only and return their output (a middle layer's features: iGPT's probe)."""
        blocks = self.blocks if layers is None else self.blocks[:layers]
        if layers is not None and not 0 <= layers <= len(self.blocks):
            raise ValueError(
                f"layers={layers!r} is invalid: expected an int in [0, {len(self.blocks)}]"
            )
        if positions is None:
            positions = TokenPositions(cache.position if cache is not None else 0, x.shape[1])
        if self.bias_provider is not None:
            q_pos, k_pos = positions.shared(x.device), positions.keys(x.device)
            shared = self.bias_provider(q_pos, k_pos)
            bias = shared if bias is None else bias + shared
        # The query positions as a tensor, made once for every block that reads them.
        hooked = any(
            b.mhsa.qk_transform is not None or b.mhsa.bias_provider is not None for b in self.blocks
        )
        q_positions = positions.query(x.device) if hooked else None
        all_weights: list[Any] | None = [] if need_weights else None
        last = len(blocks) - 1
        for i, block in enumerate(blocks):
            layer_cache = None if cache is None else cache[i]
            if self.kind == "decoder":
                x, weights = block(
                    x,
                    memory,
                    mask=mask,
                    memory_mask=memory_mask,
                    bias=bias,
                    need_weights=need_weights,
                    cache=layer_cache,
                    positions=q_positions,
                )
            else:
                x, weights = block(
                    x,
                    mask=mask,
                    bias=bias,
                    need_weights=need_weights,
                    queries=last_queries if i == last else None,
                    is_causal=self.causal,
                    cache=layer_cache,
                    positions=q_positions,
                )
            if all_weights is not None:
                all_weights.append(weights)
        return x, all_weights


__all__ = ["DecoderBlock", "DropPath", "EncoderBlock", "TransformerStack"]
