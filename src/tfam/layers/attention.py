"""Multi-head attention: Q/K/V projections, head split, a Q/K transform, a kernel, head merge,
W_O."""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import BaseConfig, check_attention
from tfam.layers.kernels import AttentionKernel, build_kernel


class QKTransform(Protocol):
    """Transforms Q and K after projection, before the scores (RoPE rotates them here).

    (q (B, H, Lq, Dh), k (B, H, Lk, Dh), q_pos, k_pos) -> (q, k); positions are int64 tensors
    (Lq,) / (Lk,), or (B, Lq) / (B, Lk) when rows differ (left-padded batches)."""

    def __call__(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor
    ) -> tuple[Tensor, Tensor]: ...


def qkv_views(qkv: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """(B, L, 3D) fused Q|K|V projection -> Q, K, V (B, H, L, Dh), views of it."""
    b, n, d3 = qkv.shape
    q, k, v = qkv.view(b, n, 3, heads, d3 // (3 * heads)).permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v


class SplitHeads3(torch.autograd.Function):
    """(B, L, 3D) fused Q|K|V projection -> Q, K, V (B, H, L, Dh), views of the input.

    The same views as :func:`qkv_views`, with a backward that writes the three gradients
    straight into one (B, L, 3, H, Dh) buffer: one copy, where autograd's unbind + permute +
    view backward stacks them and then copies the stack again to make it contiguous."""

    @staticmethod
    def forward(ctx: Any, qkv: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:  # noqa: D102
        b, n, d3 = qkv.shape
        ctx.shape = (b, n, 3, heads, d3 // (3 * heads))
        return qkv_views(qkv, heads)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor, None]:  # noqa: D102
        b, n = ctx.shape[:2]
        ref = next(g for g in grads if g is not None)
        out = ref.new_empty(ctx.shape)
        for i, g in enumerate(grads):
            if g is None:
                out[:, :, i].zero_()
            else:
                out[:, :, i].copy_(g.transpose(1, 2))
        return out.view(b, n, -1), None


class MultiHeadAttention(nn.Module):
    """MHSA(X) = Concat(head_1, ..., head_H) W_O, head_h = softmax(Q_h K_h^T / sqrt(Dh)) V_h.

    Built from a config (``dim``, ``heads``, ``qkv_bias``, ``fused_qkv``, ``attn_dropout``,
    ``dropout`` after W_O, ``attention`` + ``attention_options`` for the kernel).

    Self-attention when ``context`` is None; otherwise queries come from x and keys and values
    from ``context``: cross-attention (decoder over encoder output), or self-attention computed
    for a subset of queries. ``fused_qkv`` keeps W_Q, W_K, W_V as one (3D, D) matrix so
    self-attention projects in a single matmul; otherwise they are three Linear layers.

    ``qk_transform`` (optional module, see :class:`QKTransform`) acts on Q and K after
    projection; ``bias_provider`` (optional module) returns this layer's own additive bias
    (H, Lq, Lk) from the query and key positions (Swin's table).

    Shapes: x (B, Lq, D), context (B, Lk, D) -> (B, Lq, D); weights (B, H, Lq, Lk).
    """

    def __init__(self, config: BaseConfig) -> None:
        super().__init__()
        c = config
        dim = c.dim
        self.dim, self.heads, self.head_dim = dim, c.heads, dim // c.heads
        self.fused_qkv = c.fused_qkv
        if c.fused_qkv:
            self.qkv = nn.Linear(dim, 3 * dim, bias=c.qkv_bias)
        else:
            self.q_proj = nn.Linear(dim, dim, bias=c.qkv_bias)
            self.k_proj = nn.Linear(dim, dim, bias=c.qkv_bias)
            self.v_proj = nn.Linear(dim, dim, bias=c.qkv_bias)
        self.out_proj = nn.Linear(dim, dim)  # W_O
        self.attn_dropout = c.attn_dropout
        self.proj_dropout = nn.Dropout(c.dropout)
        self.qk_transform: nn.Module | None = None
        self.bias_provider: nn.Module | None = None
        self.init_std = c.init_std  # a kernel's own parameters start as the model's layers
        self.set_kernel(c.attention, c.attention_options)

    @property
    def attention(self) -> str:
        return self.kernel.name

    def set_kernel(
        self, attention: str, options: dict[str, Any] | None = None, discard: bool = False
    ) -> None:
        """Switch to another kernel (same projection weights), built for this layer's H and Dh.

        A kernel with learned parameters of its own (``math`` with ``score='additive'``) keeps
        them when the new kernel has the same ones (another normalizer); new ones start as at
        construction (truncated normal, std = ``init_std``). Switching to a kernel without
        them would drop what was learned: that is a ValueError unless ``discard=True`` (and
        switching back then starts them afresh)."""
        options = check_attention(attention, options)
        kernel = build_kernel(attention, options, heads=self.heads, head_dim=self.head_dim)
        old: AttentionKernel | None = self._modules.get("kernel")  # type: ignore[assignment]
        learned = old.state_dict() if old is not None else {}
        fresh = kernel.state_dict()
        same = learned.keys() == fresh.keys() and all(
            learned[n].shape == fresh[n].shape for n in learned
        )
        if learned and not same and not discard:
            was = ", ".join(f"{k}={v!r}" for k, v in old.to_options().items())
            raise ValueError(
                f"attention={attention!r} would drop the learned parameters of this layer's "
                f"kernel (attention={old.name!r}, {was}: {', '.join(learned)}); keep the kernel, "
                "or pass discard=True to drop them"
            )
        if fresh:
            # On the layer's device and dtype; kept values if they fit, else a fresh start.
            w = self.out_proj.weight
            kernel.to(device=w.device, dtype=w.dtype)
            if learned and same:
                kernel.load_state_dict(learned)
            else:
                kernel.reset_parameters(self.init_std)
        self.kernel: AttentionKernel = kernel

    def _split(self, t: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh)."""
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def project_q(self, x: Tensor) -> Tensor:
        """Q (B, H, Lq, Dh)."""
        if self.fused_qkv:
            w, bias = self.qkv.weight, self.qkv.bias
            d = self.dim
            return self._split(F.linear(x, w[:d], None if bias is None else bias[:d]))
        return self._split(self.q_proj(x))

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """K, V (B, H, Lk, Dh) each."""
        if self.fused_qkv:
            w, bias = self.qkv.weight, self.qkv.bias
            d = self.dim
            k, v = F.linear(context, w[d:], None if bias is None else bias[d:]).chunk(2, dim=-1)
        else:
            k, v = self.k_proj(context), self.v_proj(context)
        return self._split(k), self._split(v)

    def project_qkv(
        self, x: Tensor, context: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V, each (B, H, L, Dh)."""
        if context is None:
            if self.fused_qkv:
                qkv = self.qkv(x)
                # Without autograd, the same views without a Function's call overhead.
                split = SplitHeads3.apply if qkv.requires_grad else qkv_views
                q, k, v = split(qkv, self.heads)
                return q, k, v
            return self._split(self.q_proj(x)), *self.project_kv(x)
        return self.project_q(x), *self.project_kv(context)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        is_causal: bool = False,
        cache: Any = None,
        positions: Tensor | None = None,
        need_weights: bool = False,
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, Lq, D); mask bool (True = may attend) and bias float, both broadcastable to
        (B, H, Lq, Lk); ``is_causal``: query i sees keys up to its own position (bottom-right).

        ``cache``: a :class:`~tfam.layers.cache.KVCache` (self-attention: the new keys and
        values are appended) or a :class:`~tfam.layers.cache.CrossKV` (cross-attention: keys
        and values are projected from ``context`` once, then reused; ``context`` may be None
        after that). ``positions`` (Lq,) or (B, Lq): positions of x's tokens, read only by
        ``qk_transform`` and ``bias_provider`` and required by them (the stack computes them
        once per forward, :class:`~tfam.layers.position.TokenPositions`); a grid's are
        (2, Lq), row and column. ``key_positions``: the keys' when ``context`` holds x's
        tokens and more (a block computing its first queries only); by default x's own for
        self-attention, ``arange(Lk)`` for a context.

        -> (out (B, Lq, D), weights (B, H, Lq, Lk) or None)."""
        static = cache is not None and cache.static
        if static and cache.filled:
            q, (k, v) = self.project_q(x), (cache.k, cache.v)
        else:
            q, k, v = self.project_qkv(x, context)
            if static:
                cache.set(k, v)
        self_cache = None if static else cache
        if self.qk_transform is not None or self.bias_provider is not None:
            if positions is None:
                raise ValueError(
                    "positions is None: this attention has a Q/K transform or a bias provider, "
                    "which need the tokens' positions (Lq,) or (B, Lq); pass them, as "
                    "TransformerStack does"
                )
            offset = self_cache.length if self_cache is not None else 0
            q_pos = positions
            if key_positions is not None:
                k_pos = key_positions
            else:
                k_pos = q_pos if context is None else torch.arange(k.shape[-2], device=x.device)
            if self.qk_transform is not None and not static:
                q, k = self.qk_transform(q, k, q_pos, k_pos)
            if self.bias_provider is not None:
                full_k = torch.arange(offset + k.shape[-2], device=x.device)
                own = self.bias_provider(q_pos, full_k if context is None else k_pos)
                bias = own if bias is None else bias + own
        out, weights = self.kernel(
            q,
            k,
            v,
            mask=mask,
            bias=bias,
            is_causal=is_causal,
            cache=self_cache,
            dropout_p=self.attn_dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        b, _, lq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, lq, self.dim)  # concatenate the heads
        return self.proj_dropout(self.out_proj(out)), weights


__all__ = ["MultiHeadAttention", "QKTransform", "SplitHeads3", "qkv_views"]
