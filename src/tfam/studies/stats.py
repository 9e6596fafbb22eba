"""The statistics every study shares: means ± standard deviations over seeds, and the one rule
that decides whether two conditions differ.

A difference between the means of two conditions counts only when it exceeds twice its
standard error, SE = sqrt(s_a^2 / n_a + s_b^2 / n_b) (s the sample standard deviation over
seeds, ddof = 1; Welch's standard error of a difference of means). Otherwise a report says that
no difference was measured. With fewer than two values on a side there is no standard error,
and nothing counts.

Two models scored on the same test examples (one seed each) are compared example by example:
McNemar's exact test (:func:`mcnemar`) counts the examples only one of them gets right and
asks how likely a split at least that uneven is when either is equally likely to be the one
(a two-sided binomial test with p = 1/2). It measures the test set's sampling noise, not the
seeds': a p below 0.05 says these two trained models differ, not that their recipes do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "PairedTest", "Summary", "compare", "mcnemar", "summarize"]


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


@dataclass(frozen=True)
class PairedTest:
    """McNemar's exact test of two models on the same examples: ``a_only`` examples only A
    gets right, ``b_only`` only B, ``both`` and ``neither`` the rest; ``p`` the two-sided
    p-value; ``counts`` when p < 0.05."""

    a_only: int
    b_only: int
    both: int
    neither: int
    p: float

    @property
    def counts(self) -> bool:
        return self.p < 0.05

    def describe(self, a: str = "A", b: str = "B") -> str:
        """One clause: the discordant examples, the p-value and what it means."""
        n = self.a_only + self.b_only + self.both + self.neither
        split = (
            f"of {n} examples, {self.a_only} only {a} gets right and {self.b_only} only {b} "
            f"(McNemar's exact p = {self.p:.3g})"
        )
        if not self.counts:
            return f"no difference measured between {a} and {b}: {split}"
        better = a if self.a_only > self.b_only else b
        return f"{better} is right more often: {split}"


def mcnemar(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> PairedTest:
    """McNemar's exact test on two models' per-example correctness (the same examples, in
    the same order): with m = min(a_only, b_only) and n = a_only + b_only,
    p = min(1, 2 * sum_{k <= m} C(n, k) / 2^n) (exact integer arithmetic); p = 1 when no
    example tells them apart."""
    a, b = [bool(x) for x in a_correct], [bool(x) for x in b_correct]
    if len(a) != len(b):
        raise ValueError(
            f"a_correct has {len(a)} examples and b_correct {len(b)}: expected the same examples"
        )
    a_only = sum(x and not y for x, y in zip(a, b))
    b_only = sum(y and not x for x, y in zip(a, b))
    both = sum(x and y for x, y in zip(a, b))
    n = a_only + b_only
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1))
    p = min(1.0, 2 * tail / 2**n) if n else 1.0
    return PairedTest(a_only, b_only, both, len(a) - n - both, p)
