"""`tfam bench attention`: time and peak memory of attention kernels against the length."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from tfam.cli.common import add_command, device_from, field_option, option_error

EPILOG = """examples:
  tfam bench attention --kernels math,sdpa,chunked --lengths 1024,4096,16384 --out runs/bench-attn
  tfam bench attention --kernels math,chunked --lengths 1024,2048,4096,8192,16384 --backward
"""

ATTENTION_EPILOG = """examples:
  tfam bench attention --kernels math,sdpa,chunked --lengths 1024,4096,16384 --out runs/bench-attn
  tfam bench attention --kernels math,sdpa,chunked --lengths 1024,2048,4096,8192,16384 \\
      --backward --out runs/bench-attn          forward + backward, one head of width 64
  tfam bench attention --kernels sdpa --lengths 4096,16384 --causal --heads 8 --device cuda
  tfam bench attention --kernels math --lengths 65536 --time-budget 30   skipped or timed out

Each point (a kernel at a length) runs in a fresh child process: ms is the median of --repeat
calls (fewer when the budget allows no more), peak MB what the first call added to the memory
held before it (q, k, v excluded: the scores, softmax, output and, with --backward, the
gradients). A point past --time-budget seconds is killed ("timeout"); one that runs out of
memory is "oom"; one whose estimate from the kernel's cost() exceeds the free memory is
"skipped", never attempted, as is every longer length of a kernel after a timeout or oom.
The slopes are d log(value) / d log(length) from the previous length: ~1 linear, ~2 quadratic.
With --out DIR: DIR/attention.csv (rewritten after every point) and DIR/attention.png (time and
memory against length, log-log, with n and n^2 reference lines; failed points marked x).
"""

# The options and the BenchSpec fields they set; each is read as text and checked in run(), so a
# bad value is one `tfam: error:` line naming the option, the value and what is valid.
_INTS = ("heads", "head_dim", "batch", "repeat", "threads")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def register(subparsers: Any) -> None:
    bench = add_command(
        subparsers,
        "bench",
        "measure bricks: attention kernels' time and memory against the length",
        "Measure tfam's bricks on this machine.",
        EPILOG,
    )
    bench.set_defaults(func=lambda args: _usage(bench))
    sub = bench.add_subparsers(title="benchmarks", metavar="WHAT")
    p = add_command(
        sub,
        "attention",
        "time and peak memory of attention kernels at several lengths (table, CSV, PNG)",
        "Time each attention kernel at each length (forward, or forward and backward) and "
        "record its peak memory, each point in a child process with a time budget; print a "
        "table, write a CSV and a log-log plot.",
        ATTENTION_EPILOG,
    )
    p.add_argument("--kernels", default="math,sdpa,chunked", metavar="K1,K2",
                   help="registered attention kernels, comma-separated (default: "
                   "math,sdpa,chunked)")  # fmt: skip
    p.add_argument("--lengths", default="1024,4096,16384", metavar="N1,N2",
                   help="sequence lengths, comma-separated (default: 1024,4096,16384)")  # fmt: skip
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--causal", action="store_true", help="causal self-attention")
    p.add_argument("--heads", default="1", metavar="H", help="heads (default: 1)")
    p.add_argument("--head-dim", default="64", metavar="DH", help="head width (default: 64)")
    p.add_argument("--batch", default="1", metavar="B", help="batch size (default: 1)")
    p.add_argument("--dtype", default="float32", metavar="DTYPE",
                   help="float32, float64, float16 or bfloat16 (default: float32)")  # fmt: skip
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="auto, cpu, cuda or cuda:N (default: auto, CUDA when present)")  # fmt: skip
    p.add_argument("--repeat", default="3", metavar="N", help="calls per point (default: 3)")
    p.add_argument("--time-budget", default="60", metavar="SECONDS",
                   help="seconds per point before it is killed (default: 60)")  # fmt: skip
    p.add_argument("--threads", default="1", metavar="N",
                   help="CPU threads in each child (default: 1)")  # fmt: skip
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write DIR/attention.csv and DIR/attention.png")  # fmt: skip
    p.set_defaults(func=run_attention)


def _spec(args: argparse.Namespace) -> Any:
    from tfam.bench import BenchSpec, parse_kernels, parse_lengths

    options = {f.name: field_option(f.name) for f in dataclasses.fields(BenchSpec)}
    try:
        values: dict[str, Any] = {
            "kernels": parse_kernels(args.kernels),
            "lengths": parse_lengths(args.lengths),
        }
        for name in _INTS:
            text = getattr(args, name)
            try:
                values[name] = int(text)
            except ValueError:
                values[name] = text  # BenchSpec names it and says what is valid
        try:
            values["time_budget"] = float(args.time_budget)
        except ValueError:
            values["time_budget"] = args.time_budget
        if args.device.startswith("mps"):
            raise ValueError(f"--device {args.device!r} is invalid: expected cpu, cuda or cuda:N")
        device = device_from(args)
        return BenchSpec(backward=args.backward, causal=args.causal, dtype=args.dtype,
                         device=str(device), **values)  # fmt: skip
    except ValueError as err:
        raise option_error(err, options) from None


def run_attention(args: argparse.Namespace) -> int:
    from tfam.bench.attention import (
        format_table,
        progress_line,
        run_sweep,
        write_results,
    )

    spec = _spec(args)
    done: list[Any] = []

    def on_point(point: Any, i: int, n: int) -> None:
        print(progress_line(point, i, n, spec), file=sys.stderr, flush=True)
        done.append(point)
        if args.out:
            write_results(done, args.out)

    print(
        f"tfam bench attention: {spec.pass_name}, B={spec.batch} H={spec.heads} "
        f"Dh={spec.head_dim} {spec.dtype} on {spec.device}"
        + (", causal" if spec.causal else "")
        + f", {spec.threads} thread(s), budget {spec.time_budget:g} s per point",
        file=sys.stderr,
    )
    points = run_sweep(spec, on_point=on_point)
    print(format_table(points))
    if args.out:
        from tfam.viz.complexity import plot_complexity

        csv_path = write_results(points, args.out)
        png = Path(args.out) / "attention.png"
        title = (
            f"attention {spec.pass_name}: B={spec.batch}, H={spec.heads}, Dh={spec.head_dim}, "
            f"{spec.dtype}, {spec.device}" + (", causal" if spec.causal else "")
        )
        plot_complexity(points, png, title)
        print(f"wrote {csv_path} and {png}")
    return 0
