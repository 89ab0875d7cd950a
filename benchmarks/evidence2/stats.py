"""Statistics of the Evidence 2 study: pure functions of arrays, no I/O (tests/test_evidence2.py
compares each with a slow loop version on random data).

Differences are paired: runs that share a seed share the data order and the rollout seeds, and
every model is evaluated on the same questions with the same sampling seed. So the unit of a
held-out comparison is d[s, q] = metric(arm a, seed s, question q) - metric(arm b, seed s, q).

- `bootstrap_ci`: the mean of d with a percentile interval from a crossed bootstrap (seeds and
  questions resampled independently, with replacement), from a fixed RNG seed.
- `paired_t_ci`: the mean of per-seed differences with a Student-t interval (n - 1 df).
- `verdict`: "resolved" when every interval given excludes 0, else "not resolved".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def late_mean(values: Sequence, frac: float = 0.5) -> float | None:
    """Mean of the finite values among the last ceil(frac * len) entries (None/NaN skipped; None
    when nothing is left). `values` is one metric per logged step, in step order."""
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1], got {frac}")
    tail = list(values)[len(values) - math.ceil(frac * len(values)):] if len(values) else []
    xs = [float(v) for v in tail if v is not None and math.isfinite(float(v))]
    return sum(xs) / len(xs) if xs else None


def pass_at_k_per_question(n: int, correct: Sequence[int], k: int) -> np.ndarray:
    """Unbiased pass@k of each question (n samples, c of them correct): 1 - C(n-c, k) / C(n, k)."""
    from tagrpo.eval import pass_at_k

    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    return np.array([pass_at_k(n, int(c), k) for c in correct], dtype=np.float64)


def bootstrap_draws(n_seeds: int, n_questions: int, n_boot: int, rng_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The resampled indices: seeds (n_boot, S) first, then questions (n_boot, Q), from one
    numpy Generator seeded with `rng_seed` (so a reference can replay exactly the same draws)."""
    rng = np.random.default_rng(rng_seed)
    return rng.integers(0, n_seeds, size=(n_boot, n_seeds)), rng.integers(0, n_questions, size=(n_boot, n_questions))


def bootstrap_ci(diff: np.ndarray, n_boot: int = 2000, rng_seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the paired differences `diff` (S seeds, Q questions): the interval is
    the percentile interval (linear interpolation) of the mean over n_boot crossed resamples."""
    d = np.asarray(diff, dtype=np.float64)  # (S, Q)
    if d.ndim != 2 or 0 in d.shape:
        raise ValueError(f"diff must be (seeds, questions) with both > 0, got shape {d.shape}")
    s, q = d.shape
    si, qi = bootstrap_draws(s, q, n_boot, rng_seed)  # (B, S), (B, Q)
    cs = np.zeros((n_boot, s))  # (B, S): how often each seed was drawn
    cq = np.zeros((n_boot, q))  # (B, Q)
    np.add.at(cs, (np.arange(n_boot)[:, None], si), 1.0)
    np.add.at(cq, (np.arange(n_boot)[:, None], qi), 1.0)
    means = np.einsum("bs,sq,bq->b", cs, d, cq) / (s * q)  # (B,) mean of each resampled grid
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(d.mean()), float(lo), float(hi)


def t_quantile(p: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, df))


def paired_t_ci(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float | None, float | None]:
    """(mean, low, high) of per-seed differences, Student t with n - 1 degrees of freedom;
    (mean, None, None) with fewer than 2 values."""
    x = np.asarray(diffs, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no differences")
    m = float(x.mean())
    if x.size < 2:
        return m, None, None
    half = t_quantile(1 - (1 - level) / 2, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, m - half, m + half


def excludes_zero(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def verdict(*intervals: tuple[float | None, float | None]) -> str:
    """'resolved' when every (low, high) interval excludes 0, else 'not resolved'."""
    return "resolved" if intervals and all(excludes_zero(lo, hi) for lo, hi in intervals) else "not resolved"
