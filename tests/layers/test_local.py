"""The ``local`` kernel beyond the contract (which runs it at its default window, dense on tiny
inputs): at small windows, dilations, 2-D neighbourhoods and global prefixes it equals ``math``
under its pattern, forward and gradients in float64; its pattern is ``window_mask`` and the
written definitions; it never forms an (Lq, Lk) tensor and costs O(L * window)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import Tensor

import tfam
from tfam.layers.kernels import KERNELS, build_kernel, math_attention
from tfam.layers.local import LocalKernel
from tfam.layers.masks import causal_mask, window_mask

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

F64 = torch.float64


def _qkv(gen: torch.Generator, lq: int, lk: int, b: int = 2, h: int = 2, dh: int = 3):
    return tuple(
        torch.randn(b, h, n, dh, generator=gen, dtype=F64, requires_grad=True) for n in (lq, lk, lk)
    )


def _check(kernel, q, k, v, mask, bias, causal, want_mask) -> None:  # noqa: ANN001
    """Output, weights and gradients of q, k, v, bias equal ``math`` under ``want_mask``
    (the pattern, the caller's mask and causal, built independently); dead rows are zero."""
    out, weights = kernel(q, k, v, mask=mask, bias=bias, is_causal=causal, need_weights=True)
    want, want_w = math_attention(q, k, v, want_mask, bias, need_weights=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(weights, want_w, rtol=1e-9, atol=1e-11)
    dead = (want_w == 0).all(-1)
    assert (out[dead] == 0).all()
    leaves = [t for t in (q, k, v, bias) if t is not None]
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    got = torch.autograd.grad(out, leaves, cot, allow_unused=True)
    ref = torch.autograd.grad(want, leaves, cot, allow_unused=True)
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        g = torch.zeros_like(leaves[i]) if g is None else g
        r = torch.zeros_like(leaves[i]) if r is None else r
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-11, msg=f"grad {i}")
    if dead.any():
        assert (got[0][dead] == 0).all(), "a dead row's dq is not zero"


def _caller_mask(kind: str, gen: torch.Generator, lq: int, lk: int) -> Tensor | None:
    if kind == "none":
        return None
    if kind == "key":
        mask = torch.rand(2, 1, 1, lk, generator=gen) > 0.3
        mask[1] = False  # an all-padding row: every query dead
        return mask
    mask = torch.rand(2, 2, lq, lk, generator=gen) > 0.4
    mask[0, 1, 0] = False  # a dead row
    return mask


def _bias(use: bool, gen: torch.Generator, lq: int, lk: int) -> Tensor | None:
    if not use:
        return None
    bias = torch.randn(1, 2, lq, lk, generator=gen, dtype=F64)
    bias[0, 0, -1] = float("-inf")  # a row with no finite score
    return bias.requires_grad_()


def _want(pattern: Tensor, mask: Tensor | None, causal: bool, lq: int, lk: int) -> Tensor:
    want = pattern if mask is None else pattern & mask
    return want & causal_mask(lq, lk) if causal else want


def pattern_1d(lq: int, lk: int, window: int, dilation: int, prefix: int) -> Tensor:
    """The documented 1-D pattern, written out pair by pair."""
    out = torch.zeros(lq, lk, dtype=torch.bool)
    for i in range(lq):
        p = i + lk - lq
        for j in range(lk):
            d = p - j
            near = abs(d) <= window * dilation and d % dilation == 0
            out[i, j] = near or 0 <= p < prefix or j < prefix
    return out


def pattern_2d(lq: int, lk: int, window: int, dilation: int, prefix: int, gw: int) -> Tensor:
    """The documented grid neighbourhood, written out: patch (r, c) sees (r', c') within
    ``window`` steps of ``dilation`` along each axis; prefix tokens see and are seen by all."""
    out = torch.zeros(lq, lk, dtype=torch.bool)
    reach = window * dilation
    for i in range(lq):
        p = i + lk - lq
        for j in range(lk):
            if p < prefix or j < prefix:
                out[i, j] = True
                continue
            (r, c), (r2, c2) = divmod(p - prefix, gw), divmod(j - prefix, gw)
            dr, dc = r - r2, c - c2
            out[i, j] = (
                abs(dr) <= reach and abs(dc) <= reach and dr % dilation == 0 == dc % dilation
            )
    return out


# --------------------------------------------------------------------------- declaration


def test_registered_with_json_options() -> None:
    kernel = build_kernel("local", {"window": 2, "dilation": 3, "grid": (2, 5), "prefix": 1})
    assert KERNELS["local"] is LocalKernel and kernel.exactness == "pattern"
    assert kernel.refuses == {}
    opts = kernel.to_options()
    assert opts == {"window": 2, "dilation": 3, "grid": [2, 5], "prefix": 1}
    assert json.loads(json.dumps(opts)) == opts
    assert build_kernel("local", opts).to_options() == opts
    assert build_kernel("local").to_options() == {
        "window": 128,
        "dilation": 1,
        "grid": None,
        "prefix": 0,
    }


@pytest.mark.parametrize(
    "options,field",
    [
        ({"window": -1}, "window"),
        ({"window": 1.5}, "window"),
        ({"window": True}, "window"),
        ({"dilation": 0}, "dilation"),
        ({"dilation": "2"}, "dilation"),
        ({"prefix": -1}, "prefix"),
        ({"grid": [3]}, "grid"),
        ({"grid": [0, 3]}, "grid"),
        ({"grid": "3x3"}, "grid"),
        ({"grid": [2, 2.0]}, "grid"),
        ({"radius": 3}, "radius"),
    ],
)
def test_bad_options_are_one_line(options: dict, field: str) -> None:
    with pytest.raises(ValueError) as caught:
        build_kernel("local", options)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"attention_options.{field}=")
    with pytest.raises(ValueError, match=f"attention_options.{field}"):
        tfam.create_model("vit_digits", attention="local", attention_options=options)


def test_grid_lengths_are_one_line() -> None:
    kernel = build_kernel("local", {"grid": [2, 3], "prefix": 1})
    q = torch.zeros(1, 1, 8, 2)
    for lq, lk in ((8, 8), (5, 4)):  # more keys than the layout places; more queries than keys
        with pytest.raises(ValueError) as caught:
            kernel(q[:, :, :lq], q[:, :, :lk], q[:, :, :lk])
        assert "\n" not in str(caught.value) and "grid=[2, 3], prefix=1" in str(caught.value)


# ------------------------------------------------------------------------------- pattern


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    lq=st.integers(1, 11),
    lk=st.integers(1, 11),
    window=st.integers(0, 4),
    dilation=st.integers(1, 3),
    prefix=st.integers(0, 2),
)
def test_pattern_is_the_documented_one(lq, lk, window, dilation, prefix) -> None:
    options = {"window": window, "dilation": dilation, "prefix": prefix}
    pattern = build_kernel("local", options).pattern_mask(lq, lk)
    assert torch.equal(pattern, pattern_1d(lq, lk, window, dilation, prefix))
    if dilation == 1 and prefix == 0:
        assert torch.equal(pattern, window_mask(lq, lk, window))


# ------------------------------------------------------------------------ equals math, 1-D


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    lq=st.integers(1, 12),
    lk=st.integers(1, 12),
    window=st.integers(0, 4),
    dilation=st.integers(1, 3),
    prefix=st.integers(0, 2),
    causal=st.booleans(),
    mask=st.sampled_from(["none", "key", "query"]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equals_math_under_the_pattern_1d(
    lq, lk, window, dilation, prefix, causal, mask, bias, seed
) -> None:
    gen = torch.Generator().manual_seed(seed)
    kernel = build_kernel("local", {"window": window, "dilation": dilation, "prefix": prefix})
    q, k, v = _qkv(gen, lq, lk)
    m, b = _caller_mask(mask, gen, lq, lk), _bias(bias, gen, lq, lk)
    want = _want(pattern_1d(lq, lk, window, dilation, prefix), m, causal, lq, lk)
    _check(kernel, q, k, v, m, b, causal, want)


# ------------------------------------------------------------------------ equals math, 2-D


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    gh=st.integers(1, 5),
    gw=st.integers(1, 5),
    window=st.integers(0, 2),
    dilation=st.integers(1, 2),
    prefix=st.integers(0, 2),
    causal=st.booleans(),
    short=st.integers(0, 3),
    queries=st.integers(1, 40),
    mask=st.sampled_from(["none", "key", "query"]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equals_math_under_the_neighbourhood_2d(
    gh, gw, window, dilation, prefix, causal, short, queries, mask, bias, seed
) -> None:
    """Every patch sees the (2 window + 1)^2 patches around it; also with fewer keys than the
    grid holds (decoding a raster) and fewer queries than keys."""
    gen = torch.Generator().manual_seed(seed)
    lk = max(1, prefix + gh * gw - short)
    lq = min(queries, lk)
    options = {"window": window, "dilation": dilation, "prefix": prefix, "grid": [gh, gw]}
    kernel = build_kernel("local", options)
    pattern = pattern_2d(lq, lk, window, dilation, prefix, gw)
    assert torch.equal(kernel.pattern_mask(lq, lk), pattern)
    q, k, v = _qkv(gen, lq, lk)
    m, b = _caller_mask(mask, gen, lq, lk), _bias(bias, gen, lq, lk)
    _check(kernel, q, k, v, m, b, causal, _want(pattern, m, causal, lq, lk))


# --------------------------------------------------------- the contract at a small window


@pytest.mark.parametrize(
    "options",
    [{"window": 1}, {"window": 2, "dilation": 2, "prefix": 1}, {"window": 1, "grid": [2, 3]}],
)
def test_cache_path_and_gradcheck_at_small_windows(options: dict) -> None:
    """Prefill then single steps through the kernel's cache equal the whole causal call;
    gradcheck of q, k, v and a bias."""
    kernel = build_kernel("local", options)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (t.detach() for t in _qkv(gen, 6, 6))
    cache, outs = kernel.new_cache(6), []
    for start, stop in ((0, 3), (3, 4), (4, 5), (5, 6)):
        s = slice(start, stop)
        outs.append(kernel(q[:, :, s], k[:, :, s], v[:, :, s], is_causal=True, cache=cache)[0])
    whole, _ = kernel(q, k, v, is_causal=True)
    torch.testing.assert_close(torch.cat(outs, dim=2), whole, rtol=1e-12, atol=1e-12)
    q, k, v = _qkv(gen, 5, 6, b=1, h=1)
    bias = torch.randn(1, 1, 5, 6, generator=gen, dtype=F64, requires_grad=True)
    mask = torch.tensor([True, False, True, True, True, True]).view(1, 1, 1, 6)

    def f(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        return kernel(q, k, v, mask=mask, bias=bias, is_causal=True)[0]

    assert torch.autograd.gradcheck(f, (q, k, v, bias), eps=1e-6, atol=1e-7)


def test_dropout_keeps_dead_rows_zero() -> None:
    kernel = build_kernel("local", {"window": 1})
    gen = torch.Generator().manual_seed(0)
    q, k, v = _qkv(gen, 6, 6)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1] = False
    torch.manual_seed(3)
    once, _ = kernel(q, k, v, mask=mask, dropout_p=0.5)
    torch.manual_seed(3)
    again, _ = kernel(q, k, v, mask=mask, dropout_p=0.5)
    assert torch.equal(once, again) and (once[1] == 0).all()
    assert not torch.equal(once, kernel(q, k, v, mask=mask)[0])


# ------------------------------------------------------------------------ O(L * window)


@pytest.mark.parametrize(
    "options,lq,lk,causal",
    [
        ({"window": 8}, 2048, 2048, False),
        ({"window": 8, "dilation": 3, "prefix": 2}, 2048, 2048, True),
        ({"window": 8}, 1000, 2048, True),
        ({"window": 2, "grid": [40, 50], "prefix": 1}, 2001, 2001, False),
    ],
)
def test_no_lq_by_lk_tensor_and_cost_is_the_band(largest_tensor, options, lq, lk, causal) -> None:
    """Forward and backward (with a key-padding mask) never make a tensor near Lq * Lk
    elements; the largest is the blocks' scores, which ``cost`` counts, and they grow as
    L * window: doubling the length doubles them."""
    kernel = build_kernel("local", options)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 4, generator=gen, requires_grad=True) for n in (lq, lk, lk))
    mask = torch.ones(1, 1, 1, lk, dtype=torch.bool)
    mask[..., :3] = False
    with largest_tensor() as spy:
        out, _ = kernel(q, k, v, mask=mask, is_causal=causal)
        out.sum().backward()
    cost = kernel.cost(lq, lk, 4, causal)
    # The band blocks' scores (plus, with a prefix, the prefix rows' own block).
    assert 0.8 * cost.score_elements <= spy.largest <= cost.score_elements, (spy.largest, cost)
    assert cost.score_elements < lq * lk / 8
    assert cost.flops == 4.0 * 4 * cost.score_elements
    if "grid" not in options:
        twice = kernel.cost(2 * lq, 2 * lk, 4, causal).score_elements
        assert 1.9 < twice / cost.score_elements < 2.1


def test_short_inputs_cost_no_more_than_dense() -> None:
    """A window wider than the input gathers only the keys there are."""
    kernel = build_kernel("local")  # window 128
    assert kernel.cost(10, 10, 8).score_elements == 100
    assert kernel.cost(1, 300, 8, True).score_elements <= 300


# -------------------------------------------------------------------------- in a family


def test_vit_with_a_patch_neighbourhood() -> None:
    """ViT with each patch attending to its 3 x 3 neighbours and [CLS] global: the [CLS]-only
    last block (forward) equals features then head, and training steps run."""
    torch.manual_seed(0)
    model = tfam.create_model(
        "vit_digits", depth=2, dim=16, heads=2, ffn_dim=None, image_size=16, patch_size=4
    ).double()
    gh, gw = model.config.grid_size
    model.set_attention("local", {"window": 1, "grid": [gh, gw], "prefix": 1})
    model.eval()
    (x,) = (t.double() for t in model.example_inputs(2))
    out = model(x)
    torch.testing.assert_close(out, model.forward_head(model.forward_features(x)))
    out.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.set_attention("math")
    assert not torch.allclose(model(x), out)  # the neighbourhood changed what was computed


def test_a_plan_made_in_inference_mode_trains() -> None:
    """Evaluation under inference_mode builds (and caches) the plan for a length; a training
    step at the same length must still save what backward needs."""
    kernel = build_kernel("local", {"window": 2})
    q, k, v = (torch.randn(1, 2, 37, 4) for _ in range(3))
    with torch.inference_mode():
        kernel(q, k, v)
    q.requires_grad_(True)
    out, _ = kernel(q, k, v)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("name", ["performer", "local"])
def test_kernel_state_made_in_inference_mode_trains(name: str) -> None:
    """What a kernel keeps from its first call (local's plan, performer's random features)
    is never an inference tensor: a model evaluated first still trains."""
    kernel = build_kernel(name, {})
    q, k, v = (torch.randn(1, 2, 21, 4) for _ in range(3))
    with torch.inference_mode():
        kernel(q, k, v)
    q.requires_grad_(True)
    kernel(q, k, v)[0].sum().backward()
    assert torch.isfinite(q.grad).all()
