"""Interleaved timing shared by the benchmarks that compare tfam with a reference.

Every round calls each function once, starting with a different one each round (a rotation), so
neither side always runs first and machine noise hits all alike; ratios are taken within a
round, then the median over rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(
    fns: list[Callable[[], object]], rounds: int, warmup: int = 1
) -> tuple[list[float], list[float]]:
    """(median seconds per call of each fn, median over rounds of fns[i]'s time / fns[0]'s time
    in the same round). ``warmup`` untimed rounds come first."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    n = len(fns)
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for i in [(r + j) % n for j in range(n)]:
            start = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - start)
    ratios = [
        statistics.median(t / first for t, first in zip(times[i], times[0])) for i in range(n)
    ]
    return [statistics.median(t) for t in times], ratios
