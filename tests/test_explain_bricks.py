"""tfam.explain per brick: decoder stacks (masked self-attention, cross-attention Lt x Ls),
causal encoder stacks, every preset, and models too large for a tensor."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.config import BaseConfig
from tfam.explain import FLOPS_PER_ELEMENT, ExplainTable, explain, explain_stack
from tfam.layers import TransformerStack

B, LT, LS, D, H, DH, F = 2, 5, 7, 8, 2, 4, 32  # batch, target, source, width, heads, Dh, ffn


def row(table: ExplainTable, step: str, block: str, nth: int = 0) -> object:
    found = [r for r in table.rows if r.step == step and r.block == block]
    return found[nth]


def assert_pipeline(table: ExplainTable) -> None:
    """Totals are the sums of the top-level rows, and each top-level step consumes what the
    previous one produced."""
    top = [r for r in table.rows if r.level == 0]
    assert table.total_params == sum(r.params for r in top)
    assert table.total_flops == sum(r.flops for r in top)
    for prev, cur in zip(top, top[1:]):
        assert cur.input_shape == prev.output_shape, (prev.step, cur.step)


def decoder(**fields: object) -> TransformerStack:
    torch.manual_seed(0)
    return TransformerStack(BaseConfig(dim=D, heads=H, depth=2, **fields), kind="decoder")


@pytest.mark.parametrize(
    "fields",
    [{}, {"fused_qkv": False}, {"qkv_bias": False}, {"norm_first": False, "norm": "rmsnorm"}],
)
def test_decoder_stack_rows_shapes_and_totals(fields: dict) -> None:
    stack = decoder(**fields)
    table = explain_stack(stack, seq_len=LT, memory_len=LS, batch_size=B, blocks="all")
    assert table.total_params == sum(p.numel() for p in stack.parameters())
    assert_pipeline(table)
    steps = [r.step for r in table.rows if r.level == 0 and r.block == "1"]
    if stack.blocks[0].norm_first:
        assert steps == ["LN", "masked MHSA", "residual", "LN", "cross-attention", "residual",
                         "LN", "MLP", "residual"]  # fmt: skip
    else:
        assert steps == ["masked MHSA", "residual", "LN", "cross-attention", "residual", "LN",
                         "MLP", "residual", "LN"]  # fmt: skip
    for block in ("1", "2"):
        # masked self-attention: Lt queries over the Lt target tokens
        assert row(table, "masked MHSA", block).output_shape == (B, LT, D)
        assert row(table, "Q, K, V projections", block).output_shape == (B, 3, H, LT, DH)
        assert row(table, "scores Q K^T / sqrt(Dh)", block, 0).output_shape == (B, H, LT, LT)
        assert "causal" in row(table, "scores Q K^T / sqrt(Dh)", block, 0).note
        # cross-attention: Q from the Lt target tokens, K and V from the Ls source tokens
        cross = row(table, "cross-attention", block)
        assert (cross.input_shape, cross.output_shape) == ((B, LT, D), (B, LT, D))
        q = row(table, "Q projection", block)
        assert (q.input_shape, q.output_shape) == ((B, LT, D), (B, H, LT, DH))
        kv = row(table, "K, V projections", block)
        assert (kv.input_shape, kv.output_shape) == ((B, LS, D), (B, 2, H, LS, DH))
        assert kv.input_symbols == "Ls x D" and kv.output_symbols == "2 x H x Ls x Dh"
        scores = row(table, "scores Q K^T / sqrt(Dh)", block, 1)
        assert scores.output_shape == (B, H, LT, LS) and scores.output_symbols == "H x Lt x Ls"
        assert row(table, "softmax", block, 1).output_shape == (B, H, LT, LS)
        assert row(table, "weighted sum alpha V", block, 1).output_shape == (B, H, LT, DH)
        blk = stack.blocks[int(block) - 1]
        assert cross.params == sum(p.numel() for p in blk.cross_attn.parameters())
        assert q.params + kv.params + row(table, "W_O", block, 1).params == cross.params
    assert "2 x 2 x 5 x 7" in table.to_text()  # B x H x Lt x Ls


def test_cross_attention_flops_and_params_by_hand() -> None:
    table = explain_stack(decoder(), seq_len=LT, memory_len=LS, batch_size=B)
    q = B * (2 * LT * D * D + LT * D)
    kv = 2 * B * (2 * LS * D * D + LS * D)
    scores = B * H * (2 * LT * LS * DH + LT * LS)
    softmax = FLOPS_PER_ELEMENT["softmax"] * B * H * LT * LS
    weighted = B * H * 2 * LT * LS * DH
    w_o = B * (2 * LT * D * D + LT * D)
    assert row(table, "Q projection", "1").flops == q == 1360
    assert row(table, "K, V projections", "1").flops == kv == 3808
    assert row(table, "scores Q K^T / sqrt(Dh)", "1", 1).flops == scores == 1260
    assert row(table, "cross-attention", "1").flops == q + kv + scores + softmax + weighted + w_o
    assert row(table, "Q projection", "1").params == D * D + D
    assert row(table, "K, V projections", "1").params == 2 * (D * D + D)
    # per block: 3 norms, self- and cross-attention, MLP; two blocks
    per_block = 3 * 2 * D + 2 * 4 * (D * D + D) + (D * F + F) + (F * D + D)
    assert table.total_params == 2 * per_block == 2352


def test_decoder_table_matches_the_real_forward() -> None:
    """The traced shapes are those of a real forward: output (B, Lt, D), cross-attention
    weights (B, H, Lt, Ls)."""
    stack = decoder()
    x, memory = torch.randn(B, LT, D), torch.randn(B, LS, D)
    out, weights = stack(x, memory=memory, need_weights=True)
    table = explain(stack, seq_len=LT, memory_len=LS, batch_size=B, blocks="all")
    assert table.rows[-1].output_shape == tuple(out.shape)
    self_w, cross_w = weights[0]
    assert row(table, "softmax", "1", 0).output_shape == tuple(self_w.shape)
    assert row(table, "softmax", "1", 1).output_shape == tuple(cross_w.shape)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in stack.modules())
    assert all(p.device.type == "cpu" for p in stack.parameters())


def test_decoder_first_view_summarises_and_agrees_with_all() -> None:
    stack = decoder()
    first = explain_stack(stack, seq_len=LT, memory_len=LS)
    every = explain_stack(stack, seq_len=LT, memory_len=LS, blocks="all")
    summary = row(first, "same as block 1 (x 1)", "2..2")
    assert summary.params == sum(r.params for r in every.rows if r.block == "2" and not r.level)
    assert (first.total_params, first.total_flops) == (every.total_params, every.total_flops)
    assert_pipeline(first)
    text = first.to_text()
    assert "Lt = 5 target, Ls = 7 source tokens" in text
    assert "H x Lt x Dh -> H x Lt x Ls" in text and "per sequence" in text


@pytest.mark.parametrize("causal", [True, False])
def test_encoder_stack_totals_equal_parameter_count(causal: bool) -> None:
    config = BaseConfig(dim=12, heads=3, depth=3, activation="swiglu", norm="rmsnorm",
                        fused_qkv=False)  # fmt: skip
    stack = TransformerStack(config, causal=causal)
    table = explain(stack, seq_len=6, batch_size=3)
    assert table.total_params == sum(p.numel() for p in stack.parameters())
    assert_pipeline(table)
    attention = "masked MHSA" if causal else "MHSA"
    assert [r.step for r in table.rows if r.block == "1" and r.level == 0] == [
        "LN", attention, "residual", "LN", "MLP", "residual"
    ]  # fmt: skip
    scores = row(table, "scores Q K^T / sqrt(Dh)", "1")
    assert scores.output_shape == (3, 3, 6, 6) and scores.output_symbols == "H x L x L"
    assert ("causal" in scores.note) == causal
    assert row(table, "same as block 1 (x 2)", "2..3").params == 2 * (table.total_params // 3)


def test_stack_arguments_say_what_is_valid() -> None:
    with pytest.raises(ValueError, match="memory_len=None.*decoder"):
        explain_stack(decoder(), seq_len=LT)
    encoder = TransformerStack(BaseConfig(dim=D, heads=H, depth=1))
    with pytest.raises(ValueError, match="memory_len=7.*encoder"):
        explain_stack(encoder, seq_len=LT, memory_len=7)
    with pytest.raises(ValueError, match="seq_len=0"):
        explain_stack(encoder, seq_len=0)
    with pytest.raises(ValueError, match="no blocks"):
        explain_stack(TransformerStack(BaseConfig(dim=D, heads=H, depth=0)), seq_len=3)


@pytest.mark.parametrize("name", tfam.list_models())
def test_every_preset_explains(name: str) -> None:
    """(Totals against parameter counts are the preset contract's.) Every block step consumes
    what the step before it produced; an encoder-decoder restarts at its target embedding."""
    table = explain(name)
    top = [r for r in table.rows if r.level == 0]
    assert table.name == name and any(r.block for r in top)
    assert table.total_flops == sum(r.flops for r in top) > 0
    for prev, cur in zip(top, top[1:]):
        if cur.block:
            assert cur.input_shape == prev.output_shape, (prev.step, cur.step)


def test_huge_models_are_a_named_error() -> None:
    # A 10^6 x 10^6 image is 3,906,250,001 tokens: its scores are past any tensor's size.
    with pytest.raises(ValueError, match=r"too large.*sequence of 3,906,250,001 tokens"):
        explain("vit", image_size=10**6)
    # A (3D, D) W_QKV of D = 2^31 is past any tensor's size before the trace begins.
    with pytest.raises(ValueError, match=r"too large.*dim=2147483648"):
        explain("vit", dim=2**31, heads=1, depth=1)
    with pytest.raises(ValueError, match=r"too large.*sequence of 3,000,000,000 tokens"):
        explain_stack(TransformerStack(BaseConfig(dim=D, heads=H, depth=1)), seq_len=3 * 10**9)
