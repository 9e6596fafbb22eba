"""Image classification: ``model(images (B, C, H, W)) -> logits (B, num_classes)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.training.tasks.base import BaseTask, Batch, accepts, ratio

__all__ = ["ImageClassification"]


class ImageClassification(BaseTask):
    """``model(images (B, C, H, W)) -> logits (B, num_classes)``; batch ``{"images", "labels"}``.

    Training loss: cross-entropy with ``config.label_smoothing``. Metrics: ``loss`` (plain
    cross-entropy, so train and evaluation compare) and ``acc`` (top-1), both means over images.
    Datasets: a ``get_batch(indices) -> (images, labels)`` method is the fast path; otherwise
    items ``(image, label)`` are collated.
    """

    name = "image-classification"
    objective = "classify"
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
        if hasattr(dataset, "black") and accepts(fn, "fill"):
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
        return {"loss": ratio(sums, "loss"), "acc": ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["images"]).float().softmax(dim=-1)
