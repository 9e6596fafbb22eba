"""The ``flex`` kernel's paths on the CPU: FlexAttention's eager forward when no gradient is
needed (equal to ``math`` in float64), ``chunked`` when one is. The kernel contract covers the
gradient path; these tests cover the no-grad FlexAttention path it does not reach."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfam.layers.chunked
import tfam.layers.flex
from tfam.layers.kernels import build_kernel, math_attention

F64 = torch.float64
B, H, DH = 2, 3, 4


def qkv(gen: torch.Generator, lq: int, lk: int, grad: bool = False) -> list[torch.Tensor]:
    shapes = ((B, H, lq, DH), (B, H, lk, DH), (B, H, lk, DH))
    return [torch.randn(*s, generator=gen, dtype=F64).requires_grad_(grad) for s in shapes]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the calls of FlexAttention and of the chunked path inside tfam.layers.flex."""
    counts = {"flex": 0, "chunked": 0}
    flex, chunked = tfam.layers.flex.flex_attention, tfam.layers.chunked.chunked_attention

    def counted_flex(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counts["flex"] += 1
        return flex(*args, **kwargs)

    def counted_chunked(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        counts["chunked"] += 1
        return chunked(*args, **kwargs)

    monkeypatch.setattr(tfam.layers.flex, "flex_attention", counted_flex)
    monkeypatch.setattr(tfam.layers.flex, "chunked_attention", counted_chunked)
    return counts


def check_no_grad(calls: dict[str, int], lq: int, lk: int, **call: object) -> torch.Tensor:
    """The flex kernel under no_grad equals math (float64) and ran FlexAttention; its output."""
    q, k, v = qkv(torch.Generator().manual_seed(lq * 31 + lk), lq, lk)
    kernel = build_kernel("flex")
    before = calls["flex"]
    with torch.no_grad():
        got, _ = kernel(q, k, v, **call)
        want, _ = math_attention(
            q,
            k,
            v,
            call.get("mask"),
            call.get("bias"),
            is_causal=bool(call.get("is_causal", False)),
        )
    assert calls["flex"] == before + 1 and calls["chunked"] == 0
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    return got


def test_no_mask(calls: dict[str, int]) -> None:
    check_no_grad(calls, 5, 5)


def test_key_padding_mask_with_a_dead_row(calls: dict[str, int]) -> None:
    mask = torch.ones(B, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False
    mask[1] = False  # batch row 1 sees no key: its rows are zero
    out = check_no_grad(calls, 3, 6, mask=mask)
    assert (out[1] == 0).all()


def test_per_query_mask(calls: dict[str, int]) -> None:
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(B, H, 4, 5, generator=gen) > 0.4
    mask[0, 1, 2] = False
    out = check_no_grad(calls, 4, 5, mask=mask)
    assert (out[0, 1, 2] == 0).all()


@pytest.mark.parametrize(("lq", "lk"), [(5, 5), (3, 7), (1, 4)])
def test_causal_is_bottom_right(calls: dict[str, int], lq: int, lk: int) -> None:
    check_no_grad(calls, lq, lk, is_causal=True)


def test_causal_with_a_mask(calls: dict[str, int]) -> None:
    mask = torch.ones(1, H, 1, 6, dtype=torch.bool)
    mask[:, 1, :, 5] = False
    check_no_grad(calls, 4, 6, mask=mask, is_causal=True)


def test_bias_with_a_row_of_minus_inf(calls: dict[str, int]) -> None:
    bias = torch.randn(B, H, 4, 5, generator=torch.Generator().manual_seed(5), dtype=F64)
    bias[1, 2, 3] = float("-inf")
    bias[0, 0, 0, 1:] = float("-inf")  # one key left
    out = check_no_grad(calls, 4, 5, bias=bias)
    assert (out[1, 2, 3] == 0).all()


def test_broadcast_bias_and_mask_together(calls: dict[str, int]) -> None:
    bias = torch.randn(H, 1, 5, generator=torch.Generator().manual_seed(6), dtype=F64)
    mask = torch.ones(B, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 0] = False
    check_no_grad(calls, 3, 5, mask=mask, bias=bias, is_causal=True)


@settings(max_examples=10, deadline=None)
@given(
    lq=st.integers(1, 6),
    extra=st.integers(0, 4),
    causal=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_shapes(lq: int, extra: int, causal: bool, masked: bool, seed: int) -> None:
    lk = lq + extra
    gen = torch.Generator().manual_seed(seed)
    q, k, v = qkv(gen, lq, lk)
    mask = torch.rand(B, 1, lq, lk, generator=gen) > 0.3 if masked else None
    with torch.no_grad():
        got, _ = build_kernel("flex")(q, k, v, mask=mask, is_causal=causal)
        want, _ = math_attention(q, k, v, mask, is_causal=causal)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_inputs_that_require_grad_under_no_grad_run_flex(calls: dict[str, int]) -> None:
    """FlexAttention refuses CPU inputs requiring grad even under no_grad; the kernel detaches."""
    q, k, v = qkv(torch.Generator().manual_seed(7), 3, 3, grad=True)
    with torch.no_grad():
        got, _ = build_kernel("flex")(q, k, v, is_causal=True)
    want, _ = math_attention(q.detach(), k.detach(), v.detach(), is_causal=True)
    assert calls == {"flex": 1, "chunked": 0}
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gradient_on_cpu_runs_chunked(calls: dict[str, int]) -> None:
    q, k, v = qkv(torch.Generator().manual_seed(8), 3, 5, grad=True)
    bias = torch.randn(1, H, 3, 5, dtype=F64, requires_grad=True)
    mask = torch.ones(B, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    got, _ = build_kernel("flex")(q, k, v, mask=mask, bias=bias, is_causal=True)
    assert calls == {"flex": 0, "chunked": 1}
    want, _ = math_attention(q, k, v, mask, bias, is_causal=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    leaves = (q, k, v, bias)
    cot = torch.randn(got.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    for g, w in zip(torch.autograd.grad(got, leaves, cot), torch.autograd.grad(want, leaves, cot)):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_runs_in_float32_and_rounds_back(
    calls: dict[str, int], dtype: torch.dtype
) -> None:
    q, k, v = qkv(torch.Generator().manual_seed(10), 4, 4)
    with torch.no_grad():
        got, _ = build_kernel("flex")(*(t.to(dtype) for t in (q, k, v)), is_causal=True)
        want, _ = math_attention(*(t.to(dtype).float() for t in (q, k, v)), is_causal=True)
    assert got.dtype == dtype and calls["flex"] == 1
    torch.testing.assert_close(got, want.to(dtype))


def test_compile_option_is_checked() -> None:
    with pytest.raises(ValueError, match="attention_options.compile"):
        build_kernel("flex", {"compile": "sometimes"})


def test_float64_runs_eagerly_even_when_compile_is_asked(calls: dict[str, int]) -> None:
    """Compiled FlexAttention refuses float64 (the reference dtype): it runs eagerly."""
    q, k, v = qkv(torch.Generator().manual_seed(12), 3, 4)
    with torch.no_grad():
        got, _ = build_kernel("flex", {"compile": "always"})(q, k, v, is_causal=True)
        want, _ = math_attention(q, k, v, is_causal=True)
    assert calls == {"flex": 1, "chunked": 0}
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_compiled_forward_on_cpu_equals_math() -> None:
    """compile='always' on the CPU (compiling takes ~13 s): the compiled forward in float32,
    no grad, against float64 math."""
    q, k, v = qkv(torch.Generator().manual_seed(11), 4, 6)
    mask = torch.ones(B, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 0] = False
    bias = torch.randn(1, H, 4, 6, generator=torch.Generator().manual_seed(13), dtype=F64)
    kernel = build_kernel("flex", {"compile": "always"})
    with torch.no_grad():
        got, _ = kernel(q.float(), k.float(), v.float(), mask=mask, bias=bias, is_causal=True)
        want, _ = math_attention(q, k, v, mask, bias, is_causal=True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
