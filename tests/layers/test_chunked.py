"""The ``chunked`` kernel: exact against ``math_attention`` in float64, forward and gradients,
over tiles that do not divide the lengths; and no (Lq, Lk) intermediate is ever made."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import tfam  # noqa: F401  (registers the kernels)
from tfam.layers.chunked import chunked_attention
from tfam.layers.kernels import KERNELS, build_kernel, math_attention

F64 = torch.float64


def _inputs(seed: int, b: int, h: int, lq: int, lk: int, dh: int) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(b, h, n, dh, generator=g, dtype=F64, requires_grad=True) for n in (lq, lk, lk)
    )


def _check(q, k, v, mask, bias, causal, bq, bk, tol=1e-10) -> None:  # noqa: ANN001
    out = chunked_attention(q, k, v, mask, bias, causal, None, bq, bk)
    ref, _ = math_attention(q, k, v, mask, bias, is_causal=causal)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, atol=tol, rtol=0)
    wrt = [t for t in (q, k, v, bias) if t is not None and t.requires_grad]
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, wrt, g)
    want = torch.autograd.grad(ref, wrt, g)
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


def test_registered_and_declared() -> None:
    kernel = build_kernel("chunked", {"block_q": 3, "block_k": 5})
    assert KERNELS["chunked"] is type(kernel) and kernel.exactness == "exact"
    assert kernel.to_options() == {"block_q": 3, "block_k": 5}
    with pytest.raises(ValueError, match="attention_options.block_k"):
        build_kernel("chunked", {"block_k": 0})
    q, k, v = _inputs(0, 1, 1, 4, 4, 2)
    with pytest.raises(ValueError, match="chunked"):
        kernel(q, k, v, need_weights=True)
    with pytest.raises(ValueError, match="chunked"):
        kernel(q, k, v, dropout_p=0.1)


@pytest.mark.parametrize("lq,lk", [(1, 1), (5, 5), (7, 13), (13, 7), (16, 16), (1, 9)])
@pytest.mark.parametrize("bq,bk", [(1, 1), (3, 4), (4, 3), (64, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_plain_and_causal(lq: int, lk: int, bq: int, bk: int, causal: bool) -> None:
    q, k, v = _inputs(lq * 31 + lk, 2, 2, lq, lk, 3)
    _check(q, k, v, None, None, causal, bq, bk)


@pytest.mark.parametrize("causal", [False, True])
def test_masks_and_bias(causal: bool) -> None:
    lq, lk = 9, 11
    q, k, v = _inputs(1, 2, 3, lq, lk, 4)
    g = torch.Generator().manual_seed(2)
    pad = torch.ones(2, 1, 1, lk, dtype=torch.bool)
    pad[1, ..., 7:] = False  # key padding
    rand = torch.rand(2, 3, lq, lk, generator=g) > 0.4
    rand[0, 1, 4] = False  # a fully masked row
    rand[1, :, 0] = False
    alibi = torch.randn(1, 3, lq, lk, generator=g, dtype=F64, requires_grad=True)
    row_bias = torch.randn(3, 1, lk, generator=g, dtype=F64, requires_grad=True)  # broadcast rows
    dead_bias = torch.randn(2, 3, lq, lk, generator=g, dtype=F64)
    dead_bias[0, 0, 2] = float("-inf")  # a row with no finite score via the bias
    dead_bias.requires_grad_(True)
    for mask in (None, pad, rand, pad & rand):
        for bias in (None, alibi, row_bias, dead_bias):
            for bq, bk in ((2, 3), (4, 4), (9, 11)):
                _check(q, k, v, mask, bias, causal, bq, bk)


def test_fully_masked_everything_is_zero() -> None:
    q, k, v = _inputs(3, 1, 2, 5, 6, 3)
    mask = torch.zeros(1, 1, 5, 6, dtype=torch.bool)
    out = chunked_attention(q, k, v, mask, None, False, None, 2, 4)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.equal(t.grad, torch.zeros_like(t.grad))


def test_gradcheck() -> None:
    q, k, v = _inputs(4, 1, 2, 4, 5, 2)
    bias = torch.randn(1, 2, 4, 5, dtype=F64, requires_grad=True)
    mask = torch.rand(1, 1, 4, 5, generator=torch.Generator().manual_seed(5)) > 0.3

    def f(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        return chunked_attention(q, k, v, mask, bias, True, 0.7, 3, 2)

    assert torch.autograd.gradcheck(f, (q, k, v, bias))


def test_property_random_shapes() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=25, deadline=None)
    @hypothesis.given(
        lq=st.integers(1, 12),
        lk=st.integers(1, 12),
        bq=st.integers(1, 8),
        bk=st.integers(1, 8),
        causal=st.booleans(),
        masked=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def prop(lq: int, lk: int, bq: int, bk: int, causal: bool, masked: bool, seed: int) -> None:
        q, k, v = _inputs(seed, 1, 2, lq, lk, 3)
        g = torch.Generator().manual_seed(seed)
        mask = (torch.rand(1, 2, lq, lk, generator=g) > 0.3) if masked else None
        _check(q, k, v, mask, None, causal, bq, bk)

    prop()


def test_never_makes_an_lq_by_lk_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Structural memory check: every matmul result (forward and backward) has at most
    block_q * block_k or L * Dh elements per (B, H) slice, never Lq * Lk."""
    import tfam.layers.chunked as chunked

    lq, lk, dh, bq, bk = 96, 80, 4, 8, 16
    largest: list[int] = []
    real = torch.matmul

    def spy(a: Tensor, b: Tensor) -> Tensor:
        out = real(a, b)
        largest.append(out.shape[-2] * out.shape[-1])
        return out

    monkeypatch.setattr(chunked.torch, "matmul", spy)
    q, k, v = _inputs(6, 1, 2, lq, lk, dh)
    out = chunked_attention(q, k, v, None, None, True, None, bq, bk)
    out.sum().backward()
    monkeypatch.undo()
    assert largest and max(largest) <= max(bq * bk, bq * dh, bk * dh) < lq * lk
    # The spy saw the real computation: the result is still math's.
    ref, _ = math_attention(q.detach(), k.detach(), v.detach(), is_causal=True)
    torch.testing.assert_close(out.detach(), ref, atol=1e-10, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("lq", "lk", "bq", "bk"), [(7, 7, 3, 2), (5, 9, 2, 4), (9, 5, 4, 3)])
def test_cost_counts_the_tiles_it_walks(lq, lk, bq, bk, causal, monkeypatch) -> None:
    """cost() counts the pairs of the tiles the forward computes (a spy on the score matmuls)
    and holds one tile of scores, not Lq x Lk."""
    import tfam.layers.chunked as chunked

    kernel = build_kernel("chunked", {"block_q": bq, "block_k": bk})
    pairs: list[int] = []
    real = chunked._tile_scores

    def spy(qs, k_t, *args, **kwargs):  # noqa: ANN001, ANN202
        pairs.append(qs.shape[-2] * k_t.shape[-2])
        return real(qs, k_t, *args, **kwargs)

    monkeypatch.setattr(chunked, "_tile_scores", spy)
    q, k, v = _inputs(0, 1, 1, lq, lk, 4)
    with torch.no_grad():
        kernel(q, k, v, is_causal=causal)
    cost = kernel.cost(lq, lk, 4, is_causal=causal)
    assert cost.flops == 4.0 * sum(pairs) * 4
    assert cost.score_elements == min(bq, lq) * min(bk, lk)
