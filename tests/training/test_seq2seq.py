"""Seq2seq training: the task (teacher forcing, label smoothing that ignores padding, counts of
real tokens, exact match), the inverse-square-root schedule, batches by token count bucketed by
length (every example once, within the budget, deterministic, resume-exact), and a tiny
encoder–decoder Transformer that learns the copy task to 100% exact match through the trainer.

The dataset here is a stand-in with the interface of ``tfam.data.sources.seq2seq.Seq2SeqDataset``:
items ``(src_ids = tokens + [eos], tgt_ids = [bos] + tokens + [eos])``, ``lengths`` (per
example max(Ls, Lt)), ``vocab_size`` and the special ids."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tfam
from tfam.training import TrainConfig, Trainer
from tfam.training.batching import count_token_batches, pack_sorted, token_batches
from tfam.training.optim import build_scheduler, inverse_sqrt_factor
from tfam.training.tasks import IGNORE_INDEX, TASKS, Seq2Seq, Task, split_batch, task_for

PAD, BOS, EOS, VOCAB = 0, 1, 2, 16


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CopySet(torch.utils.data.Dataset):
    """Random token strings to copy (symbols 3..VOCAB-1), lengths in [lo, hi]. ``fast`` adds a
    ``get_batch`` (items gathered in the main process); without it the trainer collates items
    through a DataLoader."""

    pad_token_id, bos_token_id, eos_token_id, vocab_size = PAD, BOS, EOS, VOCAB

    def __init__(self, n: int, seed: int, lo: int = 2, hi: int = 8, fast: bool = True) -> None:
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(lo, hi + 1, (n,), generator=g)
        self.seqs = [torch.randint(3, VOCAB, (int(k),), generator=g) for k in lengths]
        self.pairs = [(s.tolist(), s.tolist()) for s in self.seqs]
        self.lengths = [len(s) + 2 for s in self.seqs]  # max(Ls, Lt) = Lt
        if fast:
            self.get_batch = lambda idx: [self[int(i)] for i in idx]

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.seqs[i]
        return torch.cat([s, torch.tensor([EOS])]), torch.cat(
            [torch.tensor([BOS]), s, torch.tensor([EOS])]
        )


def tiny_transformer(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    # Pre-norm and embeddings initialised at D^-0.5 (the paper's scale, so tokens are not
    # drowned by the sinusoids after the sqrt(D) scaling): the tiny model learns in seconds.
    return tfam.create_model(
        "transformer",
        dim=32,
        heads=4,
        depth=2,
        ffn_dim=64,
        vocab_size=VOCAB,
        max_positions=16,
        dropout=0.0,
        norm_first=True,
        init_std=32**-0.5,
    )


# -- the task -----------------------------------------------------------------------------------
def test_task_protocol_and_registry() -> None:
    task = task_for("seq2seq", CopySet(4, 0))
    assert isinstance(task, Seq2Seq) and isinstance(task, Task)
    assert task.pad_id == PAD and task.eos_id == EOS
    assert set(TASKS) >= {"image-classification", "token-classification", "seq2seq"}
    with pytest.raises(ValueError, match="task='translation' is invalid: expected one of"):
        task_for("translation")


def test_collate_shifts_the_target_and_ignores_padding() -> None:
    task = Seq2Seq(pad_id=PAD)
    batch = task.collate(
        [(torch.tensor([5, 6, 2]), torch.tensor([1, 5, 6, 2])), ([7, 2], [1, 7, 2])]
    )
    assert batch["src_ids"].tolist() == [[5, 6, 2], [7, 2, 0]]
    assert batch["tgt_ids"].tolist() == [[1, 5, 6], [1, 7, 2]]  # target[:, :-1]
    assert batch["labels"].tolist() == [[5, 6, 2], [7, 2, IGNORE_INDEX]]  # target[:, 1:]
    assert float(task.count(batch)) == 5.0  # real target tokens, eos included


def test_label_smoothed_loss_ignores_padding_by_hand() -> None:
    """The loss sum, written out: per real token (1 - eps) * -log p(y) + eps/V * sum_c -log p(c);
    padded positions add nothing, whatever their logits."""
    torch.manual_seed(0)
    task = Seq2Seq(pad_id=PAD)
    batch = task.collate(
        [(torch.tensor([5, 6, 2]), torch.tensor([1, 5, 6, 4, 2])), ([7, 2], [1, 7, 2])]
    )
    logits = torch.randn(2, 4, VOCAB)

    class Fixed(torch.nn.Module):
        def __init__(self, out: torch.Tensor) -> None:
            super().__init__()
            self.out = out

        def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            return self.out

    eps = 0.1
    loss, sums = task.train_loss(Fixed(logits), batch, TrainConfig(label_smoothing=eps))
    logp = logits.log_softmax(-1)
    expected = plain = 0.0
    for b, t in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]:  # the real target tokens
        y = int(batch["labels"][b, t])
        expected += (1 - eps) * -logp[b, t, y] - eps / VOCAB * logp[b, t].sum()
        plain += -logp[b, t, y]
    assert float(task.count(batch)) == 6.0
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)
    assert float(sums["loss"]) == pytest.approx(float(plain), rel=1e-6)
    # Changing the logits of the padded position changes nothing.
    other = logits.clone()
    other[1, 2:] = 100.0 * torch.randn(2, VOCAB)
    again, _ = task.train_loss(Fixed(other), batch, TrainConfig(label_smoothing=eps))
    assert float(again) == float(loss)


def test_exact_match_counts_whole_sequences() -> None:
    task = Seq2Seq(pad_id=PAD)
    labels = torch.tensor([[5, 2, IGNORE_INDEX], [7, 8, 2], [4, 2, IGNORE_INDEX]])
    logits = F.one_hot(torch.tensor([[5, 2, 9], [7, 9, 2], [4, 2, 3]]), VOCAB).float()
    sums = task.sums(logits, labels, torch.tensor(0.0))
    assert float(sums["exact"]) == 2.0 and float(sums["seqs"]) == 3.0  # row 1 has a wrong token
    assert float(sums["correct"]) == 6.0 and float(sums["count"]) == 7.0
    m = task.reduce({k: float(v) for k, v in sums.items()})
    assert m["exact"] == pytest.approx(2 / 3) and m["acc"] == pytest.approx(6 / 7)


def test_padding_id_must_match_the_model() -> None:
    task = Seq2Seq(pad_id=3)
    batch = task.collate([([5, 2], [1, 5, 2])])
    with pytest.raises(ValueError, match="pad_id=3 of the seq2seq task is invalid"):
        task.train_loss(tiny_transformer(), batch, TrainConfig())


def test_accumulation_one_or_two_micro_batches_give_the_same_gradient() -> None:
    """The trainer's rule: each micro-batch's summed loss / real tokens of the whole batch."""
    task = Seq2Seq(pad_id=PAD)
    data = CopySet(6, 3)
    batch = task.collate([data[i] for i in range(6)])
    cfg = TrainConfig(label_smoothing=0.1)
    grads = []
    for parts in (1, 2):
        model = tiny_transformer()
        total = float(task.count(batch))
        for part in split_batch(batch, parts):
            loss, _ = task.train_loss(model, part, cfg)
            (loss / total).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)


# -- the schedule -------------------------------------------------------------------------------
def test_inverse_sqrt_values() -> None:
    w = 4
    f = [inverse_sqrt_factor(s, w) for s in range(12)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]  # linear warmup, peak at step n = warmup
    assert f[4:] == [math.sqrt(4 / n) for n in range(5, 13)]
    assert inverse_sqrt_factor(0, 0) == 1.0 and inverse_sqrt_factor(3, 0) == 0.5  # no warmup
    assert inverse_sqrt_factor(10_000, 4, min_factor=0.1) == 0.1  # floored after warmup
    assert inverse_sqrt_factor(0, 4, min_factor=0.5) == 0.25  # not during warmup
    # The paper's formula, D^-0.5 * min(n^-0.5, n * warmup^-1.5), with peak D^-0.5 warmup^-0.5.
    d, warmup = 512, 4000
    peak = d**-0.5 * warmup**-0.5
    for n in (1, 100, 3999, 4000, 4001, 10_000, 100_000):
        paper = d**-0.5 * min(n**-0.5, n * warmup**-1.5)
        assert peak * inverse_sqrt_factor(n - 1, warmup) == pytest.approx(paper, rel=1e-12)


def test_inverse_sqrt_scheduler_and_config() -> None:
    param = torch.nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.AdamW([param], lr=2e-3)
    sched = build_scheduler(opt, 3, 50, min_lr=1e-4, schedule="inverse_sqrt")
    seen = []
    for _ in range(50):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [2e-3 * inverse_sqrt_factor(s, 3, 1e-4 / 2e-3) for s in range(50)]
    assert seen == pytest.approx(expected, rel=1e-12)
    assert max(seen) == pytest.approx(2e-3) and seen.index(max(seen)) == 2
    with pytest.raises(ValueError, match="schedule='linear' is invalid: expected one of cosine"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="warmup_steps=-1 is invalid"):
        TrainConfig(warmup_steps=-1)
    with pytest.raises(ValueError, match="batch_tokens=0 is invalid"):
        TrainConfig(batch_tokens=0)


def test_warmup_steps_wins_over_warmup_epochs() -> None:
    cfg = TrainConfig(
        epochs=2, batch_size=4, warmup_epochs=1.0, warmup_steps=3, device="cpu", progress=False
    )
    trainer = Trainer(tiny_transformer(), CopySet(16, 0), None, cfg, task=Seq2Seq())
    assert trainer.warmup_steps == 3 and trainer.total_steps == 8


# -- token batches ------------------------------------------------------------------------------
def test_pack_sorted_fills_the_budget() -> None:
    assert pack_sorted([2, 2, 3, 3, 5, 8], 10) == [3, 2, 1]  # 3x3 = 9, then 2x5 = 10, then 8
    assert pack_sorted([1, 1, 1, 4, 4, 4], 8, min_examples=2) == [3, 2, 1]
    # min_examples wins over the budget (the trainer refuses a budget below min x longest).
    assert pack_sorted([1, 1, 1, 4, 4, 4], 8, min_examples=3) == [3, 3]


def test_token_batches_every_example_once_within_budget_deterministic() -> None:
    data = CopySet(300, 5, lo=1, hi=12)
    lengths = torch.tensor(data.lengths)
    budget = 64
    plans = []
    for epoch_seed in (0, 0, 1):
        g = torch.Generator().manual_seed(epoch_seed)
        plans.append(token_batches(lengths, budget, g))
    (order, offsets), (order2, offsets2), (order3, offsets3) = plans
    assert sorted(order.tolist()) == list(range(300))  # every example exactly once
    assert torch.equal(order, order2) and torch.equal(offsets, offsets2)  # deterministic
    assert not torch.equal(order, order3)  # another draw, another plan
    assert len(offsets) - 1 == len(offsets3) - 1 == count_token_batches(lengths, budget)
    for b in range(len(offsets) - 1):
        idx = order[offsets[b] : offsets[b + 1]]
        assert len(idx) * int(lengths[idx].max()) <= budget
    # Bucketed: padding is a small share of the padded tokens.
    padded = sum(
        len(idx) * int(lengths[idx].max())
        for idx in (order[offsets[b] : offsets[b + 1]] for b in range(len(offsets) - 1))
    )
    assert int(lengths.sum()) / padded > 0.85


def test_token_batches_need_lengths_and_room_for_the_longest() -> None:
    model = tiny_transformer()
    data = CopySet(20, 0, hi=8)  # longest: 10 tokens
    with pytest.raises(ValueError, match="batch_tokens=9 is invalid: the longest example has 10"):
        Trainer(model, data, None, TrainConfig(batch_tokens=9, device="cpu"), task=Seq2Seq())

    class NoLengths(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 3

    with pytest.raises(ValueError, match="batch_tokens=64 is invalid for NoLengths: it has no"):
        Trainer(model, NoLengths(), None, TrainConfig(batch_tokens=64, device="cpu"))


def _copy_config(**over: object) -> TrainConfig:
    values = dict(
        epochs=2,
        lr=3e-3,
        batch_tokens=120,
        schedule="inverse_sqrt",
        warmup_steps=4,
        label_smoothing=0.1,
        device="cpu",
        progress=False,
        quiet=True,
        tensorboard=False,
        num_workers=0,
    )
    values.update(over)
    return TrainConfig(**values)


def test_token_batches_through_the_trainer_resume_exactly(tmp_path: Path) -> None:
    """A run stopped mid-epoch (max_steps) and resumed ends with the same weights as one that
    never stopped; items go through the DataLoader path (no get_batch)."""
    data = CopySet(80, 7, fast=False)

    def run(out: Path, stop: int | None) -> Trainer:
        trainer = Trainer(
            tiny_transformer(), data, None, _copy_config(max_steps=stop), out, task=Seq2Seq()
        )
        trainer.fit()
        return trainer

    whole = run(tmp_path / "whole", None)
    steps = whole.steps_per_epoch
    assert whole.global_step == 2 * steps and steps == count_token_batches(
        torch.tensor(data.lengths), 120
    )
    first = run(tmp_path / "cut", steps + 2)  # stopped inside epoch 2
    assert first.batch_offsets is not None
    resumed = Trainer(
        tiny_transformer(), data, None, _copy_config(), tmp_path / "cut", task=Seq2Seq()
    )
    resumed.fit(resume=True)
    for a, b in zip(whole.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    for key in ("step", "train_loss", "train_acc", "train_exact", "lr"):
        assert [r[key] for r in resumed.history] == [r[key] for r in whole.history], key


# -- the copy task ------------------------------------------------------------------------------
def test_tiny_transformer_learns_to_copy_exactly() -> None:
    """Trained through the trainer (token batches, label smoothing, inverse-sqrt schedule), the
    model copies every string of a held-out set drawn with another seed: 100% exact match, by
    the task's metric and by greedy decoding with model.generate."""
    train, held_out = CopySet(2000, 1), CopySet(300, 2)
    model = tiny_transformer()
    cfg = _copy_config(epochs=24, lr=1e-2, batch_tokens=400, warmup_steps=50, eval_batch_size=300)
    task = Seq2Seq(generate_eval=True)
    Trainer(model, train, None, cfg, task=task).fit()
    metrics = Trainer(model, train, held_out, cfg, task=task).evaluate_metrics()
    assert metrics is not None
    assert metrics["exact"] == 1.0 and metrics["gen_exact"] == 1.0, metrics
    src = task.collate([held_out[i] for i in range(len(held_out))])["src_ids"]
    out = model.generate(src, max_new_tokens=10)
    for i, row in enumerate(out.tolist()):
        assert row[1 : row.index(EOS) + 1] == held_out[i][1][1:].tolist()


def test_token_batches_under_two_processes_equal_one(tmp_path: Path) -> None:
    """torchrun, 2 processes (gloo): each takes its share of every token batch, and the loss is
    the mean over the real tokens of the whole batch, so the weights equal one process's."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    worker = str(Path(__file__).with_name("seq2seq_ddp_worker.py"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    subprocess.run([sys.executable, worker, str(one)], env=env, check=True, timeout=300)
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    run += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", worker, str(two)]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
