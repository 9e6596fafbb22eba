"""What several studies share: seeded AdamW steps, timing, and the machine a run measured."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["machine", "seeded", "train_steps"]


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``; also seeds torch's global RNG, which module
    initialisation draws from (a study builds its models right after)."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def train_steps(
    model: nn.Module,
    loss_of: Callable[[int], Tensor],
    steps: int,
    lr: float,
    weight_decay: float = 0.0,
) -> tuple[list[float], float]:
    """``steps`` AdamW steps on ``loss_of(step)`` with a linear warmup over the first 10% and
    a linear decay to 0; returns the losses and the seconds they took."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    warm = max(1, steps // 10)

    def factor(i: int) -> float:
        return (i + 1) / warm if i < warm else max(0.0, (steps - i) / max(1, steps - warm))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    losses: list[float] = []
    start = time.perf_counter()
    for i in range(steps):
        loss = loss_of(i)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses, time.perf_counter() - start


def machine(device: str = "cpu") -> str:
    """'x86_64, 2 cores, 1 torch thread(s), torch 2.x' — what a report says it ran on; on a
    CUDA ``device`` the GPU's name (and its memory) first."""
    cores = os.cpu_count() or 0
    name = platform.processor() or platform.machine()
    host = f"{name}, {cores} cores, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}"
    if not device.startswith("cuda"):
        return host
    gpu = torch.cuda.get_device_properties(torch.device(device))
    return f"{gpu.name} ({gpu.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}) on {host}"
