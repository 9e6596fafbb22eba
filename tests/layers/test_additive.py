"""Issue 22, point 1: ``math``'s ``score='additive'`` (Bahdanau et al. 2015), e_ij = v_a^T
tanh(W_a q_i + U_a k_j) per head, with its own learned W_a, U_a (Dh -> Da) and v_a (Da).

Against a float64 reference written out with loops (forward and gradients, every normalizer,
masks, causal with Lq != Lk, bias); rows with no key are zero with finite gradients; the cache
path equals the whole computation; GPT and ViT train a step and save/load; explain counts the
parameters; switching kernels keeps or refuses to drop them; refusals are one line."""

from __future__ import annotations

import math

import pytest
import torch

import tfam
from tfam.config import BaseConfig
from tfam.layers import MultiHeadAttention, build_kernel, causal_mask
from tfam.layers.kernels import AttentionCost, math_attention
from tfam.training.optim import build_optimizer

H, DH, DA = 2, 3, 4
ADDITIVE = {"score": "additive"}


def _kernel(normalizer="softmax", score_dim=DA, seed=0):
    """A float64 additive kernel with parameters drawn from ``seed`` (large enough that the
    scores are far from uniform)."""
    opts = {"score": "additive", "normalizer": normalizer, "score_dim": score_dim}
    kernel = build_kernel("math", opts, heads=H, head_dim=DH).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in kernel.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return kernel


def _qkv(lq, lk, seed=0, b=2, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, H, n, DH, generator=g, dtype=torch.float64).requires_grad_(grad)
        for n in (lq, lk, lk)
    ]


def _reference(q, k, v, w_a, u_a, v_a, mask, bias, normalizer):
    """Row by row with Python loops, float64: e_ij = v_a^T tanh(W_a q_i + U_a k_j) (+ bias)
    over the allowed keys j of row i (mask True and a finite bias), then softmax, relu(e)/n or
    sigmoid(e - log n) with n the allowed keys; a row with no key is zero. Built from torch
    ops so autograd gives the reference gradients."""
    b_, h_, lq, _ = q.shape
    lk = k.shape[-2]
    rows = []
    for b in range(b_):
        heads = []
        for h in range(h_):
            outs = []
            for i in range(lq):
                keys, scores = [], []
                for j in range(lk):
                    extra = 0.0 if bias is None else bias[b, h, i, j]
                    if (mask is not None and not mask[b, h, i, j]) or extra == float("-inf"):
                        continue
                    hidden = torch.tanh(q[b, h, i] @ w_a[h] + k[b, h, j] @ u_a[h])
                    keys.append(j)
                    scores.append(v_a[h] @ hidden + extra)
                if not keys:
                    outs.append(torch.zeros(v.shape[-1], dtype=torch.float64))
                    continue
                s, n = torch.stack(scores), len(keys)
                if normalizer == "softmax":
                    w = torch.softmax(s, dim=0)
                elif normalizer == "relu":
                    w = torch.relu(s) / n
                else:
                    w = torch.sigmoid(s - math.log(n))
                outs.append(sum(w[t] * v[b, h, j] for t, j in enumerate(keys)))
            heads.append(torch.stack(outs))
        rows.append(torch.stack(heads))
    return torch.stack(rows)


def _dead_row_mask(lq, lk, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, 1, lq, lk, generator=g) > 0.4
    mask[0, 0, 1] = False  # a row with no key
    return mask


@pytest.mark.parametrize("normalizer", ["softmax", "relu", "sigmoid"])
@pytest.mark.parametrize("case", ["plain", "mask", "causal", "causal_cross", "mask_bias"])
def test_equals_the_reference_forward_and_gradients(normalizer, case):
    lq, lk = (3, 5) if case == "causal_cross" else (4, 4)
    q, k, v = _qkv(lq, lk, grad=True)
    kernel = _kernel(normalizer)
    mask = _dead_row_mask(lq, lk) if "mask" in case else None
    bias = None
    if "bias" in case:
        bias = torch.randn(1, H, lq, lk, dtype=torch.float64)
        bias[..., 2, :] = float("-inf")  # a bias row of -inf leaves no key either
    is_causal = "causal" in case
    ref_mask = None if mask is None else mask.expand(2, H, lq, lk)
    if is_causal:  # bottom-right aligned, as with dot-product scores
        c = causal_mask(lq, lk).expand(2, H, lq, lk)
        ref_mask = c if ref_mask is None else ref_mask & c
    ref_bias = None if bias is None else bias.expand(2, H, lq, lk)
    out, weights = kernel(q, k, v, mask=mask, bias=bias, is_causal=is_causal, need_weights=True)
    params = [kernel.w_a, kernel.u_a, kernel.v_a]
    want = _reference(q, k, v, *params, ref_mask, ref_bias, normalizer)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    if ref_mask is not None:
        assert not weights.masked_select(~ref_mask).any(), "no weight on a masked key"
    seed = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
    got = torch.autograd.grad(out, [q, k, v, *params], seed)
    ref = torch.autograd.grad(want, [q, k, v, *params], seed)
    for name, g, r in zip(("q", "k", "v", "w_a", "u_a", "v_a"), got, ref, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-11, msg=f"gradient of {name}")


def test_gradcheck():
    q, k, v = _qkv(3, 4, b=1, grad=True)
    kernel = _kernel("softmax")
    mask = torch.tensor([True, False, True, True]).view(1, 1, 1, 4)

    def fn(q, k, v, w_a, u_a, v_a):
        params = {"w_a": w_a, "u_a": u_a, "v_a": v_a}
        kwargs = {"mask": mask, "is_causal": True}
        return torch.func.functional_call(kernel, params, (q, k, v), kwargs)[0]

    params = [p.detach().clone().requires_grad_() for p in (kernel.w_a, kernel.u_a, kernel.v_a)]
    assert torch.autograd.gradcheck(fn, (q, k, v, *params), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("normalizer", ["softmax", "relu", "sigmoid"])
def test_rows_with_no_key_are_zero_never_nan(normalizer):
    q, k, v = _qkv(4, 6, grad=True)
    kernel = _kernel(normalizer)
    mask = _dead_row_mask(4, 6)
    mask[1, 0, 3] = False
    out, _ = kernel(q, k, v, mask=mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, :, 1], torch.zeros_like(out[0, :, 1]))
    assert torch.equal(out[1, :, 3], torch.zeros_like(out[1, :, 3]))
    out.square().sum().backward()
    for t in (q, k, v, *kernel.parameters()):
        assert torch.isfinite(t.grad).all()
    assert kernel.w_a.grad.abs().sum() > 0
    # A row with no key gives its query no gradient.
    assert torch.equal(q.grad[0, :, 1], torch.zeros_like(q.grad[0, :, 1]))


@pytest.mark.parametrize("causal", [True, False])
def test_cache_path_equals_the_whole_computation(causal):
    """A prefill of 4 positions, then 3 single steps appending to the kernel's cache."""
    kernel = _kernel()
    q, k, v = _qkv(7, 7, seed=5)
    cache, outs = kernel.new_cache(max_len=7), []
    for start, stop in ((0, 4), (4, 5), (5, 6), (6, 7)):
        out, _ = kernel(
            q[:, :, start:stop],
            k[:, :, start:stop],
            v[:, :, start:stop],
            is_causal=causal,
            cache=cache,
        )
        whole, _ = kernel(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], is_causal=causal)
        torch.testing.assert_close(out, whole, rtol=1e-12, atol=1e-12)
        outs.append(out)
    if causal:
        whole, _ = kernel(q, k, v, is_causal=True)
        torch.testing.assert_close(torch.cat(outs, dim=2), whole, rtol=1e-12, atol=1e-12)


def test_score_dim_defaults_to_head_width_and_differs_from_dot():
    kernel = build_kernel("math", ADDITIVE, heads=H, head_dim=DH)
    assert kernel.to_options()["score_dim"] is None
    shapes = {n: tuple(p.shape) for n, p in kernel.named_parameters()}
    assert shapes == {"w_a": (H, DH, DH), "u_a": (H, DH, DH), "v_a": (H, DH)}
    wide = build_kernel("math", {**ADDITIVE, "score_dim": 5}, heads=H, head_dim=DH)
    assert tuple(wide.v_a.shape) == (H, 5)
    q, k, v = _qkv(3, 3)
    additive, _ = _kernel()(q, k, v)
    assert not torch.allclose(additive, math_attention(q, k, v)[0])
    assert not list(build_kernel("math", heads=H, head_dim=DH).parameters())


def test_cost_counts_the_additive_scores():
    dot = build_kernel("math", heads=H, head_dim=DH).cost(3, 5, DH)
    add = build_kernel("math", {**ADDITIVE, "score_dim": DA}, heads=H, head_dim=DH).cost(3, 5, DH)
    # W_a q_i, U_a k_j: 2 Dh Da each of 3 + 5; per pair sum, tanh (5), v_a^T: 8 Da; and the
    # weighted sum of values, 2 Dh per pair.
    want = 2 * (3 + 5) * DH * DA + 8 * 15 * DA + 2 * 15 * DH
    assert add == AttentionCost(flops=float(want), score_elements=15 * DA)
    assert dot == AttentionCost(flops=4.0 * 15 * DH, score_elements=15)


def _gpt(**overrides):
    return tfam.create_model(
        "gpt",
        vocab_size=11,
        max_positions=8,
        dim=8,
        depth=2,
        heads=2,
        attention="math",
        attention_options={"score": "additive", **overrides},
    )


def _vit():
    return tfam.create_model(
        "vit",
        image_size=8,
        patch_size=4,
        in_channels=1,
        num_classes=3,
        dim=8,
        depth=2,
        heads=2,
        attention="math",
        attention_options={"score": "additive", "normalizer": "sigmoid"},
    )


@pytest.mark.parametrize("make", [_gpt, _vit], ids=["gpt", "vit"])
def test_family_trains_a_step_and_saves(make, tmp_path):
    torch.manual_seed(0)
    model = make()
    names = [n for n, _ in model.named_parameters() if ".kernel." in n]
    assert len(names) == 3 * 2, "W_a, U_a, v_a in each of the 2 blocks"
    # Initialised by the model's init path: truncated normal of std init_std, cut at 2 std.
    std = model.config.init_std
    for n, p in model.named_parameters():
        if ".kernel." in n:
            assert p.abs().max() <= 2 * std and p.std() > std / 3
    inputs = model.example_inputs(2)

    def loss_of(m):
        out = m(*inputs)
        return out.float().logsumexp(-1).mean() - out.float()[..., 0].mean()

    optimizer = build_optimizer(model, lr=1e-2, weight_decay=0.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if ".kernel." in n}
    loss = loss_of(model)
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), n
        if ".kernel." in n:
            assert p.grad is not None and p.grad.abs().sum() > 0, n
    optimizer.step()
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)
    assert loss_of(model) < loss
    model.eval()
    path = model.save_pretrained(tmp_path / "m")
    again = tfam.from_pretrained(path).eval()
    assert again.config.attention_options == model.config.attention_options
    with torch.no_grad():
        assert torch.equal(again(*inputs), model(*inputs))


@pytest.mark.parametrize(
    "make",
    [
        _gpt,
        _vit,
        lambda: tfam.create_model(
            "transformer",
            vocab_size=13,
            max_positions=8,
            dim=8,
            depth=1,
            heads=2,
            attention="math",
            attention_options={"score": "additive", "score_dim": 3},
        ),
    ],
    ids=["gpt", "vit", "encoder-decoder"],
)
def test_explain_counts_the_additive_parameters(make):
    model = make()
    table = tfam.explain(model)
    assert table.total_params == model.num_parameters()
    rows = [r for r in table.rows if r.step.startswith("scores v_a^T tanh")]
    kernels = [m for m in model.modules() if getattr(m, "name", None) == "math"]
    assert rows and all(r.params == sum(p.numel() for p in kernels[0].parameters()) for r in rows)


def test_explain_scores_row_by_hand():
    model = _gpt(score_dim=DA)
    table = tfam.explain(model, seq_len=5)
    row = next(r for r in table.rows if r.step.startswith("scores v_a^T tanh"))
    b, h, lq, lk, dh = 1, 2, 5, 5, 4
    assert row.params == h * (2 * dh * DA + DA)
    assert row.flops == 2 * b * h * (lq + lk) * dh * DA + 8 * b * h * lq * lk * DA
    assert "not scaled" in row.note


@pytest.mark.parametrize("kernel", ["sdpa", "auto", "chunked"])
def test_other_exact_kernels_refuse_in_one_line(kernel):
    message = (
        rf"attention_options.score='additive' is invalid: kernel '{kernel}' computes softmax "
        r"scaled by 1/sqrt\(Dh\) only; attention='math' takes score: dot, additive"
    )
    with pytest.raises(ValueError, match=message) as err:
        BaseConfig(dim=8, heads=2, attention=kernel, attention_options=ADDITIVE)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=rf"score_dim=4 is invalid: kernel '{kernel}'"):
        BaseConfig(dim=8, heads=2, attention=kernel, attention_options={"score_dim": 4})


@pytest.mark.parametrize(
    "options,message",
    [
        (
            {"score": "additive", "scale": "model"},
            r"attention_options.scale='model' is invalid: score='additive' is not scaled",
        ),
        ({"score_dim": 4}, r"attention_options.score_dim=4 is invalid: only the additive score"),
        ({"score": "mlp"}, r"attention_options.score='mlp' is invalid: expected one of 'dot'"),
        ({**ADDITIVE, "score_dim": 0}, r"attention_options.score_dim=0 is invalid: expected an"),
        ({**ADDITIVE, "score_dim": True}, r"attention_options.score_dim=True is invalid"),
    ],
)
def test_bad_math_options_are_one_line(options, message):
    with pytest.raises(ValueError, match=message) as err:
        BaseConfig(dim=8, heads=2, attention="math", attention_options=options)
    assert "\n" not in str(err.value)


def test_building_without_the_shape_is_one_line():
    with pytest.raises(ValueError, match=r"score='additive' needs the attention's heads") as err:
        build_kernel("math", ADDITIVE)
    assert "\n" not in str(err.value)


def test_switching_kernels_keeps_or_refuses_to_drop_the_parameters():
    torch.manual_seed(0)
    model = _gpt().double()
    inputs = model.example_inputs(2)
    learned = {n: p.detach().clone() for n, p in model.named_parameters() if ".kernel." in n}
    with pytest.raises(ValueError, match=r"attention='sdpa' would drop the learned parameters"):
        model.set_attention("sdpa")
    assert model.config.attention == "math", "a refused switch changes nothing"
    assert model.stack.blocks[1].mhsa.kernel.options.score == "additive"
    # Another normalizer keeps W_a, U_a, v_a (same names and shapes).
    model.set_attention("math", {"score": "additive", "normalizer": "relu"})
    for n, p in model.named_parameters():
        if n in learned:
            assert torch.equal(p, learned[n]) and p.dtype == torch.float64
    # A wider score cannot reuse them: refused too.
    with pytest.raises(ValueError, match="would drop"):
        model.set_attention("math", {"score": "additive", "score_dim": 7})
    # discard=True drops them; switching back starts afresh, in the model's dtype.
    model.set_attention("sdpa", discard=True)
    assert not [n for n, _ in model.named_parameters() if ".kernel." in n]
    model(*inputs)
    model.set_attention("math", ADDITIVE)
    fresh = {n: p for n, p in model.named_parameters() if ".kernel." in n}
    assert fresh.keys() == learned.keys()
    assert all(
        p.dtype == torch.float64 and not torch.equal(p, learned[n]) for n, p in fresh.items()
    )


def test_attention_brick_passes_its_shape():
    config = BaseConfig(dim=12, heads=3, attention="math", attention_options=ADDITIVE)
    mha = MultiHeadAttention(config)
    assert tuple(mha.kernel.w_a.shape) == (3, 4, 4)
    assert {n for n, _ in mha.named_parameters()} >= {"kernel.w_a", "kernel.u_a", "kernel.v_a"}
    x = torch.randn(2, 5, 12)
    out, weights = mha(x, is_causal=True, need_weights=True)
    assert out.shape == (2, 5, 12) and weights.shape == (2, 3, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


@pytest.mark.parametrize(
    "options,message",
    [(ADDITIVE, "score='additive'"), ({"normalizer": "relu"}, "normalizer='relu'")],
)
def test_to_hf_refuses_what_hf_does_not_compute(options, message):
    pytest.importorskip("transformers")
    model = tfam.create_model(
        "gpt", vocab_size=11, max_positions=8, dim=8, depth=1, heads=2, attention="math",
        attention_options=options,
    )  # fmt: skip
    with pytest.raises(ValueError, match=rf"attention_options.{message} cannot be converted"):
        tfam.interop.to_hf(model)
