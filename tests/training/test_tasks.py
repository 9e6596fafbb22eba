"""The task protocol carries more than images: a token-classification task on a toy model,
with padding ignored (label -100), trains through the same trainer; its loss is the mean over
counted tokens of the whole batch however the batch is cut into micro-batches; items go
through a DataLoader with workers, and a random per-item transform stays exact on resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfam.training import ImageClassification, Task, TokenClassification, TrainConfig, Trainer
from tfam.training.tasks import IGNORE_INDEX, split_batch

VOCAB, TAGS = 12, 3


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Tagger(nn.Module):
    """A toy token classifier: embedding, a causal-free mixing layer, per-token logits."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, 16)
        self.mix = nn.Linear(16, 16)
        self.head = nn.Linear(16, TAGS)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        h = self.embed(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.head(torch.tanh(self.mix(h)) + h)  # (B, L, TAGS)


class Sentences(torch.utils.data.Dataset):
    """Variable-length token sequences; the tag of a token is (token mod 3). No get_batch: the
    trainer must collate items (padding to the longest) through a DataLoader. With ``noisy``
    each item replaces a random token, drawn from the global RNG (as a random transform in a
    dataset does) — the trainer's per-item seeding makes that reproducible."""

    def __init__(self, n: int = 120, seed: int = 0, noisy: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(2, 9, (n,), generator=g)
        self.items = [torch.randint(0, VOCAB, (int(k),), generator=g) for k in lengths]
        self.noisy = noisy

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        ids = self.items[i].clone()
        if self.noisy:
            ids[int(torch.randint(0, len(ids), ()))] = int(torch.randint(0, VOCAB, ()))
        return ids, ids % TAGS


def test_both_tasks_satisfy_the_protocol() -> None:
    assert isinstance(ImageClassification(), Task)
    assert isinstance(TokenClassification(), Task)


def test_collate_pads_with_ignored_labels() -> None:
    task = TokenClassification(pad_id=0)
    batch = task.collate([(torch.tensor([5, 6, 7]), torch.tensor([2, 0, 1])), ([4], [1])])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [4, 0, 0]]
    assert batch["labels"].tolist() == [[2, 0, 1], [1, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["attention_mask"].tolist() == [[True] * 3, [True, False, False]]
    assert float(task.count(batch)) == 4.0


def test_loss_is_the_mean_over_counted_tokens_whatever_the_micro_batches() -> None:
    """Uneven sequences: micro-batches hold different numbers of real tokens, yet K micro-
    batches give the gradient of the mean over every counted token of the batch."""
    task = TokenClassification()
    data = Sentences(13)
    batch = task.collate([data[i] for i in range(13)])
    reference = Tagger()
    logits = reference(batch["input_ids"], batch["attention_mask"])
    mean = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    mean.backward()
    mean = float(mean.detach())
    for accum in (1, 4):
        model = Tagger()
        trainer = Trainer(
            model,
            data,
            None,
            TrainConfig(batch_size=13, accum_steps=accum, lr=1e-3, clip_grad=None),
            task=task,
        )
        trainer.optimizer.step = lambda: None  # look at the gradient the step would use
        trainer.scheduler.step = lambda: None
        sums = trainer.step(batch)
        assert sums["count"] == float((batch["labels"] != -100).sum())
        assert sums["loss"] / sums["count"] == pytest.approx(mean, rel=1e-6)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert [len(b["labels"]) for b in split_batch(batch, 4)] == [4, 3, 3, 3]


def test_padding_does_not_change_the_loss() -> None:
    task = TokenClassification()
    data = Sentences(6)
    items = [data[i] for i in range(6)]
    short = task.collate(items)
    long = task.collate(items + [(torch.arange(20) % VOCAB, torch.full((20,), IGNORE_INDEX))])
    long = {k: v[:6] for k, v in long.items()}  # the same 6 sentences, padded to length 20
    model = Tagger()
    a, b = task.eval_sums(model, short), task.eval_sums(model, long)
    assert float(a["count"]) == float(b["count"])
    assert float(a["loss"]) == pytest.approx(float(b["loss"]), rel=1e-6)
    assert float(a["correct"]) == float(b["correct"])


def test_token_task_trains_through_the_trainer_with_workers() -> None:
    task = TokenClassification()
    config = TrainConfig(epochs=6, batch_size=20, lr=2e-2, num_workers=1, quiet=True)
    trainer = Trainer(Tagger(), Sentences(), Sentences(40, seed=1), config, task=task)
    before = trainer.evaluate_metrics()
    result = trainer.fit()
    # The tag is a function of the token, so the toy model can learn it fully; chance is 1/3.
    assert result.final_test_acc > 0.9 > before["acc"], (before, result.test_metrics)
    assert result.final_test_loss < before["loss"]
    assert set(result.history[0]) >= {"train_loss", "train_acc", "test_loss", "tokens_per_s"}
    probs = task.predict(trainer.model, task.collate([Sentences(1)[0]]))
    assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:-1]))


@pytest.mark.parametrize("workers", [0, 2])
def test_random_item_transforms_resume_exactly_with_workers(tmp_path: Path, workers: int) -> None:
    """Stopped mid-epoch and resumed == never stopped, and the same with or without worker
    processes: each item is produced under a seed from (run seed, epoch, index)."""
    task = TokenClassification()

    def run(out, steps=None, resume=False, workers=workers):
        cfg = TrainConfig(
            epochs=2, batch_size=16, lr=1e-2, num_workers=workers, max_steps=steps, quiet=True
        )
        trainer = Trainer(Tagger(), Sentences(noisy=True), None, cfg, out_dir=out, task=task)
        trainer.fit(resume=resume)
        return trainer.model.state_dict()

    straight = run(None)
    run(tmp_path / "run", steps=5)  # 8 steps per epoch: stopped mid-epoch 1
    resumed = run(tmp_path / "run", resume=True)
    other = run(None, workers=1 - min(workers, 1))  # 0 <-> 1 worker
    for name, tensor in straight.items():
        assert torch.equal(resumed[name], tensor), name
        assert torch.equal(other[name], tensor), name
    assert not math.isnan(float(next(iter(straight.values())).sum()))


def test_mixed_images_weigh_both_labels_as_a_mixed_one_hot_target() -> None:
    """Mixup/CutMix: ImageClassification.augment adds the partner's labels and lam; the loss
    equals cross-entropy against lam onehot(y) + (1 - lam) onehot(y') (with the same label
    smoothing), whole or cut into micro-batches; accuracy counts the label of larger weight."""
    from tfam.data.vision.augment import BatchAugment

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 6 * 6, 5))
    task = ImageClassification()
    images = torch.randn(7, 2, 6, 6)
    labels = torch.tensor([0, 1, 2, 3, 4, 0, 1])
    batch = task.augment(
        {"images": images, "labels": labels},
        BatchAugment(mixup=0.8, cutmix=1.0),
        torch.Generator().manual_seed(2),
        None,
    )
    assert torch.equal(batch["mix_labels"], labels.flip(0)) and batch["mix_lam"].shape == (7,)
    lam = batch["mix_lam"][:, None]
    target = lam * F.one_hot(labels, 5) + (1 - lam) * F.one_hot(labels.flip(0), 5)
    config = TrainConfig(label_smoothing=0.1)
    loss, sums = task.train_loss(model, batch, config)
    logits = model(batch["images"])
    expected = F.cross_entropy(logits, target, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(loss, expected)
    plain = F.cross_entropy(logits, target, reduction="sum")
    torch.testing.assert_close(sums["loss"].float(), plain.detach())
    dominant = torch.where(batch["mix_lam"] >= 0.5, labels, labels.flip(0))
    assert sums["correct"] == (logits.argmax(-1) == dominant).sum() and sums["count"] == 7
    parts = sum(task.train_loss(model, part, config)[0] for part in split_batch(batch, 3))
    torch.testing.assert_close(parts, expected)
    # Without mixing the batch keeps its two keys.
    plain_batch = task.augment(
        {"images": images, "labels": labels}, BatchAugment(padding=1), torch.Generator(), None
    )
    assert set(plain_batch) == {"images", "labels"}
