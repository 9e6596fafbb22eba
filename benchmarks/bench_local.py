"""How the `local` kernel's time grows with length, against dense `sdpa`.

Times forward + backward of one attention call (batch 1, one head, Dh 64, float32, no mask) at
each length: `local` (window 128 on each side) and torch's fused `sdpa` over every key (up to
``--sdpa-max`` tokens: dense attention's time grows as L^2). Prints a table and the log-log slope
of `local`'s time between the first and last length (1 = linear in L).

    python benchmarks/bench_local.py [--lengths 4096 16384 65536] [--window 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time
from collections.abc import Callable

import torch

import tfam  # noqa: F401  (registers the kernels)
from tfam.layers.kernels import build_kernel


def seconds(fn: Callable[[], None], repeats: int) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step(kernel: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    q.grad = k.grad = v.grad = None
    out, _ = kernel(q, k, v)
    out.sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sdpa-max", type=int, default=16384, help="longest sdpa run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    local = build_kernel("local", {"window": args.window})
    sdpa = build_kernel("sdpa")
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), one head, Dh {args.head_dim}, "
        f"window {args.window}, forward + backward, median of {args.repeats}"
    )
    print(f"{'tokens':>7}  {'local ms':>9}  {'sdpa ms':>9}  {'sdpa/local':>10}  local scores")
    measured = []
    for n in args.lengths:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 1, n, args.head_dim, generator=g).requires_grad_() for _ in "qkv")
        t_local = seconds(functools.partial(step, local, q, k, v), args.repeats)
        measured.append((n, t_local))
        scores = local.cost(n, n, args.head_dim).score_elements
        if n <= args.sdpa_max:
            t_sdpa = seconds(functools.partial(step, sdpa, q, k, v), args.repeats)
            dense = f"{t_sdpa * 1e3:9.1f}  {t_sdpa / t_local:10.2f}"
        else:
            dense = f"{'-':>9}  {'-':>10}"
        print(f"{n:7d}  {t_local * 1e3:9.1f}  {dense}  {scores}")
    (n0, t0), (n1, t1) = measured[0], measured[-1]
    if n1 > n0:
        slope = math.log(t1 / t0) / math.log(n1 / n0)
        print(f"local: log-log slope {n0} -> {n1}: {slope:.2f}")


if __name__ == "__main__":
    main()
