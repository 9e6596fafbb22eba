"""max_positions bounds only a learned table: every other position scheme (sinusoids, RoPE,
ALiBi, none) runs past the training length in every sequence family, and a learned table asked
for more rows refuses in one line naming max_positions."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.training.tasks import task_for

PAST = ["sinusoidal", "rope", "alibi", "none"]
LEARNED_LINE = (
    r"^{what} of {n} tokens is longer than max_positions=8, which bounds position='learned' "
    r"\(a table of 8 rows; other schemes run past it\)$"
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def model(family: str, position: str) -> tfam.models.TfamModel:
    torch.manual_seed(0)
    values = dict(dim=16, heads=2, depth=1, vocab_size=13, max_positions=8, position=position)
    values["init_std"] = 0.5  # scores of O(1): positions move the outputs visibly
    return tfam.create_model(family, **values).double().eval()


def ids(length: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(3, 13, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("position", PAST)
def test_gpt_gives_logits_at_twice_max_positions(position):
    gpt = model("gpt", position)
    x = ids(16)
    x[:, 2], x[:, 10] = 3, 4  # two different tokens, swapped below
    with torch.no_grad():
        logits = gpt(x)
        short = gpt(x[:, :8])
    assert logits.shape == (2, 16, 13) and torch.isfinite(logits).all()
    # Causal: the first 8 rows are those of the sequence cut at the training length.
    torch.testing.assert_close(logits[:, :8], short, rtol=1e-12, atol=1e-12)
    # Order past the table is seen: swapping tokens 2 and 10 changes the last row, except
    # with no positions (a causal row then sees the set of the tokens before it, not their order).
    swapped = x.clone()
    swapped[:, [2, 10]] = x[:, [10, 2]]
    with torch.no_grad():
        last, again = gpt(x)[:, -1], gpt(swapped)[:, -1]
    if position == "none":
        torch.testing.assert_close(last, again, rtol=1e-10, atol=1e-12)
    else:
        assert (last - again).abs().max() > 1e-3


@pytest.mark.parametrize("position", PAST)
def test_bert_and_the_encoder_decoder_run_past_max_positions(position):
    bert = model("bert", position)
    with torch.no_grad():
        hidden = bert(ids(16))
    assert hidden.shape == (2, 16, 16) and torch.isfinite(hidden).all()
    seq2seq = model("transformer", position)
    with torch.no_grad():
        logits = seq2seq(ids(16), ids(12))
    assert logits.shape == (2, 12, 13) and torch.isfinite(logits).all()


def test_a_learned_table_refuses_in_one_line_naming_max_positions():
    cases = [
        ("gpt", lambda m: m(ids(16)), "the sequence", 16),
        ("bert", lambda m: m(ids(9)), "input_ids", 9),
        ("transformer", lambda m: m(ids(16), ids(3)), "the source", 16),
        ("transformer", lambda m: m(ids(3), ids(10)), "the target", 10),
    ]
    for family, call, what, n in cases:
        learned = model(family, "learned")
        with pytest.raises(ValueError, match=LEARNED_LINE.format(what=what, n=n)) as err:
            call(learned)
        assert "\n" not in str(err.value)
    # The table itself says the same, whoever calls it.
    from tfam.layers.position import TokenPositions

    gpt = model("gpt", "learned")
    with pytest.raises(ValueError, match=r"^a sequence of 10 positions is longer than max_pos"):
        gpt.position.values(TokenPositions(4, 6), gpt.pos_embed)


def test_the_causal_lm_task_bounds_only_a_learned_table():
    task = task_for("causal-lm")
    batch = task.collate([torch.arange(3, 13), torch.arange(2, 12)])  # 9 inputs per row
    sums = task.eval_sums(model("gpt", "rope").float(), batch)
    assert sums["loss"] > 0 and sums["count"] == 18
    with pytest.raises(ValueError, match=r"max_positions=8, which bounds position='learned'"):
        task.eval_sums(model("gpt", "learned").float(), batch)
