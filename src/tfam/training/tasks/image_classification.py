"""Image classification: ``model(images (B, C, H, W)) -> logits (B, num_classes)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.training.tasks.base import Augment, Batch, CrossEntropyTask, accepts

__all__ = ["ImageClassification"]


class ImageClassification(CrossEntropyTask):
    """``model(images (B, C, H, W)) -> logits (B, num_classes)``; batch ``{"images", "labels"}``.

    Training loss: cross-entropy with ``config.label_smoothing``. Metrics: ``loss`` (plain
    cross-entropy, so train and evaluation compare) and ``acc`` (top-1), both means over images
    (:class:`CrossEntropyTask`'s, every label counted). An augmentation that mixes batches
    (``BatchAugment(mixup=..., cutmix=...)``) adds ``mix_labels`` and ``mix_lam`` (B,) to a
    training batch, and :class:`CrossEntropyTask`'s loss weighs both labels
    (:func:`~tfam.training.tasks.base.mixed_cross_entropy`); training accuracy counts the
    label of the larger weight.
    Datasets: a ``get_batch(indices) -> (images, labels)`` method is the fast path; otherwise
    items ``(image, label)`` are collated.
    """

    name = "image-classification"
    objective = "classify"
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

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch:
        if fn is None:
            return batch
        # tfam's BatchAugment fills padding with the dataset's normalised black when it can.
        if hasattr(dataset, "black") and accepts(fn, "fill"):
            images = fn(batch["images"], generator, fill=dataset.black)
        else:
            images = fn(batch["images"], generator)
        if not getattr(fn, "mixes", False):
            return {**batch, "images": images}
        # Mixup / CutMix: image i meets image B-1-i, so its second label is the reversed batch's.
        images, lam = fn.mix(images, generator)
        return {
            **batch,
            "images": images,
            "mix_labels": batch["labels"].flip(0),
            "mix_lam": lam.to(images.device),
        }

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["images"]).float()
