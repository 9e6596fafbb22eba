"""RoPE (a Q/K transform) and ALiBi (a bias provider) through the attention hooks: exact
against Hugging Face's formulas, relative by construction, and right under a KV cache (the new
tokens' positions continue from the cache, not from 0)."""

from __future__ import annotations

import pytest
import torch

from tfam.config import BaseConfig
from tfam.layers import ALiBi, RotaryEmbedding, TransformerStack, alibi_slopes


def test_rope_half_layout_equals_hugging_face_llama(rng):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q = torch.randn(2, 3, 5, 8, generator=rng, dtype=torch.float64)
    k = torch.randn(2, 3, 5, 8, generator=rng, dtype=torch.float64)
    pos = torch.arange(3, 8)
    rope = RotaryEmbedding(8, layout="half")
    ours = rope(q, k, pos, pos)
    inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    emb = torch.cat([pos[:, None] * inv, pos[:, None] * inv], dim=-1)[None]  # (1, L, Dh)
    ref = llama.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_rope_interleaved_is_the_same_rotation_on_paired_features(rng):
    """Interleaved pairs (2i, 2i+1) = half-layout pairs (i, i + Dh/2) after a feature shuffle."""
    x = torch.randn(1, 2, 4, 8, generator=rng, dtype=torch.float64)
    pos = torch.arange(4)
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # interleaved -> half order
    half = RotaryEmbedding(8, layout="half").rotate(x[..., perm], pos)
    inter = RotaryEmbedding(8, layout="interleaved").rotate(x, pos)
    torch.testing.assert_close(inter[..., perm], half, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_scores_depend_on_relative_position_only(rng, layout):
    rope = RotaryEmbedding(6, layout=layout)
    q = torch.randn(1, 1, 1, 6, generator=rng, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 6, generator=rng, dtype=torch.float64)

    def score(m: int, n: int) -> torch.Tensor:
        qr, kr = rope(q, k, torch.tensor([m]), torch.tensor([n]))
        return (qr * kr).sum()

    torch.testing.assert_close(score(3, 1), score(10, 8), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(score(3, 1), score(3, 2))


def test_rope_per_row_positions(rng):
    """Left-padded batches: each row has its own positions."""
    rope = RotaryEmbedding(4)
    x = torch.randn(2, 1, 3, 4, generator=rng, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2], [5, 6, 7]])
    out = rope.rotate(x, pos)
    torch.testing.assert_close(out[1:], rope.rotate(x[1:], torch.arange(5, 8)))


def test_rope_errors_name_the_argument():
    with pytest.raises(ValueError, match="head_dim=5"):
        RotaryEmbedding(5)
    with pytest.raises(ValueError, match="layout='twisted'"):
        RotaryEmbedding(4, layout="twisted")


def test_alibi_slopes_match_the_paper_and_bloom():
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)], dtype=torch.float64)
    )
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    for heads in (1, 3, 6, 12, 16):
        # BLOOM's tensor is slope_h * j for a full mask: its slopes are the j = 1 column.
        ref = bloom.build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]
        torch.testing.assert_close(alibi_slopes(heads), ref, rtol=1e-6, atol=0)


def test_alibi_bias_formula():
    bias = ALiBi(2)(torch.arange(3), torch.arange(4))
    assert bias.shape == (2, 3, 4)
    expected = (
        -torch.tensor([0.0625, 0.00390625])[:, None, None]
        * (torch.arange(3)[:, None] - torch.arange(4)[None, :]).abs()
    )
    torch.testing.assert_close(bias, expected)


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("attention", ["math", "sdpa"])
def test_cached_decoding_continues_positions(rng, position, attention):
    config = BaseConfig(dim=12, heads=3, depth=2, position=position, attention=attention)
    stack = TransformerStack(config, causal=True).double().eval()
    if position == "rope":
        assert stack.blocks[0].mhsa.qk_transform is not None and stack.bias_provider is None
    else:
        assert stack.bias_provider is not None
    x = torch.randn(2, 5, 12, generator=rng, dtype=torch.float64)
    full, _ = stack(x)
    cache = stack.make_cache(5)
    outs = [stack(x[:, :2], cache=cache)[0]] + [
        stack(x[:, t : t + 1], cache=cache)[0] for t in range(2, 5)
    ]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-12, atol=1e-12)


def test_attention_hooks_need_positions(rng):
    """Positions are computed once per forward by the caller (the stack); a Q/K transform
    without them is one clear error, not a silent default."""
    from tfam.layers import MultiHeadAttention

    mha = MultiHeadAttention(BaseConfig(dim=8, heads=2))
    mha.qk_transform = RotaryEmbedding(4)
    with pytest.raises(ValueError, match="positions is None"):
        mha(torch.randn(1, 3, 8, generator=rng))


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_per_row_positions_reach_the_stack_once(rng, position):
    """Left-padded rows: the stack computes positions once and every block reads them; a row
    padded on the left gives the outputs of the same row unpadded (RoPE per row; ALiBi is
    relative, so its shared positions give the same)."""
    from tfam.layers import TokenPositions

    config = BaseConfig(dim=12, heads=3, depth=2, position=position, attention="math")
    stack = TransformerStack(config, causal=True).double().eval()
    x = torch.randn(1, 4, 12, generator=rng, dtype=torch.float64)
    padded = torch.cat([torch.zeros(1, 2, 12, dtype=torch.float64), x], dim=1)
    key_mask = torch.tensor([[False, False, True, True, True, True]])
    out, _ = stack(
        padded,
        mask=key_mask[:, None, None, :],
        positions=TokenPositions.count(6, key_mask=key_mask),
    )
    alone, _ = stack(x)
    torch.testing.assert_close(out[:, 2:], alone, rtol=1e-12, atol=1e-12)
