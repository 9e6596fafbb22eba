"""RoPE (a Q/K transform) and ALiBi (a bias provider) through the attention hooks: exact
against Hugging Face's formulas, relative by construction, and right under a KV cache (the new
tokens' positions continue from the cache, not from 0). 2-D axial RoPE on a patch grid: by
hand, relative in row and column, and wired through ViT."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


# ---------------------------------------------------------------------------------------------
# 2-D axial RoPE on a patch grid (ViT's position='rope')


def test_axial_rope_rotates_the_halves_by_row_and_column_by_hand(rng):
    """Features [0, Dh/2) turn by the row, [Dh/2, Dh) by the column; within each half, pair
    (i, i + Dh/4) turns by pos * 10000^(-2i/(Dh/2)): written out with Python's math."""
    import math

    from tfam.layers import AxialRotaryEmbedding

    dh = 8
    x = torch.randn(1, 1, 3, dh, generator=rng, dtype=torch.float64)
    pos = torch.tensor([[0, 2, 5], [0, 3, 1]])  # (row, column) of 3 tokens
    out = AxialRotaryEmbedding(dh).rotate(x, pos)
    expected = x.clone()
    half, quarter = dh // 2, dh // 4
    for t in range(3):
        for axis in range(2):
            p = int(pos[axis, t])
            for i in range(quarter):
                a, b = axis * half + i, axis * half + i + quarter
                theta = p * 10000 ** (-2 * i / half)
                xa, xb = float(x[0, 0, t, a]), float(x[0, 0, t, b])
                expected[0, 0, t, a] = xa * math.cos(theta) - xb * math.sin(theta)
                expected[0, 0, t, b] = xb * math.cos(theta) + xa * math.sin(theta)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[..., 0, :], x[..., 0, :]), "(0, 0) is not rotated"


@settings(max_examples=20, deadline=None)
@given(
    st.tuples(st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.integers(-5, 5), st.integers(-5, 5)),
)
def test_axial_rope_scores_depend_on_row_and_column_offsets_only(q_at, k_at, shift):
    """q_(r,c) . k_(r',c') after rotation depends on (r - r', c - c') only: moving both
    patches by one shift keeps it."""
    from tfam.layers import AxialRotaryEmbedding

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 8, generator=gen, dtype=torch.float64)
    rope = AxialRotaryEmbedding(8)

    def score(qp: tuple[int, int], kp: tuple[int, int]) -> torch.Tensor:
        qr, kr = rope(q, k, torch.tensor(qp)[:, None], torch.tensor(kp)[:, None])
        return (qr * kr).sum()

    def moved(p: tuple[int, int]) -> tuple[int, int]:
        return (p[0] + shift[0], p[1] + shift[1])

    torch.testing.assert_close(
        score(q_at, k_at), score(moved(q_at), moved(k_at)), rtol=1e-10, atol=1e-10
    )


def test_axial_rope_tells_rows_from_columns(rng):
    from tfam.layers import AxialRotaryEmbedding

    rope = AxialRotaryEmbedding(8)
    q = torch.randn(1, 1, 1, 8, generator=rng, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 8, generator=rng, dtype=torch.float64)

    def score(kp: tuple[int, int]) -> torch.Tensor:
        qr, kr = rope(q, k, torch.zeros(2, 1, dtype=torch.long), torch.tensor(kp)[:, None])
        return (qr * kr).sum()

    assert not torch.allclose(score((1, 0)), score((0, 1)))
    with pytest.raises(ValueError, match=r"expected \(2, 1\) \(row, column\) per token"):
        rope(q, k, torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="head_dim=6 is invalid for 2-D RoPE"):
        AxialRotaryEmbedding(6)


def test_grid_positions_put_the_prefix_at_the_origin():
    from tfam.layers import TokenPositions

    where = TokenPositions.on_grid((2, 3), prefix=1)
    assert where.length == 7
    assert where.query(torch.device("cpu")).tolist() == [
        [0, 0, 0, 0, 1, 1, 1],
        [0, 0, 1, 2, 0, 1, 2],
    ]


def vit_rope(**kw) -> torch.nn.Module:
    import tfam

    torch.manual_seed(0)
    values = dict(dim=16, heads=2, depth=1, image_size=(8, 12), patch_size=2, num_classes=3)
    return tfam.create_model("vit", position="rope", **(values | kw)).double().eval()


def test_vit_rope_scores_follow_the_patch_grid():
    """A uniform image gives every patch the same Q and K, so in block 0 the log-ratio
    log w[i, j] - log w[i, i] is the rotated score's change, a function of (row, column)
    offset alone: equal for equal 2-D offsets, different for offsets equal only when the
    grid is flattened to one sequence (the grid's positions reach the transform)."""
    model = vit_rope(class_token=False, pool="mean", init_std=0.5)  # scores of O(1)
    gw = 6  # 4 x 6 patches
    with torch.no_grad():
        _, weights = model(torch.full((1, 3, 8, 12), 0.3, dtype=torch.float64), True)
    w = weights["encoder"][0][0].log()  # (H, N, N)

    def change(q: tuple[int, int], k: tuple[int, int]) -> torch.Tensor:
        i, j = q[0] * gw + q[1], k[0] * gw + k[1]
        return w[:, i, j] - w[:, i, i]

    torch.testing.assert_close(change((0, 0), (1, 1)), change((2, 3), (3, 4)), rtol=0, atol=1e-12)
    torch.testing.assert_close(change((1, 5), (0, 2)), change((3, 4), (2, 1)), rtol=0, atol=1e-12)
    # (0, 5) -> (1, 0) is one step in the flattened sequence, like (0, 0) -> (0, 1): not on
    # the grid.
    assert (change((0, 5), (1, 0)) - change((0, 0), (0, 1))).abs().max() > 1e-2
    assert (change((0, 0), (1, 0)) - change((0, 0), (0, 1))).abs().max() > 1e-2


def test_vit_rope_reading_cls_alone_equals_the_full_path():
    """ViT's last block computes the [CLS] row alone: its keys keep their grid positions;
    another image size (another grid) runs the same way."""
    model = vit_rope(depth=2)
    for size in ((8, 12), (10, 6)):
        x = torch.randn(
            2, 3, *size, generator=torch.Generator().manual_seed(2), dtype=torch.float64
        )
        with torch.no_grad():
            short = model(x)
            full = model.forward_head(model.forward_features(x))
        torch.testing.assert_close(short, full, rtol=1e-12, atol=1e-12)


def test_vit_rope_needs_a_head_width_divisible_by_4():
    import tfam

    with pytest.raises(ValueError, match=r"heads=2 is invalid: position='rope' on a patch grid"):
        tfam.create_model("vit", dim=12, heads=2, image_size=4, patch_size=2, position="rope")
