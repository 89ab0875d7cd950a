"""The rollout interface every engine implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature 0 (or do_sample False) means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    do_sample: bool = True
    seed: int | None = None  # seeds the engine's RNG right before this call when set

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Completion:
    """One sampled response: token ids exactly as generated (EOS included when it stopped)."""

    token_ids: list[int]
    text: str
    finished: bool  # True if it ended with EOS, False if cut at max_new_tokens


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt id list, in order. Repeat a prompt to sample it several times."""
        ...
