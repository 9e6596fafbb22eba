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
from pathlib import Path
from typing import Any

from tfam.bench.speech_memory import _model, child, run_point, score_entries, slope


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
