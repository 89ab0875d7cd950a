"""Evaluation: the unbiased pass@k estimator (and, later, the benchmark runner and diversity)."""

from tagrpo.eval.passk import mean_pass_at_k, pass_at_k

__all__ = ["mean_pass_at_k", "pass_at_k"]
