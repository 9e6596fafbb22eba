"""Train a data set's catalog recipe in code, with changes: what ``tfam train <family> --data
NAME`` does, without a run folder, for benchmarks and studies that compare variants of one
recipe (the graph model with and without its edge mask: benchmarks/bench_graph.py and the
``graph-edges`` study).

    from tfam.data import get_dataset
    from tfam.data.sources.karate import load_karate
    run = train_recipe(get_dataset("karate"), load_karate("train"), load_karate("test"),
                       seed=0, overrides={"graph_mask": False}, train={"epochs": 50})
    run.metrics(load_karate("test"))        # {"loss": ..., "acc": ...}
    run.seconds, run.cpu_seconds, run.steps
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tfam.data import task_facts
from tfam.models import create_model
from tfam.training.config import TrainConfig
from tfam.training.tasks import task_for
from tfam.training.trainer import Trainer

__all__ = ["RecipeRun", "train_recipe"]


@dataclass
class RecipeRun:
    """A trained model, its trainer (:meth:`metrics` evaluates through it), the wall-clock and
    CPU seconds training took, and the optimiser steps it made."""

    model: torch.nn.Module
    trainer: Trainer
    seconds: float
    cpu_seconds: float
    steps: int

    def metrics(self, dataset: Any) -> dict[str, float]:
        """The task's metrics on ``dataset`` (eval mode; e.g. ``acc``, or ``mae`` and ``r2``)."""
        out = self.trainer.evaluate_metrics(dataset)
        if out is None:
            raise RuntimeError("evaluation was interrupted by a stop request")
        return out


def train_recipe(
    entry: Any,
    train_set: Any,
    test_set: Any,
    *,
    seed: int,
    overrides: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    val_set: Any = None,
) -> RecipeRun:
    """Build ``entry.recipe.preset`` with the data's facts (:func:`tfam.data.task_facts`), the
    recipe's model fields and ``overrides``; train it with the recipe's TrainConfig values
    updated by ``train`` (``seed`` and ``quiet`` set); the split passed as ``test_set`` is the
    trainer's per-epoch one when there is no ``val_set``. ``warmup_epochs`` is cut to the
    epochs when ``train`` asks for fewer epochs than the recipe warms up over."""
    torch.manual_seed(seed)
    values = {**task_facts(entry), **entry.recipe.model, **(overrides or {})}
    model = create_model(entry.recipe.preset, **values)
    settings = {**entry.recipe.train, **(train or {}), "seed": seed, "quiet": True}
    if "epochs" in settings and settings.get("warmup_epochs", 0) > settings["epochs"]:
        settings["warmup_epochs"] = float(settings["epochs"])
    config = TrainConfig(**settings)
    task = task_for(entry.task, train_set)
    trainer = Trainer(model, train_set, test_set, config, val_set=val_set, task=task)
    start, cpu = time.perf_counter(), time.process_time()
    trainer.fit()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return RecipeRun(model, trainer, seconds, cpu_seconds, trainer.global_step)
