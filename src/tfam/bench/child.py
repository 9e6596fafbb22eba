"""One point of ``tfam bench attention``, run as ``python -m tfam.bench.child '<json>'``.

The JSON is a :class:`~tfam.bench.attention.BenchSpec` plus ``kernel`` and ``length``. The child
prints ``ready`` once torch, tfam (every registered kernel and plug-in: ``-m`` runs tfam's
package face first) and the kernel are loaded, then one JSON line: ``status`` (``ok``, ``oom``,
``error: <line>``), and when ok ``ms`` (the median of the calls), ``peak_mb`` and ``calls``.
The parent counts the time budget from ``ready`` and kills the child past it.

Peak memory is what the first timed call adds over what the process held just before it (q, k,
v and the output's gradient allocated already; one untimed call at a tiny length before it has
loaded the library code and started the autograd engine): on CPU the rise of the resident set's high-water
mark, reset to the current resident set right before the call (``/proc/self/clear_refs``),
or of ``ru_maxrss`` where that reset is not possible; on CUDA ``max_memory_allocated`` over
``memory_allocated``, after ``reset_peak_memory_stats``.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from typing import Any

import torch

from tfam.layers.kernels import build_kernel


def _status_kib(key: str) -> int | None:
    """A ``Vm*`` line of /proc/self/status in KiB (None when there is no such file)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class CpuPeak:
    """The rise of this process's peak resident set over a baseline taken by :meth:`start`."""

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # high-water mark := the current resident set (Linux >= 4.0)
            self.base = _status_kib("VmHWM")
            self.key = "VmHWM"
        except OSError:
            self.base, self.key = None, ""
        if self.base is None:  # the process peak so far: a rise below it is not seen
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            self.key = ""

    def stop(self) -> float:
        """MB (1e6 bytes) added at the peak since :meth:`start`."""
        now = _status_kib(self.key) if self.key else None
        if now is None:
            now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return max(0, now - self.base) * 1024 / 1e6


class CudaPeak:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)

    def stop(self) -> float:
        torch.cuda.synchronize(self.device)
        return (torch.cuda.max_memory_allocated(self.device) - self.base) / 1e6


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def measure(kernel: torch.nn.Module, req: dict[str, Any]) -> dict[str, Any]:
    """Time ``req['repeat']`` calls of ``kernel`` within ``req['time_budget']`` seconds; the first call's
    peak memory."""
    device = torch.device(req["device"])
    dtype = getattr(torch, req["dtype"])
    cuda = device.type == "cuda"
    start = time.perf_counter()
    b, h, n, dh = req["batch"], req["heads"], req["length"], req["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)
    grad = req["backward"]
    q, k, v = (
        torch.randn(b, h, n, dh, generator=gen, device=device, dtype=dtype).requires_grad_(grad)
        for _ in range(3)
    )
    dout = torch.randn(b, h, n, dh, generator=gen, device=device, dtype=dtype) if grad else None
    peak = CudaPeak(device) if cuda else CpuPeak()
    seconds: list[float] = []
    peak_mb = 0.0
    with torch.set_grad_enabled(grad):
        # One call at a tiny length first: the first call of a process loads library code and
        # starts the autograd engine (tens of MB of resident set that no length needs).
        w = min(n, 16)
        small = [t[:, :, :w].detach().requires_grad_(grad) for t in (q, k, v)]
        out, _ = kernel(*small, is_causal=req["causal"])
        if grad:
            torch.autograd.backward(out, torch.ones_like(out))
        del out, small
        for i in range(req["repeat"]):
            if i == 0:
                peak.start()
            t = time.perf_counter()
            out, _ = kernel(q, k, v, is_causal=req["causal"])
            if grad:
                torch.autograd.backward(out, dout)
            if cuda:
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - t)
            if i == 0:
                peak_mb = peak.stop()
            del out
            for t_in in (q, k, v):
                t_in.grad = None
            # Stop when another call like the slowest would pass the budget: a point measured
            # a few times is worth more than one killed.
            if time.perf_counter() - start + max(seconds) > 0.9 * req["time_budget"]:
                break
    return {
        "status": "ok",
        "ms": statistics.median(seconds) * 1e3,
        "peak_mb": peak_mb,
        "calls": len(seconds),
    }


def main(argv: list[str]) -> int:
    req = json.loads(argv[0])
    torch.set_num_threads(req["threads"])
    kernel = build_kernel(req["kernel"]).to(torch.device(req["device"]))
    print("ready", flush=True)
    try:
        result = measure(kernel, req)
    except Exception as err:  # noqa: BLE001 - every failure is a status, never a traceback
        if _is_oom(err):
            result = {"status": "oom"}
        else:
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            result = {"status": f"error: {type(err).__name__}: {lines[0] if lines else ''}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
