"""tfam's vision models vs Hugging Face's on the same weights, in the same run: ViT by default,
and any preset of the vision families Hugging Face has (DeiT, Swin, ResNet, ImageGPT) by name.

Rows: inference at batch 1 and 16, and a training step (forward, backward, AdamW) at batch 16,
for ViT-S/16 and ViT-B/16 at 224x224. Each row interleaves the two implementations (one call
of each per round, which one goes first swapped every round) so machine noise hits both alike.
Prints median images/s, the speed ratio (the median over rounds of Hugging Face's time / tfam's
time in the same round: > 1 means tfam is faster), and the fraction of this machine's matmul
peak (in the precision the models run in), measured in the same run.

"% peak" divides the model's nominal FLOPs (`tfam.explain`: every block over every token) by the
time taken, for both libraries. tfam's classifier computes only the [CLS] row in its last block
(the only row the head reads), so it does about 1/depth less work than that nominal count.
ImageGPT reads pixel ids (random, one image a sequence) and trains on next-pixel cross-entropy;
the others read images and train on class cross-entropy.

``--device cuda`` runs both on the GPU (each timed call ends with a synchronize), ``--precision
bf16`` under ``torch.autocast`` to bfloat16 for both (as ``tfam train --precision bf16``); the
header names the device. On a GPU, issue 23's rows: ``--device cuda --precision bf16 --family
all`` (ViT-B/16, DeiT-B distilled, Swin-T, ResNet-50, ImageGPT-small).

    python benchmarks/bench_vit.py                  # full table (a few minutes on 2 cores)
    python benchmarks/bench_vit.py --quick          # ViT-S/16 only, fewer rounds
    python benchmarks/bench_vit.py --presets deit_digits swin_digits igpt_digits --rounds 3
    python benchmarks/bench_vit.py --device cuda --precision bf16 --family all
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
from tfam.training.devices import autocast  # noqa: E402

# One preset per family that Hugging Face also has (--family all).
FAMILY_PRESETS = [
    "vit_base_patch16_224",
    "deit_base_distilled_patch16_224",
    "swin_tiny_patch4_window7_224",
    "resnet50",
    "imagegpt_small",
]


def matmul_peak(
    n: int = 2048, rounds: int = 10, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> float:
    """Best GFLOP/s of an n x n x n matmul in ``dtype`` on ``device``, now."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _io(model: torch.nn.Module, batch: int, device: str) -> tuple:
    """(inputs, Hugging Face's keyword, targets, loss) for one batch of random data: images
    and class cross-entropy, or, for ImageGPT, pixel ids and next-pixel cross-entropy."""
    c = model.config
    if c.family == "igpt":
        ids = torch.randint(0, c.vocab_size - 1, (batch, c.max_positions), device=device)

        def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), target[:, 1:].flatten())

        return ids, "input_ids", ids, loss
    x = torch.randn(batch, c.in_channels, *c.image_size, device=device)
    y = torch.randint(0, c.num_classes, (batch,), device=device)
    return x, "pixel_values", y, lambda logits, y: F.cross_entropy(logits.float(), y)


def bench_preset(
    name: str, rounds: int, device: str = "cpu", precision: str = "fp32"
) -> list[dict]:
    torch.manual_seed(0)
    model = tfam.create_model(name).eval()
    forward_flops = tfam.explain(model).total_flops  # per image
    hf = to_hf(model).eval().to(device)
    model = model.to(device)
    amp = autocast(torch.device(device), precision)  # as `tfam train --precision` does

    def timed(fn):  # noqa: ANN001, ANN202
        def call() -> None:
            with amp:
                fn()
            sync(device)

        return call

    rows = []
    for batch in (1, 16):
        x, key, _, _ = _io(model, batch, device)
        with torch.inference_mode():
            with amp:
                diff = (model(x).float() - hf(**{key: x}).logits.float()).abs().max().item()
            (t_tfam, t_hf), (_, ratio) = interleaved(
                [timed(lambda x=x: model(x)), timed(lambda x=x, key=key: hf(**{key: x}))],
                rounds,
                warmup=2,
            )
        rows.append(
            _row(name, f"inference b{batch}", batch, t_tfam, t_hf, ratio, forward_flops, diff)
        )

    batch = 16
    x, key, y, loss = _io(model, batch, device)
    model.train()
    hf.train()
    opt_tfam = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt_hf = torch.optim.AdamW(hf.parameters(), lr=1e-4)

    def step_tfam() -> None:
        opt_tfam.zero_grad(set_to_none=True)
        loss(model(x), y).backward()
        opt_tfam.step()

    def step_hf() -> None:
        opt_hf.zero_grad(set_to_none=True)
        loss(hf(**{key: x}).logits, y).backward()
        opt_hf.step()

    (t_tfam, t_hf), (_, ratio) = interleaved([timed(step_tfam), timed(step_hf)], rounds, warmup=2)
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
    parser.add_argument(
        "--family", choices=["all"], default=None, help="one preset per vision family: " +
        ", ".join(FAMILY_PRESETS)
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="ViT-S/16 only, 5 rounds")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    if args.quick:
        args.presets, args.rounds = ["vit_small_patch16_224"], 5
    if args.family:
        args.presets = FAMILY_PRESETS
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device!r} is invalid here: torch sees no CUDA device")
    where = (
        torch.cuda.get_device_name(torch.device(args.device))
        if args.device.startswith("cuda")
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"torch {torch.__version__}, {where}, {args.precision}")
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    # The CPU's bfloat16 matmul can be far slower than its float32 one: a smaller probe.
    n = 8192 if args.device.startswith("cuda") else 2048 if dtype == torch.float32 else 512
    peak_before = matmul_peak(n, device=args.device, dtype=dtype)
    rows = [
        r
        for name in args.presets
        for r in bench_preset(name, args.rounds, args.device, args.precision)
    ]
    peak = max(peak_before, matmul_peak(n, device=args.device, dtype=dtype))
    for r in rows:
        r["tfam % peak"] = 100 * r.pop("tfam GFLOP/s") / peak
        r["HF % peak"] = 100 * r.pop("HF GFLOP/s") / peak
    print(f"{args.precision} matmul peak measured in this run: {peak:.0f} GFLOP/s")
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
    widths = [32, 16, 11, 10, 7, 12, 10, 11]
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
