"""Aggregating stored samples into metrics: the k list (parsed, checked against n), per-question
correct counts -> unbiased pass@k (mean over questions), greedy accuracy, length, truncation and
diversity, and re-scoring stored samples with another verifier.

Works on plain per-question records (`{"id", "kind", "answer", "samples": [{"text", "reward",
"tokens", "finished"}], "greedy"?, "diversity"?}`), so a result file can be re-aggregated or
re-scored without a model. Nothing here differs between GRPO and TA-GRPO.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tagrpo.errors import TagrpoError
from tagrpo.eval.passk import mean_pass_at_k
from tagrpo.eval.scoring import scorer_for

CORRECT_THRESHOLD = 0.5  # a sample counts as correct when its reward is >= this (rewards are 0/1)


def parse_ks(ks: str | Sequence[int]) -> list[int]:
    """`"1,2,4"` or `[1, 2, 4]` -> sorted unique ints >= 1."""
    if isinstance(ks, str):
        try:
            vals = [int(x) for x in ks.replace(" ", "").split(",") if x]
        except ValueError:
            raise TagrpoError(f"--k {ks!r}: expected a comma-separated list of integers, e.g. 1,2,4,8") from None
    else:
        vals = [int(x) for x in ks]
    if not vals:
        raise TagrpoError("--k: give at least one k, e.g. 1,2,4")
    bad = [k for k in vals if k < 1]
    if bad:
        raise TagrpoError(f"--k: every k must be >= 1, got {bad[0]}")
    return sorted(set(vals))


def check_ks(ks: Sequence[int], n: int) -> None:
    """Refuse k > n: the unbiased estimator needs at least k samples per question."""
    if n < 1:
        raise TagrpoError(f"--n must be >= 1, got {n}")
    too_big = [k for k in ks if k > n]
    if too_big:
        raise TagrpoError(
            f"--k {too_big[0]} is larger than --n {n}: pass@{too_big[0]} needs at least {too_big[0]} samples "
            f"per question. Raise --n to {max(too_big)} or drop k > {n} (valid k here: 1..{n})."
        )


def is_correct(reward: float) -> bool:
    return reward is not None and not math.isnan(reward) and reward >= CORRECT_THRESHOLD


def summarize(questions: Sequence[dict], ks: Sequence[int]) -> dict:
    """Aggregate metrics from per-question records (`samples`: [{reward, tokens, finished}],
    optional `greedy` sample, optional `diversity`). Used by `evaluate` and by re-scoring."""
    if not questions:
        raise TagrpoError("no questions to summarize")
    counts = []
    for q in questions:
        samples = q.get("samples") or []
        if not samples:
            raise TagrpoError(f"question {q.get('id')!r} has no samples")
        counts.append((len(samples), sum(1 for s in samples if is_correct(s["reward"]))))
    n_min = min(n for n, _ in counts)
    check_ks(ks, n_min)
    all_samples = [s for q in questions for s in q["samples"]]
    out: dict[str, Any] = {
        "n_questions": len(questions),
        "n_samples": n_min if n_min == max(n for n, _ in counts) else [n for n, _ in counts],
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "mean_reward": sum(float(s["reward"]) for s in all_samples) / len(all_samples),
        "mean_response_length": sum(s["tokens"] for s in all_samples) / len(all_samples),
        "truncation_rate": sum(1 for s in all_samples if not s["finished"]) / len(all_samples),
        "n_all_correct": sum(1 for n, c in counts if c == n),
        "n_all_wrong": sum(1 for _, c in counts if c == 0),
    }
    greedy = [q["greedy"] for q in questions if q.get("greedy")]
    if greedy:
        out["greedy_accuracy"] = sum(1 for g in greedy if is_correct(g["reward"])) / len(greedy)
        out["greedy_truncation_rate"] = sum(1 for g in greedy if not g["finished"]) / len(greedy)
    divs = [q["diversity"] for q in questions if q.get("diversity") is not None and not math.isnan(q["diversity"])]
    if divs:
        out["diversity"] = sum(divs) / len(divs)
    return out


def rescore(result: dict, reward_fn: Callable[[str, str], float] | None = None) -> dict:
    """Re-score every stored sample of one benchmark result (e.g. after fixing the verifier) and
    recompute its metrics; returns a new result dict. `reward_fn` defaults to the row kind's scorer."""
    questions = []
    for q in result["questions"]:
        fn = reward_fn or scorer_for(q.get("kind", "math"))
        q = dict(q)
        q["samples"] = [dict(s, reward=float(fn(s["text"], q["answer"]))) for s in q["samples"]]
        if q.get("greedy"):
            q["greedy"] = dict(q["greedy"], reward=float(fn(q["greedy"]["text"], q["answer"])))
        q["n_correct"] = sum(1 for s in q["samples"] if is_correct(s["reward"]))
        questions.append(q)
    ks = [int(k) for k in result["pass@k"]]
    new = {k: v for k, v in result.items() if k != "questions"}
    new.update(summarize(questions, ks))
    new["questions"] = questions
    return new
