"""Classification metrics over a dataset: accuracy, per-class accuracy, confusion matrix, loss.

    from tfam.training.evaluation import evaluate
    result = evaluate(model, tfam.data.load_dataset("digits", "test"))
    result.accuracy, result.per_class_accuracy, result.confusion   # float, (K,), (K, K)

The confusion matrix has one row per TRUE class and one column per PREDICTED class, so row k
sums to the number of examples of class k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["EvalResult", "accuracy", "confusion_matrix", "evaluate", "per_class_accuracy"]


def confusion_matrix(targets: Tensor, predictions: Tensor, num_classes: int) -> Tensor:
    """(K, K) int64 counts: entry [t, p] = number of examples of class t predicted as p.

    targets, predictions: (N,) integers in [0, num_classes).
    """
    targets = torch.as_tensor(targets).reshape(-1).to(torch.int64)
    predictions = torch.as_tensor(predictions).reshape(-1).to(torch.int64)
    if targets.shape != predictions.shape:
        raise ValueError(
            f"targets and predictions must have the same length, got {targets.numel()} and "
            f"{predictions.numel()}"
        )
    for name, t in (("targets", targets), ("predictions", predictions)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
            raise ValueError(
                f"{name} must lie in [0, {num_classes}), found [{int(t.min())}, {int(t.max())}]"
            )
    flat = targets * num_classes + predictions
    return torch.bincount(flat, minlength=num_classes * num_classes).view(num_classes, num_classes)


def accuracy(logits_or_predictions: Tensor, targets: Tensor) -> float:
    """Fraction correct. Accepts logits (N, K) or predicted class indices (N,)."""
    pred = logits_or_predictions
    if pred.ndim == 2:
        pred = pred.argmax(dim=-1)
    if pred.shape != targets.shape:
        raise ValueError(
            f"predictions {tuple(pred.shape)} and targets {tuple(targets.shape)} differ in shape"
        )
    if targets.numel() == 0:
        raise ValueError("accuracy of zero examples is undefined")
    return float((pred == targets).float().mean())


def per_class_accuracy(confusion: Tensor) -> Tensor:
    """(K,) float64 recall per true class: diag / row sum; NaN for a class with no examples."""
    counts = confusion.sum(dim=1).to(torch.float64)
    correct = confusion.diagonal().to(torch.float64)
    return torch.where(counts > 0, correct / counts.clamp(min=1), torch.nan)


@dataclass
class EvalResult:
    """Everything ``evaluate`` measured. confusion: (K, K) int64, rows = true class;
    ``predictions`` and ``targets``: (N,) int64 per example, in the dataset's order (for
    paired comparisons of two models, :func:`tfam.studies.stats.mcnemar`)."""

    classes: tuple[str, ...]
    confusion: Tensor
    loss: float
    predictions: Tensor | None = None
    targets: Tensor | None = None

    @property
    def correct_mask(self) -> Tensor:
        """(N,) bool: which examples the model got right, in the dataset's order."""
        if self.predictions is None or self.targets is None:
            raise ValueError("this result holds no per-example predictions")
        return self.predictions == self.targets

    @property
    def num_examples(self) -> int:
        return int(self.confusion.sum())

    @property
    def correct(self) -> int:
        return int(self.confusion.diagonal().sum())

    @property
    def accuracy(self) -> float:
        return self.correct / self.num_examples

    @property
    def class_counts(self) -> Tensor:
        """(K,) examples per true class."""
        return self.confusion.sum(dim=1)

    @property
    def class_correct(self) -> Tensor:
        """(K,) correctly classified examples per true class."""
        return self.confusion.diagonal().clone()

    @property
    def per_class_accuracy(self) -> Tensor:
        """(K,) float64 accuracy per true class (NaN where a class has no examples)."""
        return per_class_accuracy(self.confusion)

    def most_confused(self, n: int = 3) -> list[tuple[str, str, int]]:
        """The n largest off-diagonal cells as (true class, predicted class, count), count > 0."""
        off = self.confusion.clone()
        off.fill_diagonal_(0)
        values, flat = off.flatten().sort(descending=True, stable=True)
        k = len(self.classes)
        return [
            (self.classes[i // k], self.classes[i % k], int(v))
            for v, i in zip(values[:n].tolist(), flat[:n].tolist())
            if v > 0
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers (NaN per-class accuracy becomes None)."""
        per_class = []
        for name, count, right, acc in zip(
            self.classes,
            self.class_counts.tolist(),
            self.class_correct.tolist(),
            self.per_class_accuracy.tolist(),
        ):
            per_class.append(
                {
                    "class": name,
                    "count": count,
                    "correct": right,
                    "accuracy": None if math.isnan(acc) else acc,
                }
            )
        return {
            "num_examples": self.num_examples,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "loss": self.loss,
            "classes": list(self.classes),
            "per_class": per_class,
            "confusion_matrix": self.confusion.tolist(),
        }


def _batch(dataset: Any, indices: Tensor) -> tuple[Tensor, Tensor]:
    if hasattr(dataset, "get_batch"):
        return dataset.get_batch(indices)
    items = [dataset[int(i)] for i in indices]
    images = torch.stack([torch.as_tensor(x) for x, _ in items])
    labels = torch.tensor([int(y) for _, y in items], dtype=torch.int64)
    return images, labels


def evaluate(
    model: nn.Module,
    dataset: Any,
    batch_size: int = 256,
    classes: Sequence[str] | None = None,
    device: str | torch.device | None = None,
) -> EvalResult:
    """Run ``model`` over every example of ``dataset`` in batches, without gradients.

    model: images (B, C, H, W) -> logits (B, K). dataset: ``get_batch(indices)`` ->
    (images (B, C, H, W), labels (B,)) like ``tfam.data.ImageDataset``, or any indexable of
    (image (C, H, W), label) pairs. classes: K names (default: ``dataset.classes``, else
    "0".."K-1"). The model's train/eval mode is restored afterwards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is invalid: expected an int >= 1")
    n = len(dataset)
    if n == 0:
        raise ValueError("dataset is empty: nothing to evaluate")
    if classes is None:
        classes = getattr(dataset, "classes", None)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    confusion: Tensor | None = None
    loss_sum = 0.0
    predicted, targets = [], []
    try:
        with torch.inference_mode():
            for start in range(0, n, batch_size):
                x, y = _batch(dataset, torch.arange(start, min(n, start + batch_size)))
                logits = model(x.to(device)).float().cpu()
                if logits.ndim != 2:
                    raise ValueError(
                        f"the model returned shape {tuple(logits.shape)}; expected logits (B, K)"
                    )
                k = logits.shape[1]
                if classes is None:
                    classes = [str(i) for i in range(k)]
                if len(classes) != k:
                    raise ValueError(
                        f"the model predicts {k} classes but the data has {len(classes)} "
                        f"({', '.join(map(str, classes[:12]))})"
                    )
                loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
                pred = logits.argmax(dim=1)
                predicted.append(pred)
                targets.append(y.reshape(-1).to(torch.int64))
                cm = confusion_matrix(y, pred, k)
                confusion = cm if confusion is None else confusion + cm
    finally:
        model.train(was_training)
    assert confusion is not None and classes is not None
    return EvalResult(
        classes=tuple(str(c) for c in classes),
        confusion=confusion,
        loss=loss_sum / n,
        predictions=torch.cat(predicted),
        targets=torch.cat(targets),
    )
