"""The statistics every study shares: means ± standard deviations over seeds, and the one rule
that decides whether two conditions differ.

A difference between the means of two conditions counts only when it exceeds twice its
standard error, SE = sqrt(s_a^2 / n_a + s_b^2 / n_b) (s the sample standard deviation over
seeds, ddof = 1; Welch's standard error of a difference of means). Otherwise a report says that
no difference was measured. With fewer than two values on a side there is no standard error,
and nothing counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "Summary", "compare", "summarize"]


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation (ddof = 1; 0 for one value) and count of ``values``."""

    mean: float
    std: float
    n: int

    def format(self, digits: int = 3, scale: float = 1.0) -> str:
        """'0.812 ± 0.013' (values multiplied by ``scale``, e.g. 100 for percent); one value
        alone is written without ±."""
        if self.n < 2:
            return f"{self.mean * scale:.{digits}f}"
        return f"{self.mean * scale:.{digits}f} ± {self.std * scale:.{digits}f}"

    def __str__(self) -> str:
        return self.format()


def summarize(values: Sequence[float]) -> Summary:
    """Mean ± sample standard deviation of ``values`` (at least one)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("summarize() needs at least one value")
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return Summary(mean, math.sqrt(var), n)


@dataclass(frozen=True)
class Comparison:
    """mean(a) − mean(b) with its standard error; ``counts`` when |diff| > 2 SE."""

    diff: float
    se: float | None
    counts: bool
    a: Summary
    b: Summary

    def describe(
        self, a: str = "A", b: str = "B", digits: int = 3, scale: float = 1.0, unit: str = ""
    ) -> str:
        """One clause: which is larger and by how much (in ``unit``), or that no difference
        was measured."""
        u = f" {unit}" if unit else ""
        d = self.diff * scale
        if self.se is None:
            return (
                f"no difference measured between {a} and {b} (fewer than two seeds: no "
                f"standard error; {a} − {b} = {d:+.{digits}f}{u})"
            )
        se = self.se * scale
        if not self.counts:
            return (
                f"no difference measured between {a} and {b} ({a} − {b} = {d:+.{digits}f}{u}, "
                f"within twice its standard error {se:.{digits}f}{u})"
            )
        bigger, smaller = (a, b) if d > 0 else (b, a)
        return (
            f"{bigger} is higher than {smaller} by {abs(d):.{digits}f}{u} "
            f"(standard error {se:.{digits}f}{u}; more than twice it)"
        )


def compare(a: Sequence[float], b: Sequence[float]) -> Comparison:
    """Does mean(a) differ from mean(b)? The difference counts only when it exceeds twice its
    standard error sqrt(s_a²/n_a + s_b²/n_b); with fewer than two values on a side there is no
    standard error and nothing counts. A difference of values that never vary (SE = 0, e.g.
    parameter counts over seeds) counts when it is not zero."""
    sa, sb = summarize(a), summarize(b)
    diff = sa.mean - sb.mean
    if sa.n < 2 or sb.n < 2:
        return Comparison(diff, None, False, sa, sb)
    se = math.sqrt(sa.std**2 / sa.n + sb.std**2 / sb.n)
    return Comparison(diff, se, abs(diff) > 2 * se, sa, sb)
