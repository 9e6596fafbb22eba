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

Tasks are chosen by the dataset catalog's task name: ``task_for(name, dataset)`` (the names
are :data:`TASKS`): images (:class:`ImageClassification`), one label per token
(:class:`TokenClassification`) or per sequence (:class:`SequenceClassification`), next-token
prediction (:class:`CausalLM`), BERT's masked tokens (:class:`MaskedLM`, masking by
:func:`mask_tokens`) and sequence to sequence (:class:`Seq2Seq`). Token and sequence tasks
count nothing where a label is -100 (padding), so padding never changes a loss or a metric.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "IGNORE_INDEX",
    "TASKS",
    "Batch",
    "CausalLM",
    "ImageClassification",
    "MaskedLM",
    "Seq2Seq",
    "SequenceClassification",
    "Task",
    "TokenClassification",
    "mask_tokens",
    "split_batch",
    "task_for",
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


def token_cross_entropy(
    logits: Tensor, labels: Tensor, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Per-token cross-entropy summed over positions whose label is not ``IGNORE_INDEX``:
    logits (..., V), labels (...) -> (loss to minimise (with label smoothing), plain loss
    (detached when smoothing, for metrics comparable with evaluation))."""
    flat, flat_labels = logits.flatten(0, -2), labels.flatten()
    loss = F.cross_entropy(
        flat,
        flat_labels,
        ignore_index=IGNORE_INDEX,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    if label_smoothing == 0:
        return loss, loss
    with torch.no_grad():
        plain = F.cross_entropy(flat, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, plain


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


def _real_tokens(batch: Batch) -> float:
    """Real (non-padding) input tokens of a batch: its attention mask's sum, else every id."""
    mask = batch.get("attention_mask")
    return float(mask.sum()) if mask is not None else float(batch["input_ids"].numel())


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


class _LabeledIds:
    """What token and sequence classification share: ``model(input_ids, attention_mask=...)``
    -> logits (B, L, C) or (B, C) against labels (B, L) or (B,); cross-entropy and accuracy
    summed over labels that are not -100."""

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
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss, plain = token_cross_entropy(logits, labels, smoothing)
        with torch.no_grad():
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        labels = batch["labels"]
        logits = self._logits(model, batch)
        loss = token_cross_entropy(logits, labels)[1]
        return self._sums(logits, labels, loss)

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": _ratio(sums, "loss"), "acc": _ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        return self._logits(model, batch).softmax(dim=-1)


class TokenClassification(_LabeledIds):
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

    def units(self, batch: Batch) -> float:
        """Throughput is counted in real input tokens."""
        return _real_tokens(batch)

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


class Seq2Seq:
    """Sequence to sequence with teacher forcing: ``model(src_ids (B, Ls), tgt_ids (B, Lt)) ->
    logits (B, Lt, V)`` that masks ``pad_id`` itself (tfam's encoder–decoder Transformer), and
    ``model.generate(src_ids, max_new_tokens=...)`` for :meth:`predict`.

    Items ``(src_ids (Ls,), tgt_ids (Lt,))`` with ``tgt_ids = [bos] + tokens + [eos]``;
    ``collate`` pads both sides with ``pad_id`` and shifts the target: batch ``{"src_ids" (B, Ls),
    "tgt_ids" (B, Lt - 1) = target[:, :-1], "labels" (B, Lt - 1) = target[:, 1:]}`` with label
    -100 on padding. A dataset with ``get_batch(indices)`` returning such items (or such a batch)
    is gathered in the main process; otherwise items go through the trainer's DataLoader.

    Training loss: cross-entropy with ``config.label_smoothing`` (PyTorch's definition: the
    target gets 1 - eps, every class eps / V), summed over real target tokens; ``count`` is the
    number of real target tokens, so accumulation and DDP give the mean per token of the global
    batch. Metrics (train and evaluation): ``loss`` (plain cross-entropy, nats per token),
    ``acc`` (token accuracy) and ``exact`` (the fraction of sequences whose every target token,
    eos included, is the argmax).

    ``exact`` is computed from the teacher-forced logits, and that *is* greedy decoding's exact
    match: greedy decoding feeds back its own argmax, so it reproduces the reference up to and
    including eos exactly when every teacher-forced argmax is right (and at its first wrong
    argmax it leaves the reference). So evaluation costs one forward per batch. With
    ``generate_eval=True`` evaluation also decodes greedily (``model.generate``, cached, at most
    the reference length + 1 new tokens: one decoder step per token, about as many forwards as
    target tokens) and counts ``gen_exact``: generated tokens up to eos equal to the reference.
    """

    name = "seq2seq"
    metrics = ("loss", "acc", "exact")
    primary_metric = "loss"
    higher_is_better = False
    unit = "sentences"

    def __init__(
        self,
        pad_id: int = 0,
        eos_id: int | None = None,
        generate_eval: bool = False,
        max_new_tokens: int | None = None,
    ) -> None:
        self.pad_id = int(pad_id)
        self.eos_id = eos_id
        self.generate_eval = bool(generate_eval)
        if max_new_tokens is not None and (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens={max_new_tokens!r} is invalid: expected an int >= 1")
        self.max_new_tokens = max_new_tokens
        if self.generate_eval:
            self.metrics = ("loss", "acc", "exact", "gen_exact")

    @classmethod
    def for_dataset(cls, dataset: Any, **options: Any) -> Seq2Seq:
        """The task with the dataset's ``pad_token_id`` and ``eos_token_id`` (when it has them)."""
        return cls(
            pad_id=int(getattr(dataset, "pad_token_id", 0)),
            eos_id=getattr(dataset, "eos_token_id", None),
            **options,
        )

    # -- batches ------------------------------------------------------------------------------
    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        if not hasattr(dataset, "get_batch"):
            return None
        got = dataset.get_batch(indices)
        return dict(got) if isinstance(got, dict) else self.collate(got)

    def collate(self, items: Sequence[Any]) -> Batch:
        src = [torch.as_tensor(item[0], dtype=torch.int64) for item in items]
        tgt = [torch.as_tensor(item[1], dtype=torch.int64) for item in items]
        if any(t.numel() < 2 for t in tgt):
            raise ValueError(
                "a target has fewer than 2 tokens: expected tgt_ids = [bos] + tokens + [eos]"
            )
        src_ids = nn.utils.rnn.pad_sequence(src, batch_first=True, padding_value=self.pad_id)
        target = nn.utils.rnn.pad_sequence(tgt, batch_first=True, padding_value=self.pad_id)
        labels = target[:, 1:].clone()
        # A real pad id inside a target cannot be told from padding; the model masks it anyway.
        labels[labels == self.pad_id] = IGNORE_INDEX
        return {"src_ids": src_ids, "tgt_ids": target[:, :-1], "labels": labels}

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

    # -- losses and metrics -------------------------------------------------------------------
    def _check_pad(self, model: nn.Module) -> None:
        # The model masks its own pad id; a different one here would count padding as tokens.
        config = getattr(getattr(model, "module", model), "config", None)
        pad = getattr(config, "pad_token_id", None)
        if pad is not None and int(pad) != self.pad_id:
            raise ValueError(
                f"pad_id={self.pad_id} of the seq2seq task is invalid for this model: its "
                f"config has pad_token_id={pad}; use the same padding id for data and model"
            )

    def _logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["src_ids"], batch["tgt_ids"]).float()

    def _sums(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        counted = labels != IGNORE_INDEX
        right = (logits.argmax(dim=-1) == labels) & counted
        rows = counted.any(dim=-1)
        whole = (right | ~counted).all(dim=-1) & rows
        return {
            "loss": loss.detach().double(),
            "correct": right.sum().double(),
            "count": counted.sum().double(),
            "exact": whole.sum().double(),
            "seqs": rows.sum().double(),
        }

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        self._check_pad(model)
        labels = batch["labels"]
        logits = self._logits(model, batch)
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss, plain = token_cross_entropy(logits, labels, smoothing)
        with torch.no_grad():
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        self._check_pad(model)
        labels = batch["labels"]
        logits = self._logits(model, batch)
        loss = token_cross_entropy(logits, labels)[1]
        sums = self._sums(logits, labels, loss)
        if self.generate_eval:
            sums["gen_exact"] = self._generated_exact(model, batch)
        return sums

    def _generated_exact(self, model: nn.Module, batch: Batch) -> Tensor:
        """Sequences whose greedy decoding, up to eos, equals the reference (labels up to the
        first -100)."""
        labels = batch["labels"]
        generated = self.predict(model, batch, max_new_tokens=labels.shape[1])[:, 1:]
        eos = self._eos(model)
        hits = 0
        for row, ref in zip(generated.tolist(), labels.tolist()):
            ref = [t for t in ref if t != IGNORE_INDEX]
            if not ref:
                continue
            out = row[: row.index(eos) + 1] if eos is not None and eos in row else row
            hits += int(out == ref)
        return torch.tensor(float(hits), dtype=torch.float64, device=labels.device)

    def _eos(self, model: nn.Module) -> int | None:
        if self.eos_id is not None:
            return int(self.eos_id)
        config = getattr(getattr(model, "module", model), "config", None)
        eos = getattr(config, "eos_token_id", None)
        return None if eos is None else int(eos)

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        seqs = sums.get("seqs", 0.0)
        out = {
            "loss": _ratio(sums, "loss"),
            "acc": _ratio(sums, "correct"),
            "exact": sums.get("exact", 0.0) / seqs if seqs else float("nan"),
        }
        if self.generate_eval:
            # Training sums have no generation: NaN there.
            gen = sums.get("gen_exact")
            out["gen_exact"] = gen / seqs if gen is not None and seqs else float("nan")
        return out

    def predict(self, model: nn.Module, batch: Batch, max_new_tokens: int | None = None) -> Tensor:
        """Greedy decoding of ``batch["src_ids"]`` -> (B, 1 + new) ids: ``[bos]`` then the
        generated tokens, padded with the pad id after eos. New tokens: ``max_new_tokens``
        (argument, then the task's), else the labels' width when the batch has labels, else the
        source length + 10; never more than the model's ``max_positions`` - 1."""
        plain = getattr(model, "module", model)
        src = batch["src_ids"]
        n = max_new_tokens or self.max_new_tokens
        if n is None:
            n = batch["labels"].shape[1] if "labels" in batch else src.shape[1] + 10
        limit = getattr(getattr(plain, "config", None), "max_positions", None)
        if limit is not None:
            n = min(n, int(limit) - 1)
        kwargs: dict[str, Any] = {"max_new_tokens": int(n), "pad_token_id": self.pad_id}
        if self.eos_id is not None:
            kwargs["eos_token_id"] = int(self.eos_id)
        return plain.generate(src, **kwargs)


# -- text tasks: sequence classification, causal and masked language modelling ----------------
def _dataset_attr(dataset: Any, *names: str) -> Any:
    """The first of ``names`` that the dataset, then its ``tokenizer``, has (not None)."""
    for owner in (dataset, getattr(dataset, "tokenizer", None)):
        if owner is None:
            continue
        for name in names:
            value = getattr(owner, name, None)
            if value is not None:
                return value
    return None


def _pad_id(dataset: Any) -> int:
    """The dataset's padding id (``pad_token_id``, else its tokenizer's ``pad_id``), else 0."""
    pad = _dataset_attr(dataset, "pad_token_id", "pad_id")
    return 0 if pad is None else int(pad)


def _item_ids(item: Any) -> Tensor:
    """Token ids (L,) of an item: the item itself, or the first field of an ``(ids, ...)``
    tuple (so a labelled dataset can also be read as plain text)."""
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (Tensor, list, tuple)):
        item = item[0]
    ids = torch.as_tensor(item, dtype=torch.int64)
    if ids.ndim != 1:
        raise ValueError(f"an item has ids of shape {tuple(ids.shape)}; expected token ids (L,)")
    return ids


def _pad_right(rows: Sequence[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Rows of ids -> (ids (B, L) right-padded with ``pad_id``, mask (B, L) True = real)."""
    length = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), length), int(pad_id), dtype=torch.int64)
    mask = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def _dataset_batch(task: Any, dataset: Any, indices: Tensor) -> Batch | None:
    """The dataset's ``get_batch`` fast path: a batch dict as it is, or items collated."""
    if not hasattr(dataset, "get_batch"):
        return None
    got = dataset.get_batch(indices)
    return dict(got) if isinstance(got, dict) else task.collate(got)


def _model_config(model: nn.Module) -> Any:
    return getattr(getattr(model, "module", model), "config", None)


class SequenceClassification(_LabeledIds):
    """One label per sequence: ``model(input_ids (B, L), attention_mask=(B, L) bool) -> logits
    (B, C)`` (tfam's BERT with ``head="sequence"``).

    Items ``(ids (L,), label int)``; ``collate`` pads the ids on the right with ``pad_id``:
    batch ``{"input_ids" (B, L), "attention_mask" (B, L) True = real token, "labels" (B,)}``.
    A label of -100 marks a row that nothing counts (a padding row). Training loss: cross-
    entropy with ``config.label_smoothing``, summed over counted rows; metrics ``loss`` (plain
    cross-entropy) and ``acc``, means over sequences. ``predict`` -> probabilities (B, C).
    """

    name = "sequence-classification"
    metrics = ("loss", "acc")
    primary_metric = "acc"
    higher_is_better = True
    unit = "sentences"

    def __init__(self, pad_id: int = 0) -> None:
        self.pad_id = int(pad_id)

    @classmethod
    def for_dataset(cls, dataset: Any) -> SequenceClassification:
        """The task with the dataset's padding id (see :func:`task_for`)."""
        return cls(pad_id=_pad_id(dataset))

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        return _dataset_batch(self, dataset, indices)

    def collate(self, items: Sequence[Any]) -> Batch:
        ids, mask = _pad_right([_item_ids(item[0]) for item in items], self.pad_id)
        labels = torch.as_tensor([int(item[1]) for item in items], dtype=torch.int64)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def count(self, batch: Batch) -> Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum().double()


CAUSAL_UNITS = ("tokens", "characters")


class CausalLM:
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
        from tfam.data.tokenizer import CharTokenizer

        unit = getattr(dataset, "unit", None)
        if unit not in CAUSAL_UNITS:
            chars = isinstance(getattr(dataset, "tokenizer", None), CharTokenizer)
            unit = "characters" if chars else "tokens"
        return cls(pad_id=_pad_id(dataset), unit=unit)

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        return _dataset_batch(self, dataset, indices)

    def collate(self, items: Sequence[Any]) -> Batch:
        rows = [_item_ids(item) for item in items]
        short = [len(r) for r in rows if len(r) < 2]
        if short:
            raise ValueError(
                f"an item has {short[0]} ids; a causal-lm item needs at least 2 (inputs ids[:-1], "
                "labels ids[1:])"
            )
        ids, mask = _pad_right(rows, self.pad_id)
        labels = ids[:, 1:].masked_fill(~mask[:, 1:], IGNORE_INDEX)
        return {"input_ids": ids[:, :-1], "labels": labels}

    def count(self, batch: Batch) -> Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum().double()

    def units(self, batch: Batch) -> float:
        """Throughput is counted in predicted tokens (characters for a character model)."""
        return float(self.count(batch))

    def augment(
        self,
        batch: Batch,
        fn: Callable[..., Tensor] | None,
        generator: torch.Generator,
        dataset: Any,
    ) -> Batch:
        return batch if fn is None else fn(batch, generator)

    def _logits(self, model: nn.Module, batch: Batch) -> Tensor:
        ids = batch["input_ids"]
        context = getattr(_model_config(model), "max_positions", None)
        if context is not None and ids.shape[1] > int(context):
            raise ValueError(
                f"the causal-lm batch has {ids.shape[1]} input tokens per row (items of "
                f"{ids.shape[1] + 1} ids), more than the model's context max_positions="
                f"{int(context)}: make the dataset's context at most {int(context)} or build the "
                f"model with max_positions >= {ids.shape[1]}"
            )
        mask = batch.get("attention_mask")
        return (model(ids) if mask is None else model(ids, attention_mask=mask)).float()

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
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss, plain = token_cross_entropy(logits, labels, smoothing)
        with torch.no_grad():
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        labels = batch["labels"]
        logits = self._logits(model, batch)
        return self._sums(logits, labels, token_cross_entropy(logits, labels)[1])

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        loss = _ratio(sums, "loss")
        out = {"loss": loss, "acc": _ratio(sums, "correct")}
        if self.unit == "characters":
            out["bpc"] = loss / math.log(2)
        else:
            # exp overflows a float past ~709 nats: the perplexity is then infinite.
            out["ppl"] = math.exp(loss) if not loss > 700 else math.inf
        return out

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Next-token probabilities (B, L, V): row i of position t scores token t + 1."""
        return self._logits(model, batch).softmax(dim=-1)


MLM_PROBABILITY = 0.15  # BERT: the share of maskable tokens that are predicted
MLM_MASK, MLM_RANDOM = 0.8, 0.1  # of those: -> [MASK], -> a random id; the rest stay


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
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size={vocab_size!r} is invalid: expected an int >= 1")
    if not 0 <= int(mask_token_id) < vocab_size:
        raise ValueError(
            f"mask_token_id={mask_token_id!r} is invalid: expected 0 <= id < vocab_size="
            f"{vocab_size}"
        )
    if not 0.0 < float(probability) <= 1.0:
        raise ValueError(f"probability={probability!r} is invalid: expected a number in (0, 1]")
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


class MaskedLM:
    """BERT's masked language modelling: ``model(input_ids (B, L), attention_mask=(B, L) bool)
    -> logits (B, L, V)`` (tfam's BERT with ``head="mlm"``).

    Items ``ids (L,)`` (or ``(ids, ...)``); ``collate`` pads them on the right: ``{"input_ids",
    "attention_mask"}``, unmasked. Masking (:func:`mask_tokens`: 15% of the tokens that are not
    padding nor special, of those 80% [MASK], 10% random, 10% unchanged) adds ``"labels"`` (the
    original id at chosen positions, -100 elsewhere): in training in :meth:`augment`, with the
    trainer's augmentation generator (so a resumed run masks as an uninterrupted one); in
    evaluation in :meth:`eval_sums`, each row under a seed from ``eval_seed`` and the row's own
    tokens, so evaluation is deterministic and does not depend on batch size, chunking or the
    number of processes. A batch that already has ``"labels"`` is taken as masked.

    Loss: cross-entropy (with ``config.label_smoothing``) summed over chosen positions
    (``count``); metrics ``loss`` (nats per masked token) and ``acc``, over chosen positions.
    """

    name = "masked-lm"
    metrics = ("loss", "acc")
    primary_metric = "loss"
    higher_is_better = False
    unit = "tokens"

    def __init__(
        self,
        mask_token_id: int,
        vocab_size: int,
        pad_id: int = 0,
        special_ids: Sequence[int] = (),
        probability: float = MLM_PROBABILITY,
        eval_seed: int = 0,
    ) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size={vocab_size!r} is invalid: expected an int >= 1")
        if not 0 <= int(mask_token_id) < vocab_size:
            raise ValueError(
                f"mask_token_id={mask_token_id!r} is invalid: expected 0 <= id < vocab_size="
                f"{vocab_size}"
            )
        if not 0.0 < float(probability) <= 1.0:
            raise ValueError(f"probability={probability!r} is invalid: expected a number in (0, 1]")
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
        return _real_tokens(batch)

    @classmethod
    def for_dataset(cls, dataset: Any, **options: Any) -> MaskedLM:
        """The task for a text dataset: ``mask_token_id``, ``vocab_size``, ``pad_token_id`` and
        ``special_ids`` read from the dataset, else from its ``tokenizer`` (also ``mask_id``,
        ``pad_id``); without ``special_ids``, the [CLS]/[SEP]/bos/eos ids it names
        (``cls_token_id``, ``sep_token_id``, ``cls_id``, ``sep_id``, ``bos_id``, ``eos_id``)."""
        what = type(dataset).__name__ if dataset is not None else "no dataset"
        mask = _dataset_attr(dataset, "mask_token_id", "mask_id")
        if mask is None:
            raise ValueError(
                f"task='masked-lm' needs the [MASK] id: {what} has no mask_token_id (nor its "
                "tokenizer a mask_token_id or mask_id)"
            )
        vocab = _dataset_attr(dataset, "vocab_size")
        if vocab is None:
            raise ValueError(
                f"task='masked-lm' needs the vocabulary size for its random replacements: {what} "
                "has no vocab_size (nor its tokenizer)"
            )
        special = _dataset_attr(dataset, "special_ids")
        if special is None:
            names = ("cls_token_id", "sep_token_id", "cls_id", "sep_id")
            names += ("bos_token_id", "eos_token_id", "bos_id", "eos_id")
            found = (_dataset_attr(dataset, name) for name in names)
            special = [int(i) for i in found if isinstance(i, int) and not isinstance(i, bool)]
        return cls(int(mask), int(vocab), _pad_id(dataset), tuple(special), **options)

    # -- batches ------------------------------------------------------------------------------
    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        return _dataset_batch(self, dataset, indices)

    def collate(self, items: Sequence[Any]) -> Batch:
        ids, mask = _pad_right([_item_ids(item) for item in items], self.pad_id)
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
        self,
        batch: Batch,
        fn: Callable[..., Tensor] | None,
        generator: torch.Generator,
        dataset: Any,
    ) -> Batch:
        if fn is not None:
            batch = fn(batch, generator)
        return batch if "labels" in batch else self.mask_batch(batch, generator)

    # -- losses and metrics -------------------------------------------------------------------
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
        if "labels" not in batch:
            self.count(batch)  # the clear error
        labels = batch["labels"]
        logits = self._logits(model, batch)
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss, plain = token_cross_entropy(logits, labels, smoothing)
        with torch.no_grad():
            sums = self._sums(logits, labels, plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        if "labels" not in batch:
            batch = self.eval_mask(batch)
        labels = batch["labels"]
        logits = self._logits(model, batch)
        return self._sums(logits, labels, token_cross_entropy(logits, labels)[1])

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": _ratio(sums, "loss"), "acc": _ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Token probabilities (B, L, V) of the batch as given (mask the ids to predict)."""
        return self._logits(model, batch).softmax(dim=-1)


# The dataset catalog's task names -> a task for a dataset (its padding id and the like).
TASKS: dict[str, Callable[[Any], Task]] = {
    ImageClassification.name: lambda dataset: ImageClassification(),
    TokenClassification.name: lambda dataset: TokenClassification(
        pad_id=int(getattr(dataset, "pad_token_id", 0))
    ),
    Seq2Seq.name: lambda dataset: Seq2Seq.for_dataset(dataset),
    SequenceClassification.name: SequenceClassification.for_dataset,
    CausalLM.name: CausalLM.for_dataset,
    MaskedLM.name: lambda dataset: MaskedLM.for_dataset(dataset),
}


def task_for(name: str, dataset: Any = None) -> Task:
    """The task named ``name`` (a dataset catalog's ``entry.task``), set up for ``dataset``."""
    if name not in TASKS:
        raise ValueError(f"task={name!r} is invalid: expected one of {', '.join(sorted(TASKS))}")
    return TASKS[name](dataset)
