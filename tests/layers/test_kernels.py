"""Attention kernels against softmax(Q K^T / sqrt(Dh) + bias, masked) V written out in float64.

Conventions under test (design.md): masks are bool with True = may attend, broadcastable to
(B, H, Lq, Lk); biases are separate float terms; a row with no allowed key yields zeros, never
NaN, in forward and backward, on every kernel and dtype.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tfam.layers.kernels import (
    KERNELS,
    MathKernel,
    SDPAKernel,
    build_kernel,
    math_attention,
    sdpa_attention,
)

KERNEL_FNS = {"math": math_attention, "sdpa": sdpa_attention}
MASK_KINDS = ("none", "lq_lk", "b_1_lq_lk", "b_h_lq_lk", "key_padding", "causal")


def make_mask(kind: str, b: int, h: int, lq: int, lk: int, gen: torch.Generator) -> torch.Tensor:
    """A random boolean mask (True = may attend) of one of the broadcast shapes we support."""
    shapes = {
        "lq_lk": (lq, lk),
        "b_1_lq_lk": (b, 1, lq, lk),
        "b_h_lq_lk": (b, h, lq, lk),
        "key_padding": (b, 1, 1, lk),
    }
    if kind == "none":
        return None
    if kind == "causal":
        return causal_mask(lq, lk)
    return torch.rand(shapes[kind], generator=gen) > 0.4


def causal_mask(lq: int, lk: int) -> torch.Tensor:
    """Query i (of the last Lq positions) may see keys j <= i + (Lk - Lq): bottom-right aligned."""
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    return j <= i + (lk - lq)


def qkv(b, h, lq, lk, dh, gen, dtype=torch.float64, requires_grad=True):
    def draw(n):
        t = torch.randn(b, h, n, dh, generator=gen, dtype=torch.float64).to(dtype)
        return t.requires_grad_(requires_grad)

    return draw(lq), draw(lk), draw(lk)


def grads(outputs: torch.Tensor, inputs: list[torch.Tensor], cotangent: torch.Tensor):
    return torch.autograd.grad(outputs, inputs, cotangent, allow_unused=False)


@settings(deadline=None, max_examples=25)
@given(
    kernel=st.sampled_from(sorted(KERNEL_FNS)),
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    lq=st.integers(1, 5),
    lk=st.integers(1, 6),
    dh=st.integers(1, 8),
    mask_kind=st.sampled_from(MASK_KINDS),
    with_bias=st.booleans(),
    custom_scale=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_kernel_matches_float64_reference(
    ref_attention, kernel, b, h, lq, lk, dh, mask_kind, with_bias, custom_scale, seed
):
    """Forward output, returned weights and all input gradients equal the formula (float64)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = qkv(b, h, lq, lk, dh, gen)
    mask = make_mask(mask_kind, b, h, lq, lk, gen)
    bias = None
    if with_bias:
        bias = torch.randn(h, lq, lk, generator=gen, dtype=torch.float64).requires_grad_()
    scale = 0.37 if custom_scale else None
    inputs = [q, k, v] + ([bias] if with_bias else [])

    out, weights = KERNEL_FNS[kernel](q, k, v, mask=mask, bias=bias, scale=scale, need_weights=True)
    ref_out, ref_weights = ref_attention(q, k, v, mask=mask, bias=bias, scale=scale)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, ref_weights.expand_as(weights), rtol=1e-12, atol=1e-12)

    # Backward through the fused path (need_weights=False), which is what training runs.
    out, none = KERNEL_FNS[kernel](q, k, v, mask=mask, bias=bias, scale=scale)
    assert none is None
    cot = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    for g, g_ref in zip(grads(out, inputs, cot), grads(ref_out, inputs, cot)):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("lq,lk", [(4, 4), (3, 7), (6, 2)])
def test_kernel_each_mask_shape(ref_attention, rng, kernel, mask_kind, with_bias, lq, lk):
    """Every supported broadcast shape, with and without bias, square and Lq != Lk."""
    b, h, dh = 2, 3, 5
    q, k, v = qkv(b, h, lq, lk, dh, rng, requires_grad=False)
    mask = make_mask(mask_kind, b, h, lq, lk, rng)
    # Bias broadcast over the batch (ALiBi-like), a different shape from any mask above.
    bias = torch.randn(1, h, lq, lk, generator=rng, dtype=torch.float64) if with_bias else None
    out, _ = KERNEL_FNS[kernel](q, k, v, mask=mask, bias=bias)
    ref_out, _ = ref_attention(q, k, v, mask=mask, bias=bias)
    assert out.shape == (b, h, lq, dh)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_fully_masked_rows_are_zero_forward_and_backward(rng, kernel, dtype, with_bias):
    b, h, lq, lk, dh = 2, 2, 4, 5, 8
    q, k, v = qkv(b, h, lq, lk, dh, rng, dtype=dtype)
    mask = torch.rand(b, h, lq, lk, generator=rng) > 0.5
    mask[..., 0] = True  # every other row has a key ...
    mask[0, 1, 2] = False  # ... except one row in one head,
    mask[1] = False  # and every row of the second sample.
    empty = ~mask.any(dim=-1)  # (B, H, Lq)
    bias = torch.randn(h, lq, lk, generator=rng).to(dtype).requires_grad_() if with_bias else None
    inputs = [q, k, v] + ([bias] if with_bias else [])

    out, _ = KERNEL_FNS[kernel](q, k, v, mask=mask, bias=bias)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    assert (out[empty] == 0).all(), "rows with no allowed key must be exactly zero"
    assert out[~empty].abs().sum() > 0

    gs = grads(out, inputs, torch.randn(out.shape, generator=rng).to(dtype))
    for g in gs:
        assert torch.isfinite(g).all(), "backward through an empty row must stay finite"
    # The output of an empty row is a constant, so its queries get no gradient.
    assert (gs[0][empty] == 0).all()

    if kernel == "math":
        _, weights = math_attention(q, k, v, mask=mask, bias=bias, need_weights=True)
        assert torch.isfinite(weights).all()
        assert (weights[empty] == 0).all()


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
def test_all_keys_masked_gives_all_zeros(rng, kernel):
    q, k, v = qkv(1, 2, 3, 4, 5, rng)
    out, _ = KERNEL_FNS[kernel](q, k, v, mask=torch.zeros(3, 4, dtype=torch.bool))
    assert torch.equal(out, torch.zeros_like(out))
    for g in grads(out.sum(), [q, k, v], torch.tensor(1.0, dtype=out.dtype)):
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
@pytest.mark.parametrize("lq,lk", [(5, 5), (2, 6), (6, 3)])
def test_causal_mask_bottom_right(ref_attention, rng, kernel, lq, lk):
    """Causal = bottom-right aligned (cached decoding): the last query sees every key; with
    Lq > Lk the first Lq - Lk queries see nothing and are zero."""
    q, k, v = qkv(2, 2, lq, lk, 4, rng, requires_grad=False)
    mask = causal_mask(lq, lk)
    assert mask[-1].all()
    out, _ = KERNEL_FNS[kernel](q, k, v, mask=mask)
    torch.testing.assert_close(out, ref_attention(q, k, v, mask=mask)[0], rtol=1e-12, atol=1e-12)
    if lq == lk:  # torch's own causal path agrees with our mask convention
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    if lq > lk:
        assert (out[:, :, : lq - lk] == 0).all()
    # Each query's output depends only on keys it may see: changing later keys/values leaves
    # earlier queries unchanged.
    k2, v2 = k.clone(), v.clone()
    k2[:, :, -1] += 1.0
    v2[:, :, -1] -= 2.0
    out2, _ = KERNEL_FNS[kernel](q, k2, v2, mask=mask)
    blind = ~mask[:, -1]  # queries that may not see the last key
    torch.testing.assert_close(out2[:, :, blind], out[:, :, blind], rtol=0, atol=0)


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.int64, torch.uint8], ids=str)
def test_non_bool_mask_raises_naming_the_convention(rng, kernel, need_weights, mask_dtype):
    q, k, v = qkv(1, 1, 3, 3, 4, rng, requires_grad=False)
    bad = torch.ones(3, 3, dtype=mask_dtype)
    with pytest.raises(ValueError, match="True = may attend") as info:
        KERNEL_FNS[kernel](q, k, v, mask=bad, need_weights=need_weights)
    assert "torch.bool" in str(info.value) and str(mask_dtype) in str(info.value)


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
def test_returned_weights_rows_sum_to_one_or_zero(rng, kernel):
    """Both kernels return weights when asked (sdpa through math)."""
    b, h, lq, lk = 2, 3, 4, 6
    q, k, v = qkv(b, h, lq, lk, 4, rng, dtype=torch.float32, requires_grad=False)
    mask = torch.rand(b, 1, lq, lk, generator=rng) > 0.5
    mask[0, 0, 1] = False
    bias = torch.randn(h, lq, lk, generator=rng)
    out, weights = KERNEL_FNS[kernel](q, k, v, mask=mask, bias=bias, need_weights=True)
    assert weights.shape == (b, h, lq, lk)
    assert (weights >= 0).all()
    assert (weights[~mask.expand(b, h, lq, lk)] == 0).all(), "blocked keys get exactly zero"
    has_key = mask.any(-1).expand(b, h, lq)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]))
    assert (sums[~has_key] == 0).all()
    torch.testing.assert_close(out, weights @ v)


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_low_precision_error_within_twice_plain_pytorch(ref_attention, kernel, dtype):
    """Flash-attention's acceptance rule: |kernel - ref64| <= 2 |plain - ref64| + floor, where
    `plain` is the same formula run naively in the low precision and the floor is a few
    float32 ulps of the output scale (for bfloat16 too, so the floor never carries the test)."""
    gen = torch.Generator().manual_seed(1234)
    eps = torch.finfo(torch.float32).eps
    cases = [
        (b, h, lq, lk, dh, mask_kind, with_bias)
        for (b, h, lq, lk, dh) in [(2, 2, 7, 7, 16), (1, 4, 5, 13, 32), (2, 1, 17, 9, 8)]
        for mask_kind in ("none", "b_h_lq_lk", "key_padding", "causal")
        for with_bias in (False, True)
    ]
    for b, h, lq, lk, dh, mask_kind, with_bias in cases:
        # Scaled inputs make peaked softmaxes, where rounding matters most.
        q, k, v = (
            t * s for t, s in zip(qkv(b, h, lq, lk, dh, gen, requires_grad=False), (2, 2, 1))
        )
        mask = make_mask(mask_kind, b, h, lq, lk, gen)
        bias = torch.randn(h, lq, lk, generator=gen, dtype=torch.float64) if with_bias else None
        ref, _ = ref_attention(q, k, v, mask=mask, bias=bias)

        def low(t):
            return None if t is None else t.to(dtype)

        plain, _ = ref_attention(low(q), low(k), low(v), mask=mask, bias=low(bias))
        out, _ = KERNEL_FNS[kernel](low(q), low(k), low(v), mask=mask, bias=low(bias))
        err = (out.double() - ref).abs().max().item()
        err_plain = (plain.double() - ref).abs().max().item()
        floor = 4 * eps * v.abs().max().item()
        assert err <= 2 * err_plain + floor, (
            f"{kernel} {dtype} case {(b, h, lq, lk, dh, mask_kind, with_bias)}: "
            f"error {err:.3e} > 2 x plain {err_plain:.3e} + {floor:.1e}"
        )


def test_kernel_registry():
    assert {"math", "sdpa"} <= set(KERNELS)
    assert isinstance(build_kernel("math"), MathKernel)
    assert isinstance(build_kernel("sdpa"), SDPAKernel)
    with pytest.raises(ValueError, match=r"attention='nope'.*'math'.*'sdpa'"):
        build_kernel("nope")


@pytest.mark.parametrize("kernel", sorted(KERNEL_FNS))
def test_default_scale_is_head_width(rng, kernel):
    """Scores are scaled by 1/sqrt(Dh) by default."""
    q, k, v = qkv(1, 2, 3, 4, 9, rng, requires_grad=False)
    out, _ = KERNEL_FNS[kernel](q, k, v)
    out_explicit, _ = KERNEL_FNS[kernel](q, k, v, scale=1 / math.sqrt(9))
    torch.testing.assert_close(out, out_explicit, rtol=1e-14, atol=1e-14)
    out_other, _ = KERNEL_FNS[kernel](q, k, v, scale=1.0)
    assert not torch.allclose(out, out_other)
