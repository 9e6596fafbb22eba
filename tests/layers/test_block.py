"""Encoder blocks, DropPath, the MLP and the norms against their written-out formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

import tfam
from tfam.config import BaseConfig
from tfam.layers import (
    DropPath,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    RMSNorm,
    TokenBatchNorm,
    TransformerStack,
    make_norm,
)

EPS = 1e-6


def randomize_(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """Random values in every parameter (norm gains and biases too) so each term is visible."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + (p.ndim == 1))
    return module


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = EPS) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as in the paper
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def rms_norm(x: Tensor, gamma: Tensor, eps: float = EPS) -> Tensor:
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * gamma


def gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def gelu_tanh(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: Tensor) -> Tensor:
    return x / (1 + torch.exp(-x))


def norm_formula(norm: nn.Module, x: Tensor) -> Tensor:
    if isinstance(norm, RMSNorm):
        return rms_norm(x, norm.weight, norm.eps)
    return layer_norm(x, norm.weight, norm.bias, norm.eps)


def mlp_formula(mlp: FeedForward, x: Tensor) -> Tensor:
    """X2 = act(X W1 + b1) W2 + b2, or act(X W) * (X V) for the gated kinds."""
    plain = {"relu": lambda t: torch.clamp(t, min=0), "gelu": gelu, "gelu_tanh": gelu_tanh}
    plain["silu"] = silu
    gated = {"swiglu": silu, "geglu": gelu}
    h = x @ mlp.fc1.weight.T + mlp.fc1.bias
    if mlp.activation in gated:
        f = mlp.fc2.weight.shape[1]
        h = gated[mlp.activation](h[..., :f]) * h[..., f:]
    else:
        h = plain[mlp.activation](h)
    return h @ mlp.fc2.weight.T + mlp.fc2.bias


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_pre_norm_block_equals_formula(rng, ref_mhsa, attention, norm):
    """X1 = X0 + MHSA(LN(X0)); X_out = X1 + MLP(LN(X1))."""
    block = EncoderBlock(
        BaseConfig(dim=12, heads=3, ffn_dim=20, norm=norm, norm_first=True, attention=attention)
    )
    block = randomize_(block.double(), rng)
    x0 = torch.randn(2, 5, 12, generator=rng, dtype=torch.float64)
    mask = torch.rand(2, 1, 1, 5, generator=rng) > 0.3
    x1 = x0 + ref_mhsa(block.mhsa, norm_formula(block.norm1, x0), mask=mask)
    expected = x1 + mlp_formula(block.mlp, norm_formula(block.norm2, x1))
    out, weights = block(x0, mask=mask)
    assert weights is None
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attention", ["math", "sdpa"])
def test_post_norm_block_equals_formula(rng, ref_mhsa, attention):
    """X1 = LN(X0 + MHSA(X0)); X_out = LN(X1 + MLP(X1))."""
    block = EncoderBlock(
        BaseConfig(
            dim=8, heads=2, ffn_dim=16, norm_first=False, activation="relu", attention=attention
        )
    )
    block = randomize_(block.double(), rng)
    x0 = torch.randn(3, 4, 8, generator=rng, dtype=torch.float64)
    x1 = norm_formula(block.norm1, x0 + ref_mhsa(block.mhsa, x0))
    expected = norm_formula(block.norm2, x1 + mlp_formula(block.mlp, x1))
    out, weights = block(x0, need_weights=True)
    assert weights.shape == (3, 2, 4, 4)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("fused_qkv", [True, False])
def test_first_queries_only_equal_those_rows_of_the_full_block(
    rng, attention, norm_first, fused_qkv
):
    """queries=n: the first n output rows, the same as the full block's (keys from all)."""
    block = EncoderBlock(
        BaseConfig(
            dim=12,
            heads=3,
            ffn_dim=20,
            norm_first=norm_first,
            attention=attention,
            fused_qkv=fused_qkv,
        )
    )
    block = randomize_(block.double(), rng)
    x = torch.randn(2, 6, 12, generator=rng, dtype=torch.float64)
    mask = torch.rand(2, 1, 6, 6, generator=rng) > 0.3  # per-query rows: cut with the queries
    bias = torch.randn(1, 3, 6, 6, generator=rng, dtype=torch.float64)
    full, full_w = block(x, mask=mask, bias=bias, need_weights=True)
    for n in (1, 2, 6):
        rows, w = block(x, mask=mask, bias=bias, need_weights=True, queries=n)
        assert rows.shape == (2, n, 12) and w.shape == (2, 3, n, 6)
        torch.testing.assert_close(rows, full[:, :n], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(w, full_w[:, :, :n], rtol=1e-12, atol=1e-12)
    key_mask = mask[:, :, :1]  # (B, 1, 1, Lk): broadcast over queries, nothing to cut
    rows, _ = block(x, mask=key_mask, queries=1)
    torch.testing.assert_close(rows, block(x, mask=key_mask)[0][:, :1], rtol=1e-12, atol=1e-12)


def test_encoder_last_queries_cuts_the_last_block_only(rng):
    encoder = randomize_(TransformerStack(BaseConfig(depth=3, dim=8, heads=2)).double(), rng).eval()
    x = torch.randn(2, 5, 8, generator=rng, dtype=torch.float64)
    seen = []
    for blk in encoder.blocks:
        blk.register_forward_hook(lambda m, a, out: seen.append(tuple(out[0].shape)))
    out, _ = encoder(x, last_queries=1)
    assert seen == [(2, 5, 8), (2, 5, 8), (2, 1, 8)]
    torch.testing.assert_close(out, encoder(x)[0][:, :1], rtol=1e-12, atol=1e-12)


def test_pre_and_post_norm_differ(rng):
    """The flag is wired: the same weights give different outputs in the two orders."""
    pre = randomize_(EncoderBlock(BaseConfig(dim=8, heads=2, norm_first=True)).double(), rng)
    post = EncoderBlock(BaseConfig(dim=8, heads=2, norm_first=False)).double()
    post.load_state_dict(pre.state_dict())
    x = torch.randn(2, 3, 8, generator=rng, dtype=torch.float64)
    assert (pre(x)[0] - post(x)[0]).abs().max() > 1e-3


def test_drop_path_identity_in_eval_and_at_zero():
    x = torch.randn(8, 3, 4)
    dp = DropPath(0.5).eval()
    assert torch.equal(dp(x), x)
    assert torch.equal(DropPath(0.0).train()(x), x)


def test_drop_path_drops_whole_samples_with_the_right_expectation():
    p, b = 0.25, 20_000
    dp = DropPath(p).train()
    x = torch.rand(b, 3, 2) + 0.5  # strictly positive, so a zero means "dropped"
    y = dp(x)
    dropped = (y == 0).flatten(1)
    # All-or-nothing per sample: a sample is either entirely zero or entirely kept ...
    assert (dropped.all(1) | ~dropped.any(1)).all()
    kept = ~dropped.all(1)
    # ... and the kept ones are rescaled by 1 / (1 - p), so E[y] = x.
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    # Drop rate ~ p: the standard error of the mean of b Bernoulli(p) is ~0.003; allow 5 sigma.
    sigma = math.sqrt(p * (1 - p) / b)
    assert abs((~kept).float().mean().item() - p) < 5 * sigma
    ratio = y.sum(dim=(1, 2)) / x.sum(dim=(1, 2))  # per-sample 0 or 1/(1-p); mean 1
    assert abs(ratio.mean().item() - 1.0) < 5 * sigma / (1 - p)


def test_drop_path_is_per_sample_inside_a_block(rng):
    """In a block in training, some samples take the residual path only."""
    torch.manual_seed(3)
    block = randomize_(
        EncoderBlock(BaseConfig(dim=8, heads=2, drop_path=0.5)).double(), rng
    ).train()
    x = torch.randn(64, 3, 8, generator=rng, dtype=torch.float64)
    out = block(x)[0]
    unchanged = (out == x).flatten(1).all(1)
    assert 0 < unchanged.sum() < 64


def test_encoder_drop_path_rises_linearly():
    enc = TransformerStack(BaseConfig(depth=5, drop_path=0.2, dim=8, heads=2))
    rates = [blk.drop_path.p for blk in enc.blocks]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])


def test_encoder_is_the_stack_of_its_blocks(rng):
    enc = randomize_(TransformerStack(BaseConfig(depth=3, dim=8, heads=2)).double(), rng)
    x = torch.randn(2, 4, 8, generator=rng, dtype=torch.float64)
    out, none = enc(x)
    assert none is None
    expected = x
    for blk in enc.blocks:
        expected = blk(expected)[0]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    out_w, weights = enc(x, need_weights=True)
    assert len(weights) == 3 and all(w.shape == (2, 2, 4, 4) for w in weights)
    torch.testing.assert_close(out_w, out, rtol=1e-12, atol=1e-12)


def test_encoder_blocks_initialised_independently():
    """create_model draws each block's weights separately: no two blocks share values."""
    model = tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=4, heads=2
    )
    weights = [
        {n: p for n, p in blk.named_parameters() if n.endswith("weight") and p.ndim == 2}
        for blk in model.blocks
    ]
    assert set(weights[0]) == {"mhsa.qkv.weight", "mhsa.out_proj.weight", "mlp.fc1.weight",
                               "mlp.fc2.weight"}  # fmt: skip
    for a, b in itertools.combinations(range(len(weights)), 2):
        for name in weights[a]:
            assert not torch.equal(weights[a][name], weights[b][name]), (name, a, b)
            assert weights[a][name].data_ptr() != weights[b][name].data_ptr()


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"])
def test_feedforward_activations_equal_formulas(rng, activation):
    mlp = randomize_(
        FeedForward(BaseConfig(dim=6, heads=1, ffn_dim=10, activation=activation)).double(), rng
    )
    gated = activation in ("swiglu", "geglu")
    assert mlp.fc1.weight.shape == ((20 if gated else 10), 6)
    assert mlp.fc2.weight.shape == (6, 10)
    x = torch.randn(2, 3, 6, generator=rng, dtype=torch.float64) * 2
    torch.testing.assert_close(mlp(x), mlp_formula(mlp, x), rtol=1e-12, atol=1e-12)


def test_feedforward_default_width_and_bad_activation():
    assert FeedForward(BaseConfig(dim=8, heads=1)).fc1.out_features == 32
    with pytest.raises(ValueError, match=r"activation='tanhh'.*'relu'"):
        FeedForward(BaseConfig(dim=8, heads=1, activation="tanhh"))


def test_activations_are_distinct(rng):
    """Guards the formula test against two names mapping to the same function."""
    x = torch.randn(2, 3, 6, generator=rng, dtype=torch.float64)
    outs = {}
    for act in ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"):
        torch.manual_seed(0)
        mlp = FeedForward(BaseConfig(dim=6, heads=1, ffn_dim=10, activation=act)).double()
        outs[act] = mlp(x)
    for a, b in itertools.combinations(("relu", "gelu", "gelu_tanh", "silu"), 2):
        assert not torch.allclose(outs[a], outs[b], rtol=1e-9, atol=1e-9), (a, b)


def test_rmsnorm_equals_formula(rng):
    norm = randomize_(RMSNorm(7, eps=1e-5).double(), rng)
    x = torch.randn(3, 4, 7, generator=rng, dtype=torch.float64) * 3 + 1
    torch.testing.assert_close(norm(x), rms_norm(x, norm.weight, 1e-5), rtol=1e-12, atol=1e-12)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]  # no bias, no centring


def test_layernorm_equals_formula(rng):
    norm = randomize_(LayerNorm(7, eps=1e-5).double(), rng)
    x = torch.randn(3, 4, 7, generator=rng, dtype=torch.float64) * 3 + 1
    expected = layer_norm(x, norm.weight, norm.bias, 1e-5)
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=1e-12)


def test_token_batchnorm_equals_formula(rng):
    """Training: each feature over all B * L tokens (biased variance); evaluation: the running
    statistics, which one training step moved by momentum 0.1 (unbiased variance)."""
    norm = randomize_(TokenBatchNorm(7, eps=1e-5).double(), rng)
    x = torch.randn(3, 4, 7, generator=rng, dtype=torch.float64) * 3 + 1
    flat = x.reshape(-1, 7)
    mu, var = flat.mean(0), flat.var(0, unbiased=False)
    expected = (x - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(norm.train()(x), expected, rtol=1e-12, atol=1e-12)
    run_mu, run_var = 0.1 * mu, 0.9 + 0.1 * flat.var(0, unbiased=True)
    expected = (x - run_mu) / torch.sqrt(run_var + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(norm.eval()(x), expected, rtol=1e-12, atol=1e-12)


def test_batchnorm_mixes_padding_into_real_tokens_layernorm_does_not(rng):
    """The same real tokens, padded with more zero tokens: a training-mode BatchNorm's output
    for them changes (the padding enters its statistics); LayerNorm's and an evaluation-mode
    BatchNorm's are identical."""
    x = torch.randn(2, 5, 6, generator=rng, dtype=torch.float64)
    padded = torch.cat([x, torch.zeros(2, 7, 6, dtype=torch.float64)], dim=1)
    bn, ln = TokenBatchNorm(6).double(), LayerNorm(6).double()
    assert (bn.train()(padded)[:, :5] - bn(x)).abs().max() > 1e-2
    assert torch.equal(ln(padded)[:, :5], ln(x))
    assert torch.equal(bn.eval()(padded)[:, :5], bn(x))


def test_make_norm():
    assert isinstance(make_norm("layernorm", 4), LayerNorm)
    assert isinstance(make_norm("rmsnorm", 4, eps=1e-5), RMSNorm)
    assert make_norm("rmsnorm", 4, eps=1e-5).eps == 1e-5
    assert isinstance(make_norm("batchnorm", 4, eps=1e-5), TokenBatchNorm)
    assert isinstance(make_norm("none", 4), torch.nn.Identity)
    with pytest.raises(ValueError, match=r"norm='groupnorm'.*'layernorm'.*'rmsnorm'.*'batchnorm'"):
        make_norm("groupnorm", 4)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "swiglu"])
def test_inference_fast_path_equals_autograd_path_and_keeps_input(activation: str) -> None:
    """Without autograd the MLP activation and the second residual run in place; the result
    must equal the autograd path bit for bit and the caller's input must stay untouched."""
    block = EncoderBlock(BaseConfig(dim=16, heads=2, activation=activation)).eval()
    x = torch.randn(2, 5, 16)
    x_before = x.clone()
    with_grad = block(x)[0]
    with torch.no_grad():
        no_grad = block(x)[0]
    with torch.inference_mode():
        inference = block(x)[0]
    assert torch.equal(with_grad.detach(), no_grad)
    assert torch.equal(with_grad.detach(), inference)
    assert torch.equal(x, x_before)
