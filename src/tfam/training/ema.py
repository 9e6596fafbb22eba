"""An exponential moving average of the weights (Polyak averaging), evaluated and saved in
their place: ``TrainConfig(ema=0.999)``, ``tfam train --ema 0.999``.

After every optimiser step each floating tensor of the model's state (parameters and buffers
such as BatchNorm's running statistics) moves the average a share towards it:

    θ̄ ← d · θ̄ + (1 − d) · θ,     d = min(ema, (1 + n) / (10 + n))

where n counts the updates so far. The second term is TensorFlow's ``num_updates`` warmup: early
on the average follows the weights closely, so a short run is not dominated by its random
initial weights (with d = 0.9999 and no warmup, after 2,500 steps the initial weights would still
carry 78% of the average). Integer buffers (BatchNorm's step count) are copied.

The trainer evaluates the average at every epoch's end (validation, best epoch), and it is the
model the run saves and tests; the checkpoint holds both the live weights and the average, so a
killed run resumes exactly. DeiT's recipe keeps such an average (timm's ``--model-ema``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["WeightEMA", "check_decay"]


def check_decay(decay: object) -> float:
    """``decay`` as a float in (0, 1), or the one-line error that names ``ema``."""
    if isinstance(decay, bool) or not isinstance(decay, float | int) or not 0 < decay < 1:
        raise ValueError(f"ema={decay!r} is invalid: expected a decay in (0, 1), e.g. 0.999")
    return float(decay)


class WeightEMA:
    """The average of ``model``'s state: a float copy of each floating tensor of its
    ``state_dict`` (same names, shapes, dtypes and device), and the number of updates.

    decay: d in (0, 1): the share of the old average kept per step (about 1 / (1 − d) steps
    of memory)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = check_decay(decay)
        self.updates = 0
        self.shadow: dict[str, Tensor] = {}
        self.reset(model)

    def reset(self, model: nn.Module) -> None:
        """Start again from ``model``'s current weights (a refit's fresh model)."""
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.updates = 0

    def current_decay(self) -> float:
        """d of the next update: min(decay, (1 + n) / (10 + n))."""
        n = self.updates
        return min(self.decay, (1 + n) / (10 + n))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """θ̄ ← d θ̄ + (1 − d) θ for every floating tensor; integer ones copied."""
        weight = 1.0 - self.current_decay()
        floats_avg, floats_now = [], []
        for k, v in model.state_dict().items():
            avg = self.shadow[k]
            if avg.is_floating_point():
                floats_avg.append(avg)
                floats_now.append(v.detach())
            else:
                avg.copy_(v)
        if floats_avg:
            torch._foreach_lerp_(floats_avg, floats_now, weight)
        self.updates += 1

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Put the average into ``model`` (its tensors are written in place)."""
        state = model.state_dict()
        for k, avg in self.shadow.items():
            state[k].copy_(avg)

    @contextlib.contextmanager
    def swapped(self, model: nn.Module) -> Iterator[None]:
        """Inside: ``model`` holds the average and this object the live weights; both are back
        on exit (exceptions included). Exact: tensors are exchanged, not recomputed."""
        self._swap(model)
        try:
            yield
        finally:
            self._swap(model)

    @torch.no_grad()
    def _swap(self, model: nn.Module) -> None:
        state = model.state_dict()
        for k, avg in self.shadow.items():
            live = state[k].clone()
            state[k].copy_(avg)
            avg.copy_(live)

    def state_dict(self) -> dict[str, Any]:
        """For the checkpoint: the average (CPU tensors) and the update count."""
        return {
            "decay": self.decay,
            "updates": self.updates,
            "weights": {k: v.detach().cpu() for k, v in self.shadow.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        weights = state["weights"]
        missing = sorted(set(self.shadow) - set(weights))
        if missing:
            raise ValueError(f"the checkpoint's weight average lacks {', '.join(missing[:5])}")
        with torch.no_grad():
            for k, avg in self.shadow.items():
                avg.copy_(weights[k])
        self.updates = int(state["updates"])
