"""Linear attention against a naive O(n^2) float64 reference of the same formula."""

import pytest
import torch

from tfam.layers.linear_attention import linear_attention, linear_step, phi


def naive(q, k, v, pad, causal, scale):
    """O(n^2) loop: out_i = sum_j w_ij v_j / sum_j w_ij with w_ij = phi(s q_i) . phi(k_j)."""
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    out = torch.zeros(b, h, lq, v.shape[-1], dtype=torch.float64)
    for i in range(lq):
        for bb in range(b):
            w = (phi(q[bb, :, i] * scale).unsqueeze(1) * phi(k[bb])).sum(-1)  # (H, Lk)
            keep = torch.ones(lk, dtype=torch.bool) if pad is None else pad[bb, 0, 0].clone()
            if causal:
                keep &= torch.arange(lk) <= i + lk - lq
            w = w * keep
            den = w.sum(-1, keepdim=True)
            out[bb, :, i] = torch.where(
                den > 0, torch.einsum("hj,hje->he", w, v[bb]) / den.clamp_min(1e-300), 0.0
            )
    return out


def _data(lq=5, lk=7):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, lq, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, lk, 4, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, lk, 6, generator=g, dtype=torch.float64)
    pad = torch.ones(2, 1, 1, lk, dtype=torch.bool)
    pad[1, ..., -3:] = False
    return q, k, v, pad


def test_equals_naive_reference():
    q, k, v, pad = _data()
    for causal in (False, True):
        for p in (None, pad):
            got = linear_attention(q, k, v, p, causal, 0.5)
            torch.testing.assert_close(got, naive(q, k, v, p, causal, 0.5))


def test_causal_future_change_leaves_past():
    q, k, v, _ = _data(7, 7)
    out = linear_attention(q, k, v, None, True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 5:] += 1.0
    v2[:, :, 5:] -= 2.0
    out2 = linear_attention(q, k2, v2, None, True)
    torch.testing.assert_close(out[:, :, :5], out2[:, :, :5])
    assert not torch.allclose(out[:, :, 5:], out2[:, :, 5:])


def test_step_decoding_equals_parallel():
    q, k, v, _ = _data(7, 7)
    full = linear_attention(q, k, v, None, True)
    state, outs = None, []
    for t in range(7):
        o, state = linear_step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, dim=2), full)


def test_fully_masked_row_zeros_no_nan_grad():
    q, k, v, pad = _data()
    pad[0] = False
    q.requires_grad_(True)
    out = linear_attention(q, k, v, pad)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


# ------------------------------------------------------------------ the registered kernel


def test_kernel_step_by_step_equals_the_parallel_form():
    """The `linear` kernel with its running-sums cache (a prefill, then single steps) gives the
    parallel causal form, which is the naive formula."""
    from tfam.layers.kernels import build_kernel

    q, k, v, _ = _data(7, 7)
    kernel = build_kernel("linear", {"chunk": 3})
    whole, _ = kernel(q, k, v, is_causal=True)
    torch.testing.assert_close(whole, naive(q, k, v, None, True, 0.5))
    cache, outs = kernel.new_cache(7), []
    for start, stop in ((0, 3), (3, 4), (4, 5), (5, 6), (6, 7)):
        sl = slice(start, stop)
        outs.append(kernel(q[:, :, sl], k[:, :, sl], v[:, :, sl], is_causal=True, cache=cache)[0])
    torch.testing.assert_close(torch.cat(outs, dim=2), whole)
    assert cache.length == 7 and cache.state[0].shape == (2, 3, 4, 6)


def _gpt(attention: str, position: str = "learned"):
    import tfam

    torch.manual_seed(0)
    config = dict(dim=24, depth=2, heads=3, vocab_size=30, max_positions=24, position=position)
    model = tfam.create_model("gpt", **config).eval()
    model.set_attention(attention)
    return model


@pytest.mark.parametrize("attention", ["linear", "performer"])
@pytest.mark.parametrize("position", ["learned", "rope"])
def test_gpt_generates_the_same_tokens_with_and_without_the_cache(attention, position):
    """Greedy and beam search (the cache follows the beams through reorder), a left-padded
    batch: the running sums give the tokens that re-encoding the whole sequence gives."""
    model = _gpt(attention, position)
    assert type(model.stack.make_cache(4)[0].self_attn).__name__ == "RunningSums"
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    for kwargs in ({}, {"num_beams": 3, "length_penalty": 0.6}):
        cached = model.generate(ids, attention_mask=mask, max_new_tokens=10, **kwargs)
        uncached = model.generate(
            ids, attention_mask=mask, max_new_tokens=10, use_cache=False, **kwargs
        )
        assert cached.shape == (2, 16)
        assert torch.equal(cached, uncached)
    alone = model.generate(ids[:1, 2:], max_new_tokens=10)
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=10)[0, 2:], alone[0])
