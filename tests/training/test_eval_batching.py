"""Evaluation and decoding in batches bounded by tokens (issue 21, point 7): the plan covers
every example once within its bounds, and only the batches change, not the numbers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import tfam
from tfam.cli.text import decode_batches, translate_ids
from tfam.training import TrainConfig, Trainer
from tfam.training.batching import eval_index_batches
from tfam.training.tasks import Seq2Seq

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12


class CopySet(torch.utils.data.Dataset):
    """Random strings to copy, lengths 1..14 (so token bounds cut batches of few examples)."""

    pad_token_id, bos_token_id, eos_token_id, vocab_size = PAD, BOS, EOS, VOCAB

    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        sizes = torch.randint(1, 15, (n,), generator=g)
        self.seqs = [torch.randint(3, VOCAB, (int(k),), generator=g) for k in sizes]
        self.lengths = [len(s) + 2 for s in self.seqs]

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.seqs[i]
        return torch.cat([s, torch.tensor([EOS])]), torch.cat(
            [torch.tensor([BOS]), s, torch.tensor([EOS])]
        )


def tiny_transformer() -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model(
        "transformer", dim=32, heads=4, depth=1, ffn_dim=64, vocab_size=VOCAB,
        max_positions=40, dropout=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("tokens", [1, 16, 40, 10_000])
def test_eval_batches_cover_every_example_within_the_bounds(tokens: int) -> None:
    lengths = torch.tensor([5, 3, 9, 3, 7, 1, 12, 4, 4, 8])
    batches = eval_index_batches(len(lengths), 4, lengths, tokens)
    seen = torch.cat(batches)
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    for b in batches:
        assert 1 <= b.numel() <= 4
        if b.numel() > 1:  # a lone example may exceed the budget
            assert b.numel() * int(lengths[b].max()) <= tokens
    # Sorted by length: each batch's examples are no longer than the next batch's.
    assert lengths[seen].tolist() == sorted(lengths.tolist())


def test_eval_batches_without_lengths_are_consecutive() -> None:
    batches = eval_index_batches(7, 3)
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert eval_index_batches(0, 3, [], 10) == []
    with pytest.raises(ValueError, match="lengths has 2 entries for 3 examples"):
        eval_index_batches(3, 3, [1, 2], 10)


def test_trainer_evaluation_bounded_by_tokens_gives_the_same_metrics(monkeypatch) -> None:
    data = CopySet(60)
    config = dict(device="cpu", progress=False, quiet=True, tensorboard=False, num_workers=0)
    task = Seq2Seq(generate_eval=True)
    widths: list[tuple[int, int]] = []
    original = task.eval_sums

    def recording(model, batch):
        widths.append(tuple(batch["tgt_ids"].shape))
        return original(model, batch)

    monkeypatch.setattr(task, "eval_sums", recording)
    whole = Trainer(tiny_transformer(), data, None, TrainConfig(**config), task=task)
    reference = whole.evaluate_metrics(data)
    assert len(widths) == 1  # 60 examples of <= 16 tokens: one batch under the defaults
    widths.clear()
    bounded = Trainer(
        tiny_transformer(), data, None, TrainConfig(**config, eval_batch_tokens=40), task=task
    )
    result = bounded.evaluate_metrics(data)
    assert len(widths) > 5
    # The bound holds: examples x longest (target, with <bos>/<eos>) <= 40 padded tokens.
    assert all(rows * (width + 1) <= 40 for rows, width in widths if rows > 1)
    assert set(result) == set(reference)
    for key in ("acc", "exact", "gen_exact"):  # counts: identical
        assert result[key] == reference[key], key
    assert math.isclose(result["loss"], reference["loss"], rel_tol=1e-6)


def test_decode_batches_bound_sentences_beams_and_lengths() -> None:
    lengths = [3, 10, 2, 7, 7, 1, 20]
    batches = decode_batches(lengths, lambda n: n + 5, beam=4, batch_size=3, batch_tokens=200)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * 4 * (longest + longest + 5) <= 200
    # Without a binding token budget: consecutive runs of batch_size in length order.
    loose = decode_batches(lengths, lambda n: n + 5, beam=4, batch_size=3, batch_tokens=10**9)
    assert loose == [[5, 2, 0], [3, 4, 1], [6]]


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_ids_bounded_by_tokens_gives_the_same_outputs(beam: int) -> None:
    model = tiny_transformer().eval()
    tokenizer = SimpleNamespace(pad_id=PAD, eos_id=EOS)
    run = SimpleNamespace(model=model, tokenizer=tokenizer, device="cpu", max_positions=40)
    data = CopySet(12, seed=3)
    sources = [data[i][0].tolist() for i in range(len(data))]
    calls: list[tuple[int, int]] = []
    generate = model.generate

    def recording(src, **kwargs):
        calls.append((src.shape[0], src.shape[1] + kwargs["max_new_tokens"]))
        return generate(src, **kwargs)

    model.generate = recording
    reference = translate_ids(run, sources, beam=beam, max_new_tokens=8, batch_size=32)
    assert len(calls) == 1
    calls.clear()
    budget = 60 * beam
    bounded = translate_ids(
        run, sources, beam=beam, max_new_tokens=8, batch_size=32, batch_tokens=budget
    )
    assert len(calls) > 2
    assert all(rows == 1 or rows * beam * tokens <= budget for rows, tokens in calls)
    assert bounded == reference
