"""Evaluation: the unbiased pass@k estimator, the benchmark registry and runner (`evaluate`),
presets for `tagrpo eval` (`--preset paper`), and response diversity (mean pairwise embedding
distance).

Imports are light (no torch, no transformers, no embedding model until a function runs)."""

from tagrpo.eval.benchmarks import (
    BENCHMARKS,
    choice_reward,
    load_benchmark,
    load_eval_data,
    load_file,
)
from tagrpo.eval.diversity import load_embedder, mean_pairwise_distance, pairwise_distances
from tagrpo.eval.passk import mean_pass_at_k, pass_at_k
from tagrpo.eval.presets import PRESETS, resolve_eval_settings
from tagrpo.eval.runner import (
    evaluate,
    make_document,
    read_document,
    rescore,
    results_table,
    summarize,
    write_document,
)

__all__ = [
    "BENCHMARKS",
    "PRESETS",
    "choice_reward",
    "evaluate",
    "load_benchmark",
    "load_embedder",
    "load_eval_data",
    "load_file",
    "make_document",
    "mean_pairwise_distance",
    "mean_pass_at_k",
    "pairwise_distances",
    "pass_at_k",
    "read_document",
    "rescore",
    "resolve_eval_settings",
    "results_table",
    "summarize",
    "write_document",
]
