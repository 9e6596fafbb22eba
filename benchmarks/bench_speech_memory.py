"""The speech encoder's peak memory and time against the number of frames: `local` vs dense.

One model (a speech preset, `speech_digits_tag` by default: D, H, depth, window and subsampling
printed above the table), one utterance of T log-mel frames (batch 1, no padding, float32), a
training step: forward, cross-entropy on random frame labels, backward. Each point (kernel,
frames) runs in a fresh child process, as `tfam bench attention` measures (tfam.bench.child):
one untimed step at 64 frames loads the library code and starts the autograd engine, then the
first step at T frames is measured for peak memory (the rise of the resident set's high-water
mark, VmHWM, reset to the current resident set right before it through /proc/self/clear_refs:
CpuPeak) and the steps for time (median of up to --repeat within the point's budget).

Printed: the table (frames, positions after subsampling, the score entries the kernels hold by
their cost(), time, peak MB), each kernel's log-log slope of time and of peak memory over the
sweep (least squares; the issue's target for `local`: <= 1.1 from 500 to 8,000 frames), and
at --compare frames (3,000 = a 30-second utterance) `local`'s peak as a fraction of each
dense kernel's (target <= 0.3).

    python benchmarks/bench_speech_memory.py [--lengths 500,1000,2000,4000,8000] \
        [--compare 3000] [--dense math,sdpa] [--dense-max 8000] [--threads 2] [--out FILE] \
        [--set subsampling=1]   # another model: any config field, JSON value
    python benchmarks/bench_speech_memory.py --tiny       # seconds: a check that it runs
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WARMUP_FRAMES = 64


# ------------------------------------------------------------------------------- the child


def _model(spec: dict[str, Any]) -> Any:
    import torch

    import tfam

    overrides = dict(spec["overrides"])
    overrides["attention"] = spec["kernel"]
    if spec["kernel"] != "local":
        overrides["attention_options"] = {}
    torch.manual_seed(0)
    return tfam.create_model(spec["preset"], **overrides)


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


# ------------------------------------------------------------------------------ the parent


def describe(spec: dict[str, Any]) -> tuple[str, Any]:
    """The model's line and its config (built on the meta device: no weights allocated)."""
    import torch

    with torch.device("meta"):
        model = _model({**spec, "kernel": "local"})
    c = model.config
    window = c.attention_options.get("window")
    line = (
        f"model {spec['preset']}: D={c.dim}, H={c.heads}, depth={c.depth}, ffn={c.ffn_dim}, "
        f"n_mels={c.n_mels}, subsampling {c.subsampling}x, local window={window} positions each "
        f"side ({window * c.subsampling * 10} ms), position={c.position}; batch 1, float32, "
        f"forward + backward, {spec['threads']} thread(s), torch {torch.__version__}"
    )
    return line, model


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
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--preset", default="speech_digits_tag")
    parser.add_argument("--lengths", default="500,1000,2000,4000,8000", help="frames")
    parser.add_argument("--compare", type=int, default=3000, help="frames of the ratio")
    parser.add_argument("--dense", default="math,sdpa", help="dense kernels to compare")
    parser.add_argument("--dense-max", type=int, default=8000, help="longest dense point")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds a point times")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a point may run")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help="a config field of the model, e.g. --set subsampling=1 (repeatable)",
    )
    parser.add_argument("--tiny", action="store_true", help="a tiny model and lengths")
    parser.add_argument("--out", help="write the points and slopes as JSON")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    overrides: dict[str, Any] = {}
    lengths = [int(n) for n in args.lengths.split(",")]
    if args.tiny:
        overrides = {"dim": 16, "heads": 2, "depth": 1, "ffn_dim": 32,
                     "attention_options": {"window": 4}}  # fmt: skip
        lengths, args.compare, args.repeat = [100, 200, 400], 200, 1
    for item in args.set:
        field, _, value = item.partition("=")
        overrides[field] = json.loads(value)
    dense = [k for k in args.dense.split(",") if k]
    base = {"preset": args.preset, "overrides": overrides, "threads": args.threads,
            "repeat": args.repeat, "budget": args.budget}  # fmt: skip
    line, model = describe(base)
    print(line, flush=True)
    frames_all = sorted({*lengths, args.compare})
    results: list[dict[str, Any]] = []
    print(f"{'kernel':>6} {'frames':>6} {'positions':>9} {'scores M':>9} {'ms':>9} "
          f"{'peak MB':>8}  status", flush=True)  # fmt: skip
    for kernel in ["local", *dense]:
        for frames in frames_all:
            if kernel != "local" and frames > args.dense_max:
                continue
            point = run_point({**base, "kernel": kernel, "frames": frames}, args.timeout)
            n = int(model.config.output_lengths(__import__("torch").tensor(frames)))
            point.update(kernel=kernel, frames=frames, positions=n,
                         scores=score_entries(model, kernel, frames))  # fmt: skip
            results.append(point)
            ok = point["status"] == "ok"
            print(f"{kernel:>6} {frames:>6} {n:>9} {point['scores'] / 1e6:>9.3f} "
                  f"{point['ms'] if ok else float('nan'):>9.1f} "
                  f"{point['peak_mb'] if ok else float('nan'):>8.1f}  {point['status']}",
                  flush=True)  # fmt: skip
    summary: dict[str, Any] = {"model": line, "points": results, "slopes": {}, "ratio": {}}
    lo, hi = min(lengths), max(lengths)
    print(f"\nlog-log slopes over {lo}-{hi} frames (least squares over the sweep's lengths):")
    for kernel in ["local", *dense]:
        ok = [p for p in results if p["kernel"] == kernel and p["status"] == "ok"
              and p["frames"] in lengths]  # fmt: skip
        s_ms = slope([(p["frames"], p["ms"]) for p in ok])
        s_mb = slope([(p["frames"], p["peak_mb"]) for p in ok])
        span = f"{ok[0]['frames']}-{ok[-1]['frames']}" if ok else "-"
        summary["slopes"][kernel] = {"time": s_ms, "peak_mb": s_mb, "frames": span}
        fmt = lambda s: "n/a" if s is None else f"{s:.2f}"  # noqa: E731
        print(f"  {kernel:>6}: time {fmt(s_ms)}, peak memory {fmt(s_mb)} (frames {span})")
    at = {p["kernel"]: p for p in results if p["frames"] == args.compare and p["status"] == "ok"}
    if "local" in at:
        print(f"\nat {args.compare} frames, local's peak memory as a fraction of dense:")
        for kernel in dense:
            if kernel in at and at[kernel]["peak_mb"] > 0:
                r = at["local"]["peak_mb"] / at[kernel]["peak_mb"]
                summary["ratio"][kernel] = r
                print(f"  local / {kernel}: {at['local']['peak_mb']:.1f} / "
                      f"{at[kernel]['peak_mb']:.1f} MB = {r:.3f}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
