"""The encoder–decoder Transformer: exact against torch.nn.Transformer, causal, padding-proof,
and its cached decoding and beam search behave."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tfam
from tfam.generation import GenerationMixin, length_penalty_factor, warp_logits
from tfam.models.transformer import Transformer, TransformerConfig


def tiny(**kw) -> Transformer:
    values = dict(
        dim=16, heads=2, depth=2, ffn_dim=24, vocab_size=23, max_positions=32, dropout=0.0
    )
    torch.manual_seed(0)
    return tfam.create_model("transformer", **{**values, **kw}).eval()


def copy_from_torch(ours: Transformer, ref: nn.Transformer) -> None:
    """torch.nn.Transformer's weights into ours (its embeddings are ours: torch has none)."""
    state = {}
    for side, layers in (("encoder", ref.encoder.layers), ("decoder", ref.decoder.layers)):
        for i, layer in enumerate(layers):
            p = f"{side}.blocks.{i}."
            state[p + "mhsa.qkv.weight"] = layer.self_attn.in_proj_weight
            state[p + "mhsa.qkv.bias"] = layer.self_attn.in_proj_bias
            state[p + "mhsa.out_proj.weight"] = layer.self_attn.out_proj.weight
            state[p + "mhsa.out_proj.bias"] = layer.self_attn.out_proj.bias
            state[p + "mlp.fc1.weight"], state[p + "mlp.fc1.bias"] = (
                layer.linear1.weight,
                layer.linear1.bias,
            )
            state[p + "mlp.fc2.weight"], state[p + "mlp.fc2.bias"] = (
                layer.linear2.weight,
                layer.linear2.bias,
            )
            state[p + "norm1.weight"], state[p + "norm1.bias"] = (
                layer.norm1.weight,
                layer.norm1.bias,
            )
            if side == "encoder":
                state[p + "norm2.weight"], state[p + "norm2.bias"] = (
                    layer.norm2.weight,
                    layer.norm2.bias,
                )
            else:
                state[p + "cross_attn.qkv.weight"] = layer.multihead_attn.in_proj_weight
                state[p + "cross_attn.qkv.bias"] = layer.multihead_attn.in_proj_bias
                state[p + "cross_attn.out_proj.weight"] = layer.multihead_attn.out_proj.weight
                state[p + "cross_attn.out_proj.bias"] = layer.multihead_attn.out_proj.bias
                state[p + "norm_cross.weight"], state[p + "norm_cross.bias"] = (
                    layer.norm2.weight,
                    layer.norm2.bias,
                )
                state[p + "norm2.weight"], state[p + "norm2.bias"] = (
                    layer.norm3.weight,
                    layer.norm3.bias,
                )
    for side in ("encoder", "decoder"):
        norm = getattr(ref, side).norm
        state[f"{side}_norm.weight"], state[f"{side}_norm.bias"] = norm.weight, norm.bias
    missing, unexpected = ours.load_state_dict(state, strict=False)
    assert not unexpected
    assert all(k.endswith("tokens.weight") or k.startswith("lm_head") for k in missing)


@pytest.mark.filterwarnings("ignore:.*nested tensor:UserWarning")
@pytest.mark.filterwarnings("ignore:.*mismatched key_padding_mask:UserWarning")
@pytest.mark.filterwarnings("ignore:enable_nested_tensor:UserWarning")
@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_nn_transformer(norm_first):
    torch.manual_seed(1)
    ref = nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=24,
        dropout=0.0,
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    ours = tiny(norm_first=norm_first, final_norm=True)
    copy_from_torch(ours, ref)
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    tgt = torch.tensor([[1, 14, 15, 16], [1, 17, 18, 0]])
    # torch.nn.Transformer takes embedded inputs; feed it ours, then compare the decoder output.
    with torch.no_grad():
        expected = ref(
            ours.src_embed(src),
            ours.tgt_embed(tgt),
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
            tgt_is_causal=True,
            src_key_padding_mask=src == 0,
            tgt_key_padding_mask=tgt == 0,
            memory_key_padding_mask=src == 0,
        )
        expected_logits = ours.lm_head(expected)
        logits = ours(src, tgt)
    real = tgt != 0  # padded target rows attend to nothing real in torch; compare real tokens
    torch.testing.assert_close(logits[real], expected_logits[real], rtol=1e-5, atol=1e-5)


def test_decoder_cannot_see_the_future():
    model = tiny()
    src = torch.randint(3, 23, (2, 6))
    tgt = torch.randint(3, 23, (2, 7))
    logits = model(src, tgt)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(3, 23, (2, 6 - t))
        torch.testing.assert_close(
            model(src, changed)[:, : t + 1], logits[:, : t + 1], rtol=0, atol=1e-6
        )


def test_a_padded_batch_equals_each_sequence_alone():
    model = tiny()
    a = torch.tensor([[5, 6, 7, 8, 9]])
    b = torch.tensor([[10, 11, 12]])
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    ta, tb = torch.tensor([[1, 13, 14]]), torch.tensor([[1, 15]])
    tgt = torch.tensor([[1, 13, 14], [1, 15, 0]])
    batch = model(src, tgt)
    torch.testing.assert_close(batch[:1], model(a, ta), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch[1:, :2], model(b, tb), rtol=1e-5, atol=1e-6)
    out = model.generate(src, max_new_tokens=6)
    alone = model.generate(b, max_new_tokens=6)
    torch.testing.assert_close(out[1:, : alone.shape[1]], alone)


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_cached_decoding_equals_full_recomputation_step_by_step(position):
    model = tiny(position=position)
    src = torch.randint(3, 23, (3, 6))
    state_c, start = model.prepare_decoding(src, None, 8, use_cache=True)
    state_f, _ = model.prepare_decoding(src, None, 8, use_cache=False)
    seq = start
    step_in = start
    for _ in range(8):
        cached = model.decode_step(state_c, step_in)
        full = model.decode_step(state_f, seq)
        torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)
        token = full.argmax(-1, keepdim=True)
        seq = torch.cat([seq, token], dim=1)
        step_in = token
    assert torch.equal(
        model.generate(src, max_new_tokens=8),
        model.generate(src, max_new_tokens=8, use_cache=False),
    )
    beams = dict(num_beams=3, length_penalty=0.6, max_new_tokens=8)
    assert torch.equal(model.generate(src, **beams), model.generate(src, use_cache=False, **beams))


def test_beam_size_one_without_length_penalty_equals_greedy():
    model = tiny()
    src = torch.randint(3, 23, (3, 6))
    state, start = model.prepare_decoding(src, None, 10, use_cache=True)
    beam = model._beam_search(state, start, 10, 1, 0.0, [2], 0, True)
    greedy = model.generate(src, max_new_tokens=10)
    torch.testing.assert_close(beam, greedy[:, : beam.shape[1]])


class ScriptedModel(GenerationMixin, nn.Module):
    """A decoder whose next-token distribution depends only on the last token, scripted so that
    a short hypothesis ends first but a longer one scores better under a length penalty."""

    class Config:
        eos_token_id, pad_token_id = 0, 0

    def __init__(self, table: dict[int, dict[int, float]], vocab: int) -> None:
        super().__init__()
        self.config, self.table, self.vocab = self.Config(), table, vocab

    def prepare_decoding(self, input_ids, attention_mask, max_new_tokens, use_cache):
        from tfam.generation import DecodingState

        return DecodingState(), torch.full((input_ids.shape[0], 1), 1)

    def decode_step(self, state, ids):
        out = torch.full((ids.shape[0], self.vocab), -1e4)
        for i, last in enumerate(ids[:, -1].tolist()):
            for tok, p in self.table.get(last, {0: 1.0}).items():
                out[i, tok] = torch.tensor(p).log()
        return out


def test_beam_search_does_not_stop_early_under_a_length_penalty():
    # From <bos>=1: eos with 0.4, token 3 with 0.35, token 4 with 0.25. After 3 comes 5 (0.99)
    # then eos (0.99), after 4 comes eos. "Two hypotheses finished" happens at step 2; yet with
    # alpha = 2 the 3-token hypothesis 1 3 5 eos scores best and is only found at step 3.
    table = {
        1: {0: 0.4, 3: 0.35, 4: 0.25},
        3: {5: 0.99, 0: 0.01},
        4: {0: 1.0},
        5: {0: 0.99, 6: 0.01},
    }
    model = ScriptedModel(table, vocab=7)
    src = torch.zeros(1, 1, dtype=torch.long)
    out = model.generate(src, num_beams=2, length_penalty=2.0, max_new_tokens=6)
    assert out.tolist() == [[1, 3, 5, 0]]
    # The short one wins without the penalty.
    out = model.generate(src, num_beams=2, length_penalty=0.0, max_new_tokens=6)
    assert out.tolist() == [[1, 0]]
    assert length_penalty_factor(1, 0.6) == pytest.approx((6 / 6) ** 0.6)


def test_top_p_and_top_k_keep_the_right_tokens():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]]).log_softmax(-1)
    kept = torch.isfinite(warp_logits(logits, top_k=2))
    assert kept.tolist() == [[True, True, False, False]]
    probs = logits.softmax(-1)[0]
    p = float(probs[0] + probs[1]) - 1e-6  # the first two reach p
    assert torch.isfinite(warp_logits(logits, top_p=p)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(warp_logits(logits, top_p=1e-9)).tolist() == [[True, False, False, False]]


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"num_beams": 0}, r"num_beams=0 is invalid"),
        ({"top_p": 1.5}, r"top_p=1.5 is invalid: expected None or a number in \(0, 1\]"),
        ({"top_p": 0}, r"top_p=0 is invalid"),
        ({"temperature": -1.0}, r"temperature=-1.0 is invalid"),
        ({"max_new_tokens": 0}, r"max_new_tokens=0 is invalid"),
        (
            {"do_sample": True, "num_beams": 2},
            r"num_beams=2 is invalid: beam search is deterministic",
        ),
    ],
)
def test_bad_generation_arguments_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        tiny().generate(torch.randint(3, 23, (1, 4)), **kw)


def test_only_a_learned_table_bounds_the_new_tokens():
    src = torch.randint(3, 23, (1, 4))
    with pytest.raises(
        ValueError,
        match=r"^max_new_tokens=40 is invalid: the decoder has max_positions=32, which bounds "
        r"position='learned'",
    ):
        tiny(position="learned").generate(src, max_new_tokens=40)
    for position in ("sinusoidal", "rope", "alibi"):
        out = tiny(position=position).generate(src, max_new_tokens=40, eos_token_id=[])
        assert out.shape == (1, 41), position


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_positions_act_in_self_attention_only(position):
    """RoPE and ALiBi reach the self-attention of both stacks and not the cross-attention:
    the decoder reads the memory as a set (permuting its rows changes nothing), while the
    encoder and the decoder see their own tokens' order."""
    # Larger weights than the default init: scores of O(1), so positions move them visibly.
    model = tiny(position=position, init_std=0.5).double()
    decoder = model.decoder.blocks
    if position == "rope":
        assert all(b.mhsa.qk_transform is not None for b in [*model.encoder.blocks, *decoder])
    else:
        assert model.encoder.bias_provider is not None and model.decoder.bias_provider is not None
    assert all(
        b.cross_attn.qk_transform is None and b.cross_attn.bias_provider is None for b in decoder
    )
    src, tgt = torch.randint(3, 23, (2, 7)), torch.randint(3, 23, (2, 5))
    src[:, 0], src[:, 6], tgt[:, 1], tgt[:, 3] = 3, 4, 5, 6
    memory, mask, _ = model.encode(src)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        plain, _ = model.decode(tgt, memory, mask)
        shuffled, _ = model.decode(tgt, memory[:, perm], None if mask is None else mask[..., perm])
        swapped_src = model(src[:, [6, 1, 2, 3, 4, 5, 0]], tgt)
        swapped_tgt = model(src, tgt[:, [0, 3, 2, 1, 4]])
    torch.testing.assert_close(shuffled, plain, rtol=1e-12, atol=1e-12)
    assert (swapped_src[:, -1] - plain[:, -1]).abs().max() > 1e-3
    assert (swapped_tgt[:, -1] - plain[:, -1]).abs().max() > 1e-3


def test_bad_ids_are_named():
    model = tiny()
    with pytest.raises(
        ValueError, match=r"src_ids holds ids in \[0, 23\]; expected 0 <= id < vocab_size=23"
    ):
        model(torch.tensor([[0, 23]]), torch.tensor([[1]]))
    # Only a learned table bounds the length (sinusoids, the default, run past it).
    with pytest.raises(
        ValueError,
        match=r"^the source of 40 tokens is longer than max_positions=32, which bounds "
        r"position='learned' \(a table of 32 rows; other schemes run past it\)$",
    ):
        tiny(position="learned")(torch.randint(3, 23, (1, 40)), torch.tensor([[1]]))
    assert model(torch.randint(3, 23, (1, 40)), torch.tensor([[1]])).shape == (1, 1, 23)


def test_tied_embeddings_save_once_and_load_tied(tmp_path):
    model = tiny()
    assert model.lm_head.weight is model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    model.save_pretrained(tmp_path)
    loaded = tfam.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.tgt_embed.tokens.weight
    src, tgt = model.example_inputs()
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt), rtol=0, atol=0)
    untied = tiny(share_embeddings=False, tie_output=False)
    assert untied.lm_head.weight is not untied.tgt_embed.tokens.weight
    assert TransformerConfig(vocab_size=10).decoder_depth == 6
