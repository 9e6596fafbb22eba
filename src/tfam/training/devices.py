"""Devices and precision: where a run computes and in which float format.

``resolve_device("auto")`` is CUDA when present (the local rank's GPU under torchrun), else
MPS when present, else the CPU. A device that is not there is a one-line ``ValueError`` that
names it and lists what is available. Precision: ``fp32`` (plain), ``bf16`` (autocast to
bfloat16, master weights stay fp32), ``fp16`` (autocast to float16 with a ``GradScaler``, so
small gradients do not flush to zero; steps with inf/NaN gradients are skipped by the scaler).
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "PRECISIONS",
    "autocast",
    "available_devices",
    "check_compile_available",
    "grad_scaler",
    "move_batch",
    "resolve_device",
]

PRECISIONS = ("fp32", "bf16", "fp16")


def available_devices() -> list[str]:
    """The device names this machine can run on, e.g. ``['cpu', 'cuda', 'cuda:0', 'cuda:1']``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names.append("cuda")
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    return names


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(
    name: str | torch.device = "auto", local_rank: int | None = None
) -> torch.device:
    """The ``torch.device`` for ``auto|cpu|cuda|cuda:N|mps``; ``cuda`` under torchrun means the
    local rank's GPU. Raises a one-line ValueError for a device this machine does not have."""
    text = str(name).strip().lower()
    available = ", ".join(available_devices())
    if text == "auto":
        if torch.cuda.is_available():
            text = "cuda"
        elif _mps_available() and local_rank is None:
            text = "mps"
        else:
            return torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"device={name!r} is invalid: expected auto, cpu, cuda, cuda:N or mps; "
            f"available: {available}"
        ) from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={name!r} is invalid: CUDA is not available on this machine; "
                f"available: {available}"
            )
        index = device.index if device.index is not None else (local_rank or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device={name!r} is invalid: this machine has {torch.cuda.device_count()} CUDA "
                f"device(s); available: {available}"
            )
        return torch.device("cuda", index)
    if device.type == "mps":
        if not _mps_available():
            raise ValueError(
                f"device={name!r} is invalid: MPS is not available on this machine; "
                f"available: {available}"
            )
        return torch.device("mps")
    raise ValueError(
        f"device={name!r} is invalid: expected auto, cpu, cuda, cuda:N or mps; "
        f"available: {available}"
    )


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of ``precision`` on ``device`` (a no-op context for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 (None otherwise): bf16 has fp32's range and needs none."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


def move_batch(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The batch on ``device``; copies from pinned memory overlap with compute on CUDA."""
    if device.type == "cpu":
        return batch
    non_blocking = device.type == "cuda"
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


def place_extra_models(task: Any, model: nn.Module, device: torch.device) -> dict[str, nn.Module]:
    """The task's extra models (``task.extra_models()``, e.g. a teacher; none when the task
    has no such method), moved in place to ``device`` and to the float dtype of ``model`` (the
    run's precision: its autocast covers their forwards inside the task as it does the
    model's), in eval mode and frozen. The trainer does not wrap them in DDP/FSDP, optimise
    them, nor save them in checkpoints."""
    extra = getattr(task, "extra_models", None)
    models = dict(extra()) if extra is not None else {}
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    for name, module in models.items():
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"extra model {name!r} of task {getattr(task, 'name', type(task).__name__)!r} "
                f"is a {type(module).__name__}: expected a torch.nn.Module"
            )
        module.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return models


def check_compile_available(device: torch.device) -> None:
    """Raise a one-line ValueError when torch.compile cannot build kernels here (on the CPU,
    inductor needs a C++ compiler; on CUDA, Triton)."""
    if device.type == "cpu":
        if not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cc", "gcc")):
            raise ValueError(
                "compile=True is invalid on this machine: torch.compile needs a C++ compiler "
                "(g++ or clang++) for CPU kernels and none was found; install one or train "
                "without compile"
            )
    elif device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            raise ValueError(
                "compile=True is invalid on this machine: torch.compile needs the triton "
                "package for CUDA kernels; install it or train without compile"
            ) from None
