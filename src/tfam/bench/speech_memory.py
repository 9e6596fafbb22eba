"""The speech encoder's peak memory and time for one training step on one utterance of T
frames, each point in a fresh child process (``python -m tfam.bench.speech_memory '<json>'``),
as ``tfam bench attention`` measures a kernel (:mod:`tfam.bench.child`).

A point's spec: ``preset`` (a speech preset), ``overrides`` (config fields, e.g. ``attention``
is set from ``kernel``, ``attention_options`` ``{"window": w}`` for ``local``), ``kernel``,
``frames``, ``threads``, ``repeat`` and ``budget`` (seconds a point times). One untimed step at
64 frames loads the library code and starts the autograd engine; the first step at T frames is
measured for peak memory (the rise of the resident set's high-water mark, CpuPeak) and the
steps for time (median of up to ``repeat`` within the budget). Used by
benchmarks/bench_speech_memory.py and the ``speech-truncated`` study.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

__all__ = ["WARMUP_FRAMES", "child", "run_point", "score_entries", "slope"]

WARMUP_FRAMES = 64


# ------------------------------------------------------------------------------- the child


def _model(spec: dict[str, Any]) -> Any:
    import torch

    from tfam.models import create_model

    overrides = dict(spec["overrides"])
    overrides["attention"] = spec["kernel"]
    if spec["kernel"] != "local":
        overrides["attention_options"] = {}
    torch.manual_seed(0)
    return create_model(spec["preset"], **overrides)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One point: the first step's peak memory, the median step time."""
    import torch
    import torch.nn.functional as F

    from tfam.bench.child import CpuPeak

    torch.set_num_threads(spec["threads"])
    model = _model(spec)
    c = model.config
    gen = torch.Generator().manual_seed(0)

    def batch(frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(1, frames, c.n_mels, generator=gen)
        y = torch.randint(0, c.num_labels, (1, frames), generator=gen)
        return x, y

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        logits = model(x)[:, : x.shape[1]]  # frames head: at the input rate, cropped to T
        F.cross_entropy(logits.reshape(-1, c.num_labels), y.reshape(-1)).backward()
        model.zero_grad(set_to_none=True)

    step(*batch(WARMUP_FRAMES))
    x, y = batch(spec["frames"])
    start, seconds, peak_mb = time.perf_counter(), [], 0.0
    peak = CpuPeak()
    for i in range(spec["repeat"]):
        if i == 0:
            peak.start()
        t = time.perf_counter()
        step(x, y)
        seconds.append(time.perf_counter() - t)
        if i == 0:
            peak_mb = peak.stop()
        if time.perf_counter() - start + max(seconds) > spec["budget"]:
            break
    return {"status": "ok", "ms": statistics.median(seconds) * 1e3, "peak_mb": peak_mb,
            "calls": len(seconds)}  # fmt: skip


def score_entries(model: Any, kernel: str, frames: int) -> int:
    """Score entries the encoder's kernels hold (cost(), all layers and heads)."""
    import torch

    from tfam.layers.attention import MultiHeadAttention
    from tfam.layers.kernels import build_kernel

    n = int(model.config.output_lengths(torch.tensor(frames)))
    total = 0
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            k = m.kernel if kernel == "local" else build_kernel(kernel)
            total += m.heads * k.cost(n, n, m.head_dim).score_elements
    return total


def run_point(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One point in a fresh child process: {"status": "ok", "ms", "peak_mb", "calls"}, or
    status "timeout", "oom" or "error: <line>"."""
    cmd = [sys.executable, "-m", "tfam.bench.speech_memory", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode == -9 or (done.returncode and "MemoryError" in done.stderr):
        return {"status": "oom"}
    if not lines:
        err = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return {"status": f"error: {err[-1] if err else done.returncode}"}
    return json.loads(lines[-1])


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares d log(value) / d log(frames)."""
    pts = [(math.log(n), math.log(v)) for n, v in points if v and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def main(argv: list[str]) -> int:
    """The child: one point's spec as JSON in argv[0]; prints its result as one JSON line."""
    print(json.dumps(child(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
