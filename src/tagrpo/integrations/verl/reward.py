"""A verl reward function that scores with `tagrpo.rewards.math_reward` (the same verifier as
`tagrpo train` and `tagrpo eval`: last \\boxed{...}, else a clear final-answer line, compared with
math-verify; bounded time, never raises).

Set it in a verl launch with (these are the defaults of `tagrpo.integrations.verl`'s config):

    reward.custom_reward_function.path=pkg://tagrpo.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

Signature as verl 0.9.1's reward managers call it (`verl/experimental/reward_loop/reward_manager/
naive.py`: `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, ...)`). The
score is the same for every variant of a family: the ground truth is q0's answer, which the
neighbors share by construction. No verl import: this module also runs in verl's reward workers.
"""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: Any = "",
    extra_info: dict | None = None,
    **kwargs: Any,
) -> float:
    """1.0 if `solution_str`'s final answer equals `ground_truth`, else 0.0 (never raises)."""
    from tagrpo.rewards import math_reward

    if isinstance(ground_truth, (list, tuple)):  # several accepted forms: any one is right
        return max((math_reward(solution_str or "", str(g)) for g in ground_truth), default=0.0)
    return math_reward(solution_str or "", str(ground_truth))
