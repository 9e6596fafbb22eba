"""tfam ViT vs Hugging Face ViT on the same weights, in the same run.

Rows: inference at batch 1 and 16, and a training step (forward, backward, AdamW) at batch 16,
for ViT-S/16 and ViT-B/16 at 224x224. Each row interleaves the two implementations (one call
of each per round, which one goes first swapped every round) so machine noise hits both alike.
Prints median images/s, the speed ratio (the median over rounds of Hugging Face's time / tfam's
time in the same round: > 1 means tfam is faster), and the fraction of this machine's float32
matmul peak, measured in the same run.

"% peak" divides the model's nominal FLOPs (`tfam.explain`: every block over every token) by the
time taken, for both libraries. tfam's classifier computes only the [CLS] row in its last block
(the only row the head reads), so it does about 1/depth less work than that nominal count.

    python benchmarks/bench_vit.py                  # full table (a few minutes on 2 cores)
    python benchmarks/bench_vit.py --quick          # ViT-S/16 only, fewer rounds
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timing import interleaved  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import to_hf  # noqa: E402


def matmul_peak(n: int = 2048, rounds: int = 10) -> float:
    """Best float32 GFLOP/s of an n x n x n matmul on this machine, now."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def bench_preset(name: str, rounds: int) -> list[dict]:
    torch.manual_seed(0)
    model = tfam.create_model(name).eval()
    hf = to_hf(model).eval()
    forward_flops = tfam.explain(model).total_flops  # per image
    rows = []
    for batch in (1, 16):
        x = torch.randn(batch, 3, *model.config.image_size)
        with torch.inference_mode():
            diff = (model(x) - hf(pixel_values=x).logits).abs().max().item()
            (t_tfam, t_hf), (_, ratio) = interleaved(
                [lambda x=x: model(x), lambda x=x: hf(pixel_values=x)], rounds, warmup=2
            )
        rows.append(
            _row(name, f"inference b{batch}", batch, t_tfam, t_hf, ratio, forward_flops, diff)
        )

    batch = 16
    x = torch.randn(batch, 3, *model.config.image_size)
    y = torch.randint(0, model.config.num_classes, (batch,))
    model.train()
    hf.train()
    opt_tfam = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt_hf = torch.optim.AdamW(hf.parameters(), lr=1e-4)

    def step_tfam() -> None:
        opt_tfam.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt_tfam.step()

    def step_hf() -> None:
        opt_hf.zero_grad(set_to_none=True)
        F.cross_entropy(hf(pixel_values=x).logits, y).backward()
        opt_hf.step()

    (t_tfam, t_hf), (_, ratio) = interleaved([step_tfam, step_hf], rounds, warmup=2)
    # forward + backward ~ 3x the forward FLOPs
    rows.append(_row(name, "train step b16", batch, t_tfam, t_hf, ratio, 3 * forward_flops, None))
    return rows


def _row(
    name: str,
    what: str,
    batch: int,
    t_tfam: float,
    t_hf: float,
    ratio: float,
    flops_per_image: float,
    diff: float | None,
) -> dict:
    return {
        "model": name,
        "row": what,
        "tfam img/s": batch / t_tfam,
        "HF img/s": batch / t_hf,
        "ratio": ratio,
        "tfam GFLOP/s": flops_per_image * batch / t_tfam / 1e9,
        "HF GFLOP/s": flops_per_image * batch / t_hf / 1e9,
        "max |diff|": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--presets", nargs="+", default=["vit_small_patch16_224", "vit_base_patch16_224"]
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="ViT-S/16 only, 5 rounds")
    args = parser.parse_args()
    if args.quick:
        args.presets, args.rounds = ["vit_small_patch16_224"], 5
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    peak_before = matmul_peak()
    rows = [r for name in args.presets for r in bench_preset(name, args.rounds)]
    peak = max(peak_before, matmul_peak())  # the better of the readings before and after
    for r in rows:
        r["tfam % peak"] = 100 * r.pop("tfam GFLOP/s") / peak
        r["HF % peak"] = 100 * r.pop("HF GFLOP/s") / peak
    print(f"float32 matmul peak measured in this run: {peak:.0f} GFLOP/s")
    print("% peak = nominal model FLOPs (tfam.explain) / time; see the module docstring\n")
    header = [
        "model",
        "row",
        "tfam img/s",
        "HF img/s",
        "ratio",
        "tfam % peak",
        "HF % peak",
        "max |diff|",
    ]
    widths = [24, 16, 11, 10, 7, 12, 10, 11]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        cells = [
            r["model"],
            r["row"],
            f"{r['tfam img/s']:.1f}",
            f"{r['HF img/s']:.1f}",
            f"{r['ratio']:.2f}x",
            f"{r['tfam % peak']:.0f}%",
            f"{r['HF % peak']:.0f}%",
            "-" if r["max |diff|"] is None else f"{r['max |diff|']:.1e}",
        ]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    worst = min(r["ratio"] for r in rows)
    print(f"\nslowest row: tfam at {worst:.2f}x Hugging Face (target >= 1.00x)")


if __name__ == "__main__":
    main()
