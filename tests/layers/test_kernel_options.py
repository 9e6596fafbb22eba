"""Kernels as bricks with options: built from a name plus config data, JSON round-trip, named
errors; is_causal (torch's fused path and the bottom-right mask agree); rows with no finite
score are zero on every kernel; float16 does not overflow; `auto` picks by sequence length."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import tfam
from tfam.config import BaseConfig
from tfam.layers import KERNELS, build_kernel, causal_mask
from tfam.layers.kernels import AutoKernel, math_attention, sdpa_attention

FNS = {"math": math_attention, "sdpa": sdpa_attention}


def qkv(b, h, lq, lk, dh, gen, dtype=torch.float64, requires_grad=False):
    return [
        torch.randn(b, h, n, dh, generator=gen, dtype=torch.float64)
        .to(dtype)
        .requires_grad_(requires_grad)
        for n in (lq, lk, lk)
    ]


def test_options_round_trip_through_json():
    config = tfam.create_model(
        "vit",
        image_size=8,
        patch_size=4,
        in_channels=1,
        num_classes=2,
        dim=8,
        depth=1,
        heads=2,
        attention="sdpa",
        attention_options={"backend": "math"},
    ).config
    again = BaseConfig.from_json(config.to_json())
    assert again == config and again.attention_options == {"backend": "math"}
    model = tfam.create_model("vit", **{k: v for k, v in again.to_dict().items() if k != "family"})
    assert model.blocks[0].mhsa.kernel.to_options() == {"backend": "math"}
    # Defaults are written out, so the JSON says what ran.
    auto = BaseConfig(dim=8, heads=2, attention="auto")
    assert json.loads(auto.to_json())["attention_options"] == {"crossover": 1}


@pytest.mark.parametrize(
    "attention,options,message",
    [
        (
            "math",
            {"window": 4},
            r"attention_options.window=4 is invalid: kernel 'math' takes the options: normalizer, scale, score, score_dim",
        ),
        (
            "sdpa",
            {"backend": "triton"},
            r"attention_options.backend='triton' is invalid: expected one of 'auto', 'math'",
        ),
        (
            "sdpa",
            {"backnd": "math"},
            r"attention_options.backnd='math' is invalid: kernel 'sdpa' takes the options: backend",
        ),
        (
            "auto",
            {"crossover": 0},
            r"attention_options.crossover=0 is invalid: expected an int >= 1",
        ),
        ("auto", {"crossover": "64"}, r"attention_options.crossover='64' is invalid"),
        ("math", [1], r"attention_options=\[1\] is invalid: expected a dict"),
        # Other registered kernels (chunked, ...) sort in between: match the built-ins only.
        (
            "flash9",
            {},
            r"attention='flash9' is invalid: expected one of 'auto', .*'math', .*'sdpa'",
        ),
    ],
)
def test_bad_options_get_a_named_error(attention, options, message):
    with pytest.raises(ValueError, match=message):
        BaseConfig(dim=8, heads=2, attention=attention, attention_options=options)


def test_switching_kernel_resets_options():
    config = BaseConfig(dim=8, heads=2, attention="auto", attention_options={"crossover": 8})
    assert config.replace(attention="math").attention_options == {
        "normalizer": "softmax",
        "scale": "head",
        "score": "dot",
        "score_dim": None,
    }
    assert build_kernel("auto", {"crossover": 8}).options.crossover == 8
    assert set(KERNELS) >= {"math", "sdpa", "auto"}


@pytest.mark.parametrize("kernel", sorted(FNS))
@pytest.mark.parametrize("lq,lk", [(5, 5), (2, 6), (1, 4), (6, 3)])
def test_is_causal_equals_the_bottom_right_mask(rng, kernel, lq, lk):
    q, k, v = qkv(2, 3, lq, lk, 4, rng)
    out, _ = FNS[kernel](q, k, v, is_causal=True)
    ref, _ = math_attention(q, k, v, mask=causal_mask(lq, lk))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    if lq == lk:
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_sdpa_takes_torchs_fused_causal_path(rng, monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("is_causal", False), kwargs.get("attn_mask")))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = qkv(1, 2, 6, 6, 4, rng)
    sdpa_attention(q, k, v, is_causal=True)
    assert seen[-1] == (True, None), "causal, square, no mask: torch's own causal kernel"
    sdpa_attention(q[:, :, :2], k, v, is_causal=True)
    assert seen[-1][0] is False and seen[-1][1] is not None, "Lq != Lk: bottom-right mask"


@pytest.mark.parametrize("kernel", sorted(FNS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_rows_with_only_minus_inf_bias_are_zero(rng, kernel, dtype):
    q, k, v = qkv(2, 2, 4, 5, 8, rng, dtype=dtype, requires_grad=True)
    bias = torch.randn(2, 4, 5, generator=rng).to(dtype)
    bias[1, 2] = float("-inf")  # one row of one head: no finite score
    bias[0, 0, :3] = float("-inf")  # a row with some keys left
    bias.requires_grad_()
    out, _ = FNS[kernel](q, k, v, bias=bias)
    assert torch.isfinite(out).all()
    assert (out[:, 1, 2] == 0).all()
    assert out[:, 0, 0].abs().sum() > 0
    gs = torch.autograd.grad(out, [q, k, v, bias], torch.randn(out.shape, generator=rng).to(dtype))
    for g in gs:
        assert torch.isfinite(g).all()
    # Together with a mask too.
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[0] = False
    out, _ = FNS[kernel](q, k, v, mask=mask, bias=bias)
    assert (out[:, :, 0] == 0).all() and (out[:, 1, 2] == 0).all()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("kernel", sorted(FNS))
def test_float16_large_activations_do_not_overflow(kernel):
    """q ~ 300 and Dh = 64: one raw score passes float16's 65,504; scaled first (by 1/8), the
    scores stay finite."""
    gen = torch.Generator().manual_seed(0)
    q = torch.full((1, 1, 3, 64), 300.0) + torch.randn(1, 1, 3, 64, generator=gen)
    k = torch.full((1, 1, 3, 64), 0.1) + torch.randn(1, 1, 3, 64, generator=gen) * 0.01
    v = torch.randn(1, 1, 3, 64, generator=gen)
    k[..., 0, :] = 4.0  # raw score of this key: ~300 * 4 * 64 = 76,800 > 65,504
    assert torch.isinf(q.half() @ k.half().transpose(-2, -1)).any(), (
        "the unscaled product overflows"
    )
    ref, _ = math_attention(q.double(), k.double(), v.double())
    out, _ = FNS[kernel](q.half(), k.half(), v.half(), need_weights=kernel == "math")
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)


def test_auto_picks_math_below_the_crossover(monkeypatch, rng):
    calls = []
    import tfam.layers.kernels as kernels

    monkeypatch.setattr(
        kernels, "math_attention", lambda *a, **k: calls.append("math") or math_attention(*a, **k)
    )
    monkeypatch.setattr(
        kernels, "sdpa_attention", lambda *a, **k: calls.append("sdpa") or sdpa_attention(*a, **k)
    )
    auto = AutoKernel(crossover=5)
    q, k, v = qkv(1, 1, 3, 4, 4, rng)
    auto(q, k, v)
    q, k, v = qkv(1, 1, 3, 5, 4, rng)
    auto(q, k, v)
    assert calls == ["math", "sdpa"]
