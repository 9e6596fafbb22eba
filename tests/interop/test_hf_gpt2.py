"""Hugging Face GPT-2 <-> tfam GPT: random-config models built offline (odd head counts, small
vocabularies) give the same hidden states and logits, with and without left padding, the same
greedy continuations, and survive a round trip."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.layers import KERNELS  # noqa: E402
from tfam.layers.kernels import MathKernel  # noqa: E402
from tfam.models.gpt import GPT  # noqa: E402

ATOL = 1e-5
VOCAB = 37


pytestmark = pytest.mark.usefixtures("one_thread")


def hf_config(**values: object) -> transformers.GPT2Config:
    base = dict(
        n_embd=24,
        n_layer=2,
        n_head=3,
        vocab_size=VOCAB,
        n_positions=40,
        bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1,
        attn_implementation="eager",
    )
    base.update(values)
    return transformers.GPT2Config(**base)


def randomize(module: nn.Module) -> nn.Module:
    """Unit-scale random weights (seeded by the caller), so the logits are far from uniform and
    greedy choices are decisive: norm gains near 1, biases of 0.2, matrices std 1/sqrt(fan_in)
    (Conv1D weights are (in, out)), embeddings of 0.5."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            elif "wte" in name or "wpe" in name or "embed" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)
    return module


def hf_lm(seed: int = 0, **values: object) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(seed)
    return randomize(transformers.GPT2LMHeadModel(hf_config(**values))).eval()


def hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """The position ids HF's ``generate`` derives for a left-padded batch; its ``forward``
    counts from 0 at the first column unless it is given these (tfam derives them itself)."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def left_padded(
    batch: int = 3, length: int = 7, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (B, L) and a mask whose row i has i pad tokens on the left (row 0 has none)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB - 1, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for i in range(batch):
        mask[i, :i] = 0
        ids[i, :i] = 0  # the pad id
    return ids, mask


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("fused_qkv", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_lm_logits_and_hidden_states_match_hf(attention: str, fused_qkv: bool, padded: bool):
    hf = hf_lm()
    model = from_hf(hf, fused_qkv=fused_qkv, attention=attention).eval()
    assert isinstance(model, GPT) and model.config.heads == 3
    ids, mask = left_padded()
    if not padded:
        mask = torch.ones_like(mask)
    with torch.no_grad():
        ref = hf(
            input_ids=ids,
            attention_mask=mask,
            position_ids=hf_positions(mask),
            output_hidden_states=True,
        )
        logits = model(ids, attention_mask=mask)
        hidden = model.forward_features(ids, attention_mask=mask)
    real = mask.bool()  # padding rows are never read; HF and tfam fill them differently
    assert torch.allclose(logits[real], ref.logits[real], atol=ATOL, rtol=0)
    assert torch.allclose(hidden[real], ref.hidden_states[-1][real], atol=ATOL, rtol=0)


def test_gpt2_model_hidden_states_match_hf():
    torch.manual_seed(3)
    hf = randomize(transformers.GPT2Model(hf_config(n_inner=40, n_head=5, n_embd=20))).eval()
    model = from_hf(hf).eval()
    assert model.config.ffn_dim == 40 and model.config.tie_output
    ids, mask = left_padded()
    with torch.no_grad():
        ref = hf(
            input_ids=ids, attention_mask=mask, position_ids=hf_positions(mask)
        ).last_hidden_state
        ours = model.forward_features(ids, attention_mask=mask)
    real = mask.bool()
    assert torch.allclose(ours[real], ref[real], atol=ATOL, rtol=0)


def test_left_padding_does_not_change_a_prompts_logits():
    """Row 2 of the padded batch (2 pads) equals the same prompt alone, in HF and in tfam."""
    model = from_hf(hf_lm()).eval()
    ids, mask = left_padded()
    with torch.no_grad():
        batch = model(ids, attention_mask=mask)
        alone = model(ids[2:, 2:])
    assert torch.allclose(batch[2, 2:], alone[0], atol=ATOL, rtol=0)


def test_future_tokens_do_not_change_past_logits():
    model = from_hf(hf_lm()).eval()
    ids, _ = left_padded(batch=2, length=10)
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 5) % VOCAB
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :6], b[:, :6], atol=0, rtol=0)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generate_equals_hf(use_cache: bool):
    hf = hf_lm(seed=5)
    model = from_hf(hf).eval()
    ids, mask = left_padded(seed=6)
    eos = VOCAB - 1
    ref = hf.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=12,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=0,
    )
    ours = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=12,
        eos_token_id=eos,
        pad_token_id=0,
        use_cache=use_cache,
    )
    assert ours.shape[1] > ids.shape[1]
    assert torch.equal(ours, ref)


def test_cached_generation_equals_uncached_for_a_left_padded_batch():
    model = from_hf(hf_lm(seed=7)).eval()
    ids, mask = left_padded(batch=4, seed=8)
    for kwargs in (dict(), dict(num_beams=3), dict(do_sample=True, top_k=5, top_p=0.9)):
        outs = []
        for use_cache in (True, False):
            g = torch.Generator().manual_seed(0)
            outs.append(
                model.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=10,
                    eos_token_id=None,
                    use_cache=use_cache,
                    generator=g if kwargs.get("do_sample") else None,
                    **kwargs,
                )
            )
        assert outs[0].shape == (4, ids.shape[1] + 10)
        assert torch.equal(outs[0], outs[1]), kwargs


@pytest.mark.parametrize("tie", [True, False])
def test_to_hf_round_trip(tie: bool):
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt",
        dim=30,
        depth=2,
        heads=3,
        vocab_size=VOCAB,
        max_positions=24,
        tie_output=tie,
        dropout=0.0,
        attn_dropout=0.0,
    )
    randomize(model).eval()
    hf = to_hf(model)
    assert isinstance(hf, transformers.GPT2LMHeadModel)
    assert (hf.lm_head.weight is hf.transformer.wte.weight) == tie
    ids, mask = left_padded()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=hf_positions(mask)).logits
        ours = model(ids, attention_mask=mask)
    real = mask.bool()
    assert torch.allclose(ours[real], ref[real], atol=ATOL, rtol=0)
    back = from_hf(hf)
    assert back.config == model.config
    state, again = model.state_dict(), back.state_dict()
    assert state.keys() == again.keys()
    for name in state:
        assert torch.equal(state[name], again[name]), name


def test_converted_weights_are_copies():
    hf = hf_lm()
    model = from_hf(hf)
    with torch.no_grad():
        hf.transformer.h[0].attn.c_attn.weight.add_(1.0)
        hf.transformer.wte.weight.add_(1.0)
    w = model.stack.blocks[0].mhsa.qkv.weight
    assert not torch.allclose(w, hf.transformer.h[0].attn.c_attn.weight.t())
    assert model.lm_head.weight is model.tok_embed.weight  # tied on the tfam side too


def test_special_ids_outside_the_vocabulary_become_none():
    hf = hf_lm(bos_token_id=50256, eos_token_id=50256)
    config = from_hf(hf).config
    assert config.bos_token_id is None and config.eos_token_id is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        (dict(scale_attn_weights=False), "scale_attn_weights"),
        (dict(activation_function="gelu_fast"), "activation_function"),
    ],
)
def test_from_hf_refuses_what_tfam_computes_differently(values: dict, message: str):
    with pytest.raises(ValueError, match=message):
        from_hf(hf_lm(**values))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(position="rope"), "position"),
        (dict(norm_first=False), "norm_first"),
        (dict(activation="swiglu"), "activation"),
        (dict(qkv_bias=False), "qkv_bias"),
    ],
)
def test_to_hf_refuses_what_gpt2_cannot_express(overrides: dict, message: str):
    model = tfam.create_model("gpt", dim=12, depth=1, heads=3, vocab_size=VOCAB, **overrides)
    with pytest.raises(ValueError, match=message):
        to_hf(model)


def test_to_hf_refuses_other_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KERNELS, "some_approximation", MathKernel)
    model = tfam.create_model("gpt", dim=12, depth=1, heads=3, vocab_size=VOCAB)
    model.set_attention("some_approximation")
    with pytest.raises(ValueError, match=r"attention='some_approximation'.*set_attention"):
        to_hf(model)


def test_to_hf_warns_that_drop_path_is_dropped() -> None:
    model = tfam.create_model("gpt", dim=12, depth=1, heads=3, vocab_size=VOCAB, drop_path=0.1)
    with pytest.warns(UserWarning, match="drop_path=0.1 is dropped: GPT-2 has no stochastic"):
        to_hf(model)
