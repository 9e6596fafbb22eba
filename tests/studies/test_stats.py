"""The statistics every study reports: mean ± sd over seeds, the 2-standard-error rule, and
McNemar's exact test of two models on the same examples."""

import math

import pytest

from tfam.studies.stats import compare, mcnemar, summarize


def test_summarize_by_hand():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s.mean == 2.5
    assert s.std == pytest.approx(math.sqrt(5 / 3))  # ddof = 1: (2.25+.25+.25+2.25) / 3
    assert s.n == 4
    assert s.format(2) == "2.50 ± 1.29"
    assert summarize([0.5]).format(1) == "0.5" and summarize([0.5]).std == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_a_difference_counts_past_twice_its_standard_error():
    # a: mean 0.80, s² = 1e-4; b: mean 0.70, s² = 1e-4; SE = sqrt(1e-4/3 + 1e-4/3) = 0.008165
    a, b = [0.79, 0.80, 0.81], [0.69, 0.70, 0.71]
    c = compare(a, b)
    assert c.diff == pytest.approx(0.10)
    assert c.se == pytest.approx(math.sqrt(2e-4 / 3))
    assert c.counts
    assert c.describe("ViT", "CNN").startswith("ViT is higher than CNN by 0.100")
    assert compare(b, a).describe("CNN", "ViT").startswith("ViT is higher than CNN")


def test_within_twice_the_standard_error_no_difference_is_measured():
    # diff 0.01, SE = sqrt(0.01²/3 · 2) = 0.00816; 2 SE = 0.0163 > 0.01
    c = compare([0.79, 0.80, 0.81], [0.78, 0.79, 0.80])
    assert c.diff == pytest.approx(0.01)
    assert not c.counts
    assert c.describe("A", "B").startswith("no difference measured between A and B")
    # Exactly at the boundary (|d| == 2 SE) it does not count: "exceeds" is strict.
    d = compare([1.0, 3.0], [0.0, 0.0])  # diff 2, SE = sqrt(2/2) = 1 -> 2 SE = 2
    assert d.se == pytest.approx(1.0) and d.diff == 2.0 and not d.counts


def test_one_seed_has_no_standard_error_and_counts_nothing():
    c = compare([0.9], [0.1])
    assert c.se is None and not c.counts
    assert "fewer than two seeds" in c.describe()


def test_values_that_never_vary_count_when_they_differ():
    assert compare([5.0, 5.0, 5.0], [3.0, 3.0, 3.0]).counts
    assert not compare([5.0, 5.0], [5.0, 5.0]).counts


def test_mcnemar_by_hand():
    # 1 example only A gets right, 9 only B, 5 both, 2 neither: n = 10 discordant,
    # p = 2 * (C(10, 0) + C(10, 1)) / 2^10 = 22 / 1024.
    a = [True] * 1 + [False] * 9 + [True] * 5 + [False] * 2
    b = [False] * 1 + [True] * 9 + [True] * 5 + [False] * 2
    t = mcnemar(a, b)
    assert (t.a_only, t.b_only, t.both, t.neither) == (1, 9, 5, 2)
    assert t.p == 22 / 1024 and t.counts
    assert t.describe("DeiT", "ViT").startswith("ViT is right more often: of 17 examples, 1 only")
    # Symmetric, and an even split (or no discordant example) tells nothing.
    assert mcnemar(b, a).p == t.p
    even = mcnemar([True, False, True, False], [False, True, False, True])
    assert even.p == 1.0 and not even.counts
    assert even.describe().startswith("no difference measured between A and B")
    assert mcnemar([True, False], [True, False]).p == 1.0
    with pytest.raises(ValueError, match="a_correct has 2 examples and b_correct 1"):
        mcnemar([True, False], [True])


def test_mcnemar_matches_scipys_binomial_test():
    stats = pytest.importorskip("scipy.stats")
    for a_only, b_only in [(241, 250), (30, 55), (0, 7), (12, 12)]:
        a = [True] * a_only + [False] * b_only
        b = [False] * a_only + [True] * b_only
        want = stats.binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue
        assert mcnemar(a, b).p == pytest.approx(want, rel=1e-9)
