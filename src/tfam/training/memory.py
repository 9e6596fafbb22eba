"""Peak memory of a run, as the trainer reports it (summary line and ``results.json``).

- ``rss``: the process's peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
  the figure ``/usr/bin/time -v`` prints as "Maximum resident set size"), so everything the
  process held at its peak: Python, torch, the data sets, the model, optimiser state and
  activations. DataLoader workers are other processes and are not counted.
- ``cuda``: on a CUDA device, ``torch.cuda.max_memory_allocated`` (tensors only, without the
  caching allocator's reserve and the CUDA context).

Bytes in both; :func:`describe_peak` prints gigabytes of 10**9 bytes.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["describe_peak", "peak_memory"]


def peak_memory(device: Any = None) -> dict[str, int]:
    """``{"rss": bytes}``, plus ``"cuda": bytes`` when ``device`` is a CUDA device; empty where
    the platform has no ``resource`` module (Windows)."""
    out: dict[str, int] = {}
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        resource = None
    if resource is not None:
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        # Linux reports KiB, macOS bytes.
        out["rss"] = peak if sys.platform == "darwin" else peak * 1024
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        out["cuda"] = int(torch.cuda.max_memory_allocated(torch.device(device)))
    return out


def describe_peak(peak: dict[str, int]) -> str:
    """``"peak memory 1.23 GB"`` (process RSS), with ``", CUDA 0.45 GB"`` when measured; ""
    when nothing was."""
    parts = []
    if "rss" in peak:
        parts.append(f"peak memory {peak['rss'] / 1e9:.2f} GB")
    if "cuda" in peak:
        parts.append(f"CUDA {peak['cuda'] / 1e9:.2f} GB")
    return ", ".join(parts)
