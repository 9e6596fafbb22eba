"""Multi-head attention: Q/K/V projections, head split, a kernel, head merge, W_O."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from tfam.layers.kernels import get_kernel


class MultiHeadAttention(nn.Module):
    """MHSA(X) = Concat(head_1, ..., head_H) W_O, head_h = softmax(Q_h K_h^T / sqrt(Dh)) V_h.

    Self-attention when ``context`` is None, cross-attention (queries from x, keys and values
    from context) otherwise. ``fused_qkv`` keeps W_Q, W_K, W_V as one (3D, D) matrix so
    self-attention projects in a single matmul; otherwise they are three Linear layers.

    Shapes: x (B, Lq, D), context (B, Lk, D) -> (B, Lq, D); weights (B, H, Lq, Lk).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        qkv_bias: bool = True,
        fused_qkv: bool = True,
        attn_dropout: float = 0.0,
        proj_dropout: float = 0.0,
        attention: str = "sdpa",
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"heads={heads!r} is invalid: dim={dim} must be divisible by heads")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        else:
            self.q_proj = nn.Linear(dim, dim, bias=qkv_bias)
            self.k_proj = nn.Linear(dim, dim, bias=qkv_bias)
            self.v_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.out_proj = nn.Linear(dim, dim)  # W_O
        self.attn_dropout = attn_dropout
        self.proj_dropout = nn.Dropout(proj_dropout)
        self.attention = attention
        self.kernel = get_kernel(attention)

    def set_kernel(self, attention: str) -> None:
        self.kernel, self.attention = get_kernel(attention), attention

    def _split(self, t: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh)."""
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def project_qkv(
        self, x: Tensor, context: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V, each (B, H, L, Dh)."""
        if self.fused_qkv:
            if context is None:
                b, n, _ = x.shape
                qkv = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
                # unbind, not indexing: its backward is one stack instead of three
                # zero-filled full-size buffers summed together.
                q, k, v = qkv.unbind(0)
                return q, k, v
            w, bias = self.qkv.weight, self.qkv.bias
            d = self.dim
            q = F.linear(x, w[:d], None if bias is None else bias[:d])
            k, v = F.linear(context, w[d:], None if bias is None else bias[d:]).chunk(2, dim=-1)
        else:
            src = x if context is None else context
            q, k, v = self.q_proj(x), self.k_proj(src), self.v_proj(src)
        return self._split(q), self._split(k), self._split(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, Lq, D); mask bool (True = may attend) and bias float, both broadcastable to
        (B, H, Lq, Lk) -> (out (B, Lq, D), weights (B, H, Lq, Lk) or None)."""
        q, k, v = self.project_qkv(x, context)
        out, weights = self.kernel(
            q,
            k,
            v,
            mask=mask,
            bias=bias,
            dropout_p=self.attn_dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        b, _, lq, _ = out.shape
        out = out.transpose(1, 2).reshape(b, lq, self.dim)  # concatenate the heads
        return self.proj_dropout(self.out_proj(out)), weights
