"""The task contract, the registry of task names, and the base every token task shares.

- :class:`Task`: what the trainer needs from a task (a Protocol: any object with these members
  trains, registered or not).
- :class:`BaseTask`: the base of tfam's tasks. A subclass that sets ``name`` registers itself
  in :data:`TASKS` (as an attention kernel does in ``layers/kernels.py``), so a new objective is
  one module; ``for_dataset(dataset)`` builds it for a dataset (padding id and the like), and
  ``extra_models()`` names the models it needs besides the one trained (a teacher).
- :class:`CrossEntropyTask`: cross-entropy against labels with -100 where nothing counts,
  for ``logits (..., V)`` against ``labels (...)``: the training loss, the metric sums, their
  reduction, evaluation and prediction, written once for image classification and the token
  tasks.
- :class:`TokenTask`: the cross-entropy task of a model that reads ``input_ids`` (sequence and
  token classification, causal and masked language modelling and sequence to sequence).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "IGNORE_INDEX",
    "TASKS",
    "Augment",
    "BaseTask",
    "Batch",
    "CrossEntropyTask",
    "Task",
    "TokenTask",
    "batch_length",
    "dominant_labels",
    "mixed_cross_entropy",
    "split_batch",
    "token_cross_entropy",
]

Batch = dict[str, Tensor]
# A training augmentation, as the trainer passes it to ``Task.augment``: called with a batch
# (or, for image tasks, its images (B, C, H, W)) and the trainer's generator, it returns the
# same kind, augmented.
Augment = Callable[..., Any]
IGNORE_INDEX = -100  # label of a position that no loss or metric counts (padding, sub-words)

# Task name (the dataset catalog's ``task``) -> the BaseTask subclass; filled by subclassing.
TASKS: dict[str, type[BaseTask]] = {}


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task (see :mod:`tfam.training.tasks` for the contract)."""

    name: str
    metrics: tuple[str, ...]
    primary_metric: str
    higher_is_better: bool
    unit: str

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None: ...

    def collate(self, items: Sequence[Any]) -> Batch: ...

    def count(self, batch: Batch) -> Tensor: ...

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch: ...

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]: ...

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]: ...

    def reduce(self, sums: dict[str, float]) -> dict[str, float]: ...

    def predict(self, model: nn.Module, batch: Batch) -> Tensor: ...


# -- helpers ----------------------------------------------------------------------------------
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


def mixed_cross_entropy(
    logits: Tensor,
    labels: Tensor,
    label_smoothing: float = 0.0,
    mix_labels: Tensor | None = None,
    mix_lam: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Cross-entropy summed over images, against two labels where the batch was mixed (Mixup,
    CutMix): per image lam CE(z, y) + (1 - lam) CE(z, y'), the same as CE against the mixed
    one-hot target. logits (B, K), labels, mix_labels and mix_lam (B,) -> (loss to minimise
    (with label smoothing), plain loss (detached when smoothing)). Without ``mix_labels``:
    :func:`token_cross_entropy`."""
    if mix_labels is None or mix_lam is None:
        return token_cross_entropy(logits, labels, label_smoothing)
    lam = mix_lam.to(logits.dtype)

    def mixed(smoothing: float) -> Tensor:
        own = F.cross_entropy(logits, labels, reduction="none", label_smoothing=smoothing)
        other = F.cross_entropy(logits, mix_labels, reduction="none", label_smoothing=smoothing)
        return (lam * own + (1 - lam) * other).sum()

    loss = mixed(label_smoothing)
    if label_smoothing == 0:
        return loss, loss
    with torch.no_grad():
        return loss, mixed(0.0)


def dominant_labels(batch: Batch) -> Tensor:
    """Per image, the label of the larger weight in a mixed batch (its own at lam >= 1/2):
    what training accuracy counts; the labels themselves when the batch was not mixed."""
    if "mix_lam" not in batch:
        return batch["labels"]
    return torch.where(batch["mix_lam"] >= 0.5, batch["labels"], batch["mix_labels"])


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


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def ratio(sums: dict[str, float], key: str) -> float:
    """``sums[key]`` per counted unit (``sums["count"]``); NaN when nothing was counted."""
    n = sums.get("count", 0.0)
    return sums.get(key, 0.0) / n if n else float("nan")


def real_tokens(batch: Batch) -> float:
    """Real (non-padding) input tokens of a batch: its attention mask's sum, else every id."""
    mask = batch.get("attention_mask")
    return float(mask.sum()) if mask is not None else float(batch["input_ids"].numel())


def dataset_attr(dataset: Any, *names: str) -> Any:
    """The first of ``names`` that the dataset, then its ``tokenizer``, has (not None)."""
    for owner in (dataset, getattr(dataset, "tokenizer", None)):
        if owner is None:
            continue
        for name in names:
            value = getattr(owner, name, None)
            if value is not None:
                return value
    return None


def dataset_pad_id(dataset: Any) -> int:
    """The dataset's padding id (``pad_token_id``, else its tokenizer's ``pad_id``), else 0."""
    pad = dataset_attr(dataset, "pad_token_id", "pad_id")
    return 0 if pad is None else int(pad)


def item_ids(item: Any) -> Tensor:
    """Token ids (L,) of an item: the item itself, or the first field of an ``(ids, ...)``
    tuple (so a labelled dataset can also be read as plain text)."""
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (Tensor, list, tuple)):
        item = item[0]
    ids = torch.as_tensor(item, dtype=torch.int64)
    if ids.ndim != 1:
        raise ValueError(f"an item has ids of shape {tuple(ids.shape)}; expected token ids (L,)")
    return ids


def pad_right(rows: Sequence[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Rows of ids -> (ids (B, L) right-padded with ``pad_id``, mask (B, L) True = real)."""
    length = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), length), int(pad_id), dtype=torch.int64)
    mask = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def model_config(model: nn.Module) -> Any:
    """The config of a model, through a DDP/FSDP wrapper (``module``)."""
    return getattr(getattr(model, "module", model), "config", None)


# -- the bases --------------------------------------------------------------------------------
class BaseTask:
    """The base of tfam's tasks. A subclass sets ``name`` (registering it in :data:`TASKS`),
    ``objective`` (its short name for ``tfam train --task``), ``metrics``, ``primary_metric``,
    ``higher_is_better`` and ``unit``, and implements ``collate``, ``count``, ``train_loss``, ``eval_sums``, ``reduce`` and ``predict``.

    Defaults here: ``for_dataset`` builds the task with no arguments; ``get_batch`` is the
    dataset's ``get_batch(indices)`` fast path (a batch dict as it is, items collated), None
    without one; ``augment`` applies ``fn(batch, generator)``; ``units`` counts rows;
    ``extra_models`` is empty.
    """

    name: ClassVar[str] = ""
    # The objective's short name on the command line (tfam train --task), where a data set
    # allows several: "classify", "tag", "mlm", ...; "" = the name.
    objective: ClassVar[str] = ""
    metrics: tuple[str, ...] = ("loss",)
    primary_metric = "loss"
    higher_is_better = False
    unit = "examples"
    # Whether ``for_dataset`` needs ``teacher=`` (a model the task runs beside the student,
    # returned by ``extra_models``); the task contract then lends it one.
    needs_teacher: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            TASKS[cls.name] = cls

    @classmethod
    def for_dataset(cls, dataset: Any) -> BaseTask:
        """The task set up for ``dataset`` (see :func:`tfam.training.tasks.task_for`)."""
        return cls()

    def extra_models(self) -> dict[str, nn.Module]:
        """Models the task needs besides the one trained (a distillation teacher, ...), by
        name. The trainer moves them to the run's device and precision and sets them to eval
        mode; it does not wrap them in DDP/FSDP, train them, nor save them in checkpoints."""
        return {}

    def prepare_training(
        self,
        dataset: Any,
        batches: Callable[[Sequence[Tensor]], Iterable[Batch]],
        prepare: Callable[[Batch], Batch],
        show_progress: bool,
    ) -> None:
        """Work done once before the first optimiser step (and again after a resume), on the
        training ``dataset``: ``batches(index_batches)`` loads them, ``prepare(batch)`` moves
        one to the run's device. Nothing by default; a distillation teacher with a cache reads
        every training image here, so a time budget times the student's steps alone."""

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        if not hasattr(dataset, "get_batch"):
            return None
        got = dataset.get_batch(indices)
        return dict(got) if isinstance(got, Mapping) else self.collate(got)

    def collate(self, items: Sequence[Any]) -> Batch:
        raise NotImplementedError(f"{type(self).__name__}.collate")

    def units(self, batch: Batch) -> float:
        """The batch's size in ``unit``, for throughput: its rows unless a task counts
        something else (tokens, characters)."""
        return float(batch_length(batch))

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch:
        return batch if fn is None else fn(batch, generator)


class CrossEntropyTask(BaseTask):
    """Cross-entropy of ``logits (..., V)`` against ``labels (...)``, counted where the label
    is not -100: ``count`` is the counted labels; the training loss is summed over them (with
    ``config.label_smoothing``); metric sums ``loss`` (plain cross-entropy), ``correct`` (argmax
    right) and ``count``; metrics ``loss`` and ``acc``, means per counted label. A batch mixed
    by Mixup or CutMix (``mix_labels`` and ``mix_lam`` beside ``labels``) trains on both labels
    (:func:`mixed_cross_entropy`) and counts the label of the larger weight as right.

    A subclass gives :meth:`logits` and may check or complete a batch before the forward
    (:meth:`training_batch`, :meth:`evaluation_batch`), add sums (:meth:`sums`) and metrics
    (:meth:`reduce`).
    """

    metrics: tuple[str, ...] = ("loss", "acc")

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """The model's float32 logits (..., V) for the batch."""
        raise NotImplementedError(f"{type(self).__name__}.logits")

    def training_batch(self, model: nn.Module, batch: Batch) -> Batch:
        """The batch a training step runs on (checks it against the model)."""
        return batch

    def evaluation_batch(self, model: nn.Module, batch: Batch) -> Batch:
        """The batch evaluation runs on (checks it against the model, or completes it)."""
        return batch

    def count(self, batch: Batch) -> Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum().double()

    def sums(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        """Metric sums of a batch (float64 scalars): plain loss, right argmaxes, counted."""
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
        batch = self.training_batch(model, batch)
        logits = self.logits(model, batch)
        smoothing = float(getattr(config, "label_smoothing", 0.0))
        loss, plain = mixed_cross_entropy(
            logits, batch["labels"], smoothing, batch.get("mix_labels"), batch.get("mix_lam")
        )
        with torch.no_grad():
            sums = self.sums(logits, dominant_labels(batch), plain)
        return loss, sums

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        batch = self.evaluation_batch(model, batch)
        labels = batch["labels"]
        logits = self.logits(model, batch)
        return self.sums(logits, labels, token_cross_entropy(logits, labels)[1])

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": ratio(sums, "loss"), "acc": ratio(sums, "correct")}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Probabilities (..., V) of the batch as given."""
        return self.logits(model, batch).softmax(dim=-1)


class TokenTask(CrossEntropyTask):
    """A :class:`CrossEntropyTask` on token ids: logits of ``model(input_ids (B, L),
    attention_mask=(B, L))``; throughput in tokens."""

    unit = "tokens"

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        """The model's float32 logits for the batch."""
        return model(batch["input_ids"], attention_mask=batch.get("attention_mask")).float()

    def augment(
        self, batch: Batch, fn: Augment | None, generator: torch.Generator, dataset: Any
    ) -> Batch:
        """A dataset that moves its own ids (``dataset.augment_ids(ids, fn, generator)``: pixel
        sequences under pad-crop and flips) gets the batch's whole sequences, which are split
        back into the batch; other data: ``fn(batch, generator)``."""
        own = getattr(dataset, "augment_ids", None)
        if fn is None or own is None:
            return super().augment(batch, fn, generator, dataset)
        return self.with_sequences(batch, own(self.sequences(batch), fn, generator))

    def sequences(self, batch: Batch) -> Tensor:
        """The batch's whole id sequences (B, L) (what a dataset's items hold)."""
        return batch["input_ids"]

    def with_sequences(self, batch: Batch, ids: Tensor) -> Batch:
        """The batch with its sequences replaced by ``ids`` (the inverse of :meth:`sequences`)."""
        return {**batch, "input_ids": ids}
