"""Causal language modelling: next-token prediction (tfam's GPT)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.config import POSITION_SCHEMES
from tfam.training.tasks.base import (
    IGNORE_INDEX,
    Batch,
    TokenTask,
    dataset_pad_id,
    item_ids,
    model_config,
    pad_right,
    ratio,
)

__all__ = ["CAUSAL_UNITS", "CausalLM"]

CAUSAL_UNITS = ("tokens", "characters")


class CausalLM(TokenTask):
    """Next-token prediction: ``model(input_ids (B, L)) -> logits (B, L, V)``, where position
    i scores token i + 1 (tfam's GPT).

    Items are windows ``ids (L + 1,)``; ``collate`` makes ``{"input_ids" = ids[:-1],
    "labels" = ids[1:]}`` (B, L). Rows of different lengths are padded on the right with
    ``pad_id`` and their labels there are -100; right padding needs no attention mask, since a
    causal model's real positions never look at later ones. Training loss: cross-entropy with
    ``config.label_smoothing`` summed over predicted tokens (``count``). Metrics: ``loss`` (plain
    cross-entropy, nats per token), ``acc`` (next-token accuracy) and, from those, ``ppl``
    (exp(loss)) or, when ``unit="characters"`` (a character-level dataset), ``bpc`` (bits per
    character, loss / ln 2). The primary metric is ``loss``, lower is better.
    """

    name = "causal-lm"
    objective = "clm"
    primary_metric = "loss"
    higher_is_better = False

    def __init__(self, pad_id: int = 0, unit: str = "tokens") -> None:
        if unit not in CAUSAL_UNITS:
            raise ValueError(f"unit={unit!r} is invalid: expected one of {', '.join(CAUSAL_UNITS)}")
        self.pad_id = int(pad_id)
        self.unit = unit
        self.metrics = ("loss", "acc", "bpc" if unit == "characters" else "ppl")

    @classmethod
    def for_dataset(cls, dataset: Any) -> CausalLM:
        """The task with the dataset's padding id, counting characters when the dataset says
        so (``dataset.unit == "characters"``) or its tokenizer is a :class:`CharTokenizer`."""
        from tfam.data.text.tokenizer import CharTokenizer

        unit = getattr(dataset, "unit", None)
        if unit not in CAUSAL_UNITS:
            chars = isinstance(getattr(dataset, "tokenizer", None), CharTokenizer)
            unit = "characters" if chars else "tokens"
        return cls(pad_id=dataset_pad_id(dataset), unit=unit)

    def collate(self, items: Sequence[Any]) -> Batch:
        rows = [item_ids(item) for item in items]
        short = [len(r) for r in rows if len(r) < 2]
        if short:
            raise ValueError(
                f"an item has {short[0]} ids; a causal-lm item needs at least 2 (inputs ids[:-1], "
                "labels ids[1:])"
            )
        ids, mask = pad_right(rows, self.pad_id)
        labels = ids[:, 1:].masked_fill(~mask[:, 1:], IGNORE_INDEX)
        return {"input_ids": ids[:, :-1], "labels": labels}

    def training_batch(self, model: nn.Module, batch: Batch) -> Batch:
        return self._without_start_targets(model, batch)

    def sequences(self, batch: Batch) -> Tensor:
        """ids (B, L + 1) = input_ids + the last label; rows must be unpadded."""
        labels = batch["labels"]
        if bool((labels == IGNORE_INDEX).any()):
            raise ValueError(
                "a causal-lm batch with padded rows cannot be augmented as whole sequences"
            )
        return torch.cat([batch["input_ids"], labels[:, -1:]], dim=1)

    def with_sequences(self, batch: Batch, ids: Tensor) -> Batch:
        return {**batch, "input_ids": ids[:, :-1], "labels": ids[:, 1:]}

    def evaluation_batch(self, model: nn.Module, batch: Batch) -> Batch:
        return self._without_start_targets(model, batch)

    @staticmethod
    def _without_start_targets(model: nn.Module, batch: Batch) -> Batch:
        """A model with a start token that it reads but never predicts (iGPT: its head scores
        every id but ``config.start_token_id``) counts no label equal to it. Image sequences
        hold it only at position 0, which is never a label, so this changes nothing there."""
        start = getattr(model_config(model), "start_token_id", None)
        labels = batch["labels"]
        if start is None or not bool((labels == start).any()):
            return batch
        return {**batch, "labels": labels.masked_fill(labels == start, IGNORE_INDEX)}

    def units(self, batch: Batch) -> float:
        """Throughput is counted in predicted tokens (characters for a character model)."""
        return float(self.count(batch))

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        ids = batch["input_ids"]
        config = model_config(model)
        context = getattr(config, "max_positions", None)
        # Only a learned table bounds the length: other schemes run past the context.
        scheme = POSITION_SCHEMES.get(getattr(config, "position", ""))
        bounded = getattr(scheme, "bounds_length", False)
        if bounded and context is not None and ids.shape[1] > int(context):
            raise ValueError(
                f"the causal-lm batch has {ids.shape[1]} input tokens per row (items of "
                f"{ids.shape[1] + 1} ids), more than the model's context max_positions="
                f"{int(context)}, which bounds position={config.position!r}: make the dataset's "
                f"context at most {int(context)}, build the model with max_positions >= "
                f"{ids.shape[1]}, or use a position scheme that runs past it"
            )
        mask = batch.get("attention_mask")
        return (model(ids) if mask is None else model(ids, attention_mask=mask)).float()

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        loss = ratio(sums, "loss")
        out = {"loss": loss, "acc": ratio(sums, "correct")}
        if self.unit == "characters":
            out["bpc"] = loss / math.log(2)
        else:
            # exp overflows a float past ~709 nats: the perplexity is then infinite.
            out["ppl"] = math.exp(loss) if not loss > 700 else math.inf
        return out

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Next-token probabilities (B, L, V): row i of position t scores token t + 1."""
        return self.logits(model, batch).softmax(dim=-1)
