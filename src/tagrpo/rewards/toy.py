"""Toy rewards for smoke tests of the training loop with random tiny models, which never
produce a correct math answer. Not for real training."""

from __future__ import annotations

import zlib


def parity_reward(completion: str, answer: str) -> float:
    """1.0 when a hash of the completion is even: about half the responses score 1, so groups are
    rarely uniform and every step has a learning signal."""
    return float(zlib.crc32(completion.encode("utf-8", "replace")) % 2 == 0)


def parity_on_even_answers(completion: str, answer: str) -> float:
    """`parity_reward` on questions whose gold answer is an even integer, 0.0 on the others: a
    batch that mixes informative families with uniform (all-wrong) ones."""
    try:
        even = int(str(answer).strip()) % 2 == 0
    except ValueError:
        return 0.0
    return parity_reward(completion, answer) if even else 0.0
