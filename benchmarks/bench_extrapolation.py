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
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

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


@torch.no_grad()
def score(model: torch.nn.Module, ids: torch.Tensor, length: int, batch: int) -> float:
    """Mean nats per character over non-overlapping windows of ``length`` characters of
    ``ids`` (each window predicts its characters 2..length+1 from those before, within it)."""
    count = (len(ids) - 1) // length
    windows = torch.stack([ids[i * length : i * length + length + 1] for i in range(count)])
    total, n = 0.0, 0
    for start in range(0, count, batch):
        chunk = windows[start : start + batch]
        logits = model(chunk[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            chunk[:, 1:].reshape(-1),
            reduction="sum",
        )
        total += float(loss)
        n += chunk[:, 1:].numel()
    return total / n


def evaluate(run: Path, lengths: tuple[int, ...], eval_chars: int) -> dict[str, object]:
    from tfam.data.sources.charlm import kjv_char_text, kjv_char_tokenizer
    from tfam.models import from_pretrained

    model = from_pretrained(run).eval()
    tokenizer = kjv_char_tokenizer()
    text = kjv_char_text("test")[:eval_chars]
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    out: dict[str, object] = {}
    for length in lengths:
        try:
            out[str(length)] = score(model, ids, length, batch=max(1, 16384 // length))
        except ValueError as err:  # a learned table past max_positions: one line
            out[str(length)] = f"refused: {str(err).splitlines()[0]}"
    return out


def plot(results: dict[str, dict], lengths: tuple[int, ...], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for scheme, row in results.items():
        xs = [n for n in lengths if isinstance(row["nats"].get(str(n)), float)]
        ys = [row["nats"][str(n)] for n in xs]
        if xs:
            ax.plot(xs, ys, marker="o", label=scheme)
    ax.axvline(TRAIN_CONTEXT, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.set_xlabel("evaluation length (characters); trained at 128")
    ax.set_ylabel("test loss (nats / character)")
    ax.set_title("Character GPT on the KJV: train short, test long")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


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
        print(f"{scheme}: " + "  ".join(f"{k}: {_cell(v)}" for k, v in nats.items()), flush=True)
    header = "| position | " + " | ".join(f"L={n}" for n in lengths) + " | rise 128->max |"
    print("\nTest loss, nats per character (trained at 128 characters)\n")
    print(header)
    print("|" + "---|" * (len(lengths) + 2))
    for scheme, row in results.items():
        cells = [_cell(row["nats"].get(str(n))) for n in lengths]
        first, last = row["nats"].get(str(lengths[0])), row["nats"].get(str(lengths[-1]))
        rise = (
            f"{last - first:+.3f}" if isinstance(first, float) and isinstance(last, float) else "-"
        )
        print(f"| {scheme} | " + " | ".join(cells) + f" | {rise} |")
    png = args.png or args.out / "extrapolation.png"
    plot(results, lengths, png)
    print(f"\nfigure: {png}  (threads {torch.get_num_threads()}, pid {os.getpid()})")


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else str(value)
    return "refused" if isinstance(value, str) and value.startswith("refused") else "-"


if __name__ == "__main__":
    main()
