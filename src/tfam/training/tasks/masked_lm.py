"""Masked language modelling: BERT's objective (tfam's BERT with ``head="mlm"``), and its
masking rule (:func:`mask_tokens`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.training.tasks.base import (
    IGNORE_INDEX,
    Augment,
    Batch,
    TokenTask,
    dataset_attr,
    dataset_pad_id,
    item_ids,
    pad_right,
    real_tokens,
)

__all__ = ["MLM_MASK", "MLM_PROBABILITY", "MLM_RANDOM", "MaskedLM", "mask_tokens"]

MLM_PROBABILITY = 0.15  # BERT: the share of maskable tokens that are predicted
MLM_MASK, MLM_RANDOM = 0.8, 0.1  # of those: -> [MASK], -> a random id; the rest stay


def _check_masking(mask_token_id: int, vocab_size: int, probability: float) -> None:
    """Refuse, in one line, a masking rule that cannot be drawn: vocab_size an int >= 1,
    0 <= mask_token_id < vocab_size, probability in (0, 1]."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size={vocab_size!r} is invalid: expected an int >= 1")
    if not 0 <= int(mask_token_id) < vocab_size:
        raise ValueError(
            f"mask_token_id={mask_token_id!r} is invalid: expected 0 <= id < vocab_size="
            f"{vocab_size}"
        )
    if not 0.0 < float(probability) <= 1.0:
        raise ValueError(f"probability={probability!r} is invalid: expected a number in (0, 1]")


def mask_tokens(
    ids: Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    generator: torch.Generator,
    special_ids: Sequence[int] = (),
    special_mask: Tensor | None = None,
    probability: float = MLM_PROBABILITY,
) -> tuple[Tensor, Tensor]:
    """BERT's masking (Devlin et al. 2019, as Hugging Face's ``DataCollatorForLanguageModeling``):
    each maskable token is chosen with probability ``probability`` by an independent Bernoulli
    draw; of the chosen, 80% become ``mask_token_id``, 10% a random id drawn uniformly from the
    whole vocabulary ``[0, vocab_size)`` and 10% stay as they are.

    ids (..., L) int; maskable = not in ``special_ids`` (padding, [CLS], [SEP], ...) and not
    True in ``special_mask`` (same shape as ids; e.g. ``~attention_mask``). Every random number
    comes from ``generator`` (drawn on its device; the global RNG is not touched), always the
    same amount for a given shape, so the same generator state gives the same masking.
    -> (inputs, labels), both shaped like ids: labels hold the original id where a token was
    chosen and -100 elsewhere.
    """
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"ids has dtype {ids.dtype}; expected token ids of int64")
    _check_masking(mask_token_id, vocab_size, probability)
    if special_mask is not None and special_mask.shape != ids.shape:
        raise ValueError(
            f"special_mask has shape {tuple(special_mask.shape)}; expected ids' "
            f"{tuple(ids.shape)} (True = never masked)"
        )
    where = generator.device
    choose = torch.rand(ids.shape, generator=generator, device=where).to(ids.device)
    action = torch.rand(ids.shape, generator=generator, device=where).to(ids.device)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, device=where)
    random_ids = random_ids.to(device=ids.device, dtype=ids.dtype)

    maskable = ~torch.isin(
        ids, torch.as_tensor(list(special_ids), dtype=ids.dtype, device=ids.device)
    )
    if special_mask is not None:
        maskable &= ~special_mask.to(device=ids.device, dtype=torch.bool)
    chosen = maskable & (choose < float(probability))
    to_mask = chosen & (action < MLM_MASK)
    to_random = chosen & (action >= MLM_MASK) & (action < MLM_MASK + MLM_RANDOM)
    inputs = torch.where(to_mask, torch.full_like(ids, int(mask_token_id)), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return inputs, labels


def _row_seed(seed: int, ids: Tensor) -> int:
    """A seed from ``seed`` and a row's ids (a stable hash, unlike Python's ``hash``)."""
    digest = hashlib.blake2b(
        int(seed).to_bytes(8, "little", signed=True)
        + ids.detach().to("cpu", torch.int64).numpy().astype("<i8").tobytes(),
        digest_size=8,
    ).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class MaskedLM(TokenTask):
    """BERT's masked language modelling: ``model(input_ids (B, L), attention_mask=(B, L) bool)
    -> logits (B, L, V)`` (tfam's BERT with ``head="mlm"``).

    Items ``ids (L,)`` (or ``(ids, ...)``); ``collate`` pads them on the right: ``{"input_ids",
    "attention_mask"}``, unmasked. Masking (:func:`mask_tokens`: 15% of the tokens that are not
    padding nor special, of those 80% [MASK], 10% random, 10% unchanged) adds ``"labels"`` (the
    original id at chosen positions, -100 elsewhere): in training in :meth:`augment`, with the
    trainer's augmentation generator (so a resumed run masks as an uninterrupted one); in
    evaluation in :meth:`eval_sums`, each row under a seed from ``eval_seed`` and the row's own
    tokens, so evaluation is deterministic and does not depend on batch size, chunking or the
    number of processes. A batch that already has ``"labels"`` of its ``input_ids``' shape is
    taken as masked; other labels (a labelled text set's one class per sentence) are dropped.

    Loss: cross-entropy (with ``config.label_smoothing``) summed over chosen positions
    (``count``); metrics ``loss`` (nats per masked token) and ``acc``, over chosen positions.
    """

    name = "masked-lm"
    objective = "mlm"
    primary_metric = "loss"
    higher_is_better = False

    def __init__(
        self,
        mask_token_id: int,
        vocab_size: int,
        pad_id: int = 0,
        special_ids: Sequence[int] = (),
        probability: float = MLM_PROBABILITY,
        eval_seed: int = 0,
    ) -> None:
        _check_masking(mask_token_id, vocab_size, probability)
        self.mask_token_id = int(mask_token_id)
        self.vocab_size = int(vocab_size)
        self.pad_id = int(pad_id)
        # Padding and [MASK] itself are never chosen, whatever the caller lists.
        self.special_ids = tuple(
            sorted({int(i) for i in special_ids} | {self.pad_id, self.mask_token_id})
        )
        self.probability = float(probability)
        self.eval_seed = int(eval_seed)

    def units(self, batch: Batch) -> float:
        """Throughput is counted in real input tokens (masked or not)."""
        return real_tokens(batch)

    @classmethod
    def for_dataset(cls, dataset: Any, **options: Any) -> MaskedLM:
        """The task for a text dataset: ``mask_token_id``, ``vocab_size``, ``pad_token_id`` and
        ``special_ids`` read from the dataset, else from its ``tokenizer`` (also ``mask_id``,
        ``pad_id``); without ``special_ids``, the [CLS]/[SEP]/bos/eos ids it names
        (``cls_token_id``, ``sep_token_id``, ``cls_id``, ``sep_id``, ``bos_id``, ``eos_id``)."""
        what = type(dataset).__name__ if dataset is not None else "no dataset"
        mask = dataset_attr(dataset, "mask_token_id", "mask_id")
        if mask is None:
            raise ValueError(
                f"task='masked-lm' needs the [MASK] id: {what} has no mask_token_id (nor its "
                "tokenizer a mask_token_id or mask_id)"
            )
        vocab = dataset_attr(dataset, "vocab_size")
        if vocab is None:
            raise ValueError(
                f"task='masked-lm' needs the vocabulary size for its random replacements: {what} "
                "has no vocab_size (nor its tokenizer)"
            )
        special = dataset_attr(dataset, "special_ids")
        if special is None:
            names = ("cls_token_id", "sep_token_id", "cls_id", "sep_id")
            names += ("bos_token_id", "eos_token_id", "bos_id", "eos_id")
            found = (dataset_attr(dataset, name) for name in names)
            special = [int(i) for i in found if isinstance(i, int) and not isinstance(i, bool)]
        return cls(int(mask), int(vocab), dataset_pad_id(dataset), tuple(special), **options)

    # -- batches ------------------------------------------------------------------------------
    def collate(self, items: Sequence[Any]) -> Batch:
        ids, mask = pad_right([item_ids(item) for item in items], self.pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def _never(self, batch: Batch) -> Tensor | None:
        mask = batch.get("attention_mask")
        return None if mask is None else ~mask.bool()

    def mask_batch(self, batch: Batch, generator: torch.Generator) -> Batch:
        """The batch with its ``input_ids`` masked and ``labels`` added (draws from
        ``generator``)."""
        inputs, labels = mask_tokens(
            batch["input_ids"],
            mask_token_id=self.mask_token_id,
            vocab_size=self.vocab_size,
            generator=generator,
            special_ids=self.special_ids,
            special_mask=self._never(batch),
            probability=self.probability,
        )
        return {**batch, "input_ids": inputs, "labels": labels}

    def eval_mask(self, batch: Batch) -> Batch:
        """The deterministic masking of evaluation: each row's real tokens are masked under a
        seed from ``eval_seed`` and those tokens, so a row is masked the same way in any batch."""
        # On the CPU: one small generator per row (a device would sync once per row).
        device = batch["input_ids"].device
        ids = batch["input_ids"].cpu()
        never = self._never(batch)
        real = torch.ones_like(ids, dtype=torch.bool) if never is None else ~never.cpu()
        inputs = ids.clone()
        labels = torch.full_like(ids, IGNORE_INDEX)
        for i in range(ids.shape[0]):
            row = ids[i][real[i]]
            if not row.numel():
                continue
            generator = torch.Generator().manual_seed(_row_seed(self.eval_seed, row))
            row_inputs, row_labels = mask_tokens(
                row,
                mask_token_id=self.mask_token_id,
                vocab_size=self.vocab_size,
                generator=generator,
                special_ids=self.special_ids,
                probability=self.probability,
            )
            inputs[i][real[i]] = row_inputs
            labels[i][real[i]] = row_labels
        return {**batch, "input_ids": inputs.to(device), "labels": labels.to(device)}

    def count(self, batch: Batch) -> Tensor:
        if "labels" not in batch:
            raise ValueError(
                "the masked-lm batch has no labels: a training batch is masked by "
                "MaskedLM.augment (the Trainer calls it before each step) or mask_batch"
            )
        return (batch["labels"] != IGNORE_INDEX).sum().double()

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch:
        if fn is not None:
            batch = fn(batch, generator)
        batch = _token_labels_only(batch)
        return batch if "labels" in batch else self.mask_batch(batch, generator)

    # -- losses and metrics (TokenTask's, on masked batches) ----------------------------------
    def training_batch(self, model: nn.Module, batch: Batch) -> Batch:
        if "labels" not in batch:
            self.count(batch)  # the clear error
        return batch

    def evaluation_batch(self, model: nn.Module, batch: Batch) -> Batch:
        batch = _token_labels_only(batch)
        return batch if "labels" in batch else self.eval_mask(batch)


def _token_labels_only(batch: Batch) -> Batch:
    """The batch without its ``labels`` when they are not one per token: a labelled text set
    (a sentence's class, (B,)) read for masked-LM pre-training, whose labels are unused."""
    labels = batch.get("labels")
    if labels is None or labels.shape == batch["input_ids"].shape:
        return batch
    return {k: v for k, v in batch.items() if k != "labels"}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Token probabilities (B, L, V) of the batch as given (mask the ids to predict)."""
        return self.logits(model, batch).softmax(dim=-1)
