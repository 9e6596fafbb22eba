"""Tasks: what a batch means. The trainer knows no family and no data kind; a task does.

A task turns a batch (a dict of tensors, batch-first) into a loss and *metric sums*, and knows
how to evaluate and predict. Metrics are kept as sums over counted units (images, real tokens,
n-gram matches) and divided only at the end, so they add up exactly across micro-batches,
batches, evaluation chunks and DDP ranks (an all-reduce of the sums), whatever the padding.

The contract (see :class:`Task`):

- ``get_batch(dataset, indices)`` — the fast path for in-memory datasets (``None`` when the
  dataset has no fast path); ``collate(items)`` — the DataLoader path, items as the dataset's
  ``__getitem__`` returns them.
- ``count(batch)`` — the number of units the training loss averages over: images for image
  classification, labels != -100 for token tasks. The trainer sums it over the whole global
  batch (every micro-batch and rank) *before* the backward passes and divides each micro-batch's
  summed loss by that total, so accumulation and DDP give the mean over the global batch.
- ``train_loss(model, batch, config)`` -> ``(loss_sum, sums)``: ``loss_sum`` is the loss to
  minimise summed over the batch's counted units (with label smoothing and the like); ``sums``
  are detached metric sums (``"loss"`` is the plain loss, comparable with evaluation).
- ``eval_sums(model, batch)`` -> metric sums on held-out data (a seq2seq task generates here).
- ``reduce(sums)`` -> the metrics (``{"loss": ..., "acc": ...}``); ``metrics`` names them in
  column order; ``primary_metric`` and ``higher_is_better`` choose "best" and early stopping.
- ``predict(model, batch)`` -> probabilities (or generated ids), batch-first.
- ``augment(batch, fn, generator, dataset)`` -> the training batch after augmentation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "IGNORE_INDEX",
    "Batch",
    "ImageClassification",
    "Task",
    "TokenClassification",
    "split_batch",
]

Batch = dict[str, Tensor]
IGNORE_INDEX = -100  # label of a position that no loss or metric counts (padding, sub-words)


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task (see the module docstring for the contract)."""

    name: str
    metrics: tuple[str, ...]
    primary_metric: str
    higher_is_better: bool
    unit: str

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None: ...

    def collate(self, items: Sequence[Any]) -> Batch: ...

    def count(self, batch: Batch) -> Tensor: ...

    def augment(
        self,
        batch: Batch,
        fn: Callable[..., Tensor] | None,
        generator: torch.Generator,
        dataset: Any,
    ) -> Batch: ...

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]: ...

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]: ...

    def reduce(self, sums: dict[str, float]) -> dict[str, float]: ...

    def predict(self, model: nn.Module, batch: Batch) -> Tensor: ...


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Cut every tensor of a batch into ``parts`` nearly equal chunks along dim 0 (the larger
    chunks first, as ``Tensor.tensor_split``); empty chunks are dropped."""
    chunks = {k: v.tensor_split(parts) for k, v in batch.items()}
    out = [{k: chunks[k][i] for k in batch} for i in range(parts)]
    first = next(iter(batch))
    return [b for b in out if b[first].shape[0] > 0]


def batch_length(batch: Batch) -> int:
    """Number of examples in a batch (dim 0 of its first tensor)."""
    return int(next(iter(batch.values())).shape[0])


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _ratio(sums: dict[str, float], key: str) -> float:
    n = sums.get("count", 0.0)
    return sums.get(key, 0.0) / n if n else float("nan")


class ImageClassification:
    """``model(images (B, C, H, W)) -> logits (B, num_classes)``; batch ``{"images", "labels"}``.

    Training loss: cross-entropy with ``config.label_smoothing``. Metrics: ``loss`` (plain
    cross-entropy, so train and evaluation compare) and ``acc`` (top-1), both means over images.
    Datasets: a ``get_batch(indices) -> (images, labels)`` method is the fast path; otherwise
    items ``(image, label)`` are collated.
    """

    name = "image-classification"
    metrics = ("loss", "acc")
    primary_metric = "acc"
    higher_is_better = True
    unit = "images"

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        if not hasattr(dataset, "get_batch"):
            return None
        x, y = dataset.get_batch(indices)
        return {"images": x, "labels": torch.as_tensor(y).to(torch.int64)}

    def collate(self, items: Sequence[Any]) -> Batch:
        x = torch.stack([torch.as_tensor(item[0]) for item in items])
        y = torch.as_tensor([int(item[1]) for item in items], dtype=torch.int64)
        return {"images": x, "labels": y}

    def count(self, batch: Batch) -> Tensor:
        return torch.tensor(float(batch["labels"].shape[0]), dtype=torch.float64)

    def augment(
        self,
        batch: Batch,
        fn: Callable[..., Tensor] | None,
        generator: torch.Generator,
        dataset: Any,
    ) -> Batch:
        if fn is None:
            return batch
        # tfam's BatchAugment fills padding with the dataset's normalised black when it can.
        if hasattr(dataset, "black") and _accepts(fn, "fill"):
            images = fn(batch["images"], generator, fill=dataset.black)
        else:
            images = fn(batch["images"], generator)
        return {**batch, "images": images}

    def _sums(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        return {
            "loss": loss.detach().double(),
            "correct": (logits.argmax(dim=1) == labels).sum().double(),
            "count": torch.full(
                (), float(labels.shape[0]), dtype=torch.float64, device=labels.device
            ),
        }

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        labels = batch["labels"]
        logits = model(batch["images"]).float()
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss = F.cross_entropy(logits, labels, reduction="sum", label_smoothing=smoothing)
        with torch.no_grad():
            plain = loss if smoothing == 0 else F.cross_entropy(logits, labels, reduction="sum")
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        labels = batch["labels"]
        logits = model(batch["images"]).float()
        return self._sums(logits, labels, F.cross_entropy(logits, labels, reduction="sum"))

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": _ratio(sums, "loss"), "acc": _ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["images"]).float().softmax(dim=-1)


class TokenClassification:
    """``model(input_ids (B, L), attention_mask=(B, L) bool) -> logits (B, L, C)``; batch
    ``{"input_ids", "attention_mask", "labels" (B, L)}`` with label -100 where nothing is
    counted (padding, continuation sub-words).

    The loss and the metrics are means over counted tokens of the whole global batch, however
    the tokens fall into micro-batches and ranks. ``collate`` pads items ``(ids, labels)`` to
    the longest with ``pad_id`` and label -100.
    """

    name = "token-classification"
    metrics = ("loss", "acc")
    primary_metric = "acc"
    higher_is_better = True
    unit = "tokens"

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = int(pad_id)

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        if not hasattr(dataset, "get_batch"):
            return None
        return dict(dataset.get_batch(indices))

    def collate(self, items: Sequence[Any]) -> Batch:
        length = max(len(item[0]) for item in items)
        ids = torch.full((len(items), length), self.pad_id, dtype=torch.int64)
        labels = torch.full((len(items), length), IGNORE_INDEX, dtype=torch.int64)
        for i, (tok, lab) in enumerate(items):
            ids[i, : len(tok)] = torch.as_tensor(tok)
            labels[i, : len(lab)] = torch.as_tensor(lab)
        mask = torch.zeros((len(items), length), dtype=torch.bool)
        for i, (tok, _) in enumerate(items):
            mask[i, : len(tok)] = True
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def count(self, batch: Batch) -> Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum().double()

    def augment(
        self,
        batch: Batch,
        fn: Callable[..., Tensor] | None,
        generator: torch.Generator,
        dataset: Any,
    ) -> Batch:
        return batch if fn is None else fn(batch, generator)

    def _logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["input_ids"], attention_mask=batch.get("attention_mask")).float()

    def _sums(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        counted = labels != IGNORE_INDEX
        right = (logits.argmax(dim=-1) == labels) & counted
        return {
            "loss": loss.detach().double(),
            "correct": right.sum().double(),
            "count": counted.sum().double(),
        }

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        labels = batch["labels"]
        logits = self._logits(model, batch)
        flat, flat_labels = logits.flatten(0, -2), labels.flatten()
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss = F.cross_entropy(
            flat, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=smoothing
        )
        with torch.no_grad():
            plain = (
                loss
                if smoothing == 0
                else F.cross_entropy(flat, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum")
            )
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        labels = batch["labels"]
        logits = self._logits(model, batch)
        loss = F.cross_entropy(
            logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        return self._sums(logits, labels, loss)

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": _ratio(sums, "loss"), "acc": _ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        return self._logits(model, batch).softmax(dim=-1)
