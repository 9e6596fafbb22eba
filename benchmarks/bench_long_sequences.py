"""Every attention kernel on the Long Range Arena-style tasks: the same small encoder trained
for the same steps on listops, lra-text and pathfinder32; accuracy, training steps/s and peak
memory per kernel, and the speed-accuracy-memory scatter per task. The work is
``tfam.bench.long_sequences.run`` (``tfam study long-sequences`` calls the same); this script
prints its table, writes results.json and the figure.

    python benchmarks/bench_long_sequences.py --profile tiny            # seconds: the code path
    python benchmarks/bench_long_sequences.py --profile quick --out runs/lra-quick
    python benchmarks/bench_long_sequences.py --profile full --seeds 3 --device cuda

Expected times (measured on this project's 2-core CPU, shared): see ``--list``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import tfam  # noqa: F401  (registers every kernel and plug-in)
from tfam.bench.long_sequences import PROFILES, TASKS, format_table, run, summarize
from tfam.config import ATTENTION_KERNELS
from tfam.viz.tradeoff import plot_tradeoff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=list(PROFILES), default="tiny")
    ap.add_argument("--kernels", nargs="+", default=None, help="default: every registered one")
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ap.add_argument("--seeds", type=int, default=1, help="seeds 0 .. N-1 per point")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--isolate", action="store_true", help="each point in its own process (its own peak memory)"
    )
    ap.add_argument("--timeout", type=float, default=None, help="seconds per isolated point")
    ap.add_argument("--out", default=None, help="folder for results.json and the figure")
    ap.add_argument("--list", action="store_true", help="the profiles and their expected times")
    args = ap.parse_args(argv)
    if args.list:
        for p in PROFILES.values():
            print(f"{p.name:<6} {p.steps} steps of {p.batch_size}, {p.expected}")
        return 0
    torch.set_num_threads(args.threads)
    kernels = args.kernels or list(ATTENTION_KERNELS)
    started = time.perf_counter()

    def progress(row: dict) -> None:
        status = row["status"] if row["status"] != "ok" else (
            f"acc {100 * row['accuracy']:.1f}%, {row['steps_per_s']:.2f} steps/s, "
            f"peak {row['peak_mb']:.1f} MB"
        )  # fmt: skip
        print(f"  {row['task']} {row['kernel']} seed {row['seed']}: {status}", flush=True)

    rows = run(args.profile, kernels=kernels, tasks=args.tasks, seeds=range(args.seeds),
               device=args.device, isolate=args.isolate, timeout=args.timeout,
               progress=progress)  # fmt: skip
    print(format_table(rows))
    print(f"{time.perf_counter() - started:.0f} s, profile {args.profile}, device {args.device}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        summary = summarize(rows)
        (out / "results.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
        plot_tradeoff(summary, out / "long_sequences.png",
                      title=f"long sequences, profile {args.profile} ({args.device})")  # fmt: skip
        print(f"wrote {out / 'results.json'} and {out / 'long_sequences.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
