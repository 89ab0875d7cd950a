"""Pure tensor math of GRPO / TA-GRPO: advantages, the clipped policy loss with k3 KL, and the
diagnostics a trainer logs. No I/O, no models, no globals.

How it differs from plain GRPO: nothing here knows about prompts. Groups are given by an
explicit id array, so GRPO passes one id per prompt and TA-GRPO passes one id per *family*
(q0 plus its N neighbors); the same code normalizes either.
"""

from tagrpo.core.advantages import SCALES, group_advantages
from tagrpo.core.diagnostics import nonzero_advantage_fraction, uniform_fraction
from tagrpo.core.logprobs import selective_log_softmax, token_entropy
from tagrpo.core.loss import AGGREGATIONS, aggregate, policy_loss

__all__ = [
    "AGGREGATIONS",
    "SCALES",
    "aggregate",
    "group_advantages",
    "nonzero_advantage_fraction",
    "policy_loss",
    "selective_log_softmax",
    "token_entropy",
    "uniform_fraction",
]
