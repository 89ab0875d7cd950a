"""Toy rewards for smoke tests of the training loop with random tiny models, which never
produce a correct math answer. Not for real training."""

from __future__ import annotations

import zlib


def parity_reward(completion: str, answer: str) -> float:
    """1.0 when a hash of the completion is even: about half the responses score 1, so groups are
    rarely uniform and every step has a learning signal."""
    return float(zlib.crc32(completion.encode("utf-8", "replace")) % 2 == 0)
