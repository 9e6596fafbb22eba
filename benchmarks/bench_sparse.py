"""The pattern kernels `longformer` and `block_sparse` against torch's fused `sdpa` by length.

Times forward + backward of one attention call (batch 1, one head, Dh 64, float32, default
options: Longformer's window of 256 each side with global token 0; BigBird's blocks of 64 with
1 window block each side, 2 global and 3 random blocks), the kernels interleaved round by round
(median of `--rounds` after one warm-up round), and prints the time, the score elements each
kernel's `cost()` says it holds, and the log-log slope of time against length between
successive lengths (2 = quadratic, 1 = linear). `sdpa` runs up to `--sdpa-max` tokens.

    python benchmarks/bench_sparse.py [--lengths 4096 16384 65536] [--threads 1] [--causal]
"""

from __future__ import annotations

import argparse
import math

import torch
from timing import interleaved

import tfam  # noqa: F401  (registers the kernels)
from tfam.layers.kernels import build_kernel

KERNELS = ("sdpa", "longformer", "block_sparse")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sdpa-max", type=int, default=16384)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {device}, {args.threads} threads, causal={args.causal}")
    print("forward + backward, batch 1, 1 head, Dh 64, float32; ms (median), held scores")
    kernels = {name: build_kernel(name).to(device) for name in KERNELS}
    seconds: dict[str, dict[int, float]] = {name: {} for name in KERNELS}

    def step(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):  # noqa: ANN202
        def run() -> None:
            q.grad = k.grad = v.grad = None
            out, _ = kernels[name](q, k, v, is_causal=args.causal)
            out.sum().backward()
            if device.type == "cuda":
                torch.cuda.synchronize()

        return run

    header = f"{'tokens':>7}" + "".join(f"  {n + ' ms':>16}  {'scores':>11}" for n in KERNELS)
    print(header)
    for length in args.lengths:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (
            torch.randn(1, 1, length, 64, generator=gen).to(device).requires_grad_()
            for _ in range(3)
        )
        names = [n for n in KERNELS if n != "sdpa" or length <= args.sdpa_max]
        times, _ = interleaved([step(n, q, k, v) for n in names], rounds=args.rounds)
        row = f"{length:>7}"
        for name in KERNELS:
            if name in names:
                seconds[name][length] = times[names.index(name)]
                held = kernels[name].cost(length, length, 64, args.causal).score_elements
                row += f"  {seconds[name][length] * 1e3:>16.1f}  {held:>11.3g}"
            else:
                row += f"  {'-':>16}  {'-':>11}"
        print(row, flush=True)
    print("log-log slope of time against length:")
    for name in KERNELS:
        lengths = sorted(seconds[name])
        slopes = [
            f"{a}->{b}: {math.log(seconds[name][b] / seconds[name][a]) / math.log(b / a):.2f}"
            for a, b in zip(lengths, lengths[1:])
        ]
        print(f"  {name:>12}  {', '.join(slopes) or '-'}")


if __name__ == "__main__":
    main()
