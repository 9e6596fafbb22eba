"""What a run leaves behind besides its weights: ``TrainResult`` (returned by ``fit``), the
``results.json`` record made from it, and ``preprocess.json`` (how images were normalised)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tfam.training.checkpoint import atomic_write_bytes

__all__ = ["RESULTS_NAME", "TrainResult", "preprocess_info", "results_record", "write_json"]


@dataclass
class TrainResult:
    """What a finished (or stopped) run reached. Accuracies are fractions in [0, 1].

    ``final_test_acc`` / ``final_test_loss``: the test split on the saved model (below; NaN
    without a test split). ``best_test_acc`` / ``best_epoch``: without a validation split, the best
    end-of-epoch test accuracy (the final one, and epoch 0, if no epoch was completed); with
    one, ``best_epoch`` is the epoch of the best validation score (``best_val_acc``) and
    ``best_test_acc`` is NaN (the test split is evaluated once, at the end).
    ``test_metrics`` / ``val_metrics``: every metric of the task, final values.
    ``already_finished``: a resume found the run finished and did nothing.

    With refit: the test values are the refit model's; ``best_*``, ``val_metrics``,
    ``epochs_completed`` and ``stopped_early`` describe the selection run; ``steps`` and
    ``seconds`` the whole run; ``refit`` holds the refit's ``epochs``, ``steps`` and
    ``examples`` (empty without refit).

    ``budget``: with ``max_minutes``, its plan (``plan``: steps, warmup, measured step time,
    ...) and the final evaluations that used a subset (``final_eval``: split, examples, of);
    see :mod:`tfam.training.budget`. Empty without a plan.
    The saved model (``out_dir/model.safetensors``, and ``trainer.model`` after ``fit``) is the
    best validation epoch's; the final test values are that model's. ``saved`` says which:
    ``epoch``, ``step``, ``rule`` ("best val"; "last epoch" without a validation split; "last
    step" when weights taken mid-epoch beat every epoch; "refit") and ``val`` (its validation
    metrics). ``final_val_*`` and ``val_metrics`` are the last epoch's, as the per-epoch rows.
    """

    final_test_acc: float
    final_test_loss: float
    best_test_acc: float
    best_epoch: int
    epochs_completed: int
    steps: int
    seconds: float
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)
    out_dir: Path | None = None
    final_val_acc: float = math.nan
    final_val_loss: float = math.nan
    best_val_acc: float = math.nan
    test_metrics: dict[str, float] = field(default_factory=dict)
    val_metrics: dict[str, float] = field(default_factory=dict)
    already_finished: bool = False
    refit: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    saved: dict[str, Any] = field(default_factory=dict)


def preprocess_info(dataset: Any) -> dict[str, Any] | None:
    """OUT/preprocess.json contents for a tfam ImageDataset (None if it lacks the facts)."""
    needed = ("mean", "std", "classes", "image_size", "in_channels", "pixel_scale")
    if not all(hasattr(dataset, a) for a in needed):
        return None
    size = dataset.image_size
    size = [int(size), int(size)] if isinstance(size, int) else [int(s) for s in size]
    return {
        "dataset": getattr(dataset, "name", "custom"),
        "image_size": size,
        "in_channels": int(dataset.in_channels),
        "mean": [float(v) for v in torch.as_tensor(dataset.mean).reshape(-1).tolist()],
        "std": [float(v) for v in torch.as_tensor(dataset.std).reshape(-1).tolist()],
        "classes": [str(c) for c in dataset.classes],
        "pixel_scale": float(dataset.pixel_scale),
    }


RESULTS_NAME = "results.json"  # a finished run's final scores, for scripts and tests


def results_record(r: TrainResult) -> dict[str, Any]:
    """What ``results.json`` holds: the final test and validation metrics, the validation
    metrics of the best epoch (``best_val``, with a validation split), which weights were saved
    and tested (``saved``: epoch, step, rule, val), the run's extent, and
    with refit the refit's extent (``refit``: epochs, steps, examples; ``test`` is then the
    refit model's score), and with a budget's plan its ``budget``. NaN, which JSON cannot hold, becomes null."""

    def clean(metrics: dict[str, float]) -> dict[str, float | None]:
        return {k: (None if math.isnan(v) else v) for k, v in metrics.items()}

    record: dict[str, Any] = {
        "test": clean(r.test_metrics),
        "val": clean(r.val_metrics),
        "best_epoch": r.best_epoch,
        "epochs_completed": r.epochs_completed,
        "steps": r.steps,
        "seconds": r.seconds,
        "stopped_early": r.stopped_early,
    }
    best = [row for row in r.history if row.get("phase", 1) == 1 and row["epoch"] == r.best_epoch]
    if r.val_metrics and best:
        record["best_val"] = clean(
            {k[len("val_") :]: float(v) for k, v in best[0].items() if k.startswith("val_")}
        )
    if r.refit:
        record["refit"] = dict(r.refit)
    if r.budget:
        record["budget"] = dict(r.budget)
    if r.saved:
        record["saved"] = {**r.saved, "val": clean(dict(r.saved.get("val") or {}))}
    return record


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())
