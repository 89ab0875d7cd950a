"""Unbiased pass@k (Chen et al., 2021): with n samples of which c are correct,
pass@k = 1 - C(n - c, k) / C(n, k), computed as a product so it stays stable for n ~ 1024."""

from __future__ import annotations

import operator
from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct)
    is correct. Requires 0 <= c <= n and 1 <= k <= n."""
    ints = []
    for name, v in (("n", n), ("c", c), ("k", k)):
        # any integer type (int, numpy.int64, a 0-d integer tensor), but not bool or float
        try:
            if isinstance(v, bool) or type(v).__name__ == "bool_":
                raise TypeError
            ints.append(operator.index(v))
        except TypeError:
            raise ValueError(f"{name} must be an int, got {v!r}") from None
    n, c, k = ints
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}: cannot estimate pass@{k} from {n} samples")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """Mean pass@k over questions given (n, c) per question."""
    vals = [pass_at_k(n, c, k) for n, c in counts]
    if not vals:
        raise ValueError("no questions to average pass@k over")
    return sum(vals) / len(vals)
