"""What the image studies share (``attention-vs-cnn``, ``vision``): seeded stratified subsets of
Fashion-MNIST, a fixed step budget over a subset, training through tfam's
:class:`~tfam.training.Trainer` (its image-classification or distillation task), accuracy by
:func:`tfam.training.evaluation.evaluate`, and FLOPs by :func:`tfam.explain`.

A run trains ``steps`` optimiser steps of ``batch`` images whatever the subset's size: the
Trainer gets one epoch over a *stream* of ``steps * batch`` images made of whole shuffled passes
over the subset (the last one cut), so its warmup and cosine schedule end where the run ends,
a subset of N images is seen about ``steps * batch / N`` times, and a subset larger than
``steps * batch`` is seen in part (a report says so).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from tfam.data.sources.images import ImageDataset
from tfam.explain import explain
from tfam.training import TrainConfig, Trainer
from tfam.training.evaluation import evaluate

__all__ = [
    "explain_flops",
    "fashion",
    "image_accuracy",
    "parameters",
    "stratified",
    "stream",
    "train_images",
]


def fashion(split: str) -> ImageDataset:
    """Fashion-MNIST's ``split`` ("train": the 60,000 training images, "test": 10,000)."""
    from tfam.data import load_dataset

    return load_dataset("fashion-mnist", split)


def stratified(ds: ImageDataset, n: int, seed: int) -> ImageDataset:
    """``n`` images of ``ds``, the same number of each class (± 1), drawn with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    k = ds.num_classes
    per = [n // k + (c < n % k) for c in range(k)]
    picked = []
    for c in range(k):
        members = (ds.labels == c).nonzero().flatten()
        picked.append(members[torch.randperm(len(members), generator=g)[: per[c]]])
    return ds.subset(torch.cat(picked))


def stream(ds: ImageDataset, count: int, seed: int) -> ImageDataset:
    """``count`` images: whole shuffled passes over ``ds`` (each image once per pass), the last
    pass cut; a ``ds`` larger than ``count`` gives ``count`` of its images."""
    g = torch.Generator().manual_seed(seed)
    passes = -(-count // len(ds))
    order = torch.cat([torch.randperm(len(ds), generator=g) for _ in range(passes)])[:count]
    return ds.subset(order)


def spread(ds: ImageDataset, limit: int) -> ImageDataset:
    """``limit`` evenly spread images of ``ds`` (all of them when it holds no more)."""
    n = len(ds)
    return ds if limit >= n else ds.subset(torch.arange(limit) * n // limit)


def parameters(model: nn.Module) -> int:
    """Trainable parameters (each tensor once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_images(
    model: nn.Module,
    train: ImageDataset,
    s: dict[str, Any],
    seed: int,
    task: Any = None,
) -> float:
    """``s['steps']`` AdamW steps of ``s['batch']`` images of ``train`` (a :func:`stream` over
    it) through tfam's Trainer: warmup over the first 10%, cosine to ``min_lr``, weight decay
    ``s['weight_decay']``, gradients clipped at 1, no augmentation; ``task``: the Trainer's
    task (default image classification). Returns the training seconds."""
    data = stream(train, s["steps"] * s["batch"], seed)
    config = TrainConfig(
        epochs=1,
        batch_size=s["batch"],
        lr=s["lr"],
        min_lr=s["lr"] / 100,
        weight_decay=s.get("weight_decay", 0.05),
        warmup_epochs=0.1,
        clip_grad=1.0,
        seed=seed,
        quiet=True,
        progress=False,
        num_workers=0,
    )
    start = time.perf_counter()
    Trainer(model, data, None, config, task=task).fit()
    return time.perf_counter() - start


def image_accuracy(model: nn.Module, ds: ImageDataset, limit: int) -> float:
    """Accuracy of ``model`` (eval mode) on ``limit`` evenly spread images of ``ds``."""
    return float(evaluate(model, spread(ds, limit), batch_size=500).accuracy)


def explain_flops(name: str, size: int, **overrides: Any) -> dict[str, int]:
    """``tfam.explain``'s FLOPs of preset ``name`` at ``size`` x ``size`` pixels (meta device,
    one image; a multiply-add = 2 FLOPs), in total and in its attention rows (scores, bias,
    softmax, weighted sum: as benchmarks/bench_swin_flops.py sums them)."""
    table = explain(name, image_size=size, blocks="all", **overrides)
    steps = ("scores", "+ relative position bias", "softmax", "weighted sum")
    attn = sum(r.flops for r in table.rows if r.level == 1 and r.step.startswith(steps))
    return {"flops": table.total_flops, "attention_flops": attn, "parameters": table.total_params}
