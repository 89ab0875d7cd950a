"""When the `openai` backend retries a request, and how long it waits first.

`RetryPolicy` (retry count and exponential backoff with equal jitter, or the server's
`Retry-After`, capped) and `parse_retry_after` (the header as seconds). Both are pure; the
backend in `openai_backend.py` (which re-exports them) decides which failures are retryable and
sleeps. Plain GRPO makes no requests, so it has no such policy.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Retries after the first attempt, and their delays in seconds.

    Delay of retry r (0-based): min(backoff_max, backoff_base * 2**r), half of it fixed and half
    uniformly random ("equal jitter"). With a `Retry-After` header the delay is that many
    seconds (capped at `max_retry_after`) plus up to 10% jitter."""

    max_retries: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    max_retry_after: float = 120.0

    def __post_init__(self):
        if self.max_retries < 0 or self.backoff_base < 0 or self.backoff_max < 0:
            raise ValueError("--max-retries, --backoff-base and --backoff-max must be >= 0")

    def delay(self, retry_index: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            wait = min(max(0.0, retry_after), self.max_retry_after)
            return wait * (1.0 + 0.1 * rng.random())
        exp = min(self.backoff_max, self.backoff_base * (2.0**retry_index))
        return exp / 2 + rng.uniform(0, exp / 2)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
