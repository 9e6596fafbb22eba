"""tfam BERT against Hugging Face transformers' BERT: random-config models (odd head count,
small vocabulary, built offline) convert both ways with equal hidden states and logits, padding
included."""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.interop.hf_bert import load_hf_bert_dir  # noqa: E402
from tfam.layers import KERNELS  # noqa: E402
from tfam.layers.kernels import MathKernel  # noqa: E402
from tfam.models.bert import Bert  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}


def hf_config(**changes):
    values = dict(
        vocab_size=61,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=20,
        type_vocab_size=3,
        num_labels=5,
        layer_norm_eps=1e-12,
    )
    values.update(changes)
    return transformers.BertConfig(**values)


def padded_batch(vocab: int = 61):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 4:] = 2
    return ids, mask, types


def build(cls, **kw):
    torch.manual_seed(0)
    model = cls(hf_config(), **kw).eval()
    # Random biases and norm weights, so a swapped or dropped one shows up.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("fused", [True, False])
def test_bert_model_hidden_states_and_pooler_match(fused):
    hf = build(transformers.BertModel)
    ids, mask, types = padded_batch()
    model = from_hf(hf, fused_qkv=fused)
    assert isinstance(model, Bert) and model.config.head == "none" and model.config.pooler
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        hidden = model(ids, mask, types)
    real = mask.bool()
    torch.testing.assert_close(hidden[real], ref.last_hidden_state[real], **TOL)
    torch.testing.assert_close(model.pool(hidden), ref.pooler_output, **TOL)


@pytest.mark.parametrize(
    "cls",
    [
        "BertForMaskedLM",
        "BertForTokenClassification",
        "BertForSequenceClassification",
    ],
)
def test_task_heads_logits_match_with_padding(cls):
    hf = build(getattr(transformers, cls))
    ids, mask, types = padded_batch()
    model = from_hf(hf)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        out = model(ids, mask, types)
    assert out.shape == ref.shape
    if out.ndim == 3:  # per token: padded rows are not defined by either side's contract
        real = mask.bool()
        torch.testing.assert_close(out[real], ref[real], **TOL)
    else:
        torch.testing.assert_close(out, ref, **TOL)
    if cls == "BertForMaskedLM":
        assert model.mlm.decoder.weight is model.embed.tokens.weight


def test_padding_does_not_change_real_tokens():
    hf = build(transformers.BertForSequenceClassification)
    model = from_hf(hf)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        short = model(ids[2:, :3], mask[2:, :3], types[2:, :3])
        padded = model(ids[2:], mask[2:], types[2:])
    torch.testing.assert_close(padded, short, **TOL)


@pytest.mark.parametrize("head", ["none", "mlm", "token", "sequence"])
def test_to_hf_round_trip(head):
    torch.manual_seed(0)
    model = Bert.config_class(
        dim=24, depth=2, heads=3, ffn_dim=40, vocab_size=61, max_positions=20,
        type_vocab_size=3, head=head, num_labels=4, dropout=0.0, attn_dropout=0.0,
    )  # fmt: skip
    model = Bert(model).eval()
    hf = to_hf(model)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        out = model(ids, mask, types)
        res = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    ref = res.last_hidden_state if head == "none" else res.logits
    real = mask.bool()
    if out.ndim == 3:
        torch.testing.assert_close(out[real], ref[real], **TOL)
    else:
        torch.testing.assert_close(out, ref, **TOL)
    again = from_hf(hf)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_hf_format_directory_loads_without_transformers_objects(tmp_path):
    hf = build(transformers.BertModel)
    hf.save_pretrained(tmp_path)
    model = load_hf_bert_dir(tmp_path)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        hidden = model(ids, mask, types)
    real = mask.bool()
    torch.testing.assert_close(hidden[real], ref[real], **TOL)


def test_refusals_name_the_problem():
    hf = build(transformers.BertModel)
    with pytest.raises(ValueError, match="hidden_act='mish'"):
        from_hf(transformers.BertModel(hf_config(hidden_act="mish")))
    model = Bert(Bert.config_class(dim=24, depth=1, heads=3, vocab_size=61, norm_first=True))
    with pytest.raises(ValueError, match="norm_first=True"):
        to_hf(model)
    converted = from_hf(hf)
    ids = torch.tensor([[1, 2, 61]])
    with pytest.raises(ValueError, match=r"input_ids holds ids in \[1, 61\]; expected 0 <= id "):
        converted(ids)
    with pytest.raises(ValueError, match="token_type_ids holds ids in"):
        converted(ids.clamp(max=60), token_type_ids=torch.full_like(ids, 3))
    with pytest.raises(ValueError, match="max_positions=20"):
        converted(torch.ones(1, 21, dtype=torch.long))


def small_bert(**overrides) -> Bert:
    values = dict(dim=24, depth=1, heads=3, ffn_dim=40, vocab_size=61, max_positions=20)
    return Bert(Bert.config_class(**(values | overrides)))


def test_to_hf_refuses_other_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel HF has no counterpart for (an approximation, say) must not convert silently.
    monkeypatch.setitem(KERNELS, "some_approximation", MathKernel)
    model = small_bert()
    model.set_attention("some_approximation")
    with pytest.raises(ValueError, match=r"attention='some_approximation'.*set_attention"):
        to_hf(model)


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi", "none"])
def test_to_hf_refuses_positions_other_than_learned(position: str) -> None:
    """HF BERT adds a learned table (embeddings.position_embeddings): any other scheme is one
    line naming position; the learned default keeps that layout and converts."""
    model = small_bert(position=position)
    assert model.embed.positions is None and "embed.positions.weight" not in model.state_dict()
    with pytest.raises(ValueError, match=rf"position='{position}' \(HF BERT adds a learned") as err:
        to_hf(model)
    assert "\n" not in str(err.value)
    assert small_bert().state_dict()["embed.positions.weight"].shape == (20, 24)


def test_to_hf_leaves_the_callers_random_stream_alone() -> None:
    model = small_bert()
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    to_hf(model)  # HF draws random initial weights before ours are copied in
    torch.testing.assert_close(torch.rand(4), expected, rtol=0, atol=0)


def test_to_hf_keeps_dtype_and_mode_and_warns_about_drop_path() -> None:
    model = small_bert(drop_path=0.1).double().train()
    with pytest.warns(UserWarning, match="drop_path=0.1 is dropped"):
        hf = to_hf(model)
    assert hf.training and next(hf.parameters()).dtype == torch.float64
    model.eval()
    hf.eval()
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids), hf(input_ids=ids).last_hidden_state, rtol=0, atol=1e-12
        )
