"""The ``flex`` kernel: exact attention through PyTorch's FlexAttention.

FlexAttention (``torch.nn.attention.flex_attention``) computes softmax(scale Q K^T + b) V with
the score changed by a ``score_mod`` and keys dropped by a ``block_mask``; compiled, it is one
fused kernel that skips the key blocks the mask drops. Here:

    mask_mod(b, h, q_idx, kv_idx) = mask[b, h, q_idx, kv_idx]
                                    and (kv_idx <= q_idx + Lk - Lq, when is_causal)
    score_mod(score, b, h, q_idx, kv_idx) = score + bias[b, h, q_idx, kv_idx]

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)
    mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend
    bias: float, broadcastable to (B, H, Lq, Lk)
    -> out (B, H, Lq, Dh)

Where it runs (torch 2.13): on CUDA, ``torch.compile(flex_attention)``, forward and backward.
On the CPU, FlexAttention has no backward (it raises for inputs that require grad), so there:
with no gradient to compute (``torch.no_grad()``, or nothing requires grad) the eager
``flex_attention`` (dense: it forms every score), and with a gradient the pure-PyTorch
``chunked`` kernel (:func:`tfam.layers.chunked.chunked_attention`, exact, memory linear), which
stays the reference and the training path on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from tfam.config import check_choice
from tfam.layers.chunked import chunked_attention
from tfam.layers.kernels import AttentionKernel, _check_mask, full_precision, math_attention

COMPILE = ("auto", "always", "never")

_COMPILED: Callable[..., Tensor] | None = None


def _compiled_flex() -> Callable[..., Tensor]:
    """``torch.compile(flex_attention)``, compiled once per process (torch caches the graphs
    it builds per shape and per score and mask function)."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(flex_attention)
    return _COMPILED


def _as_4d(t: Tensor, shape: tuple[int, int, int, int]) -> Tensor:
    """``t`` broadcast to ``shape`` as a view (expand allocates nothing)."""
    return t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)).expand(shape)


def _varies(t: Tensor, dim: int) -> bool:
    """Whether ``t`` (broadcastable to 4-D) has more than one entry along ``dim`` (0: B, 1: H)."""
    return t.dim() >= 4 - dim and t.shape[dim - 4] > 1


def flex_call(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    compiled: bool = False,
) -> Tensor:
    """softmax(scale Q K^T + bias) V by FlexAttention, masked keys and the bottom-right causal
    rule in its block mask, the bias in its score function; out (B, H, Lq, Dh) in q's dtype.
    A row with no allowed key (or a bias row of -inf) is zero (FlexAttention's own rule).
    ``compiled``: through ``torch.compile(flex_attention)``, except in float64 (eager)."""
    _check_mask(mask)
    b, h, lq, _ = q.shape
    lk = k.shape[-2]
    full = (b, h, lq, lk)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    offset = lk - lq  # bottom-right: query i sees keys j <= i + (Lk - Lq)

    block_mask = None
    if mask is not None or (is_causal and lq > 1):
        mask4 = None if mask is None else _as_4d(mask, full)

        def mask_mod(b_i: Tensor, h_i: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            keep = kv_idx <= q_idx + offset if is_causal else None
            if mask4 is not None:
                m = mask4[b_i, h_i, q_idx, kv_idx]
                keep = m if keep is None else keep & m
            return keep

        # B and H as None: one block mask serves every batch row and head (b_i = h_i = 0).
        mb = b if mask is not None and _varies(mask, 0) else None
        mh = h if mask is not None and _varies(mask, 1) else None
        block_mask = create_block_mask(mask_mod, mb, mh, lq, lk, device=q.device)

    score_mod = None
    if bias is not None:
        bias4 = _as_4d(bias, full)

        def score_mod(
            score: Tensor, b_i: Tensor, h_i: Tensor, q_idx: Tensor, kv_idx: Tensor
        ) -> Tensor:
            return score + bias4[b_i, h_i, q_idx, kv_idx].to(score.dtype)

    # Compiled FlexAttention takes float32, float16 and bfloat16 only (torch 2.13 refuses
    # float64 on the CPU): float64, the reference dtype, runs eagerly.
    fn = _compiled_flex() if compiled and q.dtype != torch.float64 else flex_attention
    with warnings.catch_warnings():
        # Eager FlexAttention warns that it is unfused: on the CPU that is the path we chose.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@dataclasses.dataclass(frozen=True)
class FlexOptions:
    # "auto": compiled on CUDA, eager on the CPU (compiling takes ~13 s on the CPU; the eager
    # forward is dense there anyway); "always": compiled everywhere; "never": eager everywhere.
    compile: str = "auto"


class FlexKernel(AttentionKernel):
    """Exact attention by PyTorch's FlexAttention: the caller's mask and the bottom-right
    causal rule as its block mask, the bias as its score function (see the module).

    On CUDA it runs compiled, forward and backward. On the CPU FlexAttention has no backward
    (torch 2.13), so a call that needs a gradient (grad enabled and q, k, v or the bias
    requiring it) runs the pure-PyTorch ``chunked`` kernel instead, exact and memory linear:
    that stays the training path on the CPU. A call with no gradient runs FlexAttention eagerly
    (dense, every score formed), in float32 for bfloat16 and float16 inputs (rounded back at
    the end; bfloat16 computed in bfloat16 measured 2x the error). Option ``compile``
    (:data:`COMPILE`): ``auto`` (compiled on CUDA only), ``always`` or ``never``; float64
    always runs eagerly (compiled FlexAttention takes float32, float16 and bfloat16)."""

    name = "flex"
    Options = FlexOptions
    exactness = "exact"
    refuses = {
        "need_weights": "FlexAttention never forms the (Lq, Lk) weights",
        "dropout": "FlexAttention has no attention dropout",
    }

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "compile":
            check_choice("attention_options.compile", value, COMPILE)

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
        mode = self.options.compile
        cuda = q.device.type == "cuda"
        compiled = mode == "always" or (mode == "auto" and cuda)
        if q.device.type == "meta":
            # Shapes only (explain runs the model on the meta device): FlexAttention refuses it.
            return math_attention(q, k, v, mask, bias, scale=scale, is_causal=is_causal)[0], None
        if cuda:
            return flex_call(q, k, v, mask, bias, is_causal, scale, compiled), None
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, bias)
        )
        if needs_grad:
            return chunked_attention(q, k, v, mask, bias, is_causal, scale), None
        # FlexAttention refuses CPU inputs that require grad even under no_grad: no graph is
        # recorded here, so detaching changes nothing. Low precision runs in float32.
        acc = torch.promote_types(q.dtype, torch.float32)
        q32, k32, v32 = (t.detach().to(acc) for t in (q, k, v))
        b32 = None if bias is None else bias.detach()
        with full_precision(q.device):
            out = flex_call(q32, k32, v32, mask, b32, is_causal, scale, compiled)
        return out.to(q.dtype), None


__all__ = ["COMPILE", "FlexKernel", "FlexOptions", "flex_call"]
