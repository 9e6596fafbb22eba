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
are :data:`TASKS`).
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
    "TASKS",
    "Batch",
    "ImageClassification",
    "Seq2Seq",
    "Task",
    "TokenClassification",
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


# The dataset catalog's task names -> a task for a dataset (its padding id and the like).
TASKS: dict[str, Callable[[Any], Task]] = {
    ImageClassification.name: lambda dataset: ImageClassification(),
    TokenClassification.name: lambda dataset: TokenClassification(
        pad_id=int(getattr(dataset, "pad_token_id", 0))
    ),
    Seq2Seq.name: lambda dataset: Seq2Seq.for_dataset(dataset),
}


def task_for(name: str, dataset: Any = None) -> Task:
    """The task named ``name`` (a dataset catalog's ``entry.task``), set up for ``dataset``."""
    if name not in TASKS:
        raise ValueError(f"task={name!r} is invalid: expected one of {', '.join(sorted(TASKS))}")
    return TASKS[name](dataset)
