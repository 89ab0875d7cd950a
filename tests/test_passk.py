"""pass@k against brute-force enumeration of all k-subsets, exact rationals for large n,
stability at n = 1024, and argument validation."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from tagrpo.eval import mean_pass_at_k, pass_at_k


def brute_force(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(1 for s in subsets if any(i < c for i in s))
    return Fraction(hits, len(subsets))


def exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n", range(1, 11))
def test_matches_enumeration_of_all_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force(n, c, k)), abs=1e-12), (n, c, k)


def test_known_values():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the fraction correct
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 wrong: any 4 include a correct one


@pytest.mark.parametrize("n", [16, 64, 200, 1024])
def test_pass_at_1_is_c_over_n(n):
    for c in range(0, n + 1, max(1, n // 16)):
        assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


def test_large_n_matches_exact_rationals():
    n = 1024
    for c in (0, 1, 2, 5, 37, 100, 511, 512, 900, 1019, 1023, 1024):
        for k in (1, 2, 4, 8, 16, 64, 128, 256, 512, 1000, 1024):
            got = pass_at_k(n, c, k)
            assert got == pytest.approx(float(exact(n, c, k)), abs=1e-12), (c, k)


def test_stable_and_monotone_at_n_1024():
    n = 1024
    ks = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    cs = list(range(0, n + 1, 31)) + [n]
    table = {(c, k): pass_at_k(n, c, k) for c in cs for k in ks}
    for v in table.values():
        assert math.isfinite(v) and 0.0 <= v <= 1.0
    for c in cs:  # more samples drawn: more likely to hit a correct one
        row = [table[c, k] for k in ks]
        assert all(a <= b for a, b in itertools.pairwise(row)), c
    for k in ks:  # more correct samples: more likely
        col = [table[c, k] for c in cs]
        assert all(a <= b for a, b in itertools.pairwise(col)), k
    assert pass_at_k(n, 0, n) == 0.0
    assert pass_at_k(n, 1, n) == 1.0
    assert pass_at_k(n, 1, n // 2) == pytest.approx(0.5, abs=1e-12)


def test_no_overflow_where_binomials_exceed_float_range():
    n = 4096
    with pytest.raises(OverflowError):  # the naive ratio of float binomials cannot even be formed
        float(math.comb(n, n // 2))
    for c, k in [(1, 2048), (3, 2048), (100, 1000), (4000, 50), (17, 4096)]:
        assert pass_at_k(n, c, k) == pytest.approx(float(exact(n, c, k)), abs=1e-12)


def test_accepts_numpy_integers():
    np = pytest.importorskip("numpy")
    assert pass_at_k(np.int64(10), np.int64(3), np.int32(2)) == pytest.approx(pass_at_k(10, 3, 2))


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 0, 1), r"n must be >= 1"),
        ((-3, 0, 1), r"n must be >= 1"),
        ((10, -1, 1), r"c must be in \[0, n=10\]"),
        ((10, 11, 1), r"c must be in \[0, n=10\]"),
        ((10, 3, 0), r"k must be in \[1, n=10\]"),
        ((10, 3, 11), r"k must be in \[1, n=10\].*pass@11 from 10 samples"),
        ((10.0, 3, 1), r"n must be an int"),
        ((10, 2.5, 1), r"c must be an int"),
        ((10, 3, "2"), r"k must be an int"),
        ((10, True, 1), r"c must be an int"),
        ((None, 3, 1), r"n must be an int"),
    ],
)
def test_invalid_arguments_raise(args, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(*args)


def test_mean_pass_at_k():
    counts = [(4, 0), (4, 1), (4, 4)]
    assert mean_pass_at_k(counts, 2) == pytest.approx((0 + 0.5 + 1) / 3)
    assert mean_pass_at_k(iter(counts), 1) == pytest.approx((0 + 0.25 + 1) / 3)
    with pytest.raises(ValueError, match="no questions"):
        mean_pass_at_k([], 1)
    with pytest.raises(ValueError, match=r"k must be in \[1, n=4\]"):
        mean_pass_at_k(counts, 5)
