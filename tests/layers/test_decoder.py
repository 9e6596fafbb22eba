"""Decoder blocks, the one stack class and the KV cache.

A decoder is causal (no position sees a later one), cached incremental decoding equals full
recomputation step by step, cross-attention runs with Lq != Lk, and a DecoderBlock equals
torch.nn.TransformerDecoderLayer with the same weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tfam.config import BaseConfig
from tfam.layers import DecoderBlock, EncoderBlock, TransformerStack, pad_token_mask


def cfg(**kw) -> BaseConfig:
    base = dict(dim=12, heads=3, depth=2, ffn_dim=20, attention="math")
    return BaseConfig(**{**base, **kw})


def randomized(module: nn.Module, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.4)
    return module.double().eval()


@pytest.mark.parametrize("attention", ["math", "sdpa", "auto"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_stack_cannot_see_the_future(rng, attention, norm_first):
    stack = randomized(TransformerStack(cfg(attention=attention, norm_first=norm_first), "decoder"))
    x = torch.randn(2, 7, 12, generator=rng, dtype=torch.float64)
    memory = torch.randn(2, 5, 12, generator=rng, dtype=torch.float64)
    out, _ = stack(x, memory=memory)
    for t in range(6):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn(2, 6 - t, 12, generator=rng, dtype=torch.float64)
        out2, _ = stack(changed, memory=memory)
        torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], rtol=0, atol=1e-12)
        assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])


@pytest.mark.parametrize("attention", ["math", "sdpa"])
def test_causal_encoder_stack_cannot_see_the_future(rng, attention):
    """A decoder-only model's stack (GPT): self-attention blocks with causal=True."""
    stack = randomized(TransformerStack(cfg(attention=attention), causal=True))
    x = torch.randn(3, 6, 12, generator=rng, dtype=torch.float64)
    out, _ = stack(x)
    changed = x.clone()
    changed[:, 4:] += 1.0
    torch.testing.assert_close(stack(changed)[0][:, :4], out[:, :4], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["math", "sdpa", "auto"])
@pytest.mark.parametrize("kind", ["decoder", "causal"])
def test_cached_incremental_decoding_equals_full_recomputation(rng, attention, kind):
    stack = TransformerStack(
        cfg(attention=attention), kind="decoder" if kind == "decoder" else "encoder", causal=True
    )
    stack = randomized(stack)
    x = torch.randn(2, 6, 12, generator=rng, dtype=torch.float64)
    memory = (
        torch.randn(2, 4, 12, generator=rng, dtype=torch.float64) if kind == "decoder" else None
    )
    memory_mask = pad_token_mask(torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]]), pad_token_id=0)
    if memory is None:
        memory_mask = None
    full, _ = stack(x, memory=memory, memory_mask=memory_mask)
    cache = stack.make_cache(max_len=6)
    # A 2-token prompt first, then one token per step: each step's output equals the full run's.
    steps = [(0, 2)] + [(t, t + 1) for t in range(2, 6)]
    for start, end in steps:
        assert cache.position == start
        out, _ = stack(x[:, start:end], memory=memory, memory_mask=memory_mask, cache=cache)
        torch.testing.assert_close(out, full[:, start:end], rtol=1e-12, atol=1e-12)
        if memory is not None:
            memory = None if start > 0 else memory  # cross K/V are cached after the first call
    assert cache.position == 6
    with pytest.raises(ValueError, match="max_len=6"):
        stack(x[:, :1], memory=None, memory_mask=memory_mask, cache=cache)


def test_cache_reorder_follows_beams(rng):
    stack = randomized(TransformerStack(cfg(), causal=True))
    x = torch.randn(3, 4, 12, generator=rng, dtype=torch.float64)
    cache = stack.make_cache(max_len=5)
    stack(x, cache=cache)
    order = torch.tensor([2, 2, 0])
    cache.reorder(order)
    step = torch.randn(3, 1, 12, generator=rng, dtype=torch.float64)
    out, _ = stack(step, cache=cache)
    full, _ = stack(torch.cat([x[order], step], dim=1))
    torch.testing.assert_close(out, full[:, -1:], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attention", ["math", "sdpa"])
def test_cross_attention_with_lq_not_lk_and_padding(rng, attention):
    block = randomized(DecoderBlock(cfg(attention=attention)))
    x = torch.randn(2, 3, 12, generator=rng, dtype=torch.float64)
    memory = torch.randn(2, 9, 12, generator=rng, dtype=torch.float64)
    ids = torch.tensor([[5, 6, 7, 8, 9, 1, 2, 3, 4], [5, 6, 7, 0, 0, 0, 0, 0, 0]])
    memory_mask = pad_token_mask(ids, pad_token_id=0)
    out, (self_w, cross_w) = block(x, memory, memory_mask=memory_mask, need_weights=True)
    assert out.shape == (2, 3, 12)
    assert self_w.shape == (2, 3, 3, 3) and cross_w.shape == (2, 3, 3, 9)
    assert (cross_w[1, :, :, 3:] == 0).all(), "padded source tokens get no attention"
    assert (self_w.triu(1) == 0).all(), "masked self-attention"
    # Padding does not change the result: the short source alone gives the same output.
    alone, _ = block(x[1:], memory[1:, :3])
    torch.testing.assert_close(out[1:], alone, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_block_equals_torch_transformer_decoder_layer(rng, norm_first):
    d, h = 12, 3
    ref = nn.TransformerDecoderLayer(
        d, h, dim_feedforward=20, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    ref = randomized(ref)
    ours = (
        DecoderBlock(cfg(activation="relu", norm_eps=1e-5, norm_first=norm_first, attention="sdpa"))
        .double()
        .eval()
    )
    pairs = {
        "mhsa.qkv": ref.self_attn.in_proj_weight,
        "mhsa.qkv.bias": ref.self_attn.in_proj_bias,
        "mhsa.out_proj": ref.self_attn.out_proj.weight,
        "mhsa.out_proj.bias": ref.self_attn.out_proj.bias,
        "cross_attn.qkv": ref.multihead_attn.in_proj_weight,
        "cross_attn.qkv.bias": ref.multihead_attn.in_proj_bias,
        "cross_attn.out_proj": ref.multihead_attn.out_proj.weight,
        "cross_attn.out_proj.bias": ref.multihead_attn.out_proj.bias,
        "mlp.fc1": ref.linear1.weight,
        "mlp.fc1.bias": ref.linear1.bias,
        "mlp.fc2": ref.linear2.weight,
        "mlp.fc2.bias": ref.linear2.bias,
        "norm1": ref.norm1.weight,
        "norm1.bias": ref.norm1.bias,
        "norm_cross": ref.norm2.weight,
        "norm_cross.bias": ref.norm2.bias,
        "norm2": ref.norm3.weight,
        "norm2.bias": ref.norm3.bias,
    }
    state = {(k if k.endswith(".bias") else k + ".weight"): v for k, v in pairs.items()}
    ours.load_state_dict(state)
    x = torch.randn(2, 5, d, generator=rng, dtype=torch.float64)
    memory = torch.randn(2, 7, d, generator=rng, dtype=torch.float64)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 4:] = False
    expected = ref(
        x,
        memory,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64),
        memory_key_padding_mask=~keep,  # torch.nn: True = blocked
        tgt_is_causal=True,
    )
    out, _ = ours(x, memory, memory_mask=keep[:, None, None, :])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_encoder_block_is_not_causal_by_default(rng):
    block = randomized(EncoderBlock(cfg()))
    x = torch.randn(1, 4, 12, generator=rng, dtype=torch.float64)
    changed = x.clone()
    changed[:, -1] += 1.0
    # Causal attention would leave token 0 exactly unchanged; here it sees the last token.
    assert not torch.equal(block(changed)[0][:, 0], block(x)[0][:, 0])


def test_stack_kind_is_checked():
    with pytest.raises(ValueError, match="kind='decode' is invalid"):
        TransformerStack(cfg(), kind="decode")
