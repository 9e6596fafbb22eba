"""Swin on Fashion-MNIST, trained the way a user trains it: `tfam train swin --data
fashion-mnist` (the catalog's Swin recipe: preset swin_fashion_mnist and its schedule), then
its test accuracy beside the target and tfam's ViT.

    python benchmarks/bench_swin.py                       # the full recipe (the lead's run)
    python benchmarks/bench_swin.py --max-steps 5         # a check that the path works
    python benchmarks/bench_swin.py --out runs/swin-fm -- --epochs 30   # extra train options

Needs the Fashion-MNIST files (`make data`). The run directory is kept (default
runs/swin-fashion-mnist); `tfam viz windows DIR test:0` draws it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TARGET = 0.92  # the target for Swin on Fashion-MNIST
VIT = 0.9131  # tfam's ViT, README: `make fashion` (vit_fashion_mnist, 24 epochs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/swin-fashion-mnist", help="run directory")
    p.add_argument("--max-steps", type=int, default=None, help="stop after N optimiser steps")
    p.add_argument("extra", nargs="*", help="more `tfam train` options, after --")
    args = p.parse_args(argv)
    cmd = [sys.executable, "-m", "tfam", "train", "swin", "--data", "fashion-mnist",
           "--out", args.out]  # fmt: skip
    if args.max_steps is not None:
        cmd += ["--max-steps", str(args.max_steps)]
    cmd += args.extra
    print("$ " + " ".join(cmd[1:]).replace("-m tfam", "tfam"), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    results = json.loads((Path(args.out) / "results.json").read_text())
    acc, steps = results["test"]["acc"], results["steps"]
    epochs = results["epochs_completed"]
    print()
    print("| model | test accuracy | training |")
    print("|---|---|---|")
    print(f"| Swin (tfam, swin_fashion_mnist) | **{100 * acc:.2f}%** | {epochs} epochs, "
          f"{steps} steps, {results['seconds']:.0f} s training, {wall:.0f} s wall |")  # fmt: skip
    print(f"| target | {100 * TARGET:.2f}% | |")
    print(f"| ViT (tfam, vit_fashion_mnist, README) | {100 * VIT:.2f}% | 24 epochs |")
    if args.max_steps is not None:
        print(f"(stopped after --max-steps {args.max_steps}: a check of the path, not a result)")
    if hasattr(os, "getloadavg"):
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
