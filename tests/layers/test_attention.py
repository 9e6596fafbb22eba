"""MultiHeadAttention: equal to torch.nn.MultiheadAttention and to the per-head formula."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from tfam.config import BaseConfig
from tfam.layers.attention import MultiHeadAttention

KERNELS = ("math", "sdpa")


def copy_to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention (batch_first) holding the same weights as ``mha``."""
    ref = nn.MultiheadAttention(
        mha.dim, mha.heads, bias=True, batch_first=True, dtype=mha.out_proj.weight.dtype
    )
    with torch.no_grad():
        if mha.fused_qkv:
            ref.in_proj_weight.copy_(mha.qkv.weight)
            ref.in_proj_bias.copy_(mha.qkv.bias)
        else:
            ref.in_proj_weight.copy_(
                torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight])
            )
            ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref


def randomize_(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """Non-zero biases everywhere, so a swapped or dropped bias cannot go unnoticed."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    return module


def fused_to_unfused(fused: MultiHeadAttention) -> MultiHeadAttention:
    """The same layer with W_Q, W_K, W_V as three Linear layers."""
    unfused = MultiHeadAttention(
        BaseConfig(dim=fused.dim, heads=fused.heads, fused_qkv=False, attention=fused.attention)
    ).to(fused.out_proj.weight.dtype)
    d = fused.dim
    with torch.no_grad():
        for i, proj in enumerate((unfused.q_proj, unfused.k_proj, unfused.v_proj)):
            proj.weight.copy_(fused.qkv.weight[i * d : (i + 1) * d])
            proj.bias.copy_(fused.qkv.bias[i * d : (i + 1) * d])
        unfused.out_proj.load_state_dict(fused.out_proj.state_dict())
    return unfused


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("padding", [False, True], ids=["no_mask", "key_padding"])
def test_equals_torch_multihead_attention(rng, kernel, fused, padding):
    b, n, d, h = 3, 5, 12, 3
    mha = randomize_(
        MultiHeadAttention(BaseConfig(dim=d, heads=h, fused_qkv=fused, attention=kernel)), rng
    ).double()
    ref = copy_to_torch(mha).eval()
    mha.eval()
    x = torch.randn(b, n, d, generator=rng, dtype=torch.float64)
    # tfam: True = real key; torch.nn: key_padding_mask True = ignore. Convert at the edge.
    keep = torch.ones(b, n, dtype=torch.bool)
    if padding:
        keep[0, 3:] = False
        keep[2, 1:] = False
    out, weights = mha(x, mask=keep[:, None, None, :], need_weights=True)
    ref_out, ref_weights = ref(
        x, x, x, key_padding_mask=~keep if padding else None, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-12, atol=1e-12)
    # And the path without weights (sdpa runs torch's fused kernel there).
    out_fast, none = mha(x, mask=keep[:, None, None, :])
    assert none is None
    torch.testing.assert_close(out_fast, ref_out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
def test_equals_torch_multihead_attention_float32(rng, kernel):
    """The default dtype too, at float32 tolerance."""
    mha = randomize_(MultiHeadAttention(BaseConfig(dim=16, heads=4, attention=kernel)), rng).eval()
    ref = copy_to_torch(mha).eval()
    x = torch.randn(2, 7, 16, generator=rng)
    with torch.no_grad():
        torch.testing.assert_close(mha(x)[0], ref(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize("kernel", KERNELS)
def test_fused_and_unfused_layouts_agree(rng, kernel):
    fused = randomize_(
        MultiHeadAttention(BaseConfig(dim=8, heads=2, attention=kernel)), rng
    ).double()
    unfused = fused_to_unfused(fused)
    x = torch.randn(2, 4, 8, generator=rng, dtype=torch.float64)
    ctx = torch.randn(2, 6, 8, generator=rng, dtype=torch.float64)
    torch.testing.assert_close(fused(x)[0], unfused(x)[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        fused(x, context=ctx)[0], unfused(x, context=ctx)[0], rtol=1e-12, atol=1e-12
    )
    assert fused.qkv.weight.shape == (24, 8)
    assert not hasattr(unfused, "qkv") and unfused.q_proj.weight.shape == (8, 8)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_self_and_cross_attention_equal_the_formula(rng, ref_mhsa, kernel, fused):
    """Per-head loop formula, queries from x (Lq = 3) and keys/values from a context (Lk = 5),
    with a mask and an additive bias."""
    b, lq, lk, d, h = 2, 3, 5, 12, 4
    mha = randomize_(
        MultiHeadAttention(BaseConfig(dim=d, heads=h, fused_qkv=fused, attention=kernel)), rng
    ).double()
    x = torch.randn(b, lq, d, generator=rng, dtype=torch.float64)
    ctx = torch.randn(b, lk, d, generator=rng, dtype=torch.float64)
    mask = torch.rand(b, 1, lq, lk, generator=rng) > 0.3
    mask[1, 0, 2] = False  # one query with no key: its head outputs are zero
    bias = torch.randn(1, h, lq, lk, generator=rng, dtype=torch.float64)

    out, weights = mha(x, context=ctx, mask=mask, bias=bias, need_weights=True)
    assert out.shape == (b, lq, d)
    assert weights.shape == (b, h, lq, lk)
    torch.testing.assert_close(out, ref_mhsa(mha, x, ctx, mask, bias), rtol=1e-12, atol=1e-12)
    # The empty query row gets only W_O's bias.
    torch.testing.assert_close(out[1, 2], mha.out_proj.bias, rtol=1e-12, atol=1e-12)

    self_out, self_weights = mha(x, need_weights=True)
    assert self_weights.shape == (b, h, lq, lq)
    torch.testing.assert_close(self_out, ref_mhsa(mha, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
def test_cross_attention_equals_torch(rng, kernel):
    b, lq, lk, d, h = 2, 3, 6, 8, 2
    mha = (
        randomize_(MultiHeadAttention(BaseConfig(dim=d, heads=h, attention=kernel)), rng)
        .double()
        .eval()
    )
    ref = copy_to_torch(mha).eval()
    x = torch.randn(b, lq, d, generator=rng, dtype=torch.float64)
    ctx = torch.randn(b, lk, d, generator=rng, dtype=torch.float64)
    torch.testing.assert_close(mha(x, context=ctx)[0], ref(x, ctx, ctx)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_gradcheck_float64(rng, kernel, fused):
    """Analytic gradients (inputs, context, bias and every parameter) equal finite differences."""
    b, lq, lk, d, h = 1, 3, 4, 4, 2
    mha = randomize_(
        MultiHeadAttention(BaseConfig(dim=d, heads=h, fused_qkv=fused, attention=kernel)), rng
    ).double()
    names = [name for name, _ in mha.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in mha.parameters()]
    x = torch.randn(b, lq, d, generator=rng, dtype=torch.float64, requires_grad=True)
    ctx = torch.randn(b, lk, d, generator=rng, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(h, lq, lk, generator=rng, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(b, 1, lq, lk, generator=rng) > 0.3
    mask[0, 0, 1] = False

    def fn(x, ctx, bias, *params):
        state = dict(zip(names, params))
        return functional_call(mha, state, (x,), {"context": ctx, "mask": mask, "bias": bias})[0]

    assert torch.autograd.gradcheck(fn, (x, ctx, bias, *params), eps=1e-6, atol=1e-7)

    def self_fn(x, *params):
        return functional_call(mha, dict(zip(names, params)), (x,))[0]

    # Self-attention takes the fused single-matmul path; the cheaper random-projection mode
    # suffices there since the full Jacobian check above covers every parameter.
    assert torch.autograd.gradcheck(self_fn, (x, *params), eps=1e-6, atol=1e-7, fast_mode=True)


def test_heads_must_divide_dim():
    with pytest.raises(ValueError, match=r"heads=3.*dim=10"):
        MultiHeadAttention(BaseConfig(dim=10, heads=3))


def test_unknown_kernel_name_raises():
    with pytest.raises(ValueError, match="attention='flashy'"):
        MultiHeadAttention(BaseConfig(dim=8, heads=2, attention="flashy"))


def test_set_kernel_keeps_weights(rng):
    mha = randomize_(MultiHeadAttention(BaseConfig(dim=8, heads=2, attention="sdpa")), rng).double()
    x = torch.randn(2, 5, 8, generator=rng, dtype=torch.float64)
    before = mha(x)[0]
    mha.set_kernel("math")
    assert mha.attention == "math"
    torch.testing.assert_close(mha(x)[0], before, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("used", [(0, 1, 2), (1,), (0, 2)])
def test_split_heads3_equals_autograd_views(used):
    """The fused Q|K|V split: the same views forward, the same gradient backward (bit for bit),
    also when only some of Q, K, V reach the loss (the others' gradients are None)."""
    from tfam.layers.attention import SplitHeads3

    gen = torch.Generator().manual_seed(0)
    b, n, heads, dh = 2, 5, 4, 3
    x = torch.randn(b, n, 3 * heads * dh, generator=gen, dtype=torch.float64, requires_grad=True)
    ours = SplitHeads3.apply(x, heads)
    ref = x.view(b, n, 3, heads, dh).permute(2, 0, 3, 1, 4).unbind(0)
    for a, r in zip(ours, ref):
        assert a.shape == (b, heads, n, dh) and torch.equal(a, r)
    weights = [torch.randn(b, heads, n, dh, generator=gen, dtype=torch.float64) for _ in range(3)]
    (g_ours,) = torch.autograd.grad(sum((ours[i] * weights[i]).sum() for i in used), x)
    (g_ref,) = torch.autograd.grad(sum((ref[i] * weights[i]).sum() for i in used), x)
    assert torch.equal(g_ours, g_ref)
