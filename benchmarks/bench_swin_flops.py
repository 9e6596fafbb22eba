"""Swin's FLOPs grow linearly with the image's area, ViT's quadratically: the totals of
`tfam explain` (meta device, no weights) for Swin-T (patch 4, window 7) and ViT-B/16 at
224, 448 and 896 pixels a side, i.e.

    tfam explain swin_tiny_patch4_window7_224 --image-size 448
    tfam explain vit_base_patch16_224 --image-size 448

Swin attends within 7 x 7 windows, so each token costs the same at every size and the total
follows the token count (the area); ViT's every token attends to every other, so its
attention term grows with the square of the token count. Printed as a Markdown table:
GFLOPs (a multiply-add = 2 FLOPs, explain's convention) and each model's growth over 224.

    python benchmarks/bench_swin_flops.py
    python benchmarks/bench_swin_flops.py --sizes 224 448 896 1792
"""

from __future__ import annotations

import argparse
import sys

import tfam

MODELS = {"Swin-T": "swin_tiny_patch4_window7_224", "ViT-B/16": "vit_base_patch16_224"}


def attention_flops(table: tfam.explain.ExplainTable) -> int:
    """FLOPs of the score, bias, softmax and weighted-sum rows (the part quadratic in a
    window's or the image's tokens), summed over every block (summary rows included)."""
    steps = ("scores", "+ relative position bias", "softmax", "weighted sum")
    return sum(r.flops for r in table.rows if r.level == 1 and r.step.startswith(steps))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[224, 448, 896])
    args = p.parse_args(argv)
    rows = {}
    for title, name in MODELS.items():
        for size in args.sizes:
            table = tfam.explain(name, image_size=size, blocks="all")
            rows[title, size] = (table.total_flops, attention_flops(table))
    first = args.sizes[0]
    print("| image | area x | " + " | ".join(
        f"{t} GFLOPs | {t} x | {t} attention x" for t in MODELS) + " |")  # fmt: skip
    print("|---|---|" + "---|---|---|" * len(MODELS))
    for size in args.sizes:
        cells = [f"{size}x{size}", f"{(size / first) ** 2:g}"]
        for title in MODELS:
            total, attn = rows[title, size]
            base_total, base_attn = rows[title, first]
            cells += [f"{total / 1e9:,.1f}", f"{total / base_total:.2f}", f"{attn / base_attn:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\n(x: growth over {first}x{first}; attention: the scores, bias, softmax and weighted"
          " sum rows of explain; totals include every row, patch embedding to head)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
