"""Attention kernels: built from a name plus options, one call signature.

    kernel = build_kernel("sdpa", {"backend": "auto"})
    out, weights = kernel(q, k, v, mask=None, bias=None, is_causal=False, cache=None,
                          dropout_p=0.0, scale=None, need_weights=False)
        q: (B, H, Lq, Dh)   k, v: (B, H, Lk_new, Dh)
        mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend
        bias: float, broadcastable to (B, H, Lq, Lk), added to the scores (ALiBi, relative)
        is_causal: query i may see keys j <= i + (Lk - Lq) (bottom-right aligned)
        cache: a KVCache; the new keys and values are appended and attention runs over all
        -> (out (B, H, Lq, Dh), weights (B, H, Lq, Lk) or None)

A kernel is an ``nn.Module`` so it may keep state (random features, a layout, learned
parameters) and travel with the model; its options are config data (``attention_options``):
checked by :meth:`AttentionKernel.validate_options`, JSON round-trip, named errors. It is built
with the shape of the attention it serves, ``build_kernel(name, options, heads=H,
head_dim=Dh)`` (MultiHeadAttention passes its own), so a kernel may size per-layer parameters
(``math``'s additive scores); those are the attention's parameters, initialised through
:meth:`AttentionKernel.reset_parameters` by the model's ``init_weights``.

Conventions on every kernel: a query row with no finite score (every key masked, or a bias row
of -inf) yields zeros, never NaN, forward and backward; Q is scaled by 1/sqrt(Dh) before the
product, so float16 scores do not overflow first; softmax runs in at least float32. In
bfloat16, an exact or pattern kernel's error against float64 ``math`` (under its pattern) stays
within 2x ``sdpa``'s bfloat16 error, output and gradients (FlashAttention's rule,
``tests/layers/test_precision.py``; ``benchmarks/bench_precision.py`` at full size, float16, CUDA).

Every kernel declares what it is (class attributes, checked when it registers):

- ``exactness``: ``"exact"`` (equals ``math``), ``"pattern"`` (equals ``math`` under its own
  sparsity pattern, :meth:`AttentionKernel.pattern_mask`, ANDed with the caller's mask) or
  ``"approximate"`` (within ``error_bound`` of ``math``);
- ``refuses``: the call features it does not compute (:data:`FEATURES`: masks, biases, causal,
  caches, lengths, weights, dropout), each with the reason; such a call is one ValueError line
  (:meth:`AttentionKernel.check_call`). A position acting as a bias on the scores (ALiBi) needs
  ``bias``; positions added to the tokens or rotating Q and K reach no kernel.

``tests/layers/test_kernel_contract.py`` checks every registered kernel by its declaration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import ATTENTION_KERNELS, check_choice, config_error
from tfam.layers.masks import GraphMask, causal_mask

KERNELS = ATTENTION_KERNELS  # name -> AttentionKernel subclass


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A kernel without options."""


EXACTNESS = ("exact", "pattern", "approximate")

# What a call may ask of a kernel, and so what a kernel may refuse (``refuses``).
FEATURES: dict[str, str] = {
    "key_mask": "a key-padding mask (broadcastable to (B, H, 1, Lk))",
    "mask": "a mask that differs per query (broadcastable to (B, H, Lq, Lk), Lq > 1)",
    "bias": "an additive bias on the scores (ALiBi, relative positions)",
    "causal": "is_causal=True",
    "lengths": "keys of another length than the queries (cross-attention, a cache)",
    "cache": "a KV cache (incremental decoding)",
    "need_weights": "returning the attention weights",
    "dropout": "attention dropout (dropout_p > 0)",
}
# A kernel refusing the left feature refuses the right one too (a key mask is a mask; a cache
# makes Lk differ from Lq).
_IMPLIED = {"key_mask": "mask", "lengths": "cache"}


@dataclasses.dataclass(frozen=True)
class AttentionCost:
    """What one head of one batch row costs a kernel's forward: ``flops`` (2 per multiply-add:
    scores and the weighted sum of values) and ``score_elements``, the most score (or weight)
    entries it holds at once, which is what grows with length in memory."""

    flops: float
    score_elements: int


def causal_pairs(lq: int, lk: int) -> int:
    """(query, key) pairs under the bottom-right causal mask: query i sees lk - lq + i + 1
    keys (at least 0, at most lk)."""
    if lk >= lq:
        return lq * (lk - lq) + lq * (lq + 1) // 2
    return lk * (lk + 1) // 2


class AttentionKernel(nn.Module, ABC):
    """Base of every kernel. A subclass sets ``name``, optionally an ``Options`` frozen
    dataclass (its fields are the kernel's options, with defaults), and implements
    :meth:`attend`. The KV cache is handled here: a kernel whose cache is not plain keys and
    values (linear attention's running sums) overrides :meth:`forward` and :meth:`new_cache`.

    Its declaration (checked when it registers; the kernel contract tests hold it to it):

    - ``exactness``: ``"exact"``, ``"pattern"`` (override :meth:`pattern_mask`) or
      ``"approximate"`` (set ``error_bound``);
    - ``error_bound``: for an approximate kernel, the largest absolute difference from
      ``math``'s output it promises for q, k, v of standard-normal entries (float64);
    - ``refuses``: {feature: why} for the :data:`FEATURES` it does not compute.

    ``class K(AttentionKernel, register=False)`` defines a kernel without registering it
    (:func:`register_kernel` does, later)."""

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    exactness: ClassVar[str] = "exact"
    error_bound: ClassVar[float | None] = None
    refuses: ClassVar[dict[str, str]] = {}
    # True for a kernel that reads a GraphMask's edge list itself (``edges``); every other
    # kernel is handed its dense form by __call__.
    reads_edges: ClassVar[bool] = False

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Only a class that names itself registers: a variant inheriting its parent's name
        # (a test's subclass) must not replace the parent in the registry.
        if register and "name" in cls.__dict__ and cls.name:
            register_kernel(cls)

    @classmethod
    def check_declaration(cls) -> None:
        """A ValueError (one line, naming the class) for a declaration the contract cannot
        hold the kernel to."""
        where = f"kernel {cls.__name__} (attention={cls.name!r})"
        if cls.exactness not in EXACTNESS:
            raise ValueError(
                f"{where}: exactness={cls.exactness!r} is invalid: expected one of {EXACTNESS}"
            )
        bound = cls.error_bound
        if cls.exactness == "approximate":
            if not isinstance(bound, float | int) or isinstance(bound, bool) or not bound > 0:
                raise ValueError(
                    f"{where}: error_bound={bound!r} is invalid: an approximate kernel states "
                    "a positive bound on |out - math|"
                )
        elif bound is not None:
            raise ValueError(
                f"{where}: error_bound={bound!r} is invalid: an {cls.exactness} kernel has none"
            )
        pattern = cls.pattern_mask is not AttentionKernel.pattern_mask
        if pattern != (cls.exactness == "pattern"):
            raise ValueError(
                f"{where}: exactness={cls.exactness!r} "
                + ("overrides pattern_mask" if pattern else "does not override pattern_mask")
                + "; a kernel has a sparsity pattern exactly when its exactness is 'pattern'"
            )
        unknown = sorted(set(cls.refuses) - set(FEATURES))
        if unknown:
            raise ValueError(
                f"{where}: refuses={unknown} is invalid: features are {', '.join(FEATURES)}"
            )
        for feature, implied in _IMPLIED.items():
            if feature in cls.refuses and implied not in cls.refuses:
                raise ValueError(
                    f"{where}: refuses {feature!r} but not {implied!r}, which implies it"
                )

    @classmethod
    def refusal(cls, feature: str) -> str | None:
        """The one-line error for a call (or a config) asking ``feature`` of this kernel, or
        None when the kernel computes it."""
        if feature not in FEATURES:
            raise ValueError(f"feature={feature!r} is invalid: expected one of {list(FEATURES)}")
        if feature not in cls.refuses:
            return None
        takers = sorted(n for n, k in ATTENTION_KERNELS.items() if feature not in k.refuses)
        return (
            f"attention={cls.name!r} refuses {FEATURES[feature]}: {cls.refuses[feature]}; "
            f"kernels that take it: {', '.join(takers) or 'none'}"
        )

    def check_call(
        self,
        q: Tensor,
        k: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        is_causal: bool = False,
        cache: Any = None,
        dropout_p: float = 0.0,
        need_weights: bool = False,
    ) -> None:
        """Raise the one-line ValueError of the first refused feature this call asks for.
        ``k`` is the new keys (B, H, Lk_new, Dh); with a cache the keys are longer still."""
        asked = (
            ("mask", mask is not None and mask.dim() >= 2 and mask.shape[-2] > 1),
            ("key_mask", mask is not None),
            ("bias", bias is not None),
            ("causal", is_causal),
            ("cache", cache is not None),
            ("lengths", cache is not None or q.shape[-2] != k.shape[-2]),
            ("need_weights", need_weights),
            ("dropout", dropout_p > 0),
        )
        for feature, wanted in asked:
            if wanted and feature in self.refuses:
                raise ValueError(self.refusal(feature))

    def pattern_mask(self, lq: int, lk: int, device: torch.device | None = None) -> Tensor:
        """A pattern kernel's sparsity pattern: bool (Lq, Lk), True = computed, for queries at
        the last Lq of Lk positions (bottom-right aligned, as causal). The kernel equals
        ``math`` with this mask ANDed with the caller's."""
        raise NotImplementedError(f"attention={self.name!r} is {self.exactness}: no pattern")

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """The forward's cost for ``lq`` queries over ``lk`` keys of width ``head_dim`` (one
        head, one batch row). The default is dense attention that forms every score: a kernel
        that computes fewer scores, or holds fewer at once, overrides it. ``explain`` and
        ``tfam bench attention`` read it."""
        pairs = causal_pairs(lq, lk) if is_causal else lq * lk
        return AttentionCost(flops=4.0 * pairs * head_dim, score_elements=lq * lk)

    def new_cache(self, max_len: int) -> Any:
        """The cache this kernel reads while decoding (keys and values: a KVCache)."""
        from tfam.layers.cache import KVCache

        return KVCache(max_len)

    def __init__(
        self, heads: int | None = None, head_dim: int | None = None, **options: Any
    ) -> None:
        super().__init__()
        self.options = self.Options(**self.validate_options(options))
        # The attention's shape (H, Dh), given by MultiHeadAttention (build_kernel); None when
        # built alone. A kernel with per-layer parameters sizes them from it; others ignore it.
        self.heads, self.head_dim = heads, head_dim

    def reset_parameters(self, std: float | None = None) -> None:
        """(Re)initialise the kernel's learned parameters, if it has any (most have none):
        ``std`` (the model's ``init_std``) gives the truncated normal of the model's linear
        layers, None the kernel's own default. ``TfamModel.init_weights`` calls it."""

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Checked options with defaults filled in, ready for JSON. Unknown names and values of
        the wrong type raise ``ValueError`` naming ``attention_options.<name>``."""
        valid = {f.name: f for f in dataclasses.fields(cls.Options)}
        defaults = {f.name: f.default for f in dataclasses.fields(MathOptions)}
        for key in options:
            if key in defaults and key not in valid and options[key] == defaults[key]:
                continue  # softmax at 1/sqrt(Dh) is what every kernel computes
            if key in defaults and key not in valid:
                # sdpa, auto and chunked compute softmax of Q K^T / sqrt(Dh) only; the other
                # scores and normalizers are written out in `math`.
                raise config_error(
                    f"attention_options.{key}",
                    options[key],
                    f"kernel {cls.name!r} computes softmax scaled by 1/sqrt(Dh) only; "
                    f"attention='math' takes {key}: {_MATH_CHOICES[key]}",
                )
            if key not in valid:
                listed = ", ".join(sorted(valid)) if valid else "none"
                raise config_error(
                    f"attention_options.{key}",
                    options[key],
                    f"kernel {cls.name!r} takes the options: {listed}",
                )
        out = {}
        for name, f in valid.items():
            value = options.get(name, f.default)
            cls.check_option(name, value)
            out[name] = value
        return out

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        """Per-option checks of a subclass (the default accepts anything JSON-typed)."""

    def to_options(self) -> dict[str, Any]:
        return dataclasses.asdict(self.options)

    def extra_repr(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.to_options().items())
        return f"{self.name!r}" + (f", {opts}" if opts else "")

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | GraphMask | None = None,
        bias: Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor | None]:
        """The one place a :class:`~tfam.layers.masks.GraphMask` becomes a dense mask (B, 1,
        N, N) and its per-edge bias a dense one (B, H, N, N), for every kernel that does not
        read edge lists (``reads_edges``), whatever its ``forward``."""
        if isinstance(mask, GraphMask) and not self.reads_edges:
            mask, bias = mask.dense_call(bias, q.shape[1])
        return super().__call__(q, k, v, mask, bias, *args, **kwargs)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        is_causal: bool = False,
        cache: Any = None,
        dropout_p: float = 0.0,
        scale: float | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if self.refuses:
            self.check_call(q, k, mask, bias, is_causal, cache, dropout_p, need_weights)
        if cache is not None:
            k, v = cache.update(k, v)
        return self.attend(q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights)

    @abstractmethod
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
        """The kernel's computation on full keys and values (the cache already applied)."""


def check_int_option(name: str, value: Any) -> None:
    """``attention_options.<name>`` must be an int >= 1 (a tile, a chunk, a feature count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(f"attention_options.{name}", value, "expected an integer >= 1")


def register_kernel(cls: type[AttentionKernel]) -> type[AttentionKernel]:
    """Check ``cls``'s declaration and register it under ``cls.name`` (a subclass with a name
    registers itself when defined; this is for one defined with ``register=False``)."""
    if not (isinstance(cls, type) and issubclass(cls, AttentionKernel)) or not cls.name:
        raise ValueError(f"cls={cls!r} is invalid: expected an AttentionKernel with a name")
    cls.check_declaration()
    ATTENTION_KERNELS[cls.name] = cls
    return cls


def build_kernel(
    name: str,
    options: dict[str, Any] | None = None,
    *,
    heads: int | None = None,
    head_dim: int | None = None,
) -> AttentionKernel:
    """A kernel instance from its registered name and options. ``heads`` (H) and ``head_dim``
    (Dh) are the shape of the attention it serves: a kernel with per-layer parameters (``math``
    with ``score='additive'``) needs them, the others ignore them. MultiHeadAttention passes
    its own."""
    check_choice("attention", name, sorted(ATTENTION_KERNELS))
    return ATTENTION_KERNELS[name](heads=heads, head_dim=head_dim, **(options or {}))


def _check_mask(mask: Tensor | None) -> None:
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(
            f"mask has dtype {mask.dtype}; expected torch.bool with True = may attend "
            "(pass additive float terms as `bias`)"
        )


def _with_causal(mask: Tensor | None, lq: int, lk: int, device: torch.device) -> Tensor | None:
    """``mask`` AND the bottom-right causal mask; None when every key is allowed."""
    if lq == 1:  # one query at the end sees every key
        return mask
    causal = causal_mask(lq, lk, device=device)
    return causal if mask is None else mask & causal


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off, where it is on, for the products a kernel runs in float32: autocast casts
    a float32 product back to bfloat16, which rounds every score (math under bfloat16 autocast
    measured 4.8x sdpa's error, and 10x its own time on the CPU: 524 against 48 ms, L = 256)."""
    kind = device.type
    if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
        return torch.autocast(kind, enabled=False)
    return contextlib.nullcontext()


def math_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    is_causal: bool = False,
    normalizer: str = "softmax",
) -> tuple[Tensor, Tensor | None]:
    """normalize(Q K^T / sqrt(Dh) + bias) V, written out; returns the weights too.

    ``normalizer`` (:data:`NORMALIZERS`) turns the scores s (B, H, Lq, Lk) into weights, with
    n (B, H, Lq, 1) the number of keys a query may attend (mask, causal, finite bias):
    ``softmax``; ``relu``: relu(s) / n (ReLU attention); ``sigmoid``: sigmoid(s - log n)
    (sigmoid attention). Masked keys weigh 0 under each; a row with no key is zero.

    Low precision (bfloat16, float16): both products run in float32 on operands cast to it,
    and the output is rounded to V's dtype at the end; returned weights are in V's dtype.

    Memory is O(Lq * Lk) per head: use ``sdpa`` for long sequences."""
    _check_mask(mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Scores in at least float32 (bf16 scores lose the small weights); float64 stays float64.
    # The product itself runs in it: a bfloat16 product rounds every score to 8 bits (with the
    # weights rounded too, below: 3.8-4.8x sdpa's bfloat16 error, benchmarks/bench_precision.py
    # at L = 256 and 1024).
    acc = torch.promote_types(q.dtype, torch.float32)
    # Scale Q first: in float16, Q K^T of large activations overflows before any later scale.
    with full_precision(q.device):
        scores = torch.matmul(q.to(acc) * scale, k.to(acc).transpose(-2, -1))
    return scores_attention(scores, v, mask, bias, dropout_p, need_weights, is_causal, normalizer)


def additive_scores(q: Tensor, k: Tensor, w_a: Tensor, u_a: Tensor, v_a: Tensor) -> Tensor:
    """Bahdanau et al. (2015)'s additive scores, per head: e_ij = v_a^T tanh(W_a q_i + U_a k_j).

    q (B, H, Lq, Dh), k (B, H, Lk, Dh); w_a, u_a (H, Dh, Da), v_a (H, Da) -> scores (B, H, Lq,
    Lk) in at least float32. Not scaled: v_a, learned, sets their size. Holds the (B, H, Lq, Lk,
    Da) tensor tanh(...) (kept for the backward), and for a moment its product with v_a: Da
    times the memory of dot-product scores, twice."""
    if q.shape[1] != w_a.shape[0] or q.shape[-1] != w_a.shape[1]:
        raise ValueError(
            f"q has {q.shape[1]} heads of width {q.shape[-1]} but the additive score's "
            f"parameters are for {w_a.shape[0]} heads of width {w_a.shape[1]}"
        )
    wq = torch.matmul(q, w_a.unsqueeze(0))  # W_a q_i: (B, H, Lq, Da)
    uk = torch.matmul(k, u_a.unsqueeze(0))  # U_a k_j: (B, H, Lk, Da)
    # tanh in place: one (B, H, Lq, Lk, Da) tensor fewer (tanh's backward reads its output).
    hidden = (wq.unsqueeze(-2) + uk.unsqueeze(-3)).tanh_()
    # e_ij = v_a^T tanh(...); a product and a sum, whose backward measured faster on the CPU
    # than einsum's batched matmul (46-57 against 74-95 ms forward and backward, L = 128).
    scores = (hidden * v_a[None, :, None, None, :]).sum(-1)
    return scores.to(torch.promote_types(q.dtype, torch.float32))


def scores_attention(
    scores: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    is_causal: bool = False,
    normalizer: str = "softmax",
) -> tuple[Tensor, Tensor | None]:
    """normalize(scores + bias) V: the part of :func:`math_attention` after the scores, for any
    score (dot-product, additive). scores (B, H, Lq, Lk) in the dtype normalisation runs in
    (at least float32), v (B, H, Lk, Dh) -> (out (B, H, Lq, Dh), weights in v's dtype or None).
    Masks, causal (bottom-right), bias and the rows with no key as in :func:`math_attention`."""
    _check_mask(mask)
    if normalizer not in NORMALIZERS:
        raise ValueError(f"normalizer={normalizer!r} is invalid: expected one of {NORMALIZERS}")
    if is_causal:
        mask = _with_causal(mask, scores.shape[-2], scores.shape[-1], scores.device)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if normalizer == "softmax":
        # Only a mask or a bias can leave a row without a finite score.
        weights = _softmax_weights(scores, mask, mask is not None or bias is not None)
    else:
        weights = _pointwise_weights(scores, mask, normalizer)
    # The weighted sum of V in the weights' dtype (at least float32), rounded to V's at the end:
    # weights rounded to bfloat16 first measured up to 2.3x sdpa's bfloat16 error (the worst of
    # 30 seeds at tests/layers/test_precision.py's size), and on the CPU the bfloat16 product
    # was the slower one (112 against 9 ms, forward and backward, B=2, H=4, L=256, Dh=64).
    acc = torch.promote_types(weights.dtype, v.dtype)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    with full_precision(v.device):
        out = torch.matmul(attn.to(acc), v.to(acc)).to(v.dtype)
    return out, (weights.to(v.dtype) if need_weights else None)


NORMALIZERS = ("softmax", "relu", "sigmoid")
SCALES = ("head", "model")
SCORES = ("dot", "additive")


def _softmax_weights(scores: Tensor, mask: Tensor | None, guard: bool) -> Tensor:
    """softmax over the keys of the scores with masked keys at -inf; with ``guard`` (a mask or
    a bias was given), a row with no finite score is zero."""
    dead = None
    if guard:
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no finite score would be 0/0 in softmax: give it a constant row, then zero
        # its weights, so forward and backward stay finite.
        # (A row's largest score is -inf exactly when all are: one reduction, no bool copy of
        # the scores; NaN compares False either way.)
        dead = scores.detach().amax(dim=-1, keepdim=True) == float("-inf")
        scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    return weights


def _pointwise_weights(scores: Tensor, mask: Tensor | None, normalizer: str) -> Tensor:
    """A per-score normalizer (relu or sigmoid) instead of softmax. Weights are computed from
    finite scores only: a masked (or -inf bias) key is given score 0 before the pointwise
    function, then its weight is set to 0, so no inf or NaN reaches either pass."""
    # Allowed keys: the mask's True entries with a finite score (a -inf bias forbids a key).
    allowed = torch.isfinite(scores)
    if mask is not None:
        allowed = allowed & mask
    scores = scores.masked_fill(~allowed, 0.0)
    # n >= 1 keeps log n and 1/n finite on rows with no key; those rows are zeroed below anyway.
    n = allowed.sum(dim=-1, keepdim=True).clamp(min=1).to(scores.dtype)
    if normalizer == "relu":
        weights = torch.relu(scores) / n
    else:
        weights = torch.sigmoid(scores - torch.log(n))
    return weights.masked_fill(~allowed, 0.0)


_SDPA_BACKENDS = {
    "auto": None,
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """torch's fused scaled_dot_product_attention (falls back to `math` when weights are
    asked for). Causal with no mask, no bias and Lq == Lk takes torch's fused causal path."""
    if need_weights:
        return math_attention(q, k, v, mask, bias, dropout_p, scale, True, is_causal)
    _check_mask(mask)
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal and mask is None and bias is None and lq == lk:
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale
        )
        return out, None
    if is_causal:
        mask = _with_causal(mask, lq, lk, q.device)
    if bias is None:
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale), None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale
        )
        # torch's kernels differ on rows with no allowed key (NaN or uniform); ours are zero.
        return out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0), None
    attn_mask = bias.to(q.dtype)
    if mask is not None:
        attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    # Rows with no finite score get a constant (finite) row and a zero output.
    dead = torch.isneginf(attn_mask).all(dim=-1, keepdim=True)
    attn_mask = attn_mask.masked_fill(dead, 0.0)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
    )
    return out.masked_fill(dead, 0.0), None


@dataclasses.dataclass(frozen=True)
class MathOptions:
    # How scores become weights (NORMALIZERS): softmax, relu (relu(s) / n) or sigmoid
    # (sigmoid(s - log n)), n = keys a query may attend.
    normalizer: str = "softmax"
    # Q's scale when the caller gives none: "head" 1/sqrt(Dh), or "model" 1/sqrt(D), D = H * Dh.
    # Dot-product scores only: additive scores are not scaled.
    scale: str = "head"
    # The score (SCORES): "dot" q_i . k_j (scaled), or "additive" v_a^T tanh(W_a q_i + U_a k_j)
    # (Bahdanau et al. 2015), with learned W_a, U_a (Dh -> Da) and v_a (Da) per head.
    score: str = "dot"
    # Da, the width of the additive score's hidden layer; None: Da = Dh. Additive only.
    score_dim: int | None = None


# What `math` takes, for the one-line refusal of the kernels that compute softmax(dot) only.
_MATH_CHOICES = {
    "normalizer": ", ".join(NORMALIZERS),
    "scale": ", ".join(SCALES),
    "score": ", ".join(SCORES),
    "score_dim": "an int >= 1, with score='additive'",
}


class MathKernel(AttentionKernel):
    """The formula written out (:func:`math_attention`): returns weights, O(L^2) memory;
    fastest at short sequences.

    With ``score='additive'`` it holds per-layer parameters (``w_a``, ``u_a``: (H, Dh, Da),
    ``v_a``: (H, Da); :func:`additive_scores`), so it must be built with the attention's shape
    (``build_kernel(..., heads=H, head_dim=Dh)``, as MultiHeadAttention does); they are the
    attention's parameters (saved, loaded, trained, initialised by the model's
    ``init_weights``). Additive scores ignore ``scale`` (the option and a caller's ``scale=``):
    v_a, learned, sets their size. They form a (B, H, Lq, Lk, Da) tensor: Da times the memory
    and about 2 Da / Dh times the score FLOPs of dot-product scores (:meth:`cost`)."""

    name = "math"
    exactness = "exact"  # refuses nothing
    Options = MathOptions

    def __init__(
        self, heads: int | None = None, head_dim: int | None = None, **options: Any
    ) -> None:
        super().__init__(heads, head_dim, **options)
        if self.options.score != "additive":
            return
        if heads is None or head_dim is None:
            raise ValueError(
                "attention_options.score='additive' needs the attention's heads and head width "
                "for its parameters: build_kernel('math', options, heads=H, head_dim=Dh) "
                "(MultiHeadAttention passes its own)"
            )
        da = self.options.score_dim or head_dim
        self.w_a = nn.Parameter(torch.empty(heads, head_dim, da))  # W_a, on the queries
        self.u_a = nn.Parameter(torch.empty(heads, head_dim, da))  # U_a, on the keys
        self.v_a = nn.Parameter(torch.empty(heads, da))
        self.reset_parameters()

    def reset_parameters(self, std: float | None = None) -> None:
        """The additive score's W_a, U_a, v_a: truncated normal (std, cut at 2 std) as the
        model's linear layers, or with ``std`` None nn.Linear's default, uniform within
        1/sqrt(fan_in) (Dh for W_a and U_a, Da for v_a)."""
        if self.options.score != "additive":
            return
        for p in (self.w_a, self.u_a, self.v_a):
            if std is not None:
                nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)
            else:
                bound = 1.0 / math.sqrt(p.shape[-2] if p.dim() == 3 else p.shape[-1])
                nn.init.uniform_(p, -bound, bound)

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "normalizer":
            check_choice("attention_options.normalizer", value, NORMALIZERS)
        elif name == "scale":
            check_choice("attention_options.scale", value, SCALES)
        elif name == "score":
            check_choice("attention_options.score", value, SCORES)
        elif (
            name == "score_dim"
            and value is not None
            and (not isinstance(value, int) or isinstance(value, bool) or value < 1)
        ):
            raise config_error("attention_options.score_dim", value, "expected an int >= 1 or null")

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().validate_options(options)
        if out["score"] != "additive" and out["score_dim"] is not None:
            raise config_error(
                "attention_options.score_dim",
                out["score_dim"],
                "only the additive score has a width: set score='additive' or leave it out",
            )
        if out["score"] == "additive" and out["scale"] != "head":
            raise config_error(
                "attention_options.scale",
                out["scale"],
                "score='additive' is not scaled (v_a, learned, sets its size): leave scale out",
            )
        return out

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """Every (query, key) pair, causal or not: the formula forms all Lq x Lk scores and
        masks them after. Additive scores replace the product q_i . k_j (2 Dh FLOPs a pair) by
        W_a q_i and U_a k_j (2 Dh Da a query and a key), and per pair their sum, tanh and
        v_a^T (8 Da: tanh counted as 5, as explain counts it); they hold Lq Lk Da elements."""
        pairs = lq * lk
        dense = AttentionCost(flops=4.0 * pairs * head_dim, score_elements=pairs)
        if self.options.score != "additive":
            return dense
        da = self.options.score_dim or head_dim
        flops = dense.flops - 2.0 * pairs * head_dim + 2.0 * (lq + lk) * head_dim * da
        return AttentionCost(flops=flops + 8.0 * pairs * da, score_elements=pairs * da)

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        normalizer = self.options.normalizer
        if self.options.score == "additive":
            scores = additive_scores(q, k, self.w_a, self.u_a, self.v_a)
            return scores_attention(
                scores, v, mask, bias, dropout_p, need_weights, is_causal, normalizer
            )
        if scale is None and self.options.scale == "model":
            # q is (B, H, Lq, Dh): the model width D is H * Dh.
            scale = 1.0 / math.sqrt(q.shape[1] * q.shape[-1])
        return math_attention(
            q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal, normalizer
        )


@dataclasses.dataclass(frozen=True)
class SDPAOptions:
    backend: str = "auto"  # torch picks; or force one of torch's SDPA backends


class SDPAKernel(AttentionKernel):
    """torch's fused ``scaled_dot_product_attention`` (:func:`sdpa_attention`). Option
    ``backend``: ``auto`` (torch picks) or one of math, flash, efficient, cudnn."""

    name = "sdpa"
    exactness = "exact"  # refuses nothing
    Options = SDPAOptions

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "backend":
            check_choice("attention_options.backend", value, _SDPA_BACKENDS)

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        backend = _SDPA_BACKENDS[self.options.backend]
        if backend is None or need_weights:
            return sdpa_attention(q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend)):
            return sdpa_attention(q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal)


@dataclasses.dataclass(frozen=True)
class AutoOptions:
    # Key length from which `sdpa` runs instead of `math` (both exact). On this project's 2-core
    # CPU, benchmarks/bench_attention.py finds `sdpa` as fast or faster from 5 keys up, so the
    # default is 1 (always `sdpa`); a machine where `math` wins on short inputs raises it. Past
    # the crossover `math` would also hold O(L^2) scores in memory.
    crossover: int = 1


class AutoKernel(AttentionKernel):
    """``math`` below ``crossover`` keys, ``sdpa`` from there on (fused, O(L) memory): the
    faster exact kernel by length, as measured. Both compute the same formula; weights, when
    asked for, come from ``math``."""

    name = "auto"
    exactness = "exact"  # refuses nothing
    Options = AutoOptions

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name == "crossover" and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise config_error("attention_options.crossover", value, "expected an int >= 1")

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        fn = math_attention if k.shape[-2] < self.options.crossover else sdpa_attention
        return fn(q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal)


__all__ = [
    "EXACTNESS",
    "FEATURES",
    "KERNELS",
    "AttentionCost",
    "AttentionKernel",
    "AutoKernel",
    "NORMALIZERS",
    "SCORES",
    "MathKernel",
    "SDPAKernel",
    "additive_scores",
    "build_kernel",
    "check_int_option",
    "causal_pairs",
    "full_precision",
    "math_attention",
    "register_kernel",
    "scores_attention",
    "sdpa_attention",
]
