"""Token classification: one label per token (tfam's BERT with ``head="token"``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tfam.training.tasks.base import IGNORE_INDEX, Batch, TokenTask, real_tokens

__all__ = ["TokenClassification"]


class TokenClassification(TokenTask):
    """``model(input_ids (B, L), attention_mask=(B, L) bool) -> logits (B, L, C)``; batch
    ``{"input_ids", "attention_mask", "labels" (B, L)}`` with label -100 where nothing is
    counted (padding, continuation sub-words).

    The loss and the metrics are means over counted tokens of the whole global batch, however
    the tokens fall into micro-batches and ranks. ``collate`` pads items ``(ids, labels)`` to
    the longest with ``pad_id`` and label -100.
    """

    name = "token-classification"
    objective = "tag"
    primary_metric = "acc"
    higher_is_better = True

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = int(pad_id)

    @classmethod
    def for_dataset(cls, dataset: Any) -> TokenClassification:
        """The task with the dataset's ``pad_token_id`` (0 without one)."""
        return cls(pad_id=int(getattr(dataset, "pad_token_id", 0)))

    def units(self, batch: Batch) -> float:
        """Throughput is counted in real input tokens."""
        return real_tokens(batch)

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
