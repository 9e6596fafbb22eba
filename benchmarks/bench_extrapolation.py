"""Length extrapolation, measured: a character GPT on the KJV text trained at context 128 with
each 1-D position scheme, then scored on longer inputs than it ever saw.

Press et al. (2022, "Train Short, Test Long", the ALiBi paper) train at one length and evaluate
at longer ones: ALiBi's loss stays flat, sinusoidal and rotary positions degrade, and a learned
table has no rows past its training length. This script repeats that on our data. Every
scheme trains with the same recipe (`tfam train gpt --data kjv`: one epoch of batch-16 windows
of 128 characters, the same seed and steps); only ``position`` differs. Each run is scored on
the test books (1 John .. Revelation, held out whole) in nats per character over
non-overlapping windows of L characters, L = 128, 256, 512, 1024, every window cut from the
same first ``--eval-chars`` characters, so each length scores the same text. A learned table
refuses a length past its ``max_positions`` in one line, which the table shows.

    python benchmarks/bench_extrapolation.py                  # trains what is missing, scores all
    python benchmarks/bench_extrapolation.py --schemes alibi,rope --eval-only
    python benchmarks/bench_extrapolation.py --out runs/extrapolation --png extrapolation.png

Runs land in ``--out`` (one directory per scheme, kept, so an interrupted benchmark resumes
where it stopped); results.json and the PNG are written there too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from tfam.studies.extrapolation import (
    cell,
    extrapolation_table,
    plot_extrapolation,
    score_lengths,
)

SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "relative", "generated", "none")
LENGTHS = (128, 256, 512, 1024)
TRAIN_CONTEXT = 128


def train(scheme: str, out: Path, extra: list[str]) -> float:
    """Train one scheme with the kjv recipe (its windows are 128 characters); returns seconds.
    A learned table gets exactly the training context; every other scheme is built with no
    table bound that matters (max_positions only sizes learned tables)."""
    cmd = [
        sys.executable,
        "-m",
        "tfam",
        "train",
        "gpt",
        "--data",
        "kjv",
        "--set",
        f"position={scheme}",
        "--set",
        f"max_positions={TRAIN_CONTEXT}",
        "--max-minutes",
        "60",  # the recipe caps at 5 minutes; here every scheme gets the same steps
        "--seed",
        "0",
        "--quiet",
        "--out",
        str(out),
        *extra,
    ]
    start = time.perf_counter()
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"training {scheme} failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - start


def evaluate(run: Path, lengths: tuple[int, ...], eval_chars: int) -> dict[str, object]:
    from tfam.data.sources.charlm import kjv_char_text, kjv_char_tokenizer
    from tfam.models import from_pretrained

    model = from_pretrained(run).eval()
    tokenizer = kjv_char_tokenizer()
    text = kjv_char_text("test")[:eval_chars]
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    return score_lengths(model, ids, lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--out", type=Path, default=Path("runs/extrapolation"))
    parser.add_argument("--png", type=Path, default=None, help="default: OUT/extrapolation.png")
    parser.add_argument("--eval-chars", type=int, default=65537, help="test characters scored")
    parser.add_argument("--eval-only", action="store_true", help="score existing runs only")
    parser.add_argument("--train-only", action="store_true", help="train missing runs only")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for scoring")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="-- then tfam train options")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from tfam.config import POSITION_SCHEMES
    from tfam.models import create_config

    names = [s for s in args.schemes.split(",") if s]
    lengths = tuple(int(n) for n in args.lengths.split(","))
    extra = [a for a in args.extra if a != "--"]
    offered = create_config("gpt_char_small").position_names()
    results: dict[str, dict] = {}
    summary = args.out / "results.json"
    if summary.exists():
        results = json.loads(summary.read_text())
    for scheme in names:
        if scheme not in POSITION_SCHEMES or scheme not in offered:
            print(f"{scheme}: not a position scheme of the gpt family here; skipped")
            continue
        run = args.out / scheme
        seconds = results.get(scheme, {}).get("train_seconds")
        if not (run / "config.json").exists():
            if args.eval_only:
                print(f"{scheme}: no run at {run}; skipped (--eval-only)")
                continue
            print(f"{scheme}: training ...", flush=True)
            seconds = train(scheme, run, extra)
            results[scheme] = {"nats": {}, "train_seconds": seconds}
            args.out.mkdir(parents=True, exist_ok=True)
            summary.write_text(json.dumps(results, indent=1))
        if args.train_only:
            continue
        nats = evaluate(run, lengths, args.eval_chars)
        steps = json.loads((run / "results.json").read_text()).get("steps")
        results[scheme] = {"nats": nats, "train_seconds": seconds, "steps": steps}
        args.out.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps(results, indent=1))
        print(f"{scheme}: " + "  ".join(f"{k}: {cell(v)}" for k, v in nats.items()), flush=True)
    print("\nTest loss, nats per character (trained at 128 characters)\n")
    print(extrapolation_table(results, lengths))
    png = args.png or args.out / "extrapolation.png"
    plot_extrapolation(results, lengths, png, TRAIN_CONTEXT)
    print(f"\nfigure: {png}  (threads {torch.get_num_threads()}, pid {os.getpid()})")


if __name__ == "__main__":
    main()
