"""AdamW with decoupled weight decay on the right parameters, and the learning-rate schedules:
warmup + cosine, and the Transformer paper's warmup + inverse square root.

Weight decay pulls weights towards zero; that regularises matrices, but on a LayerNorm gain, a
bias, a position table or a [CLS] token it only fights the parameter's job. So the optimiser
gets two groups:

- decay: every parameter with ndim >= 2 (linear and patch-projection weights);
- no decay: parameters with ndim <= 1 (norm gains, biases), any parameter whose name ends in
  ``pos_embed``, ``cls_token``, ``dist_token`` or ``mask_token``, and any name a module lists
  in its ``no_weight_decay()`` method (names relative to that module, as timm does).

Schedules (``build_scheduler(..., schedule=...)``), per optimiser step:

- ``cosine``: the learning rate rises linearly over ``warmup_steps`` optimiser steps, then
  follows half a cosine down to ``min_lr`` at ``total_steps``, and stays there.
- ``inverse_sqrt`` (Vaswani et al. 2017, eq. 3): lr(n) = peak * min(n / warmup,
  sqrt(warmup / n)) for the n-th step (n = 1, 2, ...), which is the paper's
  D^-0.5 * min(n^-0.5, n * warmup^-1.5) with the peak D^-0.5 * warmup^-0.5 given as ``lr``.
  It does not depend on ``total_steps``; after warmup it never falls below ``min_lr``. No
  warmup (0) behaves as a warmup of 1: the peak at the first step, then peak / sqrt(n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = [
    "NO_DECAY_SUFFIXES",
    "SCHEDULES",
    "InverseSqrt",
    "WarmupCosine",
    "build_optimizer",
    "build_scheduler",
    "param_groups",
    "inverse_sqrt_factor",
    "split_decay",
    "cosine_factor",
    "cosine_progress",
    "warmup_cosine_factor",
]

NO_DECAY_SUFFIXES = ("pos_embed", "cls_token", "dist_token", "mask_token")
SCHEDULES = ("cosine", "inverse_sqrt")


def _model_no_decay_names(model: nn.Module) -> set[str]:
    """Full parameter names listed by ``no_weight_decay()`` of the model or any submodule."""
    names: set[str] = set()
    for prefix, module in model.named_modules():
        method = getattr(module, "no_weight_decay", None)
        if not callable(method):
            continue
        listed: Iterable[str] = method() or ()
        for name in listed:
            names.add(f"{prefix}.{name}" if prefix else name)
    return names


def split_decay(model: nn.Module) -> tuple[list[str], list[str]]:
    """Names of the trainable parameters that get weight decay, and of those that do not.

    Returns (decay, no_decay), each in ``model.named_parameters()`` order.
    """
    listed = _model_no_decay_names(model)
    decay: list[str] = []
    no_decay: list[str] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        # A listed name may name a parameter or a module holding parameters ("cls_token",
        # "encoder.blocks.0.norm1").
        is_listed = name in listed or any(name.startswith(n + ".") for n in listed)
        if p.ndim <= 1 or name.endswith(NO_DECAY_SUFFIXES) or is_listed:
            no_decay.append(name)
        else:
            decay.append(name)
    return decay, no_decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two optimiser groups: ``{"params", "weight_decay", "names"}`` with decay, then without.

    The ``names`` key is carried along for inspection (optimisers keep extra keys).
    An empty group is left out.
    """
    if not isinstance(weight_decay, int | float) or weight_decay < 0:
        raise ValueError(f"weight_decay={weight_decay!r} is invalid: expected a float >= 0")
    params = dict(model.named_parameters())
    decay, no_decay = split_decay(model)
    groups = []
    for names, wd in ((decay, float(weight_decay)), (no_decay, 0.0)):
        if names:
            groups.append(
                {"params": [params[n] for n in names], "weight_decay": wd, "names": names}
            )
    if not groups:
        raise ValueError(f"{type(model).__name__} has no trainable parameters to optimise")
    return groups


def build_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.05,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW (decoupled weight decay) over :func:`param_groups`."""
    if not isinstance(lr, int | float) or not lr > 0:
        raise ValueError(f"lr={lr!r} is invalid: expected a float > 0")
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps)


def warmup_cosine_factor(
    step: int, warmup_steps: int, total_steps: int, min_factor: float = 0.0
) -> float:
    """Multiplier of the base lr used by optimiser step ``step`` (0-based).

    Warmup: (step + 1) / warmup_steps for step < warmup_steps, so the first step already moves
    and step warmup_steps - 1 runs at the full rate. Then
    min_factor + (1 - min_factor) * (1 + cos(pi * t)) / 2 with t = (step - warmup) /
    (total - warmup), clamped to [0, 1]: 1 at the end of warmup, min_factor at total_steps.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return cosine_factor(cosine_progress(step, warmup_steps, total_steps), min_factor)


def cosine_progress(step: int, warmup_steps: int, total_steps: int) -> float:
    """The cosine's progress t = (step - warmup) / (total - warmup), clamped to [0, 1]."""
    decay_steps = max(total_steps - warmup_steps, 1)
    return min(max((step - warmup_steps) / decay_steps, 0.0), 1.0)


def cosine_factor(t: float, min_factor: float = 0.0) -> float:
    """The cosine's multiplier at progress ``t`` in [0, 1]: 1 at 0, ``min_factor`` at 1."""
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * t))


class WarmupCosine:
    """Picklable LambdaLR factor (its numbers go into the scheduler's state_dict).

    :meth:`retarget` moves the cosine's end mid-run (a time budget re-planned) without a jump
    in the learning rate: from ``anchor_step`` on, the cosine's progress t runs linearly from
    ``anchor_t`` (its value there) to 1 at the new ``total_steps``."""

    def __init__(self, warmup_steps: int, total_steps: int, min_factor: float) -> None:
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_factor = float(min_factor)
        self.anchor_step = -1  # -1: no retarget; the plain warmup-cosine
        self.anchor_t = 0.0

    def progress(self, step: int) -> float:
        """The cosine's t in [0, 1] at ``step`` (0 during warmup)."""
        anchor = getattr(self, "anchor_step", -1)  # -1 also for a factor pickled before anchors
        if anchor < 0 or step < anchor:
            return cosine_progress(step, self.warmup_steps, self.total_steps)
        # From the anchor, the rest of the way to 1 over the steps left to the end.
        return self.anchor_t + (1.0 - self.anchor_t) * cosine_progress(
            step, anchor, self.total_steps
        )

    def retarget(self, step: int, total_steps: int) -> None:
        """End the cosine at ``total_steps`` instead, continuing from ``step`` at the rate it
        has there (during warmup only the end moves). The factor is then the schedule from
        ``step`` on; the steps before it (already taken) are not recomputed."""
        if step > self.warmup_steps:
            self.anchor_t = self.progress(step)
            self.anchor_step = int(step)
        self.total_steps = int(total_steps)

    def __call__(self, step: int) -> float:
        if getattr(self, "anchor_step", -1) < 0 or step < self.anchor_step:
            return warmup_cosine_factor(step, self.warmup_steps, self.total_steps, self.min_factor)
        return cosine_factor(self.progress(step), self.min_factor)


def inverse_sqrt_factor(step: int, warmup_steps: int, min_factor: float = 0.0) -> float:
    """Multiplier of the peak lr used by optimiser step ``step`` (0-based, so n = step + 1):
    min(n / warmup, sqrt(warmup / n)), at least ``min_factor`` after warmup; warmup 0 acts as 1.
    """
    n = step + 1
    w = max(int(warmup_steps), 1)
    if n < w:
        return n / w
    return max(math.sqrt(w / n), min_factor)


class InverseSqrt:
    """Picklable LambdaLR factor of the inverse-square-root schedule (its numbers go into the
    scheduler's state_dict)."""

    def __init__(self, warmup_steps: int, min_factor: float) -> None:
        self.warmup_steps = int(warmup_steps)
        self.min_factor = float(min_factor)

    def __call__(self, step: int) -> float:
        return inverse_sqrt_factor(step, self.warmup_steps, self.min_factor)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    total_steps: int,
    min_lr: float = 0.0,
    schedule: str = "cosine",
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup then cosine decay to ``min_lr`` (an absolute lr), or (``schedule=
    "inverse_sqrt"``) the paper's inverse-square-root decay floored at ``min_lr``; per
    optimiser step (see the module docstring).

    Call ``scheduler.step()`` after every ``optimizer.step()``.
    """
    if schedule not in SCHEDULES:
        raise ValueError(
            f"schedule={schedule!r} is invalid: expected one of {', '.join(SCHEDULES)}"
        )
    if not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} is invalid: expected an int >= 1")
    if not isinstance(warmup_steps, int) or not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"warmup_steps={warmup_steps!r} is invalid: expected an int in [0, {total_steps}] "
            "(total_steps)"
        )
    factors = []
    for group in optimizer.param_groups:
        base = group.get("initial_lr", group["lr"])
        if not 0 <= min_lr <= base:
            raise ValueError(f"min_lr={min_lr!r} is invalid: expected a float in [0, lr={base}]")
        if schedule == "inverse_sqrt":
            factors.append(InverseSqrt(warmup_steps, min_lr / base))
        else:
            factors.append(WarmupCosine(warmup_steps, total_steps, min_lr / base))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factors)
