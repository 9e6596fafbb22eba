"""Linear-time attention: timing against sdpa, and the error bounds the kernels declare.

    python benchmarks/bench_linear.py                 # forward+backward, causal, B=1, H=1, Dh=64
    python benchmarks/bench_linear.py --lengths 4096 16384 65536 --repeats 3
    python benchmarks/bench_linear.py --bound         # measure |out - math| as the contract does

Timing: one head, batch 1, float32, causal self-attention, the median of ``--repeats`` runs of
forward + backward (after one warm-up), and the log-log slope of time against length from the
first to the last length (1 = linear, 2 = quadratic). Times are the process's CPU time, not
wall time: on a shared machine the wall clock counts the other jobs too (run it with
OMP_NUM_THREADS=1, or CPU time adds up the threads).

``--bound``: the largest |out - math| of each approximate kernel (default options) over
``--draws`` draws of each call the kernel contract makes (tests/layers/test_kernel_contract.py:
standard-normal q, k, v in float64, B = H = 2, Dh = 4; plain 5 x 5, cross 3 x 6, key mask with
an all-padding batch row, causal 5 x 5 and 3 x 6, causal with a key mask 4 x 6; gradcheck's
1 x 2 x 3 x 3), plus the same at Dh = 16 and 32 keys for comparison. The declared
``error_bound`` is set above the contract-shape maximum.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from tfam.layers.kernels import build_kernel, math_attention
from tfam.layers.masks import causal_mask


def time_call(name: str, n: int, dh: int, repeats: int) -> float:
    kernel = build_kernel(name)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, dh, generator=gen).requires_grad_() for _ in range(3))

    def once() -> None:
        out, _ = kernel(q, k, v, is_causal=True)
        out.sum().backward()

    once()  # warm-up (and the performer draws its features)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        once()
        times.append(time.process_time() - start)
    return statistics.median(times)


def timing(lengths: list[int], dh: int, repeats: int, kernels: list[str]) -> None:
    print(f"forward+backward, causal, B=1 H=1 Dh={dh}, float32, CPU time, median of "
          f"{repeats} ({torch.get_num_threads()} threads)")  # fmt: skip
    print(f"{'kernel':<10}" + "".join(f"{n:>12}" for n in lengths) + f"{'slope':>8}")
    for name in kernels:
        ts = [time_call(name, n, dh, repeats) for n in lengths]
        slope = math.log(ts[-1] / ts[0]) / math.log(lengths[-1] / lengths[0])
        print(f"{name:<10}" + "".join(f"{t * 1e3:>10.1f}ms" for t in ts) + f"{slope:>8.2f}")


def _call(gen: torch.Generator, lq: int, lk: int, dh: int, key_mask: bool, causal: bool) -> dict:
    b = h = 2 if lq > 3 or lk > 3 else 1
    q, k, v = (torch.randn(b, h, n, dh, generator=gen, dtype=torch.float64) for n in (lq, lk, lk))
    call = {"q": q, "k": k, "v": v, "is_causal": causal}
    if key_mask:
        mask = torch.rand(b, 1, 1, lk, generator=gen) > 0.3
        mask[0, ..., -1] = True
        mask[-1] = False
        call["mask"] = mask
    return call


CONTRACT = [  # (lq, lk, key_mask, causal)
    (5, 5, False, False),
    (3, 6, False, False),
    (5, 5, True, False),
    (5, 5, False, True),
    (3, 6, False, True),
    (4, 6, True, True),
    (3, 3, True, True),  # gradcheck's call (B = 1, H = 2 there; 1 x 1 here)
]


def worst_error(name: str, draws: int, calls: list, dh: int) -> tuple[float, float]:
    """The largest and the mean |out - math| over the draws of each call."""
    kernel = build_kernel(name)
    gen = torch.Generator().manual_seed(1234)
    worst, total, count = 0.0, 0.0, 0
    for lq, lk, key_mask, causal in calls:
        for _ in range(draws):
            call = _call(gen, lq, lk, dh, key_mask, causal)
            out, _ = kernel(**call)
            mask = call.get("mask")
            if causal:
                cm = causal_mask(lq, lk)
                mask = cm if mask is None else mask & cm
            want, _ = math_attention(call["q"], call["k"], call["v"], mask)
            err = (out - want).abs()
            worst, total, count = (
                max(worst, err.max().item()),
                total + err.sum().item(),
                count + err.numel(),
            )
    return worst, total / count


def bounds(draws: int, kernels: list[str]) -> None:
    print(f"largest |out - math| over {draws} draws of each call (float64, standard normal)")
    longer = [(32, 32, False, False), (32, 32, False, True)]
    for name in kernels:
        declared = build_kernel(name).error_bound
        (c_max, c_mean), (w_max, w_mean) = (
            worst_error(name, draws, CONTRACT, 4),
            worst_error(name, max(draws // 10, 1), longer, 16),
        )
        print(f"{name:<10} contract shapes (Dh=4): max {c_max:.4f} mean {c_mean:.4f}   "
              f"Dh=16, 32 keys: max {w_max:.4f} mean {w_mean:.4f}   "
              f"declared error_bound: {declared}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", nargs="+", default=["sdpa", "linear", "performer"])
    parser.add_argument("--bound", action="store_true", help="measure the error bounds instead")
    parser.add_argument("--draws", type=int, default=3000)
    args = parser.parse_args()
    if args.bound:
        bounds(args.draws, [k for k in args.kernels if k != "sdpa"])
    else:
        timing(args.lengths, args.head_dim, args.repeats, args.kernels)


if __name__ == "__main__":
    main()
