"""The precision rule (FlashAttention's): a kernel's error in bfloat16 against a float64
reference stays within twice torch's own error (``sdpa``) in bfloat16.

For every registered kernel whose ``exactness`` is ``exact`` or ``pattern`` (so a kernel
registered later is covered without a new test), on the CPU: q, k, v of standard-normal
entries rounded to bfloat16; the reference is ``math`` in float64 on those same values, under
the kernel's own ``pattern_mask`` (pattern kernels) and the causal mask when asked; the kernel
runs in bfloat16, and so does ``sdpa``, under the same mask. max |kernel - reference| <= 2 x
max |sdpa - reference|, for the output and for the gradients of q, k and v. No absolute floor:
at these sizes sdpa's error is ~1e-3, about 2^-9 of the outputs (bfloat16's rounding), far
above float32 noise, so the ratio alone decides.

Approximate kernels are compared with their own float64 output by
``benchmarks/bench_precision.py`` (which also runs this rule at L = 256 and 1024, in float16,
and on CUDA); here they are left out. A kernel computing in bfloat16 throughout fails the rule
(``test_the_rule_fails_a_kernel_that_rounds_its_scores_and_weights``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

import tfam  # noqa: F401  (registers every kernel)
from tfam.layers.kernels import (
    KERNELS,
    AttentionKernel,
    build_kernel,
    math_attention,
    sdpa_attention,
)
from tfam.layers.masks import causal_mask

B, H, L, DH = 2, 2, 64, 16
LOW = torch.bfloat16
CHECKED = sorted(n for n, k in KERNELS.items() if k.exactness in ("exact", "pattern"))
WHAT = ("out", "dq", "dk", "dv")

Attend = Callable[[Tensor, Tensor, Tensor], Tensor]


def inputs(seed: int) -> tuple[list[Tensor], Tensor]:
    """q, k, v (B, H, L, Dh) and the output's cotangent, standard normal rounded to bfloat16."""
    gen = torch.Generator().manual_seed(seed)
    draw = [torch.randn(B, H, L, DH, generator=gen, dtype=torch.float64).to(LOW) for _ in range(4)]
    return draw[:3], draw[3]


def out_and_grads(fn: Attend, qkv: list[Tensor], cotangent: Tensor) -> list[Tensor]:
    """[out, dq, dk, dv] of ``fn`` on fresh leaves made from ``qkv``."""
    leaves = [t.detach().clone().requires_grad_() for t in qkv]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, cotangent.to(out.dtype))
    return [out.detach(), *grads]


def max_errors(got: list[Tensor], ref: list[Tensor]) -> list[float]:
    return [(g.double() - r).abs().max().item() for g, r in zip(got, ref)]


def check_rule(kernel: Attend, pattern: Tensor | None, is_causal: bool, seed: int) -> None:
    """The kernel's errors (output, dq, dk, dv) within 2x sdpa's, both in bfloat16 against
    float64 ``math`` under ``pattern`` (and causal)."""
    qkv, cotangent = inputs(seed)
    mask = pattern
    if is_causal:
        mask = causal_mask(L, L) if mask is None else mask & causal_mask(L, L)
    ref = out_and_grads(
        lambda q, k, v: math_attention(q, k, v, mask)[0], [t.double() for t in qkv], cotangent
    )
    base = out_and_grads(
        lambda q, k, v: sdpa_attention(q, k, v, pattern, is_causal=is_causal)[0], qkv, cotangent
    )
    got = out_and_grads(kernel, qkv, cotangent)
    assert all(t.dtype == LOW for t in got), "the kernel must answer in its inputs' dtype"
    errs, base_errs = max_errors(got, ref), max_errors(base, ref)
    bad = [
        f"{what}: {e:.3g} > 2 x sdpa's {b:.3g}"
        for what, e, b in zip(WHAT, errs, base_errs)
        if not e <= 2 * b
    ]
    assert not bad, f"bfloat16 error against float64 math: {'; '.join(bad)}"


@pytest.mark.parametrize("is_causal", [False, True], ids=["plain", "causal"])
@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("seed", [0, 1])
def test_bfloat16_error_within_twice_sdpa(name: str, is_causal: bool, seed: int) -> None:
    kernel = build_kernel(name, heads=H, head_dim=DH).to(LOW)
    if is_causal and "causal" in kernel.refuses:
        pytest.skip(type(kernel).refusal("causal"))
    pattern = kernel.pattern_mask(L, L) if kernel.exactness == "pattern" else None
    check_rule(lambda q, k, v: kernel(q, k, v, is_causal=is_causal)[0], pattern, is_causal, seed)


@pytest.mark.parametrize("name", CHECKED)
def test_bfloat16_autocast_keeps_to_the_rule(name: str) -> None:
    """Under bfloat16 autocast (``TrainConfig(precision="bf16")``), which casts float32
    products back to bfloat16, the kernel's float32 products must stay float32."""
    kernel = build_kernel(name, heads=H, head_dim=DH).to(LOW)
    pattern = kernel.pattern_mask(L, L) if kernel.exactness == "pattern" else None

    def autocast(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        with torch.autocast("cpu", dtype=LOW):
            return kernel(q, k, v)[0]

    check_rule(autocast, pattern, False, 0)


@pytest.mark.parametrize("is_causal", [False, True], ids=["plain", "causal"])
def test_chunked_keeps_to_the_rule_over_many_tiles(is_causal: bool) -> None:
    """Tiles of 16 queries x 4 keys: the online softmax, rescaled over 16 key tiles per row,
    keeps to the rule too (the default 64 x 64 tile holds all L = 64 keys at once)."""
    kernel = build_kernel("chunked", {"block_q": 16, "block_k": 4})
    check_rule(lambda q, k, v: kernel(q, k, v, is_causal=is_causal)[0], None, is_causal, 2)


def test_the_rule_fails_a_kernel_that_rounds_its_scores_and_weights() -> None:
    """The rule can fail: attention written out in bfloat16 (scores, softmax and weights
    rounded to 8 bits) misses it, as ``math`` and ``chunked`` did before their products
    ran in float32."""

    def rounded(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        scores = (q * DH**-0.5) @ k.transpose(-2, -1)  # bfloat16 product: rounded scores
        return torch.softmax(scores, dim=-1) @ v  # softmax and weights in bfloat16 too

    with pytest.raises(AssertionError, match="> 2 x sdpa's"):
        check_rule(rounded, None, False, 0)


def test_every_exact_and_pattern_kernel_is_checked() -> None:
    """The rule's list is the registry's: nothing exact or pattern is left out."""
    assert {"math", "sdpa", "auto", "chunked"} <= set(CHECKED)
    for name, cls in KERNELS.items():
        assert issubclass(cls, AttentionKernel)
        assert (name in CHECKED) == (cls.exactness != "approximate")
