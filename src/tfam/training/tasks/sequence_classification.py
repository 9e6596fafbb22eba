"""Sequence classification: one label per sequence (tfam's BERT with ``head="sequence"``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tfam.training.tasks.base import Batch, TokenTask, dataset_pad_id, item_ids, pad_right

__all__ = ["SequenceClassification"]


class SequenceClassification(TokenTask):
    """One label per sequence: ``model(input_ids (B, L), attention_mask=(B, L) bool) -> logits
    (B, C)`` (tfam's BERT with ``head="sequence"``).

    Items ``(ids (L,), label int)``; ``collate`` pads the ids on the right with ``pad_id``:
    batch ``{"input_ids" (B, L), "attention_mask" (B, L) True = real token, "labels" (B,)}``.
    A label of -100 marks a row that nothing counts (a padding row). Training loss: cross-
    entropy with ``config.label_smoothing``, summed over counted rows; metrics ``loss`` (plain
    cross-entropy) and ``acc``, means over sequences. ``predict`` -> probabilities (B, C).
    """

    name = "sequence-classification"
    objective = "classify"
    primary_metric = "acc"
    higher_is_better = True
    unit = "sentences"

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = int(pad_id)

    @classmethod
    def for_dataset(cls, dataset: Any) -> SequenceClassification:
        """The task with the dataset's padding id (see :func:`task_for`)."""
        return cls(pad_id=dataset_pad_id(dataset))

    def collate(self, items: Sequence[Any]) -> Batch:
        ids, mask = pad_right([item_ids(item[0]) for item in items], self.pad_id)
        labels = torch.as_tensor([int(item[1]) for item in items], dtype=torch.int64)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
