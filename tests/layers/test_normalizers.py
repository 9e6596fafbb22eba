"""Issue 22, point 1: scores and normalisers on the exact kernels. ``math`` takes the options
``normalizer`` (softmax | relu | sigmoid) and ``scale`` (head | model); ReLU and sigmoid
attention against float64 references written out row by row, with masks, causal and rows with
no key; the default path equal to the pre-option ``math_attention``; ``sdpa`` and ``auto``
refuse the others in one line."""

from __future__ import annotations

import json
import math

import pytest
import torch

import tfam
from tfam.config import BaseConfig
from tfam.layers import build_kernel, causal_mask
from tfam.layers.kernels import math_attention


def _old_math_attention(q, k, v, mask=None, bias=None, scale=None, is_causal=False):
    """math_attention as it was before the options (5db1345), dropout left out: the default
    path must reproduce it bit for bit."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if is_causal and q.shape[-2] > 1:
        c = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        mask = c if mask is None else mask & c
    acc = torch.promote_types(q.dtype, torch.float32)
    scores = torch.matmul(q * scale, k.transpose(-2, -1)).to(acc)
    if bias is not None:
        scores = scores + bias.to(acc)
    dead = None
    if mask is not None or bias is not None:
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
        scores = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    weights = weights.to(q.dtype)
    return torch.matmul(weights, v), weights


def _naive(q, k, v, mask, normalizer, scale=None):
    """Row by row in float64 with Python loops: out[b,h,i] = sum_j w_ij v_j over allowed j,
    w_ij = relu(s_ij)/n_i or sigmoid(s_ij - log n_i); n_i = allowed keys of row i."""
    b_, h_, lq, dh = q.shape
    lk = k.shape[-2]
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    out = torch.zeros(b_, h_, lq, v.shape[-1], dtype=torch.float64)
    full = (
        torch.ones(b_, h_, lq, lk, dtype=torch.bool)
        if mask is None
        else mask.expand(b_, h_, lq, lk)
    )
    for b in range(b_):
        for h in range(h_):
            for i in range(lq):
                keys = [j for j in range(lk) if full[b, h, i, j]]
                n = len(keys)
                for j in keys:
                    s = float((q[b, h, i].double() * scale) @ k[b, h, j].double())
                    if normalizer == "relu":
                        w = max(s, 0.0) / n
                    else:
                        w = 1.0 / (1.0 + math.exp(-(s - math.log(n))))
                    out[b, h, i] += w * v[b, h, j].double()
    return out


def _qkv(lq, lk, seed=0, b=2, h=2, dh=4, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, n, dh, generator=g, dtype=torch.float64).requires_grad_(grad)
        for n in (lq, lk, lk)
    ]


def _mask_with_dead_row(b, h, lq, lk, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, 1, lq, lk, generator=g) > 0.4
    mask[0, 0, 1] = False  # a row with no key
    return mask


@pytest.mark.parametrize("normalizer", ["relu", "sigmoid"])
@pytest.mark.parametrize("case", ["plain", "mask", "causal", "causal_cross", "mask_causal"])
def test_pointwise_normalizers_equal_naive_reference(normalizer, case):
    lq, lk = (3, 5) if case == "causal_cross" else (5, 5)
    q, k, v = _qkv(lq, lk)
    mask = _mask_with_dead_row(2, 2, lq, lk) if "mask" in case else None
    is_causal = "causal" in case
    ref_mask = mask
    if is_causal:
        c = causal_mask(lq, lk)  # bottom-right aligned, as with softmax
        ref_mask = c.expand(2, 2, lq, lk) if mask is None else mask & c
    kernel = build_kernel("math", {"normalizer": normalizer})
    out, weights = kernel(q, k, v, mask=mask, is_causal=is_causal, need_weights=True)
    want = _naive(q, k, v, ref_mask, normalizer)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    if ref_mask is not None:
        assert not weights.masked_select(~ref_mask.expand_as(weights)).any()


@pytest.mark.parametrize("normalizer", ["softmax", "relu", "sigmoid"])
def test_fully_masked_rows_are_zero_with_finite_gradients(normalizer):
    q, k, v = _qkv(4, 6, grad=True)
    mask = _mask_with_dead_row(2, 2, 4, 6)
    bias = torch.zeros(1, 1, 4, 6, dtype=torch.float64)
    bias[..., 2, :] = float("-inf")  # a bias row of -inf also leaves no key
    out, _ = math_attention(q, k, v, mask, bias, normalizer=normalizer)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, :, 1], torch.zeros_like(out[0, :, 1]))
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert q.grad.abs().sum() > 0


def test_relu_and_sigmoid_differ_from_softmax():
    # Guards the option actually reaching the computation.
    q, k, v = _qkv(4, 4)
    outs = [
        build_kernel("math", {"normalizer": n})(q, k, v)[0] for n in ("softmax", "relu", "sigmoid")
    ]
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[0], outs[2])


@pytest.mark.parametrize("case", ["plain", "mask", "causal", "bias"])
def test_default_path_is_bit_identical(case):
    q, k, v = _qkv(5, 5, seed=3)
    q32, k32, v32 = (t.float() for t in (q, k, v))
    mask = _mask_with_dead_row(2, 2, 5, 5) if case == "mask" else None
    bias = torch.randn(1, 2, 5, 5) if case == "bias" else None
    kw = dict(mask=mask, bias=bias, is_causal=case == "causal")
    want, want_w = _old_math_attention(q32, k32, v32, **kw)
    for kernel in (build_kernel("math"), build_kernel("math", {"normalizer": "softmax"})):
        out, w = kernel(q32, k32, v32, need_weights=True, **kw)
        assert torch.equal(out, want) and torch.equal(w, want_w)


def test_model_scale_uses_heads_times_head_dim():
    q, k, v = _qkv(3, 3, h=4, dh=2)
    for normalizer in ("softmax", "relu"):
        kernel = build_kernel("math", {"normalizer": normalizer, "scale": "model"})
        out, _ = kernel(q, k, v)
        want, _ = math_attention(q, k, v, scale=1 / math.sqrt(8), normalizer=normalizer)
        assert torch.equal(out, want)
        head, _ = build_kernel("math", {"normalizer": normalizer})(q, k, v)
        assert not torch.allclose(out, head)
    # An explicit scale from the caller wins over the option.
    out, _ = build_kernel("math", {"scale": "model"})(q, k, v, scale=0.3)
    assert torch.equal(out, math_attention(q, k, v, scale=0.3)[0])


@pytest.mark.parametrize("normalizer", ["relu", "sigmoid"])
def test_family_config_forward_backward_and_json(normalizer):
    options = {"normalizer": normalizer, "scale": "model", "score": "dot", "score_dim": None}
    model = tfam.create_model("vit_digits", attention="math", attention_options=options)
    config = model.config
    again = BaseConfig.from_json(config.to_json())
    assert again == config and again.attention_options == options
    assert json.loads(config.to_json())["attention_options"] == options
    kernels = [m for m in model.modules() if getattr(m, "name", None) == "math"]
    assert kernels and all(kn.to_options() == options for kn in kernels)
    x = model.example_inputs() if hasattr(model, "example_inputs") else None
    if isinstance(x, dict):
        out = model(**x)
    elif isinstance(x, tuple | list):
        out = model(*x)
    else:
        out = model(x)
    logits = out if torch.is_tensor(out) else out.logits if hasattr(out, "logits") else out[0]
    assert torch.isfinite(logits).all()
    logits.float().sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(torch.isfinite(g).all() for g in grads if g is not None)


def test_defaults_written_out():
    config = BaseConfig(dim=8, heads=2, attention="math")
    assert json.loads(config.to_json())["attention_options"] == {
        "normalizer": "softmax",
        "scale": "head",
        "score": "dot",
        "score_dim": None,
    }


@pytest.mark.parametrize(
    "attention,options,message",
    [
        (
            "math",
            {"normalizer": "tanh"},
            r"attention_options.normalizer='tanh' is invalid: expected one of 'softmax', 'relu', 'sigmoid'",
        ),
        (
            "math",
            {"scale": "none"},
            r"attention_options.scale='none' is invalid: expected one of 'head', 'model'",
        ),
        (
            "sdpa",
            {"normalizer": "relu"},
            r"attention_options.normalizer='relu' is invalid: kernel 'sdpa' computes softmax scaled by 1/sqrt\(Dh\) only; attention='math' takes normalizer: softmax, relu, sigmoid",
        ),
        (
            "auto",
            {"scale": "model"},
            r"attention_options.scale='model' is invalid: kernel 'auto' computes softmax",
        ),
    ],
)
def test_refusals_are_one_line(attention, options, message):
    with pytest.raises(ValueError, match=message) as err:
        BaseConfig(dim=8, heads=2, attention=attention, attention_options=options)
    assert "\n" not in str(err.value)


def test_sdpa_and_auto_accept_softmax():
    for name in ("sdpa", "auto"):
        kernel = build_kernel(name, {"normalizer": "softmax", "scale": "head"})
        assert "normalizer" not in kernel.to_options()
