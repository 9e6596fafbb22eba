"""The ``lsh`` kernel (Reformer's hashing attention), beyond the kernel contract (which sees it
only where every item fits one chunk and one bucket):

- one bucket and one chunk: ``math`` exactly, forward and gradients (float64), with the tied
  keys of ``shared_qk`` against ``math`` on (q, q/|q|) with Reformer's self-attention rule;
- hashing on (several buckets, chunks and rounds): ``math`` under the kernel's own pattern
  (:func:`lsh_pattern`, computed densely from the same hashes), forward and gradients, so the
  chunk windows, the duplicate counting and the logsumexp combination of rounds are exact;
- rows with no key are zero with finite gradients; causal outputs do not depend on later
  tokens; more rounds come closer to full attention on clustered keys; the seed fixes the
  rotations; the angular hash ignores scale; options and shared-QK misuse are one line; the
  declared cost is linear in length (times the hashing's sqrt(buckets)).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

import tfam  # registers the kernels
import tfam.layers.lsh as lsh_module
from tfam.layers.kernels import KERNELS, build_kernel, math_attention
from tfam.layers.lsh import draw_rotations, lsh_attention, lsh_hash, lsh_pattern
from tfam.layers.masks import causal_mask

F64 = torch.float64


def _inputs(seed: int, lq: int, lk: int, b: int = 2, h: int = 2, dh: int = 6) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(b, h, n, dh, generator=g, dtype=F64, requires_grad=True) for n in (lq, lk, lk)
    )


def _key_mask(seed: int, b: int, lk: int) -> Tensor:
    mask = torch.rand(b, 1, 1, lk, generator=torch.Generator().manual_seed(seed)) > 0.3
    mask[-1] = False  # the last batch row is all padding: every row dead
    return mask


def _reference(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, opts: dict
) -> Tensor:
    """``math`` under lsh's pattern AND the masks; with shared_qk on keys q/|q|, no token
    attending to itself unless no other key is left to it (Reformer's rule)."""
    b, h, lq, _ = q.shape
    lk = k.shape[-2]
    allowed = lsh_pattern(q, k, causal, **opts)
    keep = torch.ones(b, h, 1, lk, dtype=torch.bool) if mask is None else mask.expand(b, h, 1, lk)
    allowed = allowed & keep
    if causal:
        allowed = allowed & causal_mask(lq, lk)
    if not opts.get("shared_qk"):
        return math_attention(q, k, v, allowed)[0]
    own = torch.eye(lq, dtype=torch.bool)
    others = allowed & ~own
    allowed = others | (own & keep & ~others.any(-1, keepdim=True))
    return math_attention(q, F.normalize(q, dim=-1), v, allowed)[0]


def _check(q, k, v, mask, causal, opts, tol=1e-12) -> None:  # noqa: ANN001
    out = lsh_attention(q, k, v, mask, causal, None, **opts)
    want = _reference(q, k, v, mask, causal, opts)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, rtol=0, atol=tol)
    wrt = (q, v) if opts.get("shared_qk") else (q, k, v)  # tied keys never read k
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    for a, w in zip(torch.autograd.grad(out, wrt, g), torch.autograd.grad(want, wrt, g)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, w, rtol=0, atol=tol)


def test_registered_with_its_defaults() -> None:
    kernel = build_kernel("lsh")
    assert KERNELS["lsh"] is type(kernel) and kernel.exactness == "approximate"
    assert kernel.to_options() == {
        "buckets": None,
        "rounds": 1,
        "chunk": 64,
        "seed": 0,
        "shared_qk": False,
    }


@pytest.mark.parametrize(
    "option,value",
    [("buckets", 3), ("buckets", 0), ("buckets", True), ("buckets", "8"), ("rounds", 0),
     ("chunk", 0), ("chunk", 2.0), ("seed", -1), ("shared_qk", 1), ("n_hashes", 2)],
)  # fmt: skip
def test_bad_options_are_one_line(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"attention_options.{option}=") as caught:
        build_kernel("lsh", {option: value})
    assert "\n" not in str(caught.value)


def test_shared_qk_refuses_other_lengths_in_one_line() -> None:
    q, k, v = _inputs(0, 3, 5)
    with pytest.raises(ValueError, match="attention_options.shared_qk") as caught:
        build_kernel("lsh", {"shared_qk": True})(q, k, v)
    assert "\n" not in str(caught.value) and "Lq = Lk" in str(caught.value)


@settings(max_examples=15, deadline=None)
@given(
    lq=st.integers(1, 9),
    lk=st.integers(1, 9),
    causal=st.booleans(),
    masked=st.booleans(),
    explicit=st.booleans(),
    seed=st.integers(0, 99),
)
def test_one_bucket_and_one_chunk_is_math(lq, lk, causal, masked, explicit, seed) -> None:
    """buckets=1 with a chunk holding every item, or a chunk so long that the per-length
    default is one bucket: every query sees every key, as in math (forward and gradients)."""
    q, k, v = _inputs(seed, lq, lk)
    mask = _key_mask(seed, 2, lk) if masked else None
    opts = {"buckets": 1, "chunk": max(lq, lk)} if explicit else {"chunk": 9}
    out = lsh_attention(q, k, v, mask, causal, None, **opts)
    want, _ = math_attention(q, k, v, mask, is_causal=causal)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    for a, w in zip(
        torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(want, (q, k, v), g)
    ):
        torch.testing.assert_close(a, w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_shared_qk_in_one_bucket_is_math_on_tied_keys(causal: bool) -> None:
    """Keys q/|q|, no token attending to itself unless nothing else is left: the first causal
    token (only itself) and tokens whose other keys are all padding attend to themselves."""
    q, k, v = _inputs(1, 7, 7)
    mask = _key_mask(1, 2, 7)
    mask[0, ..., 1:] = False
    mask[0, ..., 4] = True  # batch row 0 keeps keys 0 and 4 only: each is the other's one key
    opts = {"buckets": 1, "chunk": 7, "shared_qk": True}
    _check(q, k, v, mask, causal, opts)
    out = lsh_attention(q, k, v, mask, causal, None, **opts)
    want, _ = math_attention(q, F.normalize(q, dim=-1), v, mask, is_causal=causal)
    assert not torch.allclose(out, want), "the self-attention rule changed nothing"


CASES = [
    # (shared_qk, causal, rounds, lq, lk, opts): several chunks and buckets in each.
    (shared, causal, rounds, lq, lk, opts)
    for shared in (False, True)
    for causal in (False, True)
    for rounds in (1, 3)
    for lq, lk in ((37, 37), (20, 45))
    if not (shared and lq != lk)
    for opts in ({"buckets": 4, "chunk": 4}, {"chunk": 8}, {"buckets": 6, "chunk": 5})
]


@pytest.mark.parametrize("shared,causal,rounds,lq,lk,opts", CASES)
def test_hashing_is_math_under_its_own_pattern(
    shared, causal, rounds, lq, lk, opts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With hashing on, lsh is softmax attention over exactly the pairs some round puts in one
    bucket and one window (:func:`lsh_pattern`, computed densely): the chunked computation,
    the duplicate counting across rounds and the logsumexp combination are exact. With three
    rounds, each chunk runs as its own checkpointed group."""
    if rounds == 3:
        monkeypatch.setitem(lsh_module._GROUP_SCORES, "cpu", 1)
    q, k, v = _inputs(rounds + lq, lq, lk)
    mask = _key_mask(lq, 2, lk)
    mask[-1] = mask[0]  # keep both batch rows alive here; dead rows have their own test
    opts = {**opts, "rounds": rounds, "seed": 3, "shared_qk": shared}
    density = lsh_pattern(q, k, causal, **opts).double().mean().item()
    assert 0.02 < density < 0.6, f"the pattern is not a sparse one: {density:.2f}"
    _check(q, k, v, mask, causal, opts)


@pytest.mark.parametrize("shared", [False, True])
def test_rows_with_no_key_are_zero_with_finite_gradients(shared: bool) -> None:
    lq = lk = 29
    q, k, v = _inputs(5, lq, lk)
    mask = _key_mask(5, 2, lk)  # batch row 1 is all padding
    opts = {"buckets": 4, "chunk": 4, "rounds": 2, "shared_qk": shared}
    out = lsh_attention(q, k, v, mask, True, None, **opts)
    assert torch.isfinite(out).all() and (out[1] == 0).all()
    dq, dk, dv = torch.autograd.grad(out.square().sum(), (q, k, v), allow_unused=True)
    for grad in (dq, dv) if shared else (dq, dk, dv):
        assert torch.isfinite(grad).all()
    assert (dq[1] == 0).all()
    if not shared:  # Lq > Lk causal: the first rows see no key at all
        q, k, v = _inputs(6, 9, 4)
        out = lsh_attention(q, k, v, None, True, None, buckets=2, chunk=2)
        assert (out[:, :, :5] == 0).all() and torch.isfinite(out).all()
        (dq,) = torch.autograd.grad(out.sum(), (q,))
        assert (dq[:, :, :5] == 0).all() and torch.isfinite(dq).all()


@pytest.mark.parametrize("shared", [False, True])
def test_causal_outputs_do_not_depend_on_later_tokens(shared: bool) -> None:
    """Later tokens redrawn (so they hash elsewhere and reorder the sort): the outputs before
    them stay, because a causal query's window slides over the sort (Reformer's fixed chunks
    would let the later tokens move its chunk's boundaries)."""
    length, t = 48, 30
    opts = {"buckets": 4, "chunk": 4, "rounds": 2, "shared_qk": shared}
    for seed in range(3):
        q, k, v = (x.detach() for x in _inputs(seed, length, length))
        later = _inputs(seed + 100, length, length)
        q2, k2, v2 = (torch.cat([x[:, :, :t], y.detach()[:, :, t:]], dim=2)
                      for x, y in zip((q, k, v), later))  # fmt: skip
        out = lsh_attention(q, k, v, None, True, None, **{**opts, "seed": seed})
        out2 = lsh_attention(q2, k2, v2, None, True, None, **{**opts, "seed": seed})
        torch.testing.assert_close(out[:, :, :t], out2[:, :, :t], rtol=0, atol=1e-12)
        assert not torch.allclose(out[:, :, t:], out2[:, :, t:])
        moved = lsh_pattern(q, k, True, **opts) != lsh_pattern(q2, k2, True, **opts)
        assert moved.any(), "the later tokens did not change the hashing"


def _clustered(seed: int, length: int = 256, dh: int = 16, clusters: int = 8) -> tuple:
    """Queries and keys near one of a few directions (norm 4, noise 0.3): each query's weight
    lies on the keys of its cluster, which angular hashing tends to bucket together."""
    g = torch.Generator().manual_seed(seed)
    centers = 4 * F.normalize(torch.randn(clusters, dh, generator=g, dtype=F64), dim=-1)
    label = torch.randint(0, clusters, (length,), generator=g)
    q, k = (centers[label] + 0.3 * torch.randn(length, dh, generator=g, dtype=F64)
            for _ in range(2))  # fmt: skip
    v = torch.randn(length, dh, generator=g, dtype=F64)
    return q[None, None], k[None, None], v[None, None]


@pytest.mark.parametrize("shared", [False, True])
def test_more_rounds_come_closer_to_full_attention(shared: bool) -> None:
    """Mean |lsh - math| on clustered keys, 16 buckets of chunk 16 over 256 tokens: one round
    misses much (measured 0.22-0.30), eight rounds miss less than half as much (0.05-0.09),
    on every seed, and the mean falls with each doubling."""
    errors = {}
    for rounds in (1, 2, 4, 8):
        errors[rounds] = []
        for seed in range(3):
            q, k, v = _clustered(seed)
            keys = F.normalize(q, dim=-1) if shared else k
            full, _ = math_attention(q, keys, v)
            out = lsh_attention(q, k, v, buckets=16, rounds=rounds, chunk=16, seed=seed,
                                shared_qk=shared)  # fmt: skip
            errors[rounds].append((out - full).abs().mean().item())
    assert all(e > 0.1 for e in errors[1]), errors
    assert all(e8 < 0.5 * e1 for e1, e8 in zip(errors[1], errors[8])), errors
    means = [sum(errors[r]) / 3 for r in (1, 2, 4, 8)]
    assert means == sorted(means, reverse=True), means


def test_the_seed_fixes_the_rotations() -> None:
    q, k, v = (x.detach() for x in _inputs(2, 40, 40))
    opts = {"buckets": 8, "chunk": 4, "rounds": 2}
    kernel = build_kernel("lsh", {**opts, "seed": 7})
    assert torch.equal(kernel(q, k, v)[0], kernel(q, k, v)[0])
    assert torch.equal(kernel(q, k, v)[0], build_kernel("lsh", {**opts, "seed": 7})(q, k, v)[0])
    assert not torch.equal(kernel(q, k, v)[0], build_kernel("lsh", {**opts, "seed": 8})(q, k, v)[0])
    # The first rounds of a kernel with more rounds are the rounds of one with fewer.
    two, four = draw_rotations(6, 8, 2, 7), draw_rotations(6, 8, 4, 7)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(two, four))


@pytest.mark.parametrize("buckets", [8, 256])  # 256: two rotations, 16 x 16 buckets
def test_the_hash_is_angular(buckets: int) -> None:
    """h(x) = argmax([xR; -xR]) depends on x's direction only, and spreads over the buckets."""
    x = torch.randn(4000, 6, generator=torch.Generator().manual_seed(0), dtype=F64)
    (rotations,) = draw_rotations(6, buckets, 1, 0)
    h = lsh_hash(x, rotations)
    assert torch.equal(h, lsh_hash(3.5 * x, rotations))
    assert h.min() >= 0 and h.max() < buckets
    assert h.unique().numel() > buckets // 2
    if buckets == 8:  # one rotation: -x lands in the opposite half
        assert torch.equal(lsh_hash(-x, rotations), (h + buckets // 2) % buckets)


def test_cost_is_linear_in_length() -> None:
    """Flops: rounds x chunks x C x 2C scores (C = 2 chunk items) and the hashing, linear in n
    but for the hashing's sqrt(buckets); dense is n^2. Scores held: one group at a time."""
    kernel = build_kernel("lsh", {"rounds": 2})
    cost = kernel.cost(300, 300, 64)  # 600 items, chunks of 128: 5 chunks, 8 buckets
    assert cost.flops == 4.0 * 2 * 5 * 128 * 256 * 64 + 2 * 600 * 64 * 8
    assert cost.score_elements == 5 * 128 * 256  # one round's chunks, one group on the CPU
    short, long = kernel.cost(4096, 4096, 64), kernel.cost(65536, 65536, 64)
    assert 16 <= long.flops / short.flops < 20  # the hashing grows as n sqrt(n)
    assert long.score_elements == short.score_elements == lsh_module._GROUP_SCORES["cpu"]
    dense = build_kernel("math").cost(65536, 65536, 64)
    assert long.flops < dense.flops / 50  # measured: 1/58 with two rounds


def test_memory_held_for_backward_is_linear_in_length() -> None:
    """Everything autograd keeps from the forward (the checkpointed groups keep only their
    inputs) grows as the length: 4x the tokens keep less than 5x the elements (dense: 16x),
    and no single saved tensor is as large as Lq x Lk."""

    def saved(length: int) -> tuple[int, int]:
        sizes: list[int] = []

        def pack(t: Tensor) -> Tensor:
            sizes.append(t.numel())
            return t

        q, k, v = _inputs(0, length, length, b=1, h=1, dh=8)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = lsh_attention(q, k, v, None, True, None, buckets=8, chunk=8, rounds=2)
        out.sum().backward()  # the graph is a real one
        return sum(sizes), max(sizes)

    (short, _), (long, largest) = saved(512), saved(2048)
    assert long < 5 * short, (short, long)
    assert largest < 2048 * 2048 // 16, largest


def test_generation_with_lsh_re_encodes_instead_of_caching() -> None:
    """lsh refuses a KV cache, so generate decodes by re-encoding (as use_cache=False) rather
    than failing at the first cached step."""
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", dim=16, depth=2, heads=2, vocab_size=32, max_positions=64, attention="lsh"
    ).eval()
    assert not model.decodes_from_cache()
    ids = torch.randint(0, 32, (2, 5))
    cached = model.generate(ids, max_new_tokens=8, use_cache=True)
    plain = model.generate(ids, max_new_tokens=8, use_cache=False)
    assert torch.equal(cached, plain) and cached.shape == (2, 13)
