"""Measurements of tfam's bricks: ``tfam bench attention`` (the complexity lab).

    from tfam.bench import BenchSpec, run_sweep, format_table, write_csv
    points = run_sweep(BenchSpec(kernels=("math", "sdpa"), lengths=(1024, 4096)))
    print(format_table(points))

Each point (a kernel at a length) runs in a fresh child process (:mod:`tfam.bench.child`)
under a time budget, so a point that runs out of memory or time is a status, never a crash;
a point whose memory estimate (from the kernel's ``cost()``) exceeds what the machine has is
skipped without being attempted.
"""

from tfam.bench.attention import (
    BenchSpec,
    Point,
    add_slopes,
    available_bytes,
    estimate_bytes,
    format_table,
    parse_kernels,
    parse_lengths,
    run_point,
    run_sweep,
    write_csv,
)

__all__ = [
    "BenchSpec",
    "Point",
    "add_slopes",
    "available_bytes",
    "estimate_bytes",
    "format_table",
    "parse_kernels",
    "parse_lengths",
    "run_point",
    "run_sweep",
    "write_csv",
]
