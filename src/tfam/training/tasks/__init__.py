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
- ``units(batch)`` -> the batch's size in ``unit`` (throughput); ``extra_models()`` -> the
  models the task needs besides the one trained (a distillation teacher), by name: the trainer
  puts them on the run's device and precision in eval mode, never wraps them in DDP/FSDP and
  never saves them in checkpoints.

One module per objective, each a subclass of :class:`BaseTask` (image classification and the
token tasks of :class:`CrossEntropyTask`, which writes the cross-entropy, metric sums, reduction
and prediction once; the token tasks through :class:`TokenTask`, its logits of ``input_ids``)
that registers itself by its ``name`` in :data:`TASKS` (``name -> class``). Adding an objective
is one module: subclass, set ``name``, import it once. Tasks are chosen by the dataset
catalog's task name: ``task_for(name, dataset)`` (``TASKS[name].for_dataset(dataset)``):
images (:class:`ImageClassification`), one label per token (:class:`TokenClassification`) or
per sequence (:class:`SequenceClassification`), next-token prediction (:class:`CausalLM`),
BERT's masked tokens (:class:`MaskedLM`, masking by :func:`mask_tokens`), sequence to
sequence (:class:`Seq2Seq`), audio frames (:class:`FrameClassification`, a label per 10 ms
frame; :class:`UtteranceClassification`, one per utterance; :class:`CTC`, transcription),
graphs (:class:`NodeClassification`, :class:`GraphClassification`, :class:`GraphRegression`)
and images with a teacher (:class:`ImageDistillation`, DeiT's
distillation token; its teacher is an option of ``task_for``). Token and sequence tasks count nothing where a label is -100 (padding), so padding never changes a loss or a metric.
"""

from __future__ import annotations

from typing import Any

from tfam.training.tasks.audio import FrameClassification, UtteranceClassification
from tfam.training.tasks.base import (
    IGNORE_INDEX,
    TASKS,
    Augment,
    BaseTask,
    Batch,
    CrossEntropyTask,
    Task,
    TokenTask,
    batch_length,
    split_batch,
    token_cross_entropy,
)
from tfam.training.tasks.causal_lm import CAUSAL_UNITS, CausalLM
from tfam.training.tasks.ctc import CTC
from tfam.training.tasks.distillation import ImageDistillation, distillation_loss
from tfam.training.tasks.graphs import GraphClassification, GraphRegression, NodeClassification
from tfam.training.tasks.image_classification import ImageClassification
from tfam.training.tasks.masked_lm import MLM_PROBABILITY, MaskedLM, mask_tokens
from tfam.training.tasks.seq2seq import Seq2Seq
from tfam.training.tasks.sequence_classification import SequenceClassification
from tfam.training.tasks.token_classification import TokenClassification

__all__ = [
    "CAUSAL_UNITS",
    "CTC",
    "IGNORE_INDEX",
    "MLM_PROBABILITY",
    "TASKS",
    "Augment",
    "BaseTask",
    "Batch",
    "CausalLM",
    "CrossEntropyTask",
    "FrameClassification",
    "GraphClassification",
    "GraphRegression",
    "ImageClassification",
    "ImageDistillation",
    "MaskedLM",
    "NodeClassification",
    "Seq2Seq",
    "SequenceClassification",
    "Task",
    "TokenClassification",
    "TokenTask",
    "UtteranceClassification",
    "batch_length",
    "distillation_loss",
    "mask_tokens",
    "split_batch",
    "task_for",
    "token_cross_entropy",
]


def task_for(name: str, dataset: Any = None, **options: Any) -> Task:
    """The task named ``name`` (a dataset catalog's ``entry.task``), set up for ``dataset``;
    ``options`` go to its ``for_dataset`` (the distillation task's teacher and loss)."""
    if name not in TASKS:
        raise ValueError(f"task={name!r} is invalid: expected one of {', '.join(sorted(TASKS))}")
    return TASKS[name].for_dataset(dataset, **options)
