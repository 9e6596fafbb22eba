"""The parts of studies block-mixing and bert-vs-gpt: the causal flag, the decoder without
cross-attention, the compact vocabulary, the probe and the hidden positions."""

import pytest
import torch

from tfam.models import create_model
from tfam.studies.bert_vs_gpt import hidden_positions, linear_probe
from tfam.studies.block_mixing import prefix_only, remove_cross_attention, set_causal
from tfam.studies.textdata import CompactVocab, pad_rows

pytestmark = pytest.mark.usefixtures("one_thread")


def _gpt(**kw):
    torch.manual_seed(0)
    return create_model("gpt", vocab_size=11, dim=16, depth=2, heads=2, max_positions=8,
                        dropout=0.0, attn_dropout=0.0, **kw).eval()  # fmt: skip


def test_set_causal_decides_whether_a_position_reads_later_tokens():
    model = _gpt()
    x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 11  # change the last token only
    with torch.no_grad():
        causal = (model(x) - model(y))[:, :-1].abs().max()
        set_causal(model.stack, False)
        mixed = (model(x) - model(y))[:, :-1].abs().max()
        # A model without the mask, run on each prefix alone, reads no later token either.
        prefixed = (prefix_only(model, x) - prefix_only(model, y))[:, :-1].abs().max()
    assert causal == 0 and mixed > 1e-4 and prefixed == 0


def test_set_causal_refuses_a_score_bias_and_decoder_stacks():
    with pytest.raises(ValueError, match="score bias"):
        set_causal(_gpt(position="alibi").stack, False)
    t = create_model("transformer", vocab_size=11, dim=16, depth=1, heads=2, max_positions=8)
    with pytest.raises(ValueError, match="kind='encoder'"):
        set_causal(t.decoder, False)


def test_a_decoder_without_cross_attention_ignores_the_source():
    torch.manual_seed(0)
    t = create_model("transformer", vocab_size=11, dim=16, depth=1, heads=2, max_positions=8,
                     dropout=0.0, attn_dropout=0.0).eval()  # fmt: skip
    tgt = torch.tensor([[1, 5, 6, 7]])
    a, b = torch.tensor([[3, 4, 5, 2]]), torch.tensor([[9, 8, 3, 2]])
    with torch.no_grad():
        assert (t(a, tgt) - t(b, tgt)).abs().max() > 1e-4
        remove_cross_attention(t)
        assert (t(a, tgt) - t(b, tgt)).abs().max() == 0


def test_compact_vocab_keeps_specials_first_and_maps_the_rest_to_unk():
    rows = [torch.tensor([101, 7, 7, 7, 9, 9, 50, 102]), torch.tensor([101, 7, 9, 33, 102])]
    cv = CompactVocab(rows, size=6, specials=[0, 100, 101, 102], unk=100)
    assert cv.size == 6 and cv.unk == 1
    assert cv.encode(rows[0]).tolist() == [2, 4, 4, 4, 5, 5, 1, 3]
    assert cv.decode(cv.encode(rows[1])).tolist() == [101, 7, 9, 100, 102]
    assert cv.encode(torch.tensor([5000])).tolist() == [1]  # beyond the table: [UNK]
    assert cv.coverage == pytest.approx(11 / 13)
    ids, mask = pad_rows(rows, 0)
    assert ids.shape == (2, 8) and mask.sum().item() == 13 and ids[1, 5:].eq(0).all()


def test_linear_probe_separates_separable_features_and_not_noise():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (200,), generator=gen)
    noise = torch.randn(200, 4, generator=gen)
    signal = noise + 4.0 * y[:, None]
    assert linear_probe(signal[:100], y[:100], signal[100:], y[100:]) > 0.95
    assert linear_probe(noise[:100], y[:100], noise[100:], y[100:]) < 0.75


def test_hidden_positions_are_inner_and_never_unk():
    rows = [torch.tensor([2, 5, 1, 6, 3]), torch.tensor([2, 1, 3]), torch.tensor([2, 7, 3])]
    kept, where = hidden_positions(rows, unk=1)
    assert len(kept) == 2 and where[1] == 1
    assert all(0 < t < len(r) - 1 and int(r[t]) != 1 for r, t in zip(kept, where))


def test_a_bert_of_causal_blocks_reads_no_later_token():
    torch.manual_seed(0)
    bert = create_model("bert", vocab_size=11, dim=16, depth=1, heads=2, max_positions=8,
                        ffn_dim=32, dropout=0.0, attn_dropout=0.0).eval()  # fmt: skip
    x = torch.tensor([[1, 5, 6, 7, 8, 2]])
    y = x.clone()
    y[0, -1] = 9
    mask = torch.ones_like(x, dtype=torch.bool)
    with torch.no_grad():
        assert (bert(x, attention_mask=mask) - bert(y, attention_mask=mask))[:, :-1].abs().max() > 0
        set_causal(bert.encoder, True)
        assert (bert(x, attention_mask=mask) - bert(y, attention_mask=mask))[
            :, :-1
        ].abs().max() == 0
