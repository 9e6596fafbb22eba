"""How `attention='lsh'` (Reformer's hashing attention) grows with length, beside `sdpa`.

One head of width 64, batch 1, float32, self-attention: the median time of forward + backward
per length, the kernel's declared cost (score entries held), and the log-log slope of the time
from the first length to the last (1 = linear; dense attention is 2). `sdpa` is timed up to
--sdpa-max tokens only (on a CPU it is minutes at 64k). On the CPU the time is the process's
CPU time (--clock cpu, the default there): on a machine shared with other jobs, wall time
also counts the waits for a core, which vary from run to run; --clock wall gives it.

    python benchmarks/bench_lsh.py [--lengths 4096 16384 65536] [--rounds 3] [--threads 1]
        [--sdpa-max 16384] [--causal] [--options '{"rounds": 2}'] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

import tfam  # noqa: F401  (registers the kernels)
from tfam.layers.kernels import build_kernel


def step_seconds(kernel: torch.nn.Module, length: int, args: argparse.Namespace) -> float:
    """One forward + backward of the kernel on fresh standard-normal q, k, v (1, 1, L, 64)."""
    shape = (1, 1, length, 64)
    q, k, v = (torch.randn(shape, device=args.device, requires_grad=True) for _ in range(3))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.device == "cuda":
        torch.cuda.synchronize()
    start = clock()
    out, _ = kernel(q, k, v, is_causal=args.causal)
    out.sum().backward()
    if args.device == "cuda":
        torch.cuda.synchronize()
    return clock() - start


def median_seconds(kernel: torch.nn.Module, length: int, args: argparse.Namespace) -> float:
    step_seconds(kernel, length, args)  # warm up
    return statistics.median(step_seconds(kernel, length, args) for _ in range(args.rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per length (median)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sdpa-max", type=int, default=16384)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--options", default="{}", help="lsh's attention_options as JSON")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None)
    args = parser.parse_args()
    args.clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lsh = build_kernel("lsh", json.loads(args.options))
    sdpa = build_kernel("sdpa")
    print(f"torch {torch.__version__}, {args.device}, {args.threads} thread(s), {args.clock} "
          f"time, causal {args.causal}, lsh {lsh.to_options()}")  # fmt: skip
    print(f"{'tokens':>7}  {'lsh ms':>9}  {'scores held':>11}  {'sdpa ms':>9}  {'sdpa/lsh':>8}")
    times: dict[str, dict[int, float]] = {"lsh": {}, "sdpa": {}}
    for length in args.lengths:
        times["lsh"][length] = median_seconds(lsh, length, args)
        held = lsh.cost(length, length, 64, args.causal).score_elements
        row = f"{length:>7}  {times['lsh'][length] * 1e3:>9.1f}  {held:>11,}"
        if length <= args.sdpa_max:
            times["sdpa"][length] = median_seconds(sdpa, length, args)
            ratio = times["sdpa"][length] / times["lsh"][length]
            row += f"  {times['sdpa'][length] * 1e3:>9.1f}  {ratio:>8.2f}"
        print(row, flush=True)
    for name, by_length in times.items():
        if len(by_length) >= 2:
            (a, ta), (b, tb) = min(by_length.items()), max(by_length.items())
            slope = math.log(tb / ta) / math.log(b / a)
            print(f"{name}: log-log slope of time {a} -> {b} tokens: {slope:.2f}")


if __name__ == "__main__":
    main()
