"""Where `attention='auto'` switches from the written-out `math` kernel to torch's fused `sdpa`.

Times one training step (forward + backward) of a small ViT (D=96, 4 heads, 4 blocks, batch 64)
at several token counts, both kernels interleaved round by round, and prints the median ratio.
Both kernels compute the same formula; `math` also holds the (L x L) scores in memory, so `auto`
never uses it past the crossover.

    python benchmarks/bench_attention.py [--threads 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tfam


def step_seconds(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    t = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}")
    print(f"{'tokens':>6}  {'math ms':>8}  {'sdpa ms':>8}  {'sdpa/math time':>14}  faster")
    for side in (2, 3, 4, 6, 8, 10, 12, 14, 16):  # patch grid side: tokens = side^2 + 1
        torch.manual_seed(0)
        size = side * 2
        model = tfam.create_model(
            "vit",
            image_size=size,
            patch_size=2,
            in_channels=1,
            num_classes=10,
            dim=96,
            depth=4,
            heads=4,
            pool="mean",
            attention="math",
        )
        x = torch.randn(args.batch, 1, size, size)
        y = torch.randint(0, 10, (args.batch,))
        times: dict[str, list[float]] = {"math": [], "sdpa": []}
        for r in range(args.rounds + 1):
            for kernel in ("math", "sdpa"):
                model.set_attention(kernel)
                dt = step_seconds(model, x, y)
                if r:  # the first round warms up
                    times[kernel].append(dt)
        m, s = statistics.median(times["math"]), statistics.median(times["sdpa"])
        faster = "math" if m < s else "sdpa"
        print(f"{side * side + 1:>6}  {m * 1e3:>8.1f}  {s * 1e3:>8.1f}  {s / m:>14.2f}  {faster}")


if __name__ == "__main__":
    main()
