"""Tasks on audio frames (tfam's speech family): a label per frame and one per utterance.

Items are ``(features (T, n_mels) float, label)``: the label is an int (one per utterance) or
a long tensor (T,) of frame labels (-100 where nothing counts). ``collate_audio`` pads the
frames with zeros to the longest in the batch: ``{"features" (B, T, n_mels), "attention_mask"
(B, T) True = real frame, "labels"}``. A dataset with ``augment_features(features (T, M),
generator) -> (T, M)`` (SpecAugment on a training split) has it applied to each utterance's
real frames in :meth:`AudioTask.augment`, from the trainer's generator (so resumes are exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.training.tasks.base import (
    IGNORE_INDEX,
    Augment,
    Batch,
    CrossEntropyTask,
)

__all__ = ["AudioTask", "FrameClassification", "UtteranceClassification", "collate_audio"]


def collate_audio(items: Sequence[Any]) -> tuple[Tensor, Tensor]:
    """Items ``(features (T, M), ...)`` -> (features (B, T_max, M) zero-padded, mask (B, T_max)
    True = real frame)."""
    frames = [torch.as_tensor(item[0], dtype=torch.float32) for item in items]
    length = max((f.shape[0] for f in frames), default=0)
    mels = frames[0].shape[1] if frames else 0
    features = torch.zeros(len(frames), length, mels)
    mask = torch.zeros(len(frames), length, dtype=torch.bool)
    for i, f in enumerate(frames):
        features[i, : f.shape[0]] = f
        mask[i, : f.shape[0]] = True
    return features, mask


def audio_forward(model: nn.Module, batch: Batch) -> Tensor:
    """The model's float32 output for a batch of frames."""
    return model(batch["features"], attention_mask=batch["attention_mask"]).float()


class AudioTask:
    """What the audio tasks share: throughput in real frames, and the dataset's own feature
    augmentation applied per utterance."""

    unit = "frames"

    def units(self, batch: Batch) -> float:
        return float(batch["attention_mask"].sum())

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch:
        own = getattr(dataset, "augment_features", None)
        if own is None and fn is None:
            return batch
        features = batch["features"].clone()
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        for i, n in enumerate(lengths):
            row = features[i, : int(n)]
            if own is not None:
                row = own(row, generator)
            if fn is not None:
                row = fn(row, generator)
            features[i, : int(n)] = row
        return {**batch, "features": features}


class FrameClassification(AudioTask, CrossEntropyTask):
    """A label per input frame (10 ms): ``model(features (B, T, M), attention_mask) -> logits
    (B, >= T, K)`` at the input frame rate (a subsampling model repeats its output frames), cropped
    to T; labels (B, T) with -100 on padding. Loss and accuracy are means over real frames."""

    name = "frame-classification"
    objective = "tag"
    primary_metric = "acc"
    higher_is_better = True
    unit = "frames"

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        out = audio_forward(model, batch)
        length = batch["features"].shape[1]
        if out.ndim != 3 or out.shape[1] < length:
            raise ValueError(
                f"the model gives {tuple(out.shape)} for {length} frames; a frame task needs "
                "logits (B, T, K) per input frame (a speech model with head='frames')"
            )
        return out[:, :length]

    def collate(self, items: Sequence[Any]) -> Batch:
        features, mask = collate_audio(items)
        labels = torch.full(mask.shape, IGNORE_INDEX, dtype=torch.int64)
        for i, item in enumerate(items):
            row = torch.as_tensor(item[1], dtype=torch.int64)
            labels[i, : row.shape[0]] = row
        return {"features": features, "attention_mask": mask, "labels": labels}


class UtteranceClassification(AudioTask, CrossEntropyTask):
    """One label per utterance (who is speaking; a user's class folders):
    ``model(features (B, T, M), attention_mask) -> logits (B, K)``; labels (B,). Loss and
    accuracy are means over utterances."""

    name = "utterance-classification"
    objective = "speaker"
    primary_metric = "acc"
    higher_is_better = True
    unit = "utterances"

    def units(self, batch: Batch) -> float:
        return float(batch["labels"].shape[0])

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        out = audio_forward(model, batch)
        if out.ndim != 2:
            raise ValueError(
                f"the model gives {tuple(out.shape)} per batch; an utterance task needs logits "
                "(B, K) (a speech model with head='utterance')"
            )
        return out

    def collate(self, items: Sequence[Any]) -> Batch:
        features, mask = collate_audio(items)
        labels = torch.as_tensor([int(item[1]) for item in items], dtype=torch.int64)
        return {"features": features, "attention_mask": mask, "labels": labels}
