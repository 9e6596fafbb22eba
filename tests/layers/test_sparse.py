"""The pattern kernels ``longformer`` and ``block_sparse`` (layers/sparse.py).

The kernel contract runs them with their default options, whose windows cover the contract's
short inputs; here small windows and blocks make the patterns sparse: each equals ``math``
under its ``pattern_mask`` AND the caller's mask in float64, forward, weights and gradients
(hypothesis over lengths, windows, globals, blocks, causal, masks with fully masked rows,
bias); the patterns themselves are checked against layouts written out by hand; the blocked
computation never multiplies out an (Lq, Lk) matrix; options fail in one line.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import tfam  # noqa: F401  (registers the kernels)
import tfam.layers.sparse as sparse
from tfam.layers.kernels import KERNELS, build_kernel, math_attention
from tfam.layers.masks import causal_mask

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
F64 = torch.float64


def _inputs(gen: torch.Generator, b: int, h: int, lq: int, lk: int, dh: int) -> list[Tensor]:
    return [
        torch.randn(b, h, n, dh, generator=gen, dtype=F64).requires_grad_() for n in (lq, lk, lk)
    ]


def _mask(kind: str, gen: torch.Generator, b: int, h: int, lq: int, lk: int) -> Tensor | None:
    if kind == "none":
        return None
    if kind == "key":  # key padding; batch row 1 is all padding (every row dead)
        mask = torch.rand(b, 1, 1, lk, generator=gen) > 0.3
        mask[1] = False
        return mask
    mask = torch.rand(b, h, lq, lk, generator=gen) > 0.4  # per query
    mask[0, 0, 0] = False  # a fully masked row
    return mask


def check(kernel, q, k, v, mask=None, bias=None, causal=False) -> None:  # noqa: ANN001
    """Output, weights and gradients (q, k, v, bias) equal ``math``'s under the pattern AND
    the mask AND causal; rows with no key are zero."""
    lq, lk = q.shape[-2], k.shape[-2]
    ref_mask = kernel.pattern_mask(lq, lk)
    if mask is not None:
        ref_mask = ref_mask & mask
    if causal:
        ref_mask = ref_mask & causal_mask(lq, lk)
    out, weights = kernel(q, k, v, mask=mask, bias=bias, is_causal=causal, need_weights=True)
    want, want_w = math_attention(q, k, v, ref_mask, bias, need_weights=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(weights, want_w, rtol=1e-9, atol=1e-11)
    dead = (want_w == 0).all(-1)
    assert (out[dead] == 0).all()
    leaves = [t for t in (q, k, v, bias) if t is not None and t.requires_grad]
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    got = torch.autograd.grad(out, leaves, g, allow_unused=True)
    ref = torch.autograd.grad(want, leaves, g, allow_unused=True)
    for t, a, b in zip(leaves, got, ref, strict=True):
        a = torch.zeros_like(t) if a is None else a
        b = torch.zeros_like(t) if b is None else b
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------- equal to math, by pattern

CASE = dict(
    lq=st.integers(1, 40),
    extra=st.integers(0, 12),  # Lk = Lq + extra (a cache, cross-attention), or Lk < Lq below
    shorter=st.booleans(),
    causal=st.booleans(),
    mask_kind=st.sampled_from(["none", "key", "query"]),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)


def _lengths(lq: int, extra: int, shorter: bool) -> tuple[int, int]:
    return (lq + extra, lq) if shorter and extra else (lq, lq + extra)


def _run(kernel, lq, lk, causal, mask_kind, with_bias, seed) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _inputs(gen, 2, 2, lq, lk, 3)
    mask = _mask(mask_kind, gen, 2, 2, lq, lk)
    bias = None
    if with_bias:
        bias = torch.randn(1, 2, lq, lk, generator=gen, dtype=F64)
        bias[0, 1, lq // 2] = float("-inf")  # a row dead by its bias
        bias.requires_grad_()
    check(kernel, q, k, v, mask, bias, causal)


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    window=st.integers(0, 6),
    globals_=st.lists(st.integers(0, 50), max_size=3),
    min_block=st.integers(1, 8),
    **CASE,
)
def test_longformer_equals_math_under_its_pattern(
    window, globals_, min_block, lq, extra, shorter, causal, mask_kind, with_bias, seed
):
    lq, lk = _lengths(lq, extra, shorter)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse, "MIN_QUERY_BLOCK", min_block)  # many query blocks at short lengths
        kernel = build_kernel("longformer", {"window": window, "global_tokens": globals_})
        _run(kernel, lq, lk, causal, mask_kind, with_bias, seed)


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    block=st.integers(1, 5),
    window_blocks=st.integers(0, 2),
    global_blocks=st.integers(0, 2),
    random_blocks=st.integers(0, 3),
    pattern_seed=st.integers(0, 9),
    **CASE,
)
def test_block_sparse_equals_math_under_its_pattern(
    block,
    window_blocks,
    global_blocks,
    random_blocks,
    pattern_seed,
    lq,
    extra,
    shorter,
    causal,
    mask_kind,
    with_bias,
    seed,
):
    lq, lk = _lengths(lq, extra, shorter)
    options = {"block": block, "window_blocks": window_blocks, "global_blocks": global_blocks,
               "random_blocks": random_blocks, "seed": pattern_seed}  # fmt: skip
    _run(build_kernel("block_sparse", options), lq, lk, causal, mask_kind, with_bias, seed)


@pytest.mark.parametrize(
    "name,options",
    [
        ("longformer", {"window": 2, "global_tokens": [1]}),
        ("block_sparse", {"block": 2, "global_blocks": 1, "random_blocks": 0}),
    ],
)
def test_cached_decoding_equals_the_whole_causal_computation(name, options, rng):
    """A prefill, then single steps through the kernel's cache, equal the whole causal call
    (with sparse patterns: the contract's defaults are dense at its lengths)."""
    kernel = build_kernel(name, options)
    q, k, v = (torch.randn(1, 2, 12, 3, generator=rng, dtype=F64) for _ in range(3))
    cache, outs = kernel.new_cache(max_len=12), []
    for start, stop in ((0, 5), *((i, i + 1) for i in range(5, 12))):
        out, _ = kernel(q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop],
                        is_causal=True, cache=cache)  # fmt: skip
        outs.append(out)
    whole, _ = kernel(q, k, v, is_causal=True)
    torch.testing.assert_close(torch.cat(outs, dim=2), whole, rtol=1e-12, atol=1e-12)
    want, _ = math_attention(q, k, v, kernel.pattern_mask(12, 12) & causal_mask(12))
    torch.testing.assert_close(whole, want, rtol=1e-12, atol=1e-12)


def test_gradcheck_with_many_blocks(rng):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse, "MIN_QUERY_BLOCK", 2)
        longformer = build_kernel("longformer", {"window": 1, "global_tokens": [4]})
        q, k, v = _inputs(rng, 1, 1, 7, 7, 2)
        bias = torch.randn(1, 1, 7, 7, generator=rng, dtype=F64, requires_grad=True)
        fn = lambda q, k, v, b: longformer(q, k, v, bias=b, is_causal=True)[0]  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, v, bias))
    bigbird = build_kernel("block_sparse", {"block": 2, "global_blocks": 1, "random_blocks": 1})
    fn = lambda q, k, v, b: bigbird(q, k, v, bias=b)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, bias))


# ------------------------------------------------------------------- the patterns, by hand


def _drawn(*rows: str) -> Tensor:
    return torch.tensor([[c == "x" for c in row] for row in rows])


def test_longformer_pattern_by_hand():
    kernel = build_kernel("longformer", {"window": 1, "global_tokens": [5, 0, 99]})
    assert kernel.to_options()["global_tokens"] == [0, 5, 99]  # sorted, once each
    want = _drawn(
        "xxxxxxxx",  # 0 is global: sees every key
        "xxx..x..",  # |i - j| <= 1, and the global keys 0 and 5
        "xxxx.x..",
        "x.xxxx..",
        "x..xxx..",
        "xxxxxxxx",  # 5 is global
        "x....xxx",
        "x....xxx",
    )  # 99 lies beyond the length: ignored
    assert torch.equal(kernel.pattern_mask(8, 8), want)
    assert torch.equal(kernel.pattern_mask(3, 8), want[5:])  # bottom-right: the last 3 rows


def test_block_sparse_pattern_by_hand():
    """BigBird's layout over 8 blocks: window of one block each side, one global block."""
    options = {"block": 1, "window_blocks": 1, "global_blocks": 1, "random_blocks": 0}
    want = _drawn(
        "xxxxxxxx",  # global block 0 sees everything
        "xxx.....",  # window 0..2 (0 is also global)
        "xxxx....",
        "x.xxx...",
        "x..xxx..",
        "x...xxx.",
        "x....xxx",
        "x.....xx",
    )
    assert torch.equal(build_kernel("block_sparse", options).pattern_mask(8, 8), want)
    blocks_of_2 = build_kernel("block_sparse", {**options, "block": 2})
    expanded = want.repeat_interleave(2, 0).repeat_interleave(2, 1)
    assert torch.equal(blocks_of_2.pattern_mask(16, 16), expanded)
    assert torch.equal(blocks_of_2.pattern_mask(5, 16), expanded[11:])  # bottom-right
    # A length that is not a multiple of the block: the last block is short.
    assert torch.equal(blocks_of_2.pattern_mask(15, 15), expanded[:15, :15])


def test_block_sparse_random_blocks():
    """r random key blocks per non-global query block, outside its window and the global
    blocks, the same for the same seed (config data), and another seed draws others."""
    base = {"block": 1, "window_blocks": 1, "global_blocks": 1}
    fixed = build_kernel("block_sparse", {**base, "random_blocks": 0}).pattern_mask(8, 8)
    drawn = build_kernel("block_sparse", {**base, "random_blocks": 2}).pattern_mask(8, 8)
    assert (drawn & ~fixed).sum(1).tolist() == [0] + [2] * 7
    again = build_kernel("block_sparse", {**base, "random_blocks": 2})
    assert torch.equal(again.pattern_mask(8, 8), drawn)
    others = [
        build_kernel("block_sparse", {**base, "random_blocks": 2, "seed": s}).pattern_mask(8, 8)
        for s in range(1, 6)
    ]
    assert any(not torch.equal(o, drawn) for o in others)
    # More random blocks than candidates: all of them, no error.
    many = build_kernel("block_sparse", {**base, "random_blocks": 9}).pattern_mask(8, 8)
    assert many.all()


# -------------------------------------------------------------------------- cost and memory


@pytest.mark.parametrize(
    "name,options",
    [
        ("longformer", {"window": 16, "global_tokens": [0, 500]}),
        ("block_sparse", {"block": 16}),
    ],
)
def test_no_lq_by_lk_matmul_at_long_lengths(name, options, monkeypatch, rng):
    """Every matmul (forward) yields at most a query block's gathered scores or the global
    rows' (G, Lk), never (Lq, Lk); the backward is autograd's over the same products."""
    lq = lk = 1024
    kernel = build_kernel(name, options)
    largest: list[int] = []
    real = torch.matmul

    def spy(a: Tensor, b: Tensor) -> Tensor:
        out = real(a, b)
        largest.append(out.shape[-2] * out.shape[-1])
        return out

    q, k, v = (torch.randn(1, 1, n, 8, generator=rng, requires_grad=True) for n in (lq, lk, lk))
    mask = torch.ones(1, 1, 1, lk, dtype=torch.bool)
    monkeypatch.setattr(sparse.torch, "matmul", spy)
    out, _ = kernel(q, k, v, mask=mask, is_causal=True)
    out.sum().backward()
    monkeypatch.undo()
    plan = kernel.plan(lq, lk, True)
    block = plan.q_idx.shape[1] * (plan.k_idx.shape[1] + plan.cols.numel())
    assert largest and max(largest) <= max(block, plan.rows.numel() * lk) <= lq * lk // 16
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("name", ["longformer", "block_sparse"])
def test_cost_grows_linearly(name):
    kernel = build_kernel(name)
    costs = [kernel.cost(n, n, 64) for n in (4096, 8192, 16384)]
    for a, b in zip(costs, costs[1:]):
        assert 1.8 < b.score_elements / a.score_elements < 2.2
        assert 1.8 < b.flops / a.flops < 2.2
    dense = build_kernel("math").cost(16384, 16384, 64)
    assert costs[-1].score_elements * 10 < dense.score_elements
    # What the plan holds is what the cost says.
    plan = kernel.plan(300, 300, False)
    n_q, c = plan.q_idx.shape
    held = n_q * c * (plan.k_idx.shape[1] + plan.cols.numel()) + plan.rows.numel() * 300
    assert kernel.cost(300, 300, 8).score_elements == held


# ------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("longformer", {"window": -1}, r"attention_options.window=-1 is invalid: expected an int >= 0"),
        ("longformer", {"window": True}, r"attention_options.window=True is invalid"),
        ("longformer", {"global_tokens": 0}, r"attention_options.global_tokens=0 is invalid"),
        ("longformer", {"global_tokens": [-1]}, r"global_tokens=\[-1\] is invalid: expected a list"),
        ("longformer", {"block": 4}, r"attention_options.block=4 is invalid: kernel 'longformer'"),
        ("block_sparse", {"block": 0}, r"attention_options.block=0 is invalid: expected an int >= 1"),
        ("block_sparse", {"random_blocks": 1.5}, r"attention_options.random_blocks=1.5 is invalid"),
        ("block_sparse", {"seed": -1}, r"attention_options.seed=-1 is invalid"),
        ("block_sparse", {"window": 3}, r"attention_options.window=3 is invalid: kernel 'block_"),
    ],
)  # fmt: skip
def test_option_errors_are_one_line(name, options, message):
    with pytest.raises(ValueError, match=message) as caught:
        build_kernel(name, options)
    assert "\n" not in str(caught.value)


def test_registered_with_json_options():
    for name in ("longformer", "block_sparse"):
        cls = KERNELS[name]
        assert cls.exactness == "pattern" and not cls.refuses
    config = tfam.config.BaseConfig(
        dim=8, heads=2, attention="longformer", attention_options={"global_tokens": [3, 0, 3]}
    )
    assert config.attention_options == {"window": 256, "global_tokens": [0, 3]}
    assert tfam.config.BaseConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "name,options", [("longformer", {"window": 4}), ("block_sparse", {"block": 4})]
)
def test_explain_traces_them_on_the_meta_device(name, options):
    """explain runs the kernel on meta tensors: the plan is built on the CPU, nothing reads a
    tensor's value during the forward."""
    table = tfam.explain(
        "gpt", attention=name, attention_options=options, dim=16, heads=2, depth=1,
        vocab_size=20, max_positions=64,
    )  # fmt: skip
    assert "MHSA" in str(table)
