"""The kernel contract: every registered attention kernel, checked by what it declares.

A kernel says what it is (``exactness``: ``exact``, ``pattern`` or ``approximate`` with an
``error_bound``) and what it refuses (``refuses``: {feature: why}). For each kernel in the
registry, so a kernel registered later is covered without writing a test, in float64:

- each call it accepts (no mask, key-padding and per-query masks with fully masked rows, a bias
  with a row of -inf, causal with Lq = Lk and Lq < Lk bottom-right, Lq != Lk) equals ``math``
  (``exact``), ``math`` under the kernel's own pattern ANDed with the mask (``pattern``), or
  lies within ``error_bound`` of ``math`` (``approximate``); rows with no key are zero, never
  NaN, forward and backward; gradients of q, k, v and the bias equal ``math``'s (exact,
  pattern) and every kernel's backward is the derivative of its forward (gradcheck);
- the cache path (a prefill, then single steps appending keys and values) equals the whole
  computation; weights, when returned, are rows summing to 1 (0 when dead) with out = weights V;
  ``dropout_p=0`` is the call without dropout, bit for bit;
- each refused feature is one ValueError line naming the kernel and the feature.

Two toy kernels defined here (a sliding-window pattern kernel computed by gathering each
query's keys, and an approximate one) are registered for this module only, to show that the
contract holds pattern and approximate declarations to their word; three lying kernels show that
it fails them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

from tfam.layers.kernels import (
    EXACTNESS,
    FEATURES,
    KERNELS,
    AttentionKernel,
    build_kernel,
    math_attention,
    register_kernel,
)
from tfam.layers.masks import causal_mask

B, H, DH = 2, 2, 4
F64 = torch.float64


# ------------------------------------------------------------------------------ toy kernels


@dataclasses.dataclass(frozen=True)
class WindowOptions:
    window: int = 3


class ToyWindowKernel(AttentionKernel, register=False):
    """A pattern kernel: each query sees the ``window`` keys ending at its own position
    (bottom-right aligned). Computed by gathering each query's window of keys, never the
    (Lq, Lk) scores, so the contract compares two different computations."""

    name = "toy_window"
    Options = WindowOptions
    exactness = "pattern"
    refuses = {"dropout": "the toy draws no random numbers"}

    def pattern_mask(self, lq: int, lk: int, device: Any = None) -> Tensor:
        pos = torch.arange(lq, device=device)[:, None] + (lk - lq)
        j = torch.arange(lk, device=device)[None, :]
        return (j <= pos) & (j > pos - self.options.window)

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        b, h, lq, dh = q.shape
        lk, w = k.shape[-2], self.options.window
        scale = dh**-0.5 if scale is None else scale
        # Key index of each query's window slot; slots before key 0 are not keys.
        idx = torch.arange(lq)[:, None] + (lk - lq) - torch.arange(w - 1, -1, -1)[None, :]
        valid = idx >= 0
        idx = idx.clamp(min=0)
        kw, vw = k[:, :, idx], v[:, :, idx]  # (B, H, Lq, w, Dh)
        scores = torch.einsum("bhqd,bhqwd->bhqw", q * scale, kw)
        full = (b, h, lq, lk)
        gather = idx.expand(b, h, lq, w)
        if bias is not None:
            scores = scores + torch.gather(bias.expand(full), -1, gather)
        keep = valid.expand(b, h, lq, w)
        if mask is not None:
            keep = keep & torch.gather(mask.expand(full), -1, gather)
        scores = scores.masked_fill(~keep, float("-inf"))
        dead = torch.isneginf(scores).all(-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
        out = torch.einsum("bhqw,bhqwd->bhqd", weights, vw)
        if not need_weights:
            return out, None
        # Slots outside the keys hold weight 0, so adding them onto key 0 changes nothing.
        dense = torch.zeros(full, dtype=weights.dtype).scatter_add(-1, gather, weights)
        return out, dense


class ToyTemperedKernel(AttentionKernel, register=False):
    """An approximate kernel: softmax at a slightly lower temperature (scores times 1.001).
    Takes key-padding masks, causal, caches and dropout; refuses the rest."""

    name = "toy_tempered"
    exactness = "approximate"
    error_bound = 0.01
    refuses = {
        "mask": "the toy masks keys only",
        "bias": "the toy adds nothing to its scores",
        "need_weights": "the toy keeps no weights",
    }

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):  # noqa: ANN001, ANN201
        out, _ = math_attention(q * 1.001, k, v, mask, None, dropout_p, scale, False, is_causal)
        return out, None


TOYS = (ToyWindowKernel, ToyTemperedKernel)
NAMES = sorted({*KERNELS, *(t.name for t in TOYS)})


@pytest.fixture(scope="module", autouse=True)
def _toys_registered() -> Iterator[None]:
    """The toys are in the registry for this module's tests only."""
    before = dict(KERNELS)
    for toy in TOYS:
        register_kernel(toy)
    yield
    for toy in TOYS:
        del KERNELS[toy.name]
    assert KERNELS == before


# ------------------------------------------------------------------------------- the checks


def takes(kernel: AttentionKernel, *features: str) -> bool:
    return not any(f in kernel.refuses for f in features)


def need(kernel: AttentionKernel, *features: str) -> None:
    refused = [f for f in features if f in kernel.refuses]
    if refused:
        pytest.skip(f"{kernel.name} refuses {refused[0]} (declared; see test_refusals)")


def draw(gen: torch.Generator, *shape: int, grad: bool = True) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64).requires_grad_(grad)


def reference_mask(
    kernel: AttentionKernel, lq: int, lk: int, mask: Tensor | None, is_causal: bool
) -> Tensor | None:
    """What ``math`` must be given to compute what the kernel declares it computes."""
    if is_causal:
        mask = causal_mask(lq, lk) if mask is None else mask & causal_mask(lq, lk)
    if kernel.exactness == "pattern":
        pattern = kernel.pattern_mask(lq, lk)
        mask = pattern if mask is None else mask & pattern
    return mask


def assert_declared_close(kernel: AttentionKernel, got: Tensor, want: Tensor, what: str) -> None:
    """Equal to ``math`` (exact, pattern) or within the stated bound (approximate)."""
    assert got.shape == want.shape, f"{kernel.name} {what}: shape {got.shape} != {want.shape}"
    assert torch.isfinite(got).all(), f"{kernel.name} {what}: not finite"
    if kernel.exactness == "approximate":
        err = (got - want).abs().max().item()
        assert err <= kernel.error_bound, (
            f"{kernel.name} {what}: |out - math| = {err:.3g} > error_bound {kernel.error_bound}"
        )
    else:
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11, msg=f"{kernel.name} {what}")


def check_call(
    kernel: AttentionKernel,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
) -> None:
    """The kernel's output and gradients against ``math``'s by its declaration; rows with no
    key give zeros and zero gradients, never NaN."""
    lq, lk = q.shape[-2], k.shape[-2]
    ref_mask = reference_mask(kernel, lq, lk, mask, is_causal)
    out, _ = kernel(q, k, v, mask=mask, bias=bias, is_causal=is_causal)
    want, weights = math_attention(q, k, v, ref_mask, bias, need_weights=True)
    assert_declared_close(kernel, out, want, "output")
    dead = (weights == 0).all(-1)  # (B, H, Lq): no key with a finite score
    assert (out[dead] == 0).all(), f"{kernel.name}: a row with no key is not zero"
    leaves = [t for t in (q, k, v, bias) if t is not None and t.requires_grad]
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    got_grads = torch.autograd.grad(out, leaves, cotangent, allow_unused=True)
    want_grads = torch.autograd.grad(want, leaves, cotangent, allow_unused=True)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        g = torch.zeros_like(leaves[i]) if g is None else g
        w = torch.zeros_like(leaves[i]) if w is None else w
        assert torch.isfinite(g).all(), f"{kernel.name}: gradient {i} not finite"
        if kernel.exactness != "approximate":
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11, msg=f"{kernel.name} grad {i}")
    if dead.any() and got_grads[0] is not None:
        assert (got_grads[0][dead] == 0).all(), f"{kernel.name}: a dead row's dq is not zero"


# One call per situation: (features the call needs, how to build it).
def _scenario(name: str, gen: torch.Generator) -> tuple[tuple[str, ...], dict[str, Any]]:
    lq, lk = {"cross": (3, 6), "causal_cross": (3, 6), "causal_key_mask": (4, 6)}.get(name, (5, 5))
    q, k, v = draw(gen, B, H, lq, DH), draw(gen, B, H, lk, DH), draw(gen, B, H, lk, DH)
    call: dict[str, Any] = {"q": q, "k": k, "v": v}
    features: tuple[str, ...] = ("lengths",) if lq != lk else ()
    if "key_mask" in name:
        mask = torch.rand(B, 1, 1, lk, generator=gen) > 0.3
        mask[0, ..., -1] = True  # batch row 0 keeps its last key (every causal row has one)
        mask[1] = False  # batch row 1 is all padding: every row dead
        call["mask"], features = mask, (*features, "key_mask")
    if name in ("mask", "mask_bias"):
        mask = torch.rand(B, H, lq, lk, generator=gen) > 0.4
        mask[0, 1, 2] = False  # one dead row
        call["mask"], features = mask, (*features, "mask")
    if "bias" in name:
        bias = torch.randn(B, H, lq, lk, generator=gen, dtype=F64)
        bias[1, 0, 1] = float("-inf")  # a row of -inf bias is dead too
        call["bias"], features = bias.requires_grad_(), (*features, "bias")
    if "causal" in name:
        call["is_causal"], features = True, (*features, "causal")
    return features, call


SCENARIOS = ("plain", "cross", "key_mask", "mask", "bias", "mask_bias", "causal",
             "causal_cross", "causal_key_mask")  # fmt: skip


# -------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", NAMES)
def test_declaration(name: str) -> None:
    cls = KERNELS[name]
    cls.check_declaration()
    assert cls.exactness in EXACTNESS and set(cls.refuses) <= set(FEATURES)
    assert all(isinstance(why, str) and why for why in cls.refuses.values())


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", NAMES)
def test_equals_math_by_declaration(name: str, scenario: str, rng: torch.Generator) -> None:
    kernel = build_kernel(name)
    features, call = _scenario(scenario, rng)
    need(kernel, *features)
    check_call(kernel, **call)


@pytest.mark.parametrize("name", NAMES)
def test_backward_is_the_derivative_of_forward(name: str, rng: torch.Generator) -> None:
    """gradcheck in float64 (tiny sizes), with whatever of causal and a key mask it takes."""
    kernel = build_kernel(name)
    q, k, v = draw(rng, 1, 2, 3, 3), draw(rng, 1, 2, 3, 3), draw(rng, 1, 2, 3, 3)
    mask = torch.tensor([True, False, True]).view(1, 1, 1, 3) if takes(kernel, "key_mask") else None
    causal = takes(kernel, "causal")
    fn = lambda q, k, v: kernel(q, k, v, mask=mask, is_causal=causal)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_cache_path_equals_the_whole_computation(
    name: str, causal: bool, rng: torch.Generator
) -> None:
    """A prefill of 4 positions, then 3 single steps, appending keys and values to the kernel's
    cache: each chunk equals ``math`` over the keys so far, and with causal the chunks
    together equal the whole causal computation."""
    kernel = build_kernel(name)
    need(kernel, "cache", *(("causal",) if causal else ()))
    q, k, v = (draw(rng, B, H, 7, DH, grad=False) for _ in range(3))
    cache, outs = kernel.new_cache(max_len=7), []
    for start, stop in ((0, 4), (4, 5), (5, 6), (6, 7)):
        out, _ = kernel(q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop],
                        is_causal=causal, cache=cache)  # fmt: skip
        mask = reference_mask(kernel, stop - start, stop, None, causal)
        want, _ = math_attention(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], mask)
        assert_declared_close(kernel, out, want, f"cached chunk {start}:{stop}")
        outs.append(out)
    if causal:
        whole, _ = kernel(q, k, v, is_causal=True)
        assert_declared_close(kernel, torch.cat(outs, dim=2), whole, "cached vs whole")


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_the_rows_that_make_the_output(name: str, rng: torch.Generator) -> None:
    kernel = build_kernel(name)
    need(kernel, "need_weights")
    features, call = _scenario("key_mask" if takes(kernel, "key_mask") else "plain", rng)
    out, weights = kernel(**call, need_weights=True)
    assert weights is not None and weights.shape == (B, H, 5, 5)
    sums = weights.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums)) or torch.allclose(
        sums, (sums > 0.5).to(sums.dtype)
    ), f"{name}: weight rows sum to {sums}"
    torch.testing.assert_close(out, weights @ call["v"], rtol=1e-9, atol=1e-11)
    if kernel.exactness != "approximate":
        mask = reference_mask(kernel, 5, 5, call.get("mask"), False)
        _, want = math_attention(call["q"], call["k"], call["v"], mask, need_weights=True)
        torch.testing.assert_close(weights, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", NAMES)
def test_dropout(name: str, rng: torch.Generator) -> None:
    """``dropout_p=0`` is the call without dropout, bit for bit, and repeatable; dropout, when
    taken, changes the output, repeats under the same seed and keeps dead rows zero."""
    kernel = build_kernel(name)
    features, call = _scenario("key_mask" if takes(kernel, "key_mask") else "plain", rng)
    plain, _ = kernel(**call)
    assert torch.equal(kernel(**call, dropout_p=0.0)[0], plain)
    assert torch.equal(kernel(**call, dropout_p=0.0)[0], plain)
    if not takes(kernel, "dropout"):
        return
    torch.manual_seed(3)
    once, _ = kernel(**call, dropout_p=0.5)
    torch.manual_seed(3)
    again, _ = kernel(**call, dropout_p=0.5)
    assert torch.equal(once, again) and torch.isfinite(once).all()
    assert not torch.equal(once, plain)
    if "mask" in call:
        assert (once[1] == 0).all()  # batch row 1 is all padding


def _asking(feature: str, kernel: AttentionKernel, gen: torch.Generator) -> dict[str, Any]:
    """A call that asks ``feature`` of the kernel and nothing it would refuse first."""
    lq = 3 if feature == "lengths" else 4
    q, k, v = draw(gen, B, H, lq, DH), draw(gen, B, H, 4, DH), draw(gen, B, H, 4, DH)
    call: dict[str, Any] = {"q": q, "k": k, "v": v}
    call.update({
        "key_mask": {"mask": torch.ones(B, 1, 1, 4, dtype=torch.bool)},
        "mask": {"mask": torch.ones(B, 1, 4, 4, dtype=torch.bool)},
        "bias": {"bias": torch.zeros(B, H, 4, 4, dtype=F64)},
        "causal": {"is_causal": True},
        "lengths": {},
        "cache": {"cache": kernel.new_cache(8)},
        "need_weights": {"need_weights": True},
        "dropout": {"dropout_p": 0.1},
    }[feature])  # fmt: skip
    return call


@pytest.mark.parametrize("name", NAMES)
def test_refusals_are_one_line(name: str, rng: torch.Generator) -> None:
    """Each refused feature, asked alone, is one ValueError line naming the kernel, the
    feature, why, and the kernels that take it; the same line a config check gets."""
    kernel = build_kernel(name)
    for feature in kernel.refuses:
        with pytest.raises(ValueError) as caught:
            kernel(**_asking(feature, kernel, rng))
        message = str(caught.value)
        assert message == type(kernel).refusal(feature)
        assert "\n" not in message and f"attention={name!r}" in message
        assert FEATURES[feature] in message and kernel.refuses[feature] in message
    for feature in set(FEATURES) - set(kernel.refuses):
        assert type(kernel).refusal(feature) is None


# ------------------------------------------------------- the contract can fail a kernel


def test_toys_exercise_every_kind_of_declaration() -> None:
    kinds = {KERNELS[n].exactness for n in NAMES}
    assert kinds == set(EXACTNESS)
    assert any(KERNELS[n].refuses for n in NAMES)


def test_a_kernel_declared_exact_but_approximate_fails(rng: torch.Generator) -> None:
    class Liar(ToyTemperedKernel, register=False):
        name = "liar"
        exactness = "exact"
        error_bound = None

    Liar.check_declaration()  # a consistent declaration, but not a true one
    _, call = _scenario("plain", rng)
    with pytest.raises(AssertionError):
        check_call(Liar(), **call)


def test_a_bound_too_tight_fails(rng: torch.Generator) -> None:
    class Boastful(ToyTemperedKernel, register=False):
        name = "boastful"
        error_bound = 1e-9

    _, call = _scenario("causal", rng)
    with pytest.raises(AssertionError, match="error_bound"):
        check_call(Boastful(), **call)


def test_a_pattern_kernel_with_a_wrong_pattern_fails(rng: torch.Generator) -> None:
    class Wider(ToyWindowKernel, register=False):
        name = "wider"

        def pattern_mask(self, lq: int, lk: int, device: Any = None) -> Tensor:
            return causal_mask(lq, lk)  # claims every earlier key, computes a window of 3

    _, call = _scenario("plain", rng)
    with pytest.raises(AssertionError):
        check_call(Wider(), **call)


@pytest.mark.parametrize(
    "attrs,message",
    [
        ({"exactness": "roughly"}, "exactness='roughly' is invalid"),
        ({"exactness": "approximate"}, "error_bound=None is invalid"),
        ({"error_bound": 0.1}, "an exact kernel has none"),
        ({"exactness": "pattern"}, "does not override pattern_mask"),
        ({"refuses": {"colour": "no"}}, r"refuses=\['colour'\] is invalid"),
        ({"refuses": {"key_mask": "no"}}, "refuses 'key_mask' but not 'mask'"),
        ({"refuses": {"lengths": "no"}}, "refuses 'lengths' but not 'cache'"),
    ],
)
def test_declarations_are_checked_when_a_kernel_registers(attrs: dict, message: str) -> None:
    body = {"name": "bad_declaration", "attend": ToyTemperedKernel.attend, **attrs}
    with pytest.raises(ValueError, match=message) as caught:
        type("Bad", (AttentionKernel,), body)
    assert "\n" not in str(caught.value) and "Bad" in str(caught.value)
    assert "bad_declaration" not in KERNELS


@pytest.mark.parametrize(("lq", "lk"), [(1, 7), (3, 5), (4, 4), (5, 3), (9, 2)])
def test_causal_pairs_counts_the_causal_mask(lq, lk):
    from tfam.layers.kernels import causal_pairs
    from tfam.layers.masks import causal_mask

    assert causal_pairs(lq, lk) == int(causal_mask(lq, lk).sum())


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cost_is_positive_and_grows_with_length(name):
    kernel = build_kernel(name)
    short, long = kernel.cost(64, 64, 16), kernel.cost(256, 256, 16)
    assert 0 < short.flops < long.flops
    assert 0 < short.score_elements <= long.score_elements
